"""A Slurm cluster in pods on the kubelet node, without the operator: MariaDB, slurmdbd, slurmctld, a
login pod, and the NodeSet's slurmd pods managed by a Kubernetes StatefulSet.

This stands in for the slurm-operator until its own pods run here: the operator is built now (v1.2.1 and
f2ed3fc, docs/kubernetes.md) and reconciles what we render, but its pods need cluster DNS, kube-proxy and
images that honour Slinky's contract (issue 37's items 2-4). The pods are those the operator would create, from the images of ``slurm_images.py``;
the slurmd pods come from a real StatefulSet (kube-controller-manager's controller, the NodeSet's own
``scalingMode: StatefulSet``) whose replicas, features and names are read from the NodeSet that
``cluster render`` makes of the cluster spec, so a deleted pod comes back by the same name with a new
address, as a NodeSet pod does. Its CPUs and memory are capped to what this one small node holds.

Names resolve by cluster DNS (CoreDNS and kube-proxy of ``dev kube up --kubelet``, ``kubenet.py``), as the
operator's pods resolve them: slurmctld's and the slurmd pods' names in their headless Services'
subdomains, found by bare pod name through each pod's DNS search list (the operator's worker and login pods
search the worker Service's domain the same way), slurmdbd and MariaDB behind Services of their names.
"""

from __future__ import annotations

import base64
import json
import math
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import slinkyml
from slinkyml.cluster.apply import apply_objects
from slinkyml.cluster.render import render_nodeset
from slinkyml.cluster.spec import SlurmCluster
from slinkyml.dev.images.slurm_images import INITCONF, SLURM_UID, image_name
from slinkyml.errors import SlinkyError
from slinkyml.kube import dig, quantity
from slinkyml.secretfile import write_secret
from slinkyml.slurm.conf import SlurmConfBuilder

LABEL = "slinkyml.io/pod-cluster"
SLURMCTLD_PORT, SLURMDBD_PORT, MARIADB_PORT = 6817, 6819, 3306
DB_USER = "slurm"


@dataclass(frozen=True)
class PodClusterSpec:
    """What the pods are made from: names from the cluster spec, the shared folder on the node."""

    cluster: str  # Slurm's ClusterName and the objects' prefix
    namespace: str
    release: str
    nodeset: str  # the NodeSet's name: the StatefulSet's, and its pods' (NAME-0, NAME-1...)
    replicas: int
    node_conf: str  # the NodeSet's extraConf (Features=...), slurmd's --conf
    pod_cpus: int
    pod_memory_mib: int
    shared: Path  # hostPath on the node, at the same path in every pod: the jobs' files
    host_paths: tuple[str, ...] = ()  # read-only hostPaths at their own paths (the training stack)
    env: tuple[tuple[str, str], ...] = ()  # for the login and slurmd containers
    slurmd_timeout_s: int = 30

    @classmethod
    def from_cluster(cls, spec: SlurmCluster, *, shared: Path, max_cpus: int, max_memory_mib: int,
                     nodeset: int = 0, **extra: Any) -> PodClusterSpec:
        """The NodeSet ``cluster render`` makes of ``spec.node_sets[nodeset]``: its name, replicas and
        extraConf as they are; its slurmd's CPU and memory requests capped at ``max_*`` (a node set of
        m7i.8xlarge does not fit this machine)."""
        if not spec.node_sets:
            raise SlinkyError(f"cluster {spec.name}: no node set to run")
        ns = render_nodeset(spec, spec.node_sets[nodeset])
        requests = dig(ns, "spec", "slurmd", "resources", "requests") or {}
        cpus = quantity(requests.get("cpu"))
        memory = quantity(requests.get("memory"))
        return cls(cluster=spec.name, namespace=spec.namespace, release=spec.slurm_version,
                   nodeset=ns["metadata"]["name"], replicas=int(ns["spec"]["replicas"]),
                   node_conf=str(ns["spec"].get("extraConf", "")),
                   pod_cpus=min(max_cpus, math.ceil(cpus)) if cpus else max_cpus,
                   pod_memory_mib=min(max_memory_mib, int(memory) >> 20) if memory else max_memory_mib,
                   shared=shared, **extra)

    def name(self, role: str) -> str:
        return f"{self.cluster}-{role}"

    @property
    def controller_set(self) -> str:
        """slurmctld's StatefulSet (one replica, as the operator's Controller makes it)."""
        return self.name("controller")

    @property
    def controller(self) -> str:
        """slurmctld's pod, its hostname and SlurmctldHost."""
        return f"{self.controller_set}-0"

    @property
    def accounting(self) -> str:
        return self.name("accounting")

    @property
    def database(self) -> str:
        return self.name("mariadb")

    @property
    def login(self) -> str:
        return self.name("login")

    @property
    def searches(self) -> list[str]:
        """The DNS search list of every Slurm pod: the slurmd pods' and slurmctld's headless Services'
        domains, so a bare pod name (a Slurm node name, SlurmctldHost) resolves."""
        return [f"{svc}.{self.namespace}.svc.cluster.local" for svc in (self.nodeset, self.controller_set)]

    @property
    def statesave(self) -> Path:
        return self.shared / "statesave"


