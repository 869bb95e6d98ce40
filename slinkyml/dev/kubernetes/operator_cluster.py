"""The real slurm-operator's cluster on the kubelet node of ``dev kube up --kubelet``: what this machine is
not that EKS's nodes are, given to the applied cluster, and the operator's pods as a user reaches them.

The differences, each stated in docs/local-kubernetes-cluster.md and nothing else changed: the Controller
asks 1 CPU (the node has 2 and CoreDNS asks 50m); its state claim is bound to a folder of the node's, as a
CSI driver would provision it; the node carries the labels Karpenter would give the NodeSet's pool; the
slurmd pods request nothing (an m7i.8xlarge's 31 CPUs are not here); more than one of them share this one
node only with the NodeSet's own ``oversubscribeNode: true`` (else the operator gives each a required
anti-affinity: one per node); cgroup.conf says ``CgroupPlugin=autodetect`` (these machines are cgroup v1:
the rendered cgroup/v2 stops slurmd with ``fatal: /sys/fs/cgroup is not a valid cgroup2 mountpoint``);
folders of the node's can be mounted at their own paths in the slurmd and login pods (the jobs' shared
folder, which EKS has on FSx); the training stack is in the pods' images (``training_images.py``), as on
EKS. Used by ``slinkyml demo --kubernetes``, ``slinkyml dev kube up --slurm-pods`` and
tests/test_kubelet_operator_live.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from slinkyml.cluster import names
from slinkyml.cluster.apply import apply_objects, ensure_secrets
from slinkyml.cluster.placement import controller_claim
from slinkyml.cluster.render import render
from slinkyml.cluster.spec import SlurmCluster
from slinkyml.dev.images.slurm_images import SLURM_UID
from slinkyml.errors import SlinkyError

LOCAL_CONTROLLER_CPU = "1"
GROUP, VERSION = "slinky.slurm.net", "v1beta1"
T = TypeVar("T")


def fit_spec(cluster: SlurmCluster, images: Mapping[str, str] | None = None) -> SlurmCluster:
    """The cluster with its Controller asking what this node can give; with ``images`` (role -> name, from
    ``KubeletNode.import_training_images``) its node sets on the worker image and its login pods on the
    login image, through the spec's own ``image`` fields, as a user names the images they pushed. The spec's
    ``images.registry`` is dropped: no registry is reachable here (what no field names runs the Slinky-named
    images this node imported)."""
    cluster = replace(cluster, controller=replace(cluster.controller, cpu=LOCAL_CONTROLLER_CPU),
                      images=replace(cluster.images, registry=None))
    if images:
        cluster = replace(cluster, node_sets=[replace(ns, image=images["worker"]) for ns in cluster.node_sets],
                          login=replace(cluster.login, image=images["login"]))
    return cluster


def statesave_volume(cluster: SlurmCluster, path: Path) -> dict[str, Any]:
    """The Controller's state-save PersistentVolume, reserved for its claim: a folder of the node's, owned by
    SlurmUser beforehand (a hostPath volume is not chowned to the pod's fsGroup)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, SLURM_UID, SLURM_UID)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{cluster.name}-statesave"},
            "spec": {"capacity": {"storage": cluster.controller.persistence_size},
                     "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(path), "type": "Directory"},
                     "claimRef": {"namespace": cluster.namespace, "name": controller_claim(cluster.name)}}}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1.0,
             retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """``probe()``'s first truthy answer; an error naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = probe()
        except retry_on:
            answer = None
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise SlinkyError(f"no {what} after {timeout:.0f} s (`slinkyml dev kube status` shows the plane)")
        time.sleep(every)


@dataclass(frozen=True)
class HostFolder:
    """A folder of the node's, mounted at its own path in the slurmd and login pods."""

    path: str
    read_only: bool = True


