"""Pure render: :class:`SlurmCluster` -> the Kubernetes objects the Slinky operator and EKS need.

Deterministic (same spec, same bytes); credentials are only referenced, never rendered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.cluster import helm, karpenter, names, secrets, storage, workers
from slinkyml.cluster.install import ANNOTATION_OPERATOR, install_markdown, install_script, install_steps
from slinkyml.cluster.spec import SlurmCluster, SlurmNodeSet, default_image, login_image, worker_image

SLINKY_API = "slinky.slurm.net/v1beta1"

#: the slurm chart's default sssd.conf (local files only, no credentials) and the MariaDB settings
#: the Slurm accounting guide recommends for slurmdbd
_TEMPLATES = DATA_DIR / "templates"
SSSD_CONF = (_TEMPLATES / "sssd.conf").read_text()
MARIADB_CNF = (_TEMPLATES / "mariadb.cnf").read_text()


@dataclass
class Rendered:
    """Everything ``render`` produces: Kubernetes objects in apply order, plus side files."""

    objects: list[dict[str, Any]]
    helm_values: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text (non-Kubernetes)
    #: device plugin (nvidia | efa | neuron) -> Helm values for its chart (helm/device-plugins/)
    plugin_values: dict[str, dict[str, Any]] = field(default_factory=dict)


def _meta(c: SlurmCluster, name: str, component: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = c.namespace
    meta["labels"] = names.labels(c, component)
    return meta


def _obj(api: str, kind: str, meta: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": meta, **body}


def _system_pod_spec() -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/os": "linux"}}


def render_controller(c: SlurmCluster) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterName": c.name,
        "slurmKeyRef": names.secret_ref(c, "slurm_key").ref(),
        "jwtKeyRef": names.secret_ref(c, "jwt_key").ref(),
        "slurmctld": {
            "image": default_image("slurmctld", c.slurm_version),
            "resources": {"requests": {"cpu": c.controller.cpu, "memory": c.controller.memory}},
        },
        # The operator always adds this sidecar and takes its image only from here (no default).
        "logfile": {"image": default_image("slurmctld", c.slurm_version)},
        "persistence": {
            "enabled": True,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": c.controller.persistence_size}},
        },
        "extraConf": workers.slurm_conf_extra(c),
        "template": {"spec": _system_pod_spec()},
    }
    if c.controller.storage_class:
        spec["persistence"]["storageClassName"] = c.controller.storage_class
    if c.accounting.enabled:
        spec["accountingRef"] = {"name": names.accounting(c)}
    spec["configFileRefs"] = [{"name": names.slurm_config(c)}]
    meta = _meta(c, names.controller(c), "controller")
    meta["annotations"] = {ANNOTATION_OPERATOR: c.slurm_operator}
    return _obj(SLINKY_API, "Controller", meta, spec=spec)


def render_nodeset(c: SlurmCluster, ns: SlurmNodeSet) -> dict[str, Any]:
    _, mounts = storage.fsx_volume(c)
    image = worker_image(c, ns)
    slurmd: dict[str, Any] = {"image": image, "resources": workers.slurmd_resources(ns)}
    if mounts:
        slurmd["volumeMounts"] = mounts
    spec = {
        "controllerRef": {"name": names.controller(c)},
        "replicas": ns.count,
        "scalingMode": "StatefulSet",
        "workloadDisruptionProtection": True,
        "partition": {"enabled": False},  # partitions are declared in the Controller's extraConf
        "extraConf": workers.slurmd_conf(ns),
        "slurmd": slurmd,
        "logfile": {"image": image},  # always added by the operator; no default image
        "template": workers.nodeset_pod_template(c, ns),
        "updateStrategy": {"type": "OnDelete"},  # image changes never restart running jobs' pods
    }
    meta = _meta(c, names.nodeset(c, ns), "worker")
    meta["labels"][names.LABEL_NODESET] = ns.name
    return _obj(SLINKY_API, "NodeSet", meta, spec=spec)


def render_loginset(c: SlurmCluster) -> dict[str, Any]:
    vols, mounts = storage.fsx_volume(c)
    login: dict[str, Any] = {"image": login_image(c)}
    if mounts:
        login["volumeMounts"] = mounts
    pod_spec = _system_pod_spec()
    if vols:
        pod_spec["volumes"] = vols
    spec: dict[str, Any] = {
        "controllerRef": {"name": names.controller(c)},
        "replicas": c.login.replicas,
        "sssdConfRef": {"name": names.sssd_conf(c), "key": "sssd.conf"},
        "login": login,
        "initconf": {"image": login["image"]},  # always added by the operator; no default image
        "service": {"spec": {"type": c.login.service_type}},
        "template": {"spec": pod_spec},
    }
    if c.login.root_ssh_authorized_keys.strip():
        spec["rootSshAuthorizedKeys"] = c.login.root_ssh_authorized_keys.strip() + "\n"
    return _obj(SLINKY_API, "LoginSet", _meta(c, names.loginset(c), "login"), spec=spec)


def render_accounting(c: SlurmCluster) -> dict[str, Any]:
    a = c.accounting
    host = a.host if not a.mariadb else names.mariadb(c)
    spec = {
        "slurmKeyRef": names.secret_ref(c, "slurm_key").ref(),
        "jwtKeyRef": names.secret_ref(c, "jwt_key").ref(),
        "slurmdbd": {"image": default_image("slurmdbd", c.slurm_version)},
        "storageConfig": {
            "host": host,
            "port": a.port,
            "database": a.database,
            "username": a.username,
            "passwordKeyRef": names.secret_ref(c, "db_password").ref(),
        },
        "template": {"spec": _system_pod_spec()},
    }
    return _obj(SLINKY_API, "Accounting", _meta(c, names.accounting(c), "accounting"), spec=spec)


def render_restapi(c: SlurmCluster) -> dict[str, Any]:
    spec = {
        "controllerRef": {"name": names.controller(c)},
        "replicas": c.rest_api.replicas,
        "slurmrestd": {"image": default_image("slurmrestd", c.slurm_version)},
        "template": {"spec": _system_pod_spec()},
    }
    return _obj(SLINKY_API, "RestApi", _meta(c, names.restapi(c), "restapi"), spec=spec)


def render_token(c: SlurmCluster) -> dict[str, Any]:
    spec = {
        "username": c.rest_api.token_user,
        "jwtKeyRef": names.secret_ref(c, "jwt_key").ref(),
        "secretRef": {"name": names.token_secret(c), "key": "auth-token"},
        "lifetime": c.rest_api.token_lifetime,
        "refresh": True,
    }
    return _obj(SLINKY_API, "Token", _meta(c, f"{c.name}-{c.rest_api.token_user}", "token"), spec=spec)


def render_mariadb(c: SlurmCluster) -> dict[str, Any]:
    a = c.accounting
    pw = names.secret_ref(c, "db_password")
    root = names.secret_ref(c, "db_root_password")
    storage: dict[str, Any] = {"size": a.storage_size}
    if a.storage_class:
        storage["storageClassName"] = a.storage_class
    spec = {
        # generate: false -- the Secrets come from `slinkyml cluster apply` / `secrets`, so the
        # operator and slurmdbd read one password and nothing races to create it.
        "rootPasswordSecretKeyRef": {**root.ref(), "generate": False},
        "username": a.username,
        "passwordSecretKeyRef": {**pw.ref(), "generate": False},
        "database": a.database,
        "port": a.port,
        "replicas": 1,
        "storage": storage,
        "myCnf": MARIADB_CNF,
    }
    return _obj("k8s.mariadb.com/v1alpha1", "MariaDB", _meta(c, names.mariadb(c), "database"), spec=spec)


def render_namespace(c: SlurmCluster) -> dict[str, Any]:
    meta = {"name": c.namespace, "labels": {"app.kubernetes.io/managed-by": names.MANAGED_BY}}
    return _obj("v1", "Namespace", meta)


def render_config_maps(c: SlurmCluster) -> list[dict[str, Any]]:
    """The Controller's configFileRefs ConfigMap (cgroup.conf, gres.conf): no credentials."""
    return [_obj("v1", "ConfigMap", _meta(c, names.slurm_config(c), "controller"), data=workers.config_files(c))]


