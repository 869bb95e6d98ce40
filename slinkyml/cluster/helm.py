"""Values for the official Slinky ``slurm`` Helm chart, equivalent to the rendered objects.

For teams that install with ``helm install slurm oci://ghcr.io/slinkyproject/charts/slurm -f``.
:func:`check_key_paths` proves every key path we emit exists in the chart's ``values.yaml``
(vendored copy in ``slinkyml/data/helm/``), except below keys the chart documents as free-form
(maps such as ``configFiles`` or Kubernetes types such as ``podSpec``/``resources``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml.cluster import names
from slinkyml.cluster.spec import SlurmCluster, default_image

VALUES_FILE = Path(__file__).resolve().parent.parent / "data" / "helm" / "slurm-values.yaml"

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
    from slinkyml.cluster import render

    slurm_key = names.secret_ref(c, "slurm_key")
    jwt_key = names.secret_ref(c, "jwt_key")
    vols, mounts = render._fsx_volume(c)
    values: dict[str, Any] = {
        "clusterName": c.name,
        "slurmKey": {"create": False, "secretRef": slurm_key.ref()},
        "jwtKey": {"create": False, "secretRef": jwt_key.ref()},
    }
    gres = render.gres_conf(c, render.chart_hostname_prefix)
    if gres:
        values["configFiles"] = {"gres.conf": gres}
    extra = [line for line in render.slurm_conf_extra(c).splitlines() if not line.startswith("PartitionName=")]
    controller: dict[str, Any] = {
        "slurmctld": {"image": split_image(default_image("slurmctld", c.slurm_version)),
                      "resources": {"requests": {"cpu": c.controller.cpu, "memory": c.controller.memory}}},
        "logfile": {"image": split_image(default_image("slurmctld", c.slurm_version))},
        "persistence": {"enabled": True, "resources": {"requests": {"storage": c.controller.persistence_size}}},
    }
    if c.controller.storage_class:
        controller["persistence"]["storageClassName"] = c.controller.storage_class
    if extra:
        controller["extraConf"] = "\n".join(extra) + "\n"
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
            "login": {"image": split_image(c.login.image or default_image("login", c.slurm_version))},
            "initconf": {"image": split_image(c.login.image or default_image("login", c.slurm_version))},
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
        obj = render.render_nodeset(c, ns)["spec"]
        entry: dict[str, Any] = {
            "enabled": True,
            "replicas": ns.count,
            "slurmd": {"image": split_image(obj["slurmd"]["image"]), "resources": obj["slurmd"]["resources"]},
            "logfile": {"image": split_image(obj["logfile"]["image"])},
            "extraConf": obj["extraConf"],
            "partition": {"enabled": False},
            "updateStrategy": {"type": "OnDelete"},
            "metadata": {"annotations": obj["template"]["metadata"]["annotations"]},
            "podSpec": obj["template"]["spec"],
        }
        if mounts:
            entry["slurmd"]["volumeMounts"] = mounts
        nodesets[ns.name] = entry
    values["nodesets"] = nodesets
    parts: dict[str, Any] = {"all": {"enabled": False}}
    for i, (part, (members, cfg)) in enumerate(render.partitions(c).items()):
        # chart nodeset names are the map keys (it prefixes the release name itself)
        keys = [ns.name for ns in c.node_sets if names.nodeset(c, ns) in members]
        entry = {"enabled": True, "nodesets": keys}
        conf = ("Default=YES " if i == 0 and "Default=" not in cfg else "") + cfg
        if conf.strip():
            entry["config"] = conf.strip()
        parts[part] = entry
    values["partitions"] = parts
    return values


@lru_cache(maxsize=2)
def chart_values(path: str | None = None) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(path or VALUES_FILE).read_text())


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
