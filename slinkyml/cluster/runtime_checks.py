"""Rules the slurm-operator, Karpenter, the device plugins and the FSx CSI driver apply at run time,
which a schema cannot say; each names the upstream file it mirrors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from slinkyml.cluster import addons
from slinkyml.cluster.issues import DNS1123_SUBDOMAIN, Issue, describe
from slinkyml.cluster.schemas import core_kind
from slinkyml.instances import InstanceType, load_instance_types
from slinkyml.kube import dig, quantity
from slinkyml.slurm.hostlist import HostlistError, expand_hostlist

#: kind -> the sidecar/init containers the operator always adds, whose image it takes only from spec.
REQUIRED_SIDECARS = {
    # slurm-operator internal/builder/controllerbuilder/controller_app.go (LogfileContainer)
    "Controller": ("logfile",),
    # slurm-operator internal/builder/workerbuilder/worker_app.go (LogfileContainer)
    "NodeSet": ("logfile",),
    # slurm-operator internal/builder/loginbuilder/login_app.go (InitconfContainer)
    "LoginSet": ("initconf",),
}
#: Fields of Slinky kinds that hold a corev1.Container (the CRDs keep them open).
CONTAINER_FIELDS = {
    "Controller": ("slurmctld", "reconfigure", "logfile"),
    "NodeSet": ("slurmd", "logfile"),
    "LoginSet": ("login", "initconf"),
    "Accounting": ("slurmdbd",),
    "RestApi": ("slurmrestd",),
}
#: slurm-operator pkg/taints/taints.go: every slurmd pod gets this toleration from the operator.
OPERATOR_WORKER_TOLERATION = {"key": "nodeset.slinky.slurm.net/worker", "operator": "Equal",
                              "effect": "NoExecute"}
def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The mappings of a list field (malformed entries are the schema check's finding)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _replicas(value: Any) -> int:
    """A replicas field as the API server would take it; malformed ones are the schema's finding."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


@dataclass(frozen=True)
class FitRow:
    """One line of the requests-vs-allocatable table."""

    nodeset: str
    instance_type: str
    allocatable_cpu: float
    allocatable_memory_mib: int
    max_pods: int
    requested_cpu: float
    requested_memory_mib: float
    reserve_cpu: float
    reserve_memory_mib: int

    @property
    def fits(self) -> bool:
        return (self.requested_cpu + self.reserve_cpu <= self.allocatable_cpu
                and self.requested_memory_mib + self.reserve_memory_mib <= self.allocatable_memory_mib)


def _nodeset_pool_and_type(ns_obj: dict[str, Any], pools: dict[str, Any],
                           types: dict[str, InstanceType]) -> tuple[dict[str, Any] | None, InstanceType | None]:
    selector = dig(ns_obj, "spec", "template", "spec", "nodeSelector") or {}
    pool = pools.get(selector.get("karpenter.sh/nodepool") or "") if isinstance(selector, dict) else None
    name = selector.get("node.kubernetes.io/instance-type") if isinstance(selector, dict) else None
    if name is None and pool is not None:
        for req in dig(pool, "spec", "template", "spec", "requirements") or []:
            if isinstance(req, dict) and req.get("key") == "node.kubernetes.io/instance-type" \
                    and req.get("operator") == "In" and len(req.get("values") or []) == 1:
                name = req["values"][0]
    return pool, types.get(name) if isinstance(name, str) else None