def slurm_conf(s: PodClusterSpec) -> str:
    """slurm.conf of the pods' cluster: configless, dynamic nodes (-Z) in the NodeSet of the node set's
    feature, accounting to the slurmdbd pod, state on the node (a recreated slurmctld pod loses no job)."""
    feature = s.nodeset
    b = SlurmConfBuilder().set_all([
        ("ClusterName", s.cluster), ("SlurmctldHost", s.controller), ("SlurmctldPort", SLURMCTLD_PORT),
        ("AuthType", "auth/slurm"), ("CredType", "cred/slurm"), ("AuthAltTypes", "auth/jwt"),
        ("AuthAltParameters", "jwt_key=/etc/slurm/jwt_hs256.key"), ("SlurmUser", "slurm"),
        ("StateSaveLocation", "/var/spool/slurmctld"), ("SlurmctldPidFile", "/run/slurmctld.pid"),
        ("SlurmdPidFile", "/run/slurmd.pid"), ("SlurmdSpoolDir", "/var/spool/slurmd"),
        ("SlurmctldParameters", "enable_configless"), ("ProctrackType", "proctrack/linuxproc"),
        ("TaskPlugin", "task/none"), ("JobAcctGatherType", "jobacct_gather/linux"),
        ("JobAcctGatherFrequency", 5), ("AccountingStorageType", "accounting_storage/slurmdbd"),
        ("AccountingStorageHost", s.accounting), ("AccountingStoragePort", SLURMDBD_PORT),
        ("PriorityType", "priority/multifactor"), ("JobRequeue", 1), ("MaxNodeCount", 64),
        ("ReturnToService", 2), ("SlurmdTimeout", s.slurmd_timeout_s), ("MinJobAge", 60)])
    b.nodeset(feature, [("Feature", feature)])
    b.partition("all", [("Nodes", feature), ("Default", "YES"), ("State", "UP")])
    return b.build().text()


def slurmdbd_conf(s: PodClusterSpec, password: str) -> str:
    return "".join(f"{k}={v}\n" for k, v in [
        ("AuthType", "auth/slurm"), ("AuthAltTypes", "auth/jwt"),
        ("AuthAltParameters", "jwt_key=/etc/slurm/jwt_hs256.key"), ("DbdHost", s.accounting),
        ("DbdPort", SLURMDBD_PORT), ("SlurmUser", "slurm"), ("PidFile", "/run/slurmdbd.pid"),
        ("StorageType", "accounting_storage/mysql"), ("StorageHost", s.database), ("StoragePort", MARIADB_PORT),
        ("StorageUser", DB_USER), ("StoragePass", password), ("StorageLoc", "slurm_acct_db")])


