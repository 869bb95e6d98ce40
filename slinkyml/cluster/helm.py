"""Values for the official Slinky ``slurm`` Helm chart, equivalent to the rendered objects.

:func:`check_key_paths` proves every key path exists in the vendored chart ``values.yaml``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR, specload
from slinkyml.cluster import names, storage, workers
from slinkyml.cluster.spec import SlurmCluster, default_image, login_image, worker_image

VALUES_FILE = DATA_DIR / "helm" / "slurm-values.yaml"

#: Keys the chart documents as free-form (map[string]..., corev1 types, secretKeyRef).
FREE_FORM = frozenset({
    "configFiles", "resources", "nodeSelector", "tolerations", "affinity", "volumes", "volumeMounts",
    "env", "metadata", "secretRef", "configMapRef", "extraConfMap", "configMap", "initContainers",
    "podSpec", "args", "securityContext",
})
#: Map entries whose values follow a defaults block: (map key) -> (defaults key path).
MAP_DEFAULTS = {"nodesets": ("nodesetDefaults",), "loginsets": ("loginsetDefaults",),
                "partitions": ("partitions", "all")}


def split_image(image: str) -> dict[str, str]:
    """``repo/name:tag`` -> the chart's ``{repository, tag}`` (digest form kept as digest)."""
    if "@" in image:
        repo, digest = image.split("@", 1)
        return {"repository": repo, "digest": digest}
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return {"repository": image[:colon], "tag": image[colon + 1:]}
    return {"repository": image, "tag": "latest"}


def render_values(c: SlurmCluster) -> dict[str, Any]:
    slurm_key = names.secret_ref(c, "slurm_key")
    jwt_key = names.secret_ref(c, "jwt_key")
    vols, mounts = storage.fsx_volume(c)
    values: dict[str, Any] = {
        "clusterName": c.name,
        "slurmKey": {"create": False, "secretRef": slurm_key.ref()},
        "jwtKey": {"create": False, "secretRef": jwt_key.ref()},
    }
    values["configFiles"] = workers.config_files(c, workers.chart_hostname_prefix)
    conf = workers.slurm_conf(c)
    # partitions go to the chart's own `partitions` (below); everything else stays extraConf
    extra = conf.select(lambda line: line.key.lower() != "partitionname").text()
    controller: dict[str, Any] = {
        "slurmctld": {"image": split_image(default_image("slurmctld", c.slurm_version)),
                      "resources": {"requests": {"cpu": c.controller.cpu, "memory": c.controller.memory}}},
        "logfile": {"image": split_image(default_image("slurmctld", c.slurm_version))},
        "persistence": {"enabled": True, "resources": {"requests": {"storage": c.controller.persistence_size}}},
    }
    if c.controller.storage_class:
        controller["persistence"]["storageClassName"] = c.controller.storage_class
    if extra:
        controller["extraConf"] = extra
    values["controller"] = controller
    values["restapi"] = {"replicas": c.rest_api.replicas if c.rest_api.enabled else 0,
                         "slurmrestd": {"image": split_image(default_image("slurmrestd", c.slurm_version))}}
    if c.accounting.enabled:
        a = c.accounting
        values["accounting"] = {
            "enabled": True,
            "slurmdbd": {"image": split_image(default_image("slurmdbd", c.slurm_version))},
            "storageConfig": {"host": a.host if not a.mariadb else names.mariadb(c), "port": a.port,
                              "database": a.database, "username": a.username,
                              "passwordKeyRef": names.secret_ref(c, "db_password").ref()},
        }
    if c.login.replicas:
        login: dict[str, Any] = {
            "enabled": True,
            "replicas": c.login.replicas,
            "login": {"image": split_image(login_image(c))},
            "initconf": {"image": split_image(login_image(c))},
            "service": {"spec": {"type": c.login.service_type}},
        }
        if mounts:
            login["login"]["volumeMounts"] = mounts
            login["podSpec"] = {"volumes": vols}
        if c.login.root_ssh_authorized_keys.strip():
            login["rootSshAuthorizedKeys"] = c.login.root_ssh_authorized_keys.strip() + "\n"
        values["loginsets"] = {"login": login}
    nodesets: dict[str, Any] = {}
    for ns in c.node_sets:
        template = workers.nodeset_pod_template(c, ns)
        image = split_image(worker_image(c, ns))
        entry: dict[str, Any] = {
            "enabled": True,
            "replicas": ns.count,
            "slurmd": {"image": image, "resources": workers.slurmd_resources(ns)},
            "logfile": {"image": split_image(worker_image(c, ns))},
            "extraConf": workers.slurmd_conf(ns),
            "partition": {"enabled": False},
            "updateStrategy": {"type": "OnDelete"},
            "metadata": {"annotations": template["metadata"]["annotations"]},
            "podSpec": template["spec"],
        }
        if mounts:
            entry["slurmd"]["volumeMounts"] = mounts
        nodesets[ns.name] = entry
    values["nodesets"] = nodesets
    parts: dict[str, Any] = {"all": {"enabled": False}}
    keys = {names.nodeset(c, ns): ns.name for ns in c.node_sets}  # the chart names node sets by key
    for record in conf.partitions():
        if record.raw is not None:
            continue  # a user's own PartitionName line: not ours to translate
        members = (record.param("Nodes") or "").split(",")
        entry = {"enabled": True, "nodesets": [keys[m] for m in members if m in keys]}
        conf_text = " ".join([*(f"{k}={v}" for k, v in record.params if k != "Nodes"), record.options])
        if conf_text.strip():
            entry["config"] = conf_text.strip()
        parts[record.value] = entry
    values["partitions"] = parts
    return values


@lru_cache(maxsize=2)
def chart_values(path: str | None = None) -> dict[str, Any]:
    return specload.load_data(Path(path or VALUES_FILE).read_text())


def _paths(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(obj, dict) and obj:
        out = []
        for k, v in obj.items():
            out += _paths(v, (*prefix, str(k)))
        return out
    return [prefix]


def check_key_paths(values: dict[str, Any], chart: dict[str, Any] | None = None) -> list[str]:
    """Key paths in ``values`` that the chart does not have; empty when all are known."""
    chart = chart if chart is not None else chart_values()
    bad = []
    for path in _paths(values):
        if not _known(path, chart):
            bad.append(".".join(path))
    return bad


def _known(path: tuple[str, ...], chart: dict[str, Any]) -> bool:
    if path and path[0] in MAP_DEFAULTS and len(path) >= 2:
        if path[0] == "partitions" and path[1] in chart.get("partitions", {}) and len(path) == 2:
            return True
        path = (*MAP_DEFAULTS[path[0]], *path[2:])
    node: Any = chart
    for key in path:
        if key in FREE_FORM:
            return isinstance(node, dict) and key in node
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
        if node == {} or node == []:  # empty default map/list: documented as free-form content
            return True
    return True