def fit_table(objs: list[dict[str, Any]]) -> list[FitRow]:
    """Requests of each NodeSet's slurmd pod against Karpenter's allocatable for its instance type."""
    pools = {dig(o, "metadata", "name"): o for o in objs if o.get("kind") == "NodePool"}
    types = load_instance_types()
    k = addons.addons()["karpenter"]
    rows = []
    for o in objs:
        if o.get("kind") != "NodeSet":
            continue
        _, itype = _nodeset_pool_and_type(o, pools, types)
        if itype is None:
            continue
        requests = dig(o, "spec", "slurmd", "resources", "requests")
        if not isinstance(requests, dict):
            continue
        cpu = float(quantity(requests.get("cpu", 0)) or 0)
        memory = float(quantity(requests.get("memory", 0)) or 0) / 2 ** 20
        alloc = addons.karpenter_allocatable(itype)
        rows.append(FitRow(describe(o), itype.name, alloc.cpu_millis / 1000, alloc.memory_mib, alloc.max_pods,
                           cpu, memory, k["daemonset_reserve_cpu_millis"] / 1000, k["daemonset_reserve_memory_mib"]))
    return rows


def format_fit_table(rows: list[FitRow]) -> str:
    head = ("NodeSet", "instance", "alloc cpu", "alloc MiB", "pods", "req cpu", "req MiB", "left cpu", "left MiB", "")
    body = [(r.nodeset, r.instance_type, f"{r.allocatable_cpu:g}", str(r.allocatable_memory_mib), str(r.max_pods),
             f"{r.requested_cpu:g}", f"{r.requested_memory_mib:.0f}", f"{r.allocatable_cpu - r.requested_cpu:g}",
             f"{r.allocatable_memory_mib - r.requested_memory_mib:.0f}", "ok" if r.fits else "DOES NOT FIT")
            for r in rows]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in (head, *body))


# ---------------------------------------------------------------- the rules


def sidecar_issues(o: dict[str, Any]) -> list[Issue]:
    """slurm-operator internal/builder/common/common.go: LogfileContainer/InitconfContainer merge the
    spec's container over a base with no image; a pod with an image-less container is rejected."""
    out = []
    for field_name in REQUIRED_SIDECARS.get(str(o.get("kind")), ()):
        if not dig(o, "spec", field_name, "image"):
            out.append(Issue(describe(o), f"spec.{field_name}.image", "required at run time: the operator always "
                             f"adds the {field_name} container and has no default image for it"))
    if o.get("kind") == "Controller" and dig(o, "spec", "inplaceReconfigure") and not dig(
            o, "spec", "reconfigure", "image"):
        # controller_app.go: reconfigureContainer is added when inplaceReconfigure is on
        out.append(Issue(describe(o), "spec.reconfigure.image", "required when inplaceReconfigure is on"))
    return out


def unmodelled_resource_issues(o: dict[str, Any]) -> list[Issue]:
    """karpenter-provider-aws pkg/providers/instancetype/types.go computeCapacity: an instance
    type's capacity has only these resources, so a pod asking another one fits no instance type."""
    if o.get("kind") != "NodeSet" or not dig(o, "spec", "template", "spec", "nodeSelector", "karpenter.sh/nodepool"):
        return []
    known = addons.karpenter_resources()
    out = []
    for part in ("requests", "limits"):
        asked = dig(o, "spec", "slurmd", "resources", part)
        for resource in asked if isinstance(asked, dict) else {}:
            if resource not in known:
                out.append(Issue(describe(o), f"spec.slurmd.resources.{part}.{resource}", "Karpenter does not "
                                 "model this resource on any instance type, so the pod never gets a node"))
    return out


def fit_issues(objs: list[dict[str, Any]]) -> list[Issue]:
    """karpenter-provider-aws types.go (memory, kubeReservedResources, evictionThreshold) and karpenter
    core scheduling (DaemonSet overhead): requests must fit the modelled allocatable less the reserve."""
    return [Issue(r.nodeset, "spec.slurmd.resources.requests",
                  f"asks {r.requested_cpu:g} CPU / {r.requested_memory_mib:.0f} MiB but Karpenter models "
                  f"{r.instance_type} as {r.allocatable_cpu:g} CPU / {r.allocatable_memory_mib} MiB allocatable, "
                  f"less {r.reserve_cpu:g} CPU / {r.reserve_memory_mib} MiB for DaemonSets")
            for r in fit_table(objs) if not r.fits]