def host_mounts(folders: Sequence[HostFolder]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's hostPath volumes and the container's mounts of ``folders``."""
    volumes = [{"name": f"host-{i}", "hostPath": {"path": f.path, "type": "Directory"}} for i, f in enumerate(folders)]
    mounts = [{"name": f"host-{i}", "mountPath": f.path, "readOnly": f.read_only} for i, f in enumerate(folders)]
    return volumes, mounts


def mounts_folders(pod: Any, folders: Sequence[HostFolder]) -> bool:
    """Whether ``pod`` has every one of ``folders`` as a hostPath volume."""
    paths = {v.host_path.path for v in pod.spec.volumes or [] if v.host_path}
    return all(f.path in paths for f in folders)


def is_ready(pod: Any) -> bool:
    statuses = [*(pod.status.container_statuses or []), *(pod.status.init_container_statuses or [])]
    return (pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None and bool(statuses)
            and all(s.ready for s in statuses))


@dataclass
class OperatorPods:
    """The pods the operator made for one cluster, through the Kubernetes API."""

    api: Any  # kubernetes.client.ApiClient
    cluster: SlurmCluster

    def __post_init__(self) -> None:
        from kubernetes import client  # lazy: the k8s extra, only where a plane runs

        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.objects = client.CustomObjectsApi(self.api)

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    def owned(self, kind: str) -> list[Any]:
        """The pods of the operator's object of ``kind`` (NodeSet pods are its own; the others are its
        StatefulSets' and Deployments')."""
        pods = self.core.list_namespaced_pod(self.namespace).items
        if kind == "NodeSet":
            return [p for p in pods if any(r.kind == kind for r in p.metadata.owner_references or [])]
        sets = [*self.apps.list_namespaced_stateful_set(self.namespace).items,
                *self.apps.list_namespaced_deployment(self.namespace).items]
        owned = []
        for owner in sets:
            if any(ref.kind == kind for ref in owner.metadata.owner_references or []):
                selector = ",".join(f"{k}={v}" for k, v in owner.spec.selector.match_labels.items())
                owned += self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return owned

    def ready(self, kind: str) -> Any:
        return next((p for p in self.owned(kind) if is_ready(p)), None)

    def exec(self, pod: str, container: str, command: list[str], timeout: float = 120) -> str:
        """What ``kubectl exec`` prints: the command's stdout, then its stderr."""
        from kubernetes.stream import stream  # lazy: the k8s extra

        ws = stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace, container=container,
                    command=command, stderr=True, stdout=True, stdin=False, tty=False, _preload_content=False)
        try:
            ws.run_forever(timeout=timeout)
            return (ws.read_stdout() or "") + (ws.read_stderr() or "")
        finally:
            ws.close()

    def fit_nodeset(self, node_name: str, wait_s: float = 180, replicas: int = 1,
                    folders: Sequence[HostFolder] = (), env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Give the first NodeSet this node (its labels), no requests, ``replicas`` (more than one with
        ``oversubscribeNode``), cgroup autodetect, ``folders`` and ``env`` in its slurmd container, and
        delete the pods made before (the rendered update strategy is OnDelete); the NodeSet as patched."""
        name = names.nodeset(self.cluster, self.cluster.node_sets[0])
        nodeset = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "nodesets", name)
        self.core.patch_node(node_name, {"metadata": {"labels": nodeset["spec"]["template"]["spec"]["nodeSelector"]}})
        config = self.core.read_namespaced_config_map(names.slurm_config(self.cluster), self.namespace)
        cgroup = config.data["cgroup.conf"].replace("CgroupPlugin=cgroup/v2", "CgroupPlugin=autodetect")
        self.core.patch_namespaced_config_map(config.metadata.name, self.namespace, {"data": {"cgroup.conf": cgroup}})
        ctld = wait_for("Ready controller pod", lambda: self.ready("Controller"), wait_s).metadata.name
        wait_for("cgroup.conf with autodetect in the controller pod", lambda: "autodetect" in self.exec(
            ctld, "slurmctld", ["cat", "/etc/slurm/cgroup.conf"]), wait_s)
        answer = self.exec(ctld, "slurmctld", ["scontrol", "reconfigure"])
        if "error" in answer.lower():
            raise SlinkyError(f"scontrol reconfigure in {ctld}: {answer.strip()}")
        spec: dict[str, Any] = {"replicas": replicas, "oversubscribeNode": replicas > 1,
                                "slurmd": {"resources": None, **_container_extras(folders, env)}}
        if folders:
            spec["template"] = {"spec": {"volumes": host_mounts(folders)[0]}}
        patched: dict[str, Any] = self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "nodesets", name, {"spec": spec})
        # only once the operator has seen the patch: a pod it makes before then has the old template, and
        # OnDelete leaves it so (seen: both pods Pending on the m7i.8xlarge's requests)
        generation = patched["metadata"]["generation"]
        wait_for("the operator's status of the fitted NodeSet", lambda: (self.objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "nodesets", name).get("status") or {}).get(
            "observedGeneration", 0) >= generation, wait_s)
        for pod in self.owned("NodeSet"):
            self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
        return patched

    def fit_login(self, folders: Sequence[HostFolder], env: Mapping[str, str] | None = None) -> None:
        """Mount ``folders`` and set ``env`` in the LoginSet's login container (the operator rolls its
        Deployment: ``login_pod(folders)`` is the new pod once Ready)."""
        name = names.loginset(self.cluster)
        self.objects.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "loginsets", name, {"spec": {
            "login": _container_extras(folders, env), "template": {"spec": {"volumes": host_mounts(folders)[0]}}}})

    def login_pod(self, folders: Sequence[HostFolder] = ()) -> Any:
        """A Ready login pod that mounts ``folders``, else None."""
        return next((p for p in self.owned("LoginSet") if is_ready(p) and mounts_folders(p, folders)), None)

    def registered_workers(self, replicas: int) -> list[Any]:
        """The NodeSet's pods once there are ``replicas`` of the fitted template, all Ready and idle in
        ``sinfo`` of a Ready login pod; else an empty list."""
        pods = self.owned("NodeSet")
        fresh = [p for p in pods if p.spec.containers[0].resources.requests is None]
        login = self.ready("LoginSet")
        if not (login and len(fresh) == len(pods) == replicas and all(map(is_ready, pods))):
            return []
        out = self.exec(login.metadata.name, "login", ["sinfo", "-h", "-N", "-o", "%N %t"])
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        idle = sorted(n for n, s in states.items() if s == "idle")
        return fresh if idle == sorted(p.metadata.name for p in fresh) else []


def _container_extras(folders: Sequence[HostFolder], env: Mapping[str, str] | None) -> dict[str, Any]:
    """A container's mounts of ``folders`` and its ``env``, as fields of an operator's container wrapper."""
    extras: dict[str, Any] = {}
    if folders:
        extras["volumeMounts"] = host_mounts(folders)[1]
    if env:
        extras["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return extras


def apply_cluster(pods: OperatorPods, statesave: Path, log: Callable[[str], None] = lambda _: None) -> int:
    """What ``slinkyml cluster apply`` does (the Namespace, the cluster's Secrets, the rest, server-side),
    the Controller's state volume (a folder of the node's at ``statesave``) made first; the objects applied."""
    from kubernetes.client import ApiException  # lazy: the k8s extra, only where a plane runs

    try:
        pods.core.create_persistent_volume(statesave_volume(pods.cluster, statesave))
    except ApiException as exc:
        if exc.status != 409:  # 409: there from an earlier apply
            raise
    objs = render(pods.cluster).objects
    apply_objects(objs[:1], pods.api, log=lambda _: None)
    ensure_secrets(pods.cluster, pods.api, log=log)
    return len(apply_objects(objs[1:], pods.api, log=lambda _: None)["applied"]) + 1


@dataclass
class HereCluster:
    """``dev kube up --slurm-pods``'s cluster: the operator's pods, the folder they share with this machine."""

    pods: OperatorPods
    shared: Path
    workers: list[Any]
    login: str


def up_here(plane: Any, spec: SlurmCluster, wait_s: float = 600,
            log: Callable[[str], None] = lambda _: None) -> HereCluster:
    """``dev kube up --kubelet --slurm-pods``: ``spec`` applied to the operator of ``plane`` (a
    ``KubeControlPlane`` with its node up and the Slurm images imported), its slurmd and login pods on the
    worker and login images with the training stack (``training_images.py``, built and imported here),
    fitted to this node with its first node set's count of slurmd pods; one folder mounted in those pods,
    the jobs' shared folder (EKS's FSx)."""
    images = plane.node().import_training_images(spec.slurm_version, log)
    cluster = fit_spec(spec, images)
    pods = OperatorPods(plane.api(), cluster)
    folder = plane.state_dir / "slurm-pods" / cluster.name
    shared = folder / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    shared.chmod(0o777)
    applied = apply_cluster(pods, folder / "statesave", log)
    log(f"{applied} objects applied to namespace {cluster.namespace}")
    folders = (HostFolder(str(shared), read_only=False),)
    replicas = max(1, spec.node_sets[0].count if spec.node_sets else 1)
    pods.fit_login(folders)
    pods.fit_nodeset(plane.node().settings.name, wait_s=wait_s, replicas=replicas, folders=folders)
    login = wait_for("Ready login pod with the shared folder", lambda: pods.login_pod(folders), wait_s)
    workers = wait_for(f"{replicas} slurmd pods of the NodeSet idle in sinfo",
                       lambda: pods.registered_workers(replicas), wait_s)
    return HereCluster(pods, shared, workers, login.metadata.name)
