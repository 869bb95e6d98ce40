"""A deterministic corpus of mutated cluster specs and manifests, to check that ``cluster validate``
rejects everything the real API server and the slurm-operator's webhooks reject.

Each :class:`Case` is one example's full object set after one mutation: a targeted one (a field the
CRD schema, a CEL rule, Kubernetes' own validation or an operator webhook judges), a random one
from a seeded generator (a type swapped, a key removed or added, a name or label broken) or a
mutated *spec* rendered afresh (which both sides should accept). Only kinds a bare API server with
the Slinky CRDs serves are mutated (Karpenter and mariadb-operator kinds have no judge there).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.render import render
from slinkyml.cluster.spec import from_dict, to_dict

SEED = 20261201
EXAMPLES = ("cpu-small", "h100-efa", "trn1")
#: kinds `dev kube` serves: core, the Slinky CRDs, and Karpenter's and mariadb-operator's CRDs from
#: their Go modules (no Karpenter or mariadb-operator runs: their objects are judged by admission only)
SERVED = frozenset({"Namespace", "Secret", "ConfigMap", "StorageClass", "PersistentVolumeClaim", "Controller",
                    "NodeSet", "LoginSet", "Accounting", "RestApi", "Token", "NodePool", "EC2NodeClass", "MariaDB"})
#: objects that must really exist for the webhooks to judge the others (the Controller webhook
#: reads its configFileRefs); applied for real in the case's namespace, the rest as dry runs
DEPENDENCIES = frozenset({"Namespace", "Secret", "ConfigMap"})


@dataclass(frozen=True)
class Case:
    """One mutated object set and what was done to it."""

    name: str
    example: str
    objects: list[dict[str, Any]]
    plugin_values: dict[str, Any] = field(default_factory=dict)
    #: "target": one object mutated on purpose; "random": seeded generator; "spec": re-rendered spec
    origin: str = "target"


Mutation = Callable[[dict[str, Any]], None]


def _set(*path: Any, value: Any) -> Mutation:
    def apply(o: dict[str, Any]) -> None:
        node = o
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        node[path[-1]] = copy.deepcopy(value)
    return apply


def _drop(*path: Any) -> Mutation:
    def apply(o: dict[str, Any]) -> None:
        node = o
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1], None)
    return apply


#: (kind, label, mutation): aimed at a rule of the CRD schema, CEL, Kubernetes' validation or a webhook
TARGETED: list[tuple[str, str, Mutation]] = [
    # CRD schema: types, enums, required, patterns
    ("NodeSet", "spec.replicas=-1 (no minimum: accepted)", _set("spec", "replicas", value=-1)),
    ("NodeSet", "spec.replicas='two'", _set("spec", "replicas", value="two")),
    ("NodeSet", "spec.replicas=3", _set("spec", "replicas", value=3)),
    ("NodeSet", "spec.scalingMode=Deployment", _set("spec", "scalingMode", value="Deployment")),
    ("NodeSet", "spec.scalingMode=DaemonSet", _set("spec", "scalingMode", value="DaemonSet")),
    ("NodeSet", "spec.updateStrategy.type=Rolling", _set("spec", "updateStrategy", "type", value="Rolling")),
    ("NodeSet", "spec.partition.enabled removed", _drop("spec", "partition", "enabled")),
    ("NodeSet", "spec.partition.config with a newline",
     _set("spec", "partition", "config", value="MaxTime=1\nDefault=YES")),
    ("NodeSet", "spec.controllerRef removed", _drop("spec", "controllerRef")),
    ("NodeSet", "spec.pruneSlurmNodeRecords=Always", _set("spec", "pruneSlurmNodeRecords", value="Always")),
    ("NodeSet", "spec.workloadDisruptionProtection='yes'", _set("spec", "workloadDisruptionProtection", value="yes")),
    ("NodeSet", "spec.minReadySeconds=30", _set("spec", "minReadySeconds", value=30)),
    ("NodeSet", "spec.extraConf=12", _set("spec", "extraConf", value=12)),
    ("NodeSet", "spec.unknownField", _set("spec", "unknownField", value=True)),
    ("NodeSet", "spec.partition.unknown", _set("spec", "partition", "weight", value=1)),
    # webhook (internal/webhook/nodeset_webhook.go)
    ("NodeSet", "spec.extraConf bare token", _set("spec", "extraConf", value="Features=a Weight")),
    ("NodeSet", "spec.extraConf Weight=10 (valid)", _set("spec", "extraConf", value="Features=a Weight=10")),
    ("NodeSet", "spec.controllerRef.name=''", _set("spec", "controllerRef", "name", value="")),
    ("NodeSet", "template hostname not DNS", _set("spec", "template", "spec", "hostname", value="Bad_Host")),
    ("NodeSet", "template hostname ok", _set("spec", "template", "spec", "hostname", value="gpu-")),
    ("NodeSet", "maxUnavailable=0", _set("spec", "updateStrategy", value={"type": "RollingUpdate",
                                                                          "rollingUpdate": {"maxUnavailable": 0}})),
    ("NodeSet", "maxUnavailable='0%'", _set("spec", "updateStrategy", value={
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0%"}})),
    ("NodeSet", "maxUnavailable=2", _set("spec", "updateStrategy", value={"type": "RollingUpdate",
                                                                          "rollingUpdate": {"maxUnavailable": 2}})),
    ("NodeSet", "scheduledUpdate 30s", _set("spec", "updateStrategy", value={
        "type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2026-12-01T00:00:00Z", "duration": "30s"}})),
    ("NodeSet", "scheduledUpdate without startTime", _set("spec", "updateStrategy", value={
        "type": "ScheduledUpdate", "scheduledUpdate": {"duration": "2h"}})),
    ("NodeSet", "scheduledUpdate 2h (valid)", _set("spec", "updateStrategy", value={
        "type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2026-12-01T00:00:00Z", "duration": "2h"}})),
    ("NodeSet", "ssh on without sssdConfRef.name", _set("spec", "ssh", value={
        "enabled": True, "sssdConfRef": {"key": "sssd.conf"}})),
    # the pod template and containers the CRD keeps open (preserve-unknown-fields)
    ("NodeSet", "slurmd.resources.requests.cpu='two'",
     _set("spec", "slurmd", "resources", "requests", "cpu", value="two")),
    ("NodeSet", "slurmd.image=42", _set("spec", "slurmd", "image", value=42)),
    ("NodeSet", "template.spec.tolerations not a list", _set("spec", "template", "spec", "tolerations", value="x")),
    ("NodeSet", "template.metadata.labels value 'a b'", _set("spec", "template", "metadata", "labels", "x",
                                                               value="a b")),
    # Controller: schema, CEL, webhook (controller_webhook.go)
    ("Controller", "slurmKeyRef removed (CEL)", _drop("spec", "slurmKeyRef")),
    ("Controller", "jwtKeyRef removed (CEL)", _drop("spec", "jwtKeyRef")),
    ("Controller", "external without externalConfig (CEL)", _set("spec", "external", value=True)),
    ("Controller", "clusterName 41 characters", _set("spec", "clusterName", value="c" * 41)),
    ("Controller", "clusterName 40 characters", _set("spec", "clusterName", value="c" * 40)),
    ("Controller", "persistence.enabled='true'", _set("spec", "persistence", "enabled", value="true")),
    ("Controller", "extraConf list", _set("spec", "extraConf", value=["a"])),
    ("Controller", "slurmctld.resources.requests.memory='lots'",
     _set("spec", "slurmctld", "resources", "requests", "memory", value="lots")),
    ("Controller", "configFileRefs to a missing ConfigMap", _set("spec", "configFileRefs", value=[{"name": "nope"}])),
    ("Controller", "ha on without existingClaim (CEL)", _set("spec", "ha", value={"enabled": True})),
    # LoginSet (loginset_webhook.go) and the rest
    ("LoginSet", "sssdConfRef.name=''", _set("spec", "sssdConfRef", "name", value="")),
    ("LoginSet", "replicas=2", _set("spec", "replicas", value=2)),
    ("LoginSet", "service type LoadBalancer", _set("spec", "service", "spec", "type", value="LoadBalancer")),
    ("LoginSet", "rootSshAuthorizedKeys=1", _set("spec", "rootSshAuthorizedKeys", value=1)),
    ("RestApi", "replicas='1'", _set("spec", "replicas", value="1")),
    ("RestApi", "replicas=2", _set("spec", "replicas", value=2)),
    ("RestApi", "controllerRef.name=''", _set("spec", "controllerRef", "name", value="")),
    ("Token", "jwtKeyRef removed (CEL)", _drop("spec", "jwtKeyRef")),
    ("Token", "lifetime=5", _set("spec", "lifetime", value=5)),
    ("Token", "username=''", _set("spec", "username", value="")),
    ("Accounting", "storageConfig.port='x'", _set("spec", "storageConfig", "port", value="x")),
    ("Accounting", "storageConfig.host removed", _drop("spec", "storageConfig", "host")),
    # core kinds: Kubernetes' own validation
    ("Secret", "data not base64", _set("data", value={"x": "not base64!"})),
    ("Secret", "stringData key with a slash", _set("stringData", "a/b", value="x")),
    ("Secret", "type=''", _set("type", value="")),
    ("ConfigMap", "data value 3", _set("data", "n", value=3)),
    ("ConfigMap", "key slurm.conf (reserved by the operator)", _set("data", "slurm.conf", value="x=1\n")),
    ("ConfigMap", "key cgroup.conf (known)", _set("data", "cgroup.conf", value="CgroupPlugin=autodetect\n")),
    ("StorageClass", "reclaimPolicy=Keep", _set("reclaimPolicy", value="Keep")),
    ("StorageClass", "volumeBindingMode=Later", _set("volumeBindingMode", value="Later")),
    ("PersistentVolumeClaim", "accessModes=[ReadWriteSometimes]",
     _set("spec", "accessModes", value=["ReadWriteSometimes"])),
    ("PersistentVolumeClaim", "storage='lots'", _set("spec", "resources", "requests", "storage", value="lots")),
    ("PersistentVolumeClaim", "storage removed", _drop("spec", "resources")),
    ("Namespace", "label value too long", _set("metadata", "labels", "x", value="v" * 64)),
    # Karpenter and mariadb-operator CRDs (offline: their vendored upstream CRDs, CEL rules included)
    ("NodePool", "taint effect NoRun", _set("spec", "template", "spec", "taints", value=[
        {"key": "a", "value": "b", "effect": "NoRun"}])),
    ("NodePool", "requirement operator Maybe", _set("spec", "template", "spec", "requirements", value=[
        {"key": "node.kubernetes.io/instance-type", "operator": "Maybe", "values": ["m7i.8xlarge"]}])),
    ("NodePool", "consolidationPolicy WhenIdle", _set("spec", "disruption", "consolidationPolicy", value="WhenIdle")),
    ("EC2NodeClass", "amiSelectorTerms removed", _drop("spec", "amiSelectorTerms")),
    ("EC2NodeClass", "volumeType gp9", _set("spec", "blockDeviceMappings", value=[
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp9"}}])),
    ("MariaDB", "port 'x'", _set("spec", "port", value="x")),
]


def _served(objs: list[dict[str, Any]]) -> list[int]:
    return [i for i, o in enumerate(objs) if o.get("kind") in SERVED]


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
    yield path, node


def _swap(value: Any) -> Any:
    """A value of another JSON type."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return {"x": value}
    return ["x"]