@dataclass(frozen=True)
class Keys:
    """The cluster's secrets, made once: they go into a Secret, never a ConfigMap."""

    slurm_key: bytes = field(default_factory=lambda: secrets.token_bytes(1024))
    jwt_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    db_password: str = field(default_factory=lambda: secrets.token_hex(16))


def _meta(s: PodClusterSpec, name: str, role: str) -> dict[str, Any]:
    return {"name": name, "namespace": s.namespace, "labels": {LABEL: s.cluster, "app.kubernetes.io/component": role}}


def _volumes(s: PodClusterSpec, stack: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The shared folder and (``stack``) the read-only training stack."""
    vols: list[dict[str, Any]] = [{"name": "shared", "hostPath": {"path": str(s.shared), "type": "Directory"}}]
    mounts: list[dict[str, Any]] = [{"name": "shared", "mountPath": str(s.shared)}]
    if stack:
        for i, path in enumerate(s.host_paths):
            vols.append({"name": f"stack{i}", "hostPath": {"path": path, "type": "Directory"}})
            mounts.append({"name": f"stack{i}", "mountPath": path, "readOnly": True})
    return vols, mounts


def _env(s: PodClusterSpec) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in s.env]


def _pod_spec(s: PodClusterSpec, spec: dict[str, Any]) -> dict[str, Any]:
    return {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 5,
            "dnsConfig": {"searches": s.searches}, **spec}


def _pod(s: PodClusterSpec, name: str, role: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(s, name, role), "spec": _pod_spec(s, spec)}


def _service(s: PodClusterSpec, name: str, role: str, port: int, *, headless: bool = False) -> dict[str, Any]:
    """The Service of a role's pods; a headless one publishes its pods before they are ready, as the hosts
    file did (slurmd asks for its configuration the moment it starts)."""
    spec: dict[str, Any] = {"selector": {LABEL: s.cluster, "app.kubernetes.io/component": role},
                            "ports": [{"name": role, "port": port}]}
    if headless:
        spec.update(clusterIP="None", publishNotReadyAddresses=True)
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(s, name, role), "spec": spec}


def render(s: PodClusterSpec, keys: Keys) -> list[dict[str, Any]]:
    """Every object, in the order they start: each waits for the ones before it only by name."""
    conf_name, keys_name = s.name("slurm-config"), s.name("slurm-keys")
    etc = {"name": "slurm-etc", "projected": {"defaultMode": 0o610, "sources": [
        {"configMap": {"name": conf_name}},
        {"secret": {"name": keys_name, "items": [{"key": "slurm.key", "path": "slurm.key"},
                                                  {"key": "jwt_hs256.key", "path": "jwt_hs256.key"}]}}]}}
    etc_mount = {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True}
    base_vols, base_mounts = _volumes(s, stack=False)
    stack_vols, stack_mounts = _volumes(s, stack=True)
    keys_data = {"slurm.key": keys.slurm_key, "jwt_hs256.key": keys.jwt_key,
                 "slurmdbd.conf": slurmdbd_conf(s, keys.db_password).encode(),
                 "db-password": keys.db_password.encode()}
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(s, keys_name, "config"), "type": "Opaque",
         "data": {k: _b64(v) for k, v in keys_data.items()}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(s, conf_name, "config"),
         "data": {"slurm.conf": slurm_conf(s)}},
        _service(s, s.database, "database", MARIADB_PORT),
        _service(s, s.accounting, "accounting", SLURMDBD_PORT),
        _pod(s, s.database, "database", {
            "volumes": [*base_vols, {"name": "data", "emptyDir": {}}],
            "containers": [{"name": "mariadb", "image": image_name("mariadb", s.release),
                            "ports": [{"containerPort": MARIADB_PORT}],
                            "env": [{"name": "MARIADB_USER", "value": DB_USER},
                                    {"name": "MARIADB_PASSWORD", "valueFrom": {"secretKeyRef": {
                                        "name": keys_name, "key": "db-password"}}}],
                            "volumeMounts": [*base_mounts, {"name": "data", "mountPath": "/var/lib/mariadb"}]}]}),
        # slurmdbd as the operator runs it: SlurmUser 401, its files installed by an initconf step
        _pod(s, s.accounting, "accounting", {
            "securityContext": {"runAsUser": SLURM_UID, "runAsGroup": SLURM_UID, "fsGroup": SLURM_UID},
            "volumes": [*base_vols, {"name": "keys", "secret": {"secretName": keys_name, "items": [
                {"key": k, "path": k} for k in ("slurm.key", "jwt_hs256.key", "slurmdbd.conf")]}},
                        {"name": "etc", "emptyDir": {}}, {"name": "run", "emptyDir": {}}],
            "initContainers": [{"name": "initconf", "image": image_name("slurmdbd", s.release),
                                "command": [INITCONF], "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                                "volumeMounts": [{"name": "keys", "mountPath": "/mnt/slurm", "readOnly": True},
                                                 {"name": "etc", "mountPath": "/etc/slurm"}]}],
            "containers": [{"name": "slurmdbd", "image": image_name("slurmdbd", s.release),
                            "ports": [{"containerPort": SLURMDBD_PORT}],
                            "volumeMounts": [*base_mounts, {"name": "etc", "mountPath": "/etc/slurm"},
                                             {"name": "run", "mountPath": "/run"}]}]}),
        *controller_statefulset(s, etc, etc_mount, base_vols, base_mounts),
        # the StatefulSet's governing Service (headless): its name is the pods' subdomain
        _service(s, s.nodeset, "worker", 6818, headless=True),
        nodeset_statefulset(s, etc, etc_mount, stack_vols, stack_mounts),
        _pod(s, s.login, "login", {
            "volumes": [*stack_vols, {"name": "keys", "secret": {"secretName": keys_name, "defaultMode": 0o600,
                                                                  "items": [{"key": "slurm.key", "path": "slurm.key"}]}}],
            "containers": [{"name": "login", "image": image_name("login", s.release),
                            "env": [{"name": "SACKD_OPTIONS",
                                     "value": f"--conf-server {s.controller_set}:{SLURMCTLD_PORT}"},
                                    *_env(s)],
                            "volumeMounts": [*stack_mounts, {"name": "keys", "mountPath": "/etc/slurm",
                                                             "readOnly": True}]}]}),
    ]
    return objs


def controller_statefulset(s: PodClusterSpec, etc: dict[str, Any], etc_mount: dict[str, Any],
                           base_vols: list[dict[str, Any]], base_mounts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """slurmctld as the operator's Controller runs it: a StatefulSet of one (uid 401), its state on the
    node (a hostPath), so a deleted pod comes back by the same name, at a new address, with every job."""
    pod = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": SLURM_UID, "runAsGroup": SLURM_UID,
                            "fsGroup": SLURM_UID},
        "volumes": [*base_vols, etc, {"name": "run", "emptyDir": {}}, {"name": "log", "emptyDir": {}},
                    {"name": "statesave", "hostPath": {"path": str(s.statesave), "type": "Directory"}}],
        "containers": [{"name": "slurmctld", "image": image_name("slurmctld", s.release),
                        "ports": [{"containerPort": SLURMCTLD_PORT}],
                        "volumeMounts": [*base_mounts, etc_mount, {"name": "run", "mountPath": "/run"},
                                         {"name": "statesave", "mountPath": "/var/spool/slurmctld"},
                                         {"name": "log", "mountPath": "/var/log/slurm"}]}]}
    labels = {LABEL: s.cluster, "app.kubernetes.io/component": "controller"}
    template = {"metadata": {"labels": labels}, "spec": _pod_spec(s, pod)}
    return [_service(s, s.controller_set, "controller", SLURMCTLD_PORT, headless=True),
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(s, s.controller_set, "controller"),
             "spec": {"replicas": 1, "serviceName": s.controller_set, "selector": {"matchLabels": labels},
                      "template": template}}]


def nodeset_statefulset(s: PodClusterSpec, etc: dict[str, Any], etc_mount: dict[str, Any],
                        vols: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The NodeSet's slurmd pods as a StatefulSet: privileged slurmd with the operator's arguments
    (``-Z --conf-server HOST:PORT --conf 'EXTRA'``) and its $POD_CPUS/$POD_MEMORY."""
    labels = {LABEL: s.cluster, "app.kubernetes.io/component": "worker"}
    # the NodeSet's Features= and ours are one item for slurmd: merge them
    features = [s.nodeset]
    rest = []
    for item in s.node_conf.split():
        if item.startswith("Features="):
            features += [f for f in item.removeprefix("Features=").split(",") if f not in features]
        else:
            rest.append(item)
    conf = " ".join([f"Features={','.join(features)}", *rest])
    pod = {"metadata": {"labels": labels}, "spec": _pod_spec(s, {
        "volumes": [*vols, etc, {"name": "log", "emptyDir": {}}],
        "containers": [{"name": "slurmd", "image": image_name("slurmd", s.release),
                        "securityContext": {"privileged": True},
                        "args": ["-Z", "--conf-server", f"{s.controller_set}:{SLURMCTLD_PORT}", "--conf",
                                 f"'{conf}'"],
                        "env": [{"name": "POD_CPUS", "value": str(s.pod_cpus)},
                                {"name": "POD_MEMORY", "value": str(s.pod_memory_mib)}, *_env(s)],
                        "volumeMounts": [*mounts, etc_mount, {"name": "log", "mountPath": "/var/log/slurm"}]}]})}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(s, s.nodeset, "worker"),
            "spec": {"replicas": s.replicas, "serviceName": s.nodeset, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": labels}, "template": pod}}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prepare(s: PodClusterSpec) -> None:
    """The node's side: the shared folder, the slurmctld state folder owned by SlurmUser."""
    s.shared.mkdir(parents=True, exist_ok=True)
    s.shared.chmod(0o777)
    s.statesave.mkdir(exist_ok=True)
    os.chown(s.statesave, SLURM_UID, SLURM_UID)


def apply(s: PodClusterSpec, keys: Keys, api: Any) -> None:
    """Apply every object (the node's folders first)."""
    prepare(s)
    apply_objects(render(s, keys), api, log=lambda _: None)


def saved_keys(path: Path) -> Keys:
    """The cluster's keys, kept 0600 at ``path`` (made the first time), so a second ``up`` applies the same
    Secret instead of re-keying running daemons."""
    try:
        data = json.loads(path.read_text())
        return Keys(base64.b64decode(data["slurm.key"]), base64.b64decode(data["jwt_hs256.key"]), data["db-password"])
    except FileNotFoundError:
        keys = Keys()
        write_secret(path, json.dumps({"slurm.key": _b64(keys.slurm_key), "jwt_hs256.key": _b64(keys.jwt_key),
                                       "db-password": keys.db_password}).encode())
        return keys
    except (OSError, ValueError, KeyError) as exc:
        raise SlinkyError(f"{path}: cannot read the pods' cluster keys: {exc}") from None


def up_here(spec: SlurmCluster, folder: Path, api: Any) -> PodClusterSpec:
    """``dev kube up --slurm-pods``: the cluster of ``spec`` in pods on this machine's node, the training
    stack this process runs from mounted read-only (its venv, the Python it was made from, the source tree
    of this slinkyml), each slurmd pod capped at half this machine's CPUs over the replicas and 2 GiB."""
    replicas = max(1, spec.node_sets[0].count if spec.node_sets else 1)
    source = str(Path(slinkyml.__file__).resolve().parents[1])
    s = PodClusterSpec.from_cluster(
        spec, shared=folder / "shared", max_cpus=max(1, (os.cpu_count() or 2) // (2 * replicas)),
        max_memory_mib=2048, host_paths=tuple(sorted({sys.prefix, sys.base_prefix, source})),
        env=(("PYTHONPATH", source),))
    folder.mkdir(parents=True, exist_ok=True)
    apply(s, saved_keys(folder / "keys.json"), api)
    return s