def render_sssd_secret(c: SlurmCluster) -> dict[str, Any]:
    """The LoginSet needs sssd.conf in a Secret (CRD: ``sssdConfRef``). It holds no credentials."""
    meta = _meta(c, names.sssd_conf(c), "login")
    return _obj("v1", "Secret", meta, type="Opaque", stringData={"sssd.conf": SSSD_CONF})


def render(c: SlurmCluster) -> Rendered:
    """All objects for a cluster, in an order that applies cleanly (references first)."""
    objs: list[dict[str, Any]] = [render_namespace(c), render_sssd_secret(c), *render_config_maps(c)]
    objs += storage.render_fsx(c)
    if c.accounting.enabled and c.accounting.mariadb:
        objs.append(render_mariadb(c))
    for ns in c.node_sets:
        objs += karpenter.render_node_class_and_pool(c, ns)
    if c.accounting.enabled:
        objs.append(render_accounting(c))
    objs.append(render_controller(c))
    if c.rest_api.enabled:
        objs.append(render_restapi(c))
        if c.rest_api.token_user:
            objs.append(render_token(c))
    if c.login.replicas:
        objs.append(render_loginset(c))
    objs += [render_nodeset(c, ns) for ns in c.node_sets]
    files = {}
    dra = storage.data_repository_association(c)
    if dra is not None:
        files["aws/fsx-data-repository-association.json"] = json.dumps(dra, indent=2, sort_keys=True) + "\n"
    plugin_values = workers.device_plugin_values(c)
    files["secrets.sh"] = secrets.secrets_script(c)
    steps = install_steps(objs, plugin_values)
    files["INSTALL.md"] = install_markdown(c.name, steps)
    files["install.sh"] = install_script(steps)
    return Rendered(objects=objs, helm_values=helm.render_values(c), files=files, plugin_values=plugin_values)