def _at(o: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        o = o[key]
    return o


def _random_mutation(rng: random.Random, o: dict[str, Any]) -> str:
    """Mutate ``o`` in place; returns what was done."""
    kind = rng.choice(("swap", "drop", "add", "name", "label"))
    leaves = [(p, v) for p, v in _leaves(o) if p and p[0] != "apiVersion" and p[0] != "kind"]
    if kind == "name":
        bad = rng.choice(("Upper", "under_score", "x" * 64, "dot.ted", "-lead"))
        o["metadata"]["name"] = bad
        return f"metadata.name={bad!r}"
    if kind == "label":
        key, value = rng.choice((("ok", "fine"), ("bad key!", "v"), ("k", "spaces in value"), ("k", "-lead"),
                                 ("example.com/k", "v"), ("k", 5)))
        o["metadata"].setdefault("labels", {})[key] = value
        return f"metadata.labels[{key!r}]={value!r}"
    path, value = rng.choice(leaves)
    where = ".".join(map(str, path))
    if kind == "swap":
        parent = _at(o, path[:-1])
        parent[path[-1]] = _swap(value)
        return f"{where}: {type(value).__name__} -> {type(parent[path[-1]]).__name__}"
    if kind == "drop" and isinstance(_at(o, path[:-1]), dict) and path[:1] != ("metadata",):
        del _at(o, path[:-1])[path[-1]]
        return f"{where} removed"
    target = value if isinstance(value, dict) else _at(o, path[:-1])
    if isinstance(target, dict):
        target["slinkymlExtra"] = "x"
        return f"{where if isinstance(value, dict) else '.'.join(map(str, path[:-1]))}.slinkymlExtra added"
    o.setdefault("spec", {})["slinkymlExtra"] = "x"
    return "spec.slinkymlExtra added"


def _spec_mutations(rng: random.Random, raw: dict[str, Any]) -> str:
    """A valid change to a spec: what a user edits (counts, replicas, switches, instance types)."""
    choice = rng.choice(("count", "login", "restapi", "accounting", "features", "partition", "spare", "type",
                         "token", "service"))
    ns = rng.choice(raw["node_sets"])
    if choice == "count":
        ns["count"] = rng.randint(0, 16)
        return f"node_sets.{ns['name']}.count={ns['count']}"
    if choice == "login":
        raw.setdefault("login", {})["replicas"] = rng.randint(0, 3)
        return f"login.replicas={raw['login']['replicas']}"
    if choice == "restapi":
        raw.setdefault("rest_api", {})["enabled"] = rng.random() < 0.5
        return f"rest_api.enabled={raw['rest_api']['enabled']}"
    if choice == "accounting":
        raw["accounting"] = {"enabled": True, "mariadb": rng.random() < 0.5, "host": "db.example.com"}
        return f"accounting mariadb={raw['accounting']['mariadb']}"
    if choice == "features":
        ns["features"] = [*(ns.get("features") or []), rng.choice(("ib", "nvme", "big-mem"))]
        return f"node_sets.{ns['name']}.features+"
    if choice == "partition":
        ns["partition_config"] = rng.choice(("MaxTime=1-00:00:00", "PriorityTier=2", "MaxNodes=8"))
        others = [o for o in raw["node_sets"] if (o.get("partition") or o["name"]) == (ns.get("partition") or
                                                                                         ns["name"]) and o is not ns]
        for other in others:
            other["partition_config"] = ns["partition_config"]
        return f"node_sets.{ns['name']}.partition_config"
    if choice == "spare":
        ns["spare_nodes"] = rng.randint(0, 4)
        return f"node_sets.{ns['name']}.spare_nodes={ns['spare_nodes']}"
    if choice == "type" and not ns.get("efa") and "zone" not in ns:
        ns["instance_type"] = rng.choice(("m7i.8xlarge", "c7i.4xlarge"))
        return f"node_sets.{ns['name']}.instance_type={ns['instance_type']}"
    if choice == "token":
        raw.setdefault("rest_api", {})["token_lifetime"] = rng.choice(("1h", "12h", "168h"))
        return f"rest_api.token_lifetime={raw['rest_api']['token_lifetime']}"
    raw.setdefault("login", {})["service_type"] = rng.choice(("ClusterIP", "NodePort", "LoadBalancer"))
    return f"login.service_type={raw['login']['service_type']}"


def cases(seed: int = SEED, random_per_example: int = 25, specs_per_example: int = 20) -> list[Case]:
    """The corpus: every targeted mutation on every example that has its kind, then the seeded
    random mutations and re-rendered spec mutations."""
    rng = random.Random(seed)
    out: list[Case] = []
    for example in EXAMPLES:
        spec = load_spec(EXAMPLES_DIR / example / "cluster.yaml")
        rendered = render(spec)
        base = rendered.objects
        for kind, label, mutate in TARGETED:
            index = next((i for i in _served(base) if base[i]["kind"] == kind), None)
            if index is None:
                continue
            objs = copy.deepcopy(base)
            mutate(objs[index])
            out.append(Case(f"{example}: {kind} {base[index]['metadata']['name']}: {label}", example, objs,
                            rendered.plugin_values, "target"))
        for _ in range(random_per_example):
            objs = copy.deepcopy(base)
            index = rng.choice(_served(objs))
            name = objs[index]["metadata"]["name"]
            what = _random_mutation(rng, objs[index])
            out.append(Case(f"{example}: {objs[index]['kind']} {name}: {what}", example, objs,
                            rendered.plugin_values, "random"))
        for _ in range(specs_per_example):
            raw = to_dict(spec)
            what = _spec_mutations(rng, raw)
            fresh = render(from_dict(raw))
            out.append(Case(f"{example}: spec {what}", example, fresh.objects, fresh.plugin_values, "spec"))
    return out


def bases() -> dict[str, list[dict[str, Any]]]:
    """Each example's rendered objects, which every case of it changes (``agreement.run`` judges a case
    beside them)."""
    return {example: render(load_spec(EXAMPLES_DIR / example / "cluster.yaml")).objects for example in EXAMPLES}