def _nodesets_with_pools(objs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each NodeSet with the NodePool its nodes come from (NodeSets without one are left out)."""
    pools = {dig(o, "metadata", "name"): o for o in objs if o.get("kind") == "NodePool"}
    for o in objs:
        if o.get("kind") == "NodeSet":
            pool, _ = _nodeset_pool_and_type(o, pools, {})
            if pool is not None:
                yield o, pool


def _requested_plugins(nodeset: dict[str, Any], plugin_values: dict[str, dict[str, Any]] | None
                       ) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    """(extended resource, its device plugin, that plugin's values or None) per resource the slurmd requests."""
    requests = dig(nodeset, "spec", "slurmd", "resources", "requests")
    for resource in requests if isinstance(requests, dict) else {}:
        plugin = addons.plugin_for_resource(resource)
        if plugin is not None:
            yield resource, plugin, (plugin_values or {}).get(plugin)


def taint_issues(objs: list[dict[str, Any]], plugin_values: dict[str, dict[str, Any]] | None) -> list[Issue]:
    """What runs on a NodePool's nodes must tolerate its taints: the slurmd pods (their own
    tolerations plus the operator's, pkg/taints/taints.go) and the device plugin of every extended
    resource they request (NVIDIA deployments/helm/nvidia-device-plugin/values.yaml, eks-charts
    stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml, neuron-helm-charts values.yaml)."""
    out = []
    for o, pool in _nodesets_with_pools(objs):
        taints = _dicts(dig(pool, "spec", "template", "spec", "taints"))
        pod_tolerations = [*_dicts(dig(o, "spec", "template", "spec", "tolerations")), OPERATOR_WORKER_TOLERATION]
        for t in addons.untolerated(taints, pod_tolerations):
            out.append(Issue(describe(o), "spec.template.spec.tolerations",
                             f"does not tolerate taint {t.get('key')}:{t.get('effect')} of {describe(pool)}"))
        for resource, plugin, given in _requested_plugins(o, plugin_values):
            tolerations = addons.plugin_tolerations(plugin, given)
            for t in addons.untolerated(taints, tolerations):
                where = "its values in helm/device-plugins/" if given is not None else "the chart's default values"
                out.append(Issue(describe(pool), "spec.template.spec.taints",
                                 f"taint {t.get('key')}:{t.get('effect')} keeps the {plugin} device plugin off "
                                 f"the nodes ({where} do not tolerate it), so they never advertise {resource} "
                                 f"and {describe(o)} stays Pending"))
    return out


#: labels every node Karpenter launches has (karpenter core pkg/apis/v1 labels.go WellKnownLabels,
#: scheduling/requirements.go), whose value the NodePool may leave open
KARPENTER_NODE_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                         "node.kubernetes.io/instance-type", "kubernetes.io/arch", "kubernetes.io/hostname",
                         "karpenter.sh/capacity-type")


def pool_node_labels(pool: dict[str, Any]) -> addons.NodeLabels:
    """The labels a node of this NodePool will carry: its template labels, its nodepool name, each
    ``In`` requirement's values (one of them), the well-known ones with values left open (empty)."""
    labels: addons.NodeLabels = {key: frozenset() for key in KARPENTER_NODE_LABELS}
    labels["kubernetes.io/os"] = frozenset({"linux"})
    for req in _dicts(dig(pool, "spec", "template", "spec", "requirements")):
        if req.get("operator") == "In" and isinstance(req.get("key"), str):
            labels[req["key"]] = frozenset(str(v) for v in req.get("values") or [])
        elif req.get("operator") == "Exists" and isinstance(req.get("key"), str):
            labels.setdefault(req["key"], frozenset())
    template = dig(pool, "spec", "template", "metadata", "labels")
    for key, value in (template if isinstance(template, dict) else {}).items():
        labels[str(key)] = frozenset({str(value)})
    labels["karpenter.sh/nodepool"] = frozenset({str(dig(pool, "metadata", "name"))})
    return labels


def plugin_placement_issues(objs: list[dict[str, Any]],
                            plugin_values: dict[str, dict[str, Any]] | None) -> list[Issue]:
    """The device plugin of every extended resource a NodeSet requests must be allowed on its
    NodePool's nodes by the chart's nodeAffinity and nodeSelector (NVIDIA: NFD labels or
    nvidia.com/gpu.present=true; EFA: the instance types of supportedInstanceLabels; Neuron:
    neuronInstances, not Fargate/hybrid/auto nodes), or the resource is never advertised."""
    out = []
    for o, pool in _nodesets_with_pools(objs):
        labels = pool_node_labels(pool)
        for resource, plugin, given in _requested_plugins(o, plugin_values):
            terms = addons.plugin_node_selector_terms(plugin, given)
            selector = addons.plugin_node_selector(plugin, given)
            if addons.node_affinity_matches(terms, selector, labels):
                continue
            where = "its values in helm/device-plugins/" if given is not None else "the chart's default values"
            need = addons.terms_text(terms) + "".join(f" and {k}={v}" for k, v in selector.items())
            out.append(Issue(describe(pool), "spec.template.metadata.labels",
                             f"no node of this pool matches the {plugin} device plugin's node affinity ({where}: "
                             f"{need}), so its DaemonSet never runs there, the nodes never advertise {resource} "
                             f"and {describe(o)} stays Pending"))
    return out


def selector_issues(objs: list[dict[str, Any]]) -> list[Issue]:
    """A NodeSet's nodeSelector must match its NodePool's nodes: a label the pool pins (zone,
    instance type, capacity type, its own labels) to other values leaves the pod Pending
    (kube-scheduler NodeAffinity: "didn't match Pod's node affinity/selector")."""
    out = []
    for o, pool in _nodesets_with_pools(objs):
        selector = dig(o, "spec", "template", "spec", "nodeSelector")
        if not isinstance(selector, dict):
            continue
        labels = pool_node_labels(pool)
        for key, value in selector.items():
            have = labels.get(str(key))
            if have and str(value) not in have:
                out.append(Issue(describe(o), f"spec.template.spec.nodeSelector.{key}",
                                 f"{value!r} matches no node of {describe(pool)}, whose nodes have {key} in "
                                 f"{{{', '.join(sorted(have))}}}: the pods stay Pending (node affinity/selector)"))
    return out


# ---------------------------------------------------------------- images


def _slurm_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _repository_and_tag(image: str) -> tuple[str, str]:
    """``registry/path:tag@digest`` -> (``registry/path``, ``tag``); a registry port is not a tag."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        repo, tag = name.rsplit(":", 1)
        return repo, tag
    return name, ""


def image_issues(o: dict[str, Any]) -> list[Issue]:
    """Images that do not exist or that the operator does not support: a Slinky image must be a
    published component and ``<slurm>-<flavor>`` tag (SlinkyProject/containers docker-bake.hcl) at
    or above the slurm chart's minimum-slurm-version; a ``…/slinkyml/<name>`` image must be one
    this repository builds (containers/<name>)."""
    data = addons.addons()
    release = addons.operator_release()  # the oldest minimum of the releases slinkyml installs
    slinky, minimum = data["slinky_images"], release["minimum_slurm_version"]
    out = []
    for field_name in CONTAINER_FIELDS.get(str(o.get("kind")), ()):
        image = dig(o, "spec", field_name, "image")
        if not isinstance(image, str) or not image:
            continue
        where = f"spec.{field_name}.image"
        repo, tag = _repository_and_tag(image)
        if repo.startswith(slinky["registry"] + "/"):
            component = repo[len(slinky["registry"]) + 1:]
            if component not in slinky["components"]:
                out.append(Issue(describe(o), where, f"{image!r}: Slinky publishes no image '{component}' "
                                 f"(it has {', '.join(slinky['components'])})"))
                continue
            m = re.fullmatch(r"(\d+\.\d+)(?:\.\d+)?-(.+)", tag)
            if m is None or m.group(1) not in slinky["slurm_versions"] or m.group(2) not in slinky["flavors"]:
                out.append(Issue(describe(o), where, f"{image!r}: not a published tag (<slurm>-<flavor>: Slurm "
                                 f"{', '.join(slinky['slurm_versions'])} on {', '.join(slinky['flavors'])})"))
            elif _slurm_key(m.group(1)) < _slurm_key(minimum):
                out.append(Issue(describe(o), where, f"{image!r}: Slurm {m.group(1)} is below the operator's "
                                 f"minimum-slurm-version {minimum} (slurm-operator "
                                 f"{release['name']}, helm/slurm-operator/Chart.yaml)"))
        elif (name := addons.project_image_name(image)) is not None:
            if name not in data["project_images"]:
                out.append(Issue(describe(o), where, f"{image!r}: slinkyml builds no image '{name}' "
                                 f"(containers/: {', '.join(data['project_images'])})"))
    return out


# ---------------------------------------------------------------- gres.conf node names


@lru_cache(maxsize=64)
def _hosts(expr: str) -> frozenset[str]:
    try:
        return frozenset(expand_hostlist(expr))
    except HostlistError:
        return frozenset()


def hostlist_matches(expr: str, host: str) -> bool:
    """Does a Slurm hostlist (``a-[0-9,12]``, ``x1,x2``) name ``host``? (slinkyml.slurm.hostlist)"""
    return host in _hosts(expr)


def _gres_names(extra_conf: str) -> list[str]:
    m = re.search(r"(?:^|\s)Gres=(\S+)", extra_conf)
    return [g.split(":")[0] for g in m.group(1).split(",")] if m else []


def gres_hostname_issues(where: str, gres_conf: str, nodesets: list[tuple[str, str, int, str]]) -> list[Issue]:
    """Neuron gres.conf lines must name each slurmd's node name, or the node registers no devices.

    Checks every ordinal up to one more than the replicas; ``nodesets``: (description, hostname
    prefix, replicas, slurmd extraConf).
    """
    autodetect_all = any(re.match(r"^\s*AutoDetect=\S+", line) for line in gres_conf.splitlines())
    lines = [line for line in gres_conf.splitlines() if re.search(r"(?:^|\s)Name=", line)]
    out = []
    for desc, prefix, replicas, extra in nodesets:
        for gres in _gres_names(extra):
            if gres == "gpu" and autodetect_all:
                continue
            own = [line for line in lines if re.search(rf"(?:^|\s)Name={re.escape(gres)}(?:\s|$)", line)]
            if not own:
                continue
            for ordinal in range(replicas + 1):
                host = f"{prefix}{ordinal}"
                if not any(hostlist_matches(_node_name(line, host), host) for line in own):
                    out.append(Issue(where, "gres.conf", f"no Name={gres} line names {host} ({desc}'s "
                                     f"{'next' if ordinal == replicas else 'pod'} hostname)"))
                    break
    return out


def operator_gres_issues(objs: list[dict[str, Any]]) -> list[Issue]:
    """gres.conf from a Controller's configFileRefs vs its NodeSets' pod hostnames."""
    configmaps = {(dig(o, "metadata", "namespace"), dig(o, "metadata", "name")): o
                  for o in objs if o.get("kind") == "ConfigMap"}
    out = []
    for ctrl in (o for o in objs if o.get("kind") == "Controller"):
        ns = dig(ctrl, "metadata", "namespace")
        for ref in dig(ctrl, "spec", "configFileRefs") or []:
            cm = configmaps.get((ns, dig(ref, "name")))
            gres = dig(cm, "data", "gres.conf")
            if not isinstance(gres, str):
                continue
            members = []
            for o in objs:
                if o.get("kind") == "NodeSet" and dig(o, "metadata", "namespace") == ns \
                        and dig(o, "spec", "controllerRef", "name") == dig(ctrl, "metadata", "name"):
                    hostname = dig(o, "spec", "template", "spec", "hostname")
                    prefix = hostname if isinstance(hostname, str) and hostname else f"{dig(o, 'metadata', 'name')}-"
                    members.append((describe(o), prefix, _replicas(dig(o, "spec", "replicas")),
                                    str(dig(o, "spec", "extraConf") or "")))
            out += gres_hostname_issues(describe(cm), gres, members)
    return out


def chart_values_issues(source: str, values: dict[str, Any]) -> list[Issue]:
    """The same check for the slurm chart's values: hostname ``<key>-`` (helm/slurm/templates/nodeset/
    nodeset-cr.yaml) plus the ordinal."""
    gres = dig(values, "configFiles", "gres.conf")
    if not isinstance(gres, str):
        return []
    members = [(f"nodesets.{key}", f"{key}-", _replicas(entry.get("replicas")), str(entry.get("extraConf") or ""))
               for key, entry in _mapping(values.get("nodesets")).items() if isinstance(entry, dict)]
    return gres_hostname_issues(f"{source}: configFiles", gres, members)


# ---------------------------------------------------------------- FSx


_GO_BOOLS = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}


def fsx_issues(o: dict[str, Any]) -> list[Issue]:
    """kubernetes-sigs/aws-fsx-csi-driver pkg/driver/controller.go CreateVolume: the parameters it
    reads, how it parses them (strconv.ParseInt/ParseBool) and the values FSx accepts; keys it does
    not know are ignored silently, so a misspelt one is reported."""
    if o.get("kind") != "StorageClass" or o.get("provisioner") != "fsx.csi.aws.com":
        return []
    f = addons.addons()["fsx_csi_driver"]
    params = o.get("parameters") or {}
    if not isinstance(params, dict):
        return []  # the schema check reports it
    name = describe(o)
    known = {"subnetId", "securityGroupIds", "autoImportPolicy", "s3ImportPath", "s3ExportPath", "deploymentType",
             "kmsKeyId", "perUnitStorageThroughput", "storageType", "driveCacheType", "automaticBackupRetentionDays",
             "dailyAutomaticBackupStartTime", "copyTagsToBackups", "dataCompressionType", "weeklyMaintenanceStartTime",
             "fileSystemTypeVersion", "extraTags", "efaEnabled", "metadataConfigurationMode", "metadataIops"}
    out = [Issue(name, f"parameters.{key}", "not a parameter of the FSx CSI driver (it would be ignored)")
           for key in params if key not in known]

    def bad(key: str, why: str) -> None:
        out.append(Issue(name, f"parameters.{key}", f"{params[key]!r}: {why}"))

    if not re.fullmatch(r"subnet-[0-9a-f]{8,17}", str(params.get("subnetId", ""))):
        out.append(Issue(name, "parameters.subnetId", "one subnet id is required (FSx takes exactly one)"))
    groups = str(params.get("securityGroupIds", "")).split(",")
    if not all(re.fullmatch(r"sg-[0-9a-f]{8,17}", g) for g in groups):
        out.append(Issue(name, "parameters.securityGroupIds", "a comma-separated list of sg-... ids is required"))
    deployment = params.get("deploymentType", "SCRATCH_1")
    if "deploymentType" in params and deployment not in f["deployment_types"]:
        bad("deploymentType", f"not one of {', '.join(f['deployment_types'])}")
    for key in f["integer_parameters"]:
        if key in params and not re.fullmatch(r"-?\d+", str(params[key])):
            bad(key, "must be an integer string")
    for key in f["boolean_parameters"]:
        if key in params and str(params[key]) not in _GO_BOOLS:
            bad(key, "must be true or false")
    throughput = str(params.get("perUnitStorageThroughput", ""))
    if deployment == "PERSISTENT_2" and throughput.isdigit() and int(throughput) not in f["persistent_2_throughputs"]:
        bad("perUnitStorageThroughput", "PERSISTENT_2 takes " + ", ".join(map(str, f["persistent_2_throughputs"])))
    if "dataCompressionType" in params and params["dataCompressionType"] not in f["data_compression_types"]:
        bad("dataCompressionType", f"not one of {', '.join(f['data_compression_types'])}")
    if "fileSystemTypeVersion" in params and str(params["fileSystemTypeVersion"]) not in f["file_system_type_versions"]:
        bad("fileSystemTypeVersion", f"not one of {', '.join(f['file_system_type_versions'])}")
    return out


# ---------------------------------------------------------------- what the operator builds


#: Slinky kinds whose ``spec.service`` becomes a Service (slurm-operator v1.2.1
#: internal/builder/*/*_service.go: the spec's ServiceSpec, plus one port of the operator's own
#: from ``service.port``/``service.nodePort``); the CRD keeps ``service.spec`` open
SERVICE_KINDS = ("Controller", "LoginSet", "RestApi", "Accounting")
#: kinds whose replicas go to a Deployment, not a scale subresource the API server checks
#: (restapibuilder/restapi_app.go: Replicas: restapi.Spec.Replicas)
DEPLOYMENT_REPLICAS = ("RestApi",)
#: k8s.io/kubernetes pkg/apis/core/validation ValidateService: supportedServiceType, supportedPortProtocols
SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
PORT_PROTOCOLS = ("SCTP", "TCP", "UDP")
BUILT = "the CRD admits it, but the operator's {what} built from it is refused by the API server"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _port_problem(value: Any, zero_ok: bool) -> str | None:
    """apimachinery IsValidPortNum (1-65535); 0 where the field means unset."""
    if not _is_int(value) or (zero_ok and value == 0) or 1 <= value <= 65535:
        return None
    return f"Invalid value: {value}: must be between 1 and 65535, inclusive"


def service_issues(o: dict[str, Any]) -> list[Issue]:
    """The Service the operator makes of ``spec.service``: its port and nodePort, the ServiceSpec's
    types (corev1.ServiceSpec, the vendored OpenAPI), type, port numbers and protocols."""
    service = dig(o, "spec", "service")
    if o.get("kind") not in SERVICE_KINDS or not isinstance(service, dict):
        return []
    why = BUILT.format(what="Service")
    out = []
    for key in ("port", "nodePort"):
        problem = _port_problem(service.get(key), zero_ok=True)
        if problem:
            out.append(Issue(describe(o), f"spec.service.{key}", f"{problem} ({why})"))
    spec = service.get("spec")
    if not isinstance(spec, dict):
        return out
    found = core_kind("", "io.k8s.api.core.v1.ServiceSpec")
    typed = [e for e in found.validator.iter_errors(spec) if e.validator != "additionalProperties"] if found else []
    for e in typed:  # Go's decoder fails on a wrong type; unknown fields it drops
        where = ".".join(["spec.service.spec", *map(str, e.absolute_path)])
        out.append(Issue(describe(o), where, f"{' '.join(str(e.message).split())[:120]} ({why})"))
    if typed:
        return out
    kind = spec.get("type")
    if kind is not None and kind not in SERVICE_TYPES:
        out.append(Issue(describe(o), "spec.service.spec.type", f"Unsupported value: {kind!r}: supported values: "
                         f"{', '.join(SERVICE_TYPES)} ({why})"))
    for i, port in enumerate(_dicts(spec.get("ports"))):
        for key, zero_ok in (("port", False), ("nodePort", True)):
            problem = _port_problem(port.get(key), zero_ok)
            if problem:
                out.append(Issue(describe(o), f"spec.service.spec.ports[{i}].{key}", f"{problem} ({why})"))
        if port.get("protocol") not in (None, *PORT_PROTOCOLS):
            out.append(Issue(describe(o), f"spec.service.spec.ports[{i}].protocol", f"Unsupported value: "
                             f"{port['protocol']!r}: supported values: {', '.join(PORT_PROTOCOLS)} ({why})"))
    return out


def _refs(value: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    """(path, field name, the ref) of every ``...KeyRef``/``secretRef``/``...ConfRef`` (a Secret's
    key selector) and ``...Refs`` item (a ConfigMap) below a Slinky spec."""
    for key, sub in value.items() if isinstance(value, dict) else ():
        here = f"{path}.{key}"
        if key.endswith(("KeyRef", "secretRef", "ConfRef")) and isinstance(sub, dict):
            yield here, "Secret", sub.get("name")
        elif key.endswith("Refs") and isinstance(sub, list):
            for i, item in enumerate(sub):
                if isinstance(item, dict):
                    yield f"{here}[{i}].name", "ConfigMap", item.get("name")
        elif isinstance(sub, dict) and key not in ("template", "service") and not key.endswith("Ref"):
            yield from _refs(sub, here)


def reference_name_issues(o: dict[str, Any]) -> list[Issue]:
    """A Secret or ConfigMap a Slinky object names must be able to exist: the CRD takes any string,
    but no object can have a name that is not a DNS-1123 subdomain, so the operator waits for it (or,
    for a Token's ``secretRef``, fails to create it) for ever."""
    if not str(o.get("apiVersion", "")).startswith("slinky.slurm.net/"):
        return []
    out = []
    for path, kind, name in _refs(o.get("spec"), "spec"):
        if isinstance(name, str) and name and (not DNS1123_SUBDOMAIN.match(name) or len(name) > 253):
            out.append(Issue(describe(o), path if path.endswith(".name") else f"{path}.name",
                             f"Invalid value: {name!r}: a {kind} name must be a lowercase RFC 1123 subdomain; the CRD "
                             f"admits it, but no {kind} can be named so and the operator never finds it"))
    return out


def deployment_replicas_issues(o: dict[str, Any]) -> list[Issue]:
    replicas = dig(o, "spec", "replicas")
    if o.get("kind") in DEPLOYMENT_REPLICAS and _is_int(replicas) and replicas < 0:
        return [Issue(describe(o), "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0 "
                      f"({BUILT.format(what='Deployment')})")]
    return []


def operator_build_issues(objs: list[dict[str, Any]]) -> list[Issue]:
    """What passes admission but makes the operator build an object the API server refuses."""
    out: list[Issue] = []
    for o in objs:
        if isinstance(o, dict) and isinstance(o.get("metadata"), dict):
            out += service_issues(o) + reference_name_issues(o) + deployment_replicas_issues(o)
    return out


def runtime_issues(objs: list[dict[str, Any]],
                   plugin_values: dict[str, dict[str, Any]] | None = None) -> list[Issue]:
    """Every run-time rule over a set of objects (one cluster's render, or a folder of them)."""
    return operator_build_issues(objs) + after_admission_issues(objs, plugin_values)


def after_admission_issues(objs: list[dict[str, Any]],
                           plugin_values: dict[str, dict[str, Any]] | None = None) -> list[Issue]:
    """What Karpenter, the device plugins, the scheduler and slurmd decide once the objects exist."""
    objs = [o for o in objs if isinstance(o, dict) and isinstance(o.get("metadata"), dict)]
    out: list[Issue] = []
    for o in objs:
        out += sidecar_issues(o) + image_issues(o) + unmodelled_resource_issues(o) + fsx_issues(o)
    return (out + fit_issues(objs) + taint_issues(objs, plugin_values) + plugin_placement_issues(objs, plugin_values)
            + selector_issues(objs) + operator_gres_issues(objs))


def _node_name(line: str, default: str) -> str:
    """A gres.conf line's ``NodeName=``; a line without one applies to every node (``default``)."""
    match = re.search(r"NodeName=(\S+)", line)
    return match.group(1) if match else default
