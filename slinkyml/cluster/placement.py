"""Let the real kube-scheduler judge where a rendered cluster's pods go, without EC2 or a kubelet.

Node objects are shaped like each rendered NodePool's nodes (Karpenter's labels, the zone, the
pool's taints, capacity and allocatable from the instance model of ``data/instance_types.yaml``),
kept Ready by our own status and Lease patches (no kwok, no kubelet: :class:`Heartbeat`). The
device plugins' DaemonSets are created as their charts render them with our values
(:func:`plugin_daemonset`); kube-controller-manager's DaemonSet controller and the scheduler decide
where they run, and a node advertises a plugin's extended resources only once a pod of that plugin
is bound to it, as a real plugin would after registering with the kubelet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from slinkyml.cluster import EXAMPLES_DIR, addons, load_spec
from slinkyml.cluster.apply import apply_objects, dynamic_client, ensure_secrets
from slinkyml.cluster.render import render
from slinkyml.cluster.runtime_checks import OPERATOR_WORKER_TOLERATION, pool_node_labels
from slinkyml.instances import get_instance_type
from slinkyml.kube import dig

MANAGED = "slinkyml.io/simulated-node"
#: on a pod built as the operator would: the object it is built for
OWNER = "slinkyml.io/built-for"
#: the existing EKS nodes the system pods (slurmctld, slurmrestd, login, slurmdbd) run on: two of these
SYSTEM_NODE = {"cpu": "64", "memory": "256Gi", "pods": "250"}
SYSTEM_NODES = 2
ROOT_VOLUME = "200Gi"


def plugin_daemonset(name: str, values: dict[str, Any] | None, namespace: str = "kube-system") -> dict[str, Any]:
    """The device plugin's DaemonSet as its chart renders it with ``values``: the template's and the
    values' tolerations, the chart's node affinity and nodeSelector, its priority class and requests."""
    plugin = addons.device_plugins()[name]
    ds = plugin["daemonset"]
    labels = {"app.kubernetes.io/name": ds["name"], MANAGED: "true"}
    pod: dict[str, Any] = {
        "tolerations": addons.plugin_tolerations(name, values),
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": addons.plugin_node_selector_terms(name, values)}}},
        "priorityClassName": ds["priority_class"],
        "containers": [{"name": name, "image": ds["image"], "resources": ds.get("resources") or {}}],
    }
    selector = addons.plugin_node_selector(name, values)
    if selector:
        pod["nodeSelector"] = selector
    if ds.get("host_network"):
        pod["hostNetwork"] = True
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": ds["name"], "namespace": namespace, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": ds["name"]}},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def advertised(name: str, instance_type: str) -> dict[str, str]:
    """The extended resources a plugin advertises on an instance type (what its kubelet reports)."""
    itype = get_instance_type(instance_type)
    resource = addons.device_plugins()[name]["resource"]
    if resource == "vpc.amazonaws.com/efa":
        return {resource: str(itype.efa_interfaces)} if itype.efa_interfaces else {}
    acc = itype.accelerator
    if acc is None or acc.resource != resource:
        return {}
    out = {resource: str(acc.count)}
    if acc.kind == "neuron" and acc.cores_per_device:
        out["aws.amazon.com/neuroncore"] = str(acc.count * acc.cores_per_device)
    return out


def _one(values: frozenset[str], default: str) -> str:
    return sorted(values)[0] if values else default


def pool_nodes(pool: dict[str, Any], count: int, *, prefix: str, default_zone: str) -> list[dict[str, Any]]:
    """``count`` Node objects as Karpenter would launch them for this NodePool (ready, no extended
    resources yet: the device plugins add those)."""
    labels = pool_node_labels(pool)
    itype_name = _one(labels["node.kubernetes.io/instance-type"], "")
    itype = get_instance_type(itype_name)
    alloc = addons.karpenter_allocatable(itype)
    zone = _one(labels["topology.kubernetes.io/zone"], default_zone)
    nodes = []
    for i in range(count):
        name = f"{prefix}{dig(pool, 'metadata', 'name')}-{i}"
        node_labels = {key: _one(values, "") for key, values in labels.items() if values}
        node_labels.update({
            "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": zone[:-1], "kubernetes.io/arch": _one(labels["kubernetes.io/arch"],
                                                                                   "amd64"),
            "karpenter.sh/capacity-type": _one(labels["karpenter.sh/capacity-type"], "on-demand"),
            "karpenter.sh/registered": "true", "karpenter.sh/initialized": "true", MANAGED: "true"})
        capacity = {"cpu": str(itype.vcpus), "memory": f"{int(round(itype.memory_gib * 1024))}Mi",
                    "pods": str(alloc.max_pods), "ephemeral-storage": ROOT_VOLUME}
        allocatable = {"cpu": f"{alloc.cpu_millis}m", "memory": f"{alloc.memory_mib}Mi", "pods": str(alloc.max_pods),
                       "ephemeral-storage": ROOT_VOLUME}
        taints = [{k: t[k] for k in ("key", "value", "effect") if k in t}
                  for t in dig(pool, "spec", "template", "spec", "taints") or [] if isinstance(t, dict)]
        nodes.append(_node(name, node_labels, taints, capacity, allocatable))
    return nodes


def system_node(name: str) -> dict[str, Any]:
    """An untainted node for the Controller, LoginSet, RestApi and Accounting pods."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              MANAGED: "true"}
    return _node(name, labels, [], dict(SYSTEM_NODE), dict(SYSTEM_NODE))


def _node(name: str, labels: dict[str, str], taints: list[dict[str, str]], capacity: dict[str, str],
          allocatable: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"capacity": capacity, "allocatable": allocatable}}


# ---------------------------------------------------------------- live: nodes kept Ready by our code


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _conditions() -> list[dict[str, str]]:
    now = _now()
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated by slinkyml"}
    others = [{"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": "simulated by slinkyml"}
              for t, r in (("MemoryPressure", "SufficientMemory"), ("DiskPressure", "NoDiskPressure"),
                           ("PIDPressure", "SufficientPID"))]
    return [{**c, "lastHeartbeatTime": now, "lastTransitionTime": now} for c in (ready, *others)]


@dataclass
class Heartbeat:
    """Creates Node objects and keeps them Ready: status conditions and the node Lease in
    kube-node-lease renewed every ``period`` seconds (what a kubelet does), so the node lifecycle
    controller never taints them unreachable."""

    api: Any
    period: float = 10.0

    def __post_init__(self) -> None:
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client

        self.core = client.CoreV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.nodes: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="slinkyml-node-heartbeat", daemon=True)

    def add(self, node: dict[str, Any]) -> None:
        body = {k: v for k, v in node.items() if k != "status"}
        self.core.create_node(body)
        with self._lock:
            self.nodes[node["metadata"]["name"]] = {"capacity": dict(node["status"]["capacity"]),
                                                     "allocatable": dict(node["status"]["allocatable"])}
        self._beat(node["metadata"]["name"], first=True)

    def advertise(self, name: str, resources: dict[str, str]) -> None:
        """A device plugin registered on ``name``: its resources join capacity and allocatable."""
        with self._lock:
            status = self.nodes[name]
            status["capacity"].update(resources)
            status["allocatable"].update(resources)
        self._beat(name)

    def _beat(self, name: str, first: bool = False) -> None:
        with self._lock:
            status = {**self.nodes[name], "conditions": _conditions()}
        self.core.patch_node_status(name, {"status": status})
        lease = {"metadata": {"name": name, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": _micro_now()}}
        if first:
            self.coordination.create_namespaced_lease("kube-node-lease", lease)
        else:
            self.coordination.patch_namespaced_lease(name, "kube-node-lease", {"spec": lease["spec"]})

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            for name in list(self.nodes):
                try:
                    self._beat(name)
                except Exception:  # noqa: BLE001 - a missed beat is retried; the grace period is 4 beats
                    continue

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.period + 5)
        for name in list(self.nodes):
            try:
                self.core.delete_node(name)
                self.coordination.delete_namespaced_lease(name, "kube-node-lease")
            except Exception:  # noqa: BLE001 - best-effort clean-up of our own objects
                continue


def remove_stale_nodes(api: Any, older_than: float = 120.0) -> list[str]:
    """Delete simulated nodes whose Lease nobody renewed for ``older_than`` seconds (a run that died
    before its clean-up); another run's live nodes are left alone."""
    # lazy: the kubernetes client is the optional [k8s] extra
    from kubernetes import client

    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
    removed = []
    now = datetime.now(UTC)
    for node in core.list_node(label_selector=MANAGED).items:
        name = node.metadata.name
        try:
            renewed = coordination.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
        except client.ApiException:
            renewed = None
        if renewed is None or (now - renewed).total_seconds() > older_than:
            try:
                core.delete_node(name)
                removed.append(name)
            except client.ApiException:
                continue
    return removed


def delete_cluster_scoped(api: Any, objs: list[dict[str, Any]]) -> None:
    """Delete the cluster-scoped objects of a render (StorageClass, NodePool, EC2NodeClass), which
    deleting its namespace leaves behind."""
    # lazy: the kubernetes client is the optional [k8s] extra
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

    dyn = dynamic_client(api)
    for o in objs:
        if dig(o, "metadata", "namespace") is None and o.get("kind") != "Namespace":
            try:
                dyn.resources.get(api_version=o["apiVersion"], kind=o["kind"]).delete(name=o["metadata"]["name"])
            except (DynamicApiError, ResourceNotFoundError):
                continue


def remove_stale_storage(api: Any, keep_prefix: str) -> None:
    """Delete the StorageClasses and PersistentVolumes an earlier run left (ours carry MANAGED)."""
    # lazy: the kubernetes client is the optional [k8s] extra
    from kubernetes import client

    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    for pv in core.list_persistent_volume(label_selector=MANAGED).items:
        if not pv.metadata.name.startswith(keep_prefix):
            core.delete_persistent_volume(pv.metadata.name)
    for sc in storage.list_storage_class(label_selector=MANAGED).items:
        if not sc.metadata.name.startswith(keep_prefix):
            storage.delete_storage_class(sc.metadata.name)


@contextmanager
def simulated_nodes(api: Any, period: float = 10.0) -> Iterator[Heartbeat]:
    beat = Heartbeat(api, period).start()
    try:
        yield beat
    finally:
        beat.stop()


def wait(predicate: Any, timeout: float, step: float = 1.0) -> Any:
    """Poll ``predicate`` until it returns something true, or ``timeout`` seconds; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


# ---------------------------------------------------------------- scenarios: render -> nodes -> scheduler


@dataclass
class Scenario:
    """One rendered cluster (in a namespace and under a cluster name of its own) to place."""

    name: str
    objects: list[dict[str, Any]]
    plugin_values: dict[str, Any]
    cluster: Any  # the SlurmCluster, for its credential Secrets
    default_zone: str


#: the scenario name of the device plugins' own pods in :func:`place`'s rows
PLUGINS = "device plugins"


@dataclass(frozen=True)
class PodRow:
    """Where the scheduler put one pod, or why it could not."""

    scenario: str
    pod: str
    owner: str
    node: str | None
    reason: str = ""


def expected_pods(objs: list[dict[str, Any]]) -> int:
    """How many pods the operator makes for these objects (Controller 1, Accounting 1, the replicas of
    the rest)."""
    n = 0
    for o in objs:
        kind = o.get("kind")
        if kind in ("Controller", "Accounting"):
            n += 1
        elif kind in ("NodeSet", "LoginSet", "RestApi"):
            replicas = dig(o, "spec", "replicas")
            n += replicas if isinstance(replicas, int) else 1
    return n


@dataclass(frozen=True)
class Claim:
    """One volume the objects will claim: its class, access mode, size and the claim's own name."""

    storage_class: str | None
    mode: str
    size: str
    namespace: str
    name: str


def controller_claim(controller: str) -> str:
    """The state-save claim of a Controller's pod: the operator's StatefulSet ``<name>-controller``
    with its volumeClaimTemplate ``statesave`` (v1.2.1 internal/builder/controllerbuilder)."""
    return f"statesave-{controller}{POD_SUFFIX['Controller']}-0"


def _claims(objs: list[dict[str, Any]]) -> list[Claim]:
    """Each volume the objects will claim (a Controller's state as its StatefulSet names the claim)."""
    out: list[Claim] = []
    for o in objs:
        ns, name = dig(o, "metadata", "namespace"), dig(o, "metadata", "name")
        if o.get("kind") == "Controller" and dig(o, "spec", "persistence", "enabled"):
            out.append(Claim(dig(o, "spec", "persistence", "storageClassName"), "ReadWriteOnce",
                             str(dig(o, "spec", "persistence", "resources", "requests", "storage") or "1Gi"),
                             ns, controller_claim(name)))
        if o.get("kind") == "PersistentVolumeClaim":
            out.append(Claim(dig(o, "spec", "storageClassName"), "ReadWriteMany",
                             str(dig(o, "spec", "resources", "requests", "storage")), ns, name))
    return out


def storage_objects(scenarios: list[Scenario], prefix: str) -> list[dict[str, Any]]:
    """What the EBS and FSx CSI drivers would provide: a StorageClass per class the volumes name
    (a default one for those that name none), and a PersistentVolume ready for each claim, bound
    to it by ``claimRef`` (a claim left pending by an earlier test on the same plane, given the default
    class retroactively, would otherwise take one)."""
    out: list[dict[str, Any]] = []
    classes: dict[str | None, str] = {}
    rendered_classes = {dig(o, "metadata", "name") for s in scenarios for o in s.objects
                        if o.get("kind") == "StorageClass"}
    n = 0
    for s in scenarios:
        for claim in _claims(s.objects):
            cls = claim.storage_class
            if cls not in rendered_classes and cls not in classes:
                name = cls or f"{prefix}default"
                classes[cls] = name
                meta: dict[str, Any] = {"name": name, "labels": {MANAGED: "true"}}
                if cls is None:
                    meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
                out.append({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta,
                            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})
            source: dict[str, Any] = {"hostPath": {"path": f"/var/lib/{prefix}pv-{n}"}}
            if cls in rendered_classes:  # FSx: a volume its CSI driver made
                source = {"csi": {"driver": "fsx.csi.aws.com", "volumeHandle": f"fs-{n:017x}"}}
            out.append({"apiVersion": "v1", "kind": "PersistentVolume",
                        "metadata": {"name": f"{prefix}pv-{n}", "labels": {MANAGED: "true"}},
                        "spec": {"capacity": {"storage": claim.size}, "accessModes": [claim.mode],
                                 "claimRef": {"namespace": claim.namespace, "name": claim.name},
                                 "storageClassName": classes.get(cls, cls), "persistentVolumeReclaimPolicy": "Retain",
                                 **source}})
            n += 1
    return out


#: the main container of each kind's pods (slurm-operator f2ed3fc internal/builder/*builder)
MAIN_CONTAINER = {"Controller": "slurmctld", "NodeSet": "slurmd", "LoginSet": "login", "RestApi": "slurmrestd",
                  "Accounting": "slurmdbd"}
SIDECAR = {"Controller": "logfile", "NodeSet": "logfile"}
#: pod names: the operator's workload names (<name>-controller StatefulSet, <name>-restapi...)
POD_SUFFIX = {"Controller": "-controller", "RestApi": "-restapi", "Accounting": "-accounting"}


def operator_pods(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the slurm-operator (f2ed3fc) makes for these objects, with every field the scheduler
    reads: the template's pod spec merged over the main container (the spec's image, resources and
    volume mounts) and the logfile sidecar (a restartable init container), the operator's worker
    toleration on slurmd pods (pkg/taints), and the Controller's state-save claim as its
    StatefulSet's volumeClaimTemplates name it (:func:`controller_claim`); plus those claims.

    Built here because the plane's operator stops its NodeSet sync before making pods until cluster
    DNS serves its Services; a pod the operator made first (same name) is the one judged."""
    out: list[dict[str, Any]] = []
    for o in objs:
        kind = o.get("kind")
        if kind not in MAIN_CONTAINER:
            continue
        spec, meta = o.get("spec") or {}, o["metadata"]
        template = dig(spec, "template", "spec") or {}
        main = dict(spec.get(MAIN_CONTAINER[kind]) or {})
        pod_spec: dict[str, Any] = {k: v for k, v in template.items() if k != "volumes"}
        pod_spec["containers"] = [{"name": MAIN_CONTAINER[kind], "image": main.get("image"),
                                   **{k: main[k] for k in ("resources", "volumeMounts") if k in main}}]
        if kind in SIDECAR:
            side = spec.get(SIDECAR[kind]) or {}
            pod_spec["initContainers"] = [{"name": SIDECAR[kind], "image": side.get("image"),
                                           "restartPolicy": "Always"}]
        volumes = list(template.get("volumes") or [])
        if kind == "NodeSet":
            pod_spec["tolerations"] = [*(template.get("tolerations") or []), dict(OPERATOR_WORKER_TOLERATION)]
        replicas = 1 if kind in ("Controller", "Accounting") else spec.get("replicas", 1)
        claim = None
        if kind == "Controller" and dig(spec, "persistence", "enabled"):
            claim = controller_claim(meta["name"])
            volumes.append({"name": "statesave", "persistentVolumeClaim": {"claimName": claim}})
            pvc_spec = {"accessModes": dig(spec, "persistence", "accessModes") or ["ReadWriteOnce"],
                        "resources": dig(spec, "persistence", "resources") or {"requests": {"storage": "1Gi"}}}
            if dig(spec, "persistence", "storageClassName"):
                pvc_spec["storageClassName"] = spec["persistence"]["storageClassName"]
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim, "namespace": meta["namespace"]}, "spec": pvc_spec})
        if volumes:
            pod_spec["volumes"] = volumes
        labels = {**(dig(spec, "template", "metadata", "labels") or {}), MANAGED: "true"}
        for i in range(replicas if isinstance(replicas, int) else 1):
            name = f"{meta['name']}{POD_SUFFIX.get(kind, '')}-{i}"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                                "annotations": {OWNER: f"{kind} {meta['name']}"}},
                   "spec": {**pod_spec, **({"hostname": name} if "hostname" not in pod_spec else {})}}
            out.append(pod)
    return out


#: the scheduler's word for a pod whose claims wait for a volume (the PV controller binds them shortly after)
VOLUMES_NOT_YET = "didn't find available persistent volumes to bind"


def _judged(row: PodRow) -> bool:
    """Bound, or Unschedulable for good: a claim the PV controller has not bound yet, or a SchedulerError
    (a conflict while binding a volume), is retried by the scheduler and is no verdict yet."""
    return row.node is not None or (row.reason.startswith("Unschedulable:") and VOLUMES_NOT_YET not in row.reason)


def _pod_row(scenario: str, pod: Any) -> PodRow:
    owner = ", ".join(f"{r.kind} {r.name}" for r in pod.metadata.owner_references or []) \
        or (pod.metadata.annotations or {}).get(OWNER, "-")
    if pod.spec.node_name:
        return PodRow(scenario, pod.metadata.name, owner, pod.spec.node_name)
    cond = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
    reason = f"{cond.reason}: {cond.message}" if cond is not None and cond.status == "False" else "not yet judged"
    return PodRow(scenario, pod.metadata.name, owner, None, " ".join(reason.split()))


def place(api: Any, scenarios: list[Scenario], prefix: str, timeout: float = 240.0,
          log: Any = lambda _: None) -> list[PodRow]:
    """Nodes for every scenario's NodePools and two system nodes, the device plugins' DaemonSets,
    storage, then the objects; returns where the scheduler put each plugin pod (scenario
    :data:`PLUGINS`) and each cluster pod once all are judged (bound, or Unschedulable with the
    scheduler's message)."""
    # lazy: the kubernetes client is the optional [k8s] extra
    from kubernetes import client

    core, apps, storage = client.CoreV1Api(api), client.AppsV1Api(api), client.StorageV1Api(api)
    extra = storage_objects(scenarios, prefix)
    plugins: dict[str, list[dict[str, Any]]] = {}
    for s in scenarios:
        for name, values in s.plugin_values.items():
            plugins.setdefault(name, []).append(values)
    daemonsets = [plugin_daemonset(name, addons.merge_plugin_values(name, vals)) for name, vals in plugins.items()]
    for ds in daemonsets:
        ds["metadata"]["name"] = f"{prefix}{ds['metadata']['name']}"
    instance_of: dict[str, str] = {}
    remove_stale_nodes(api)
    remove_stale_storage(api, prefix)
    with simulated_nodes(api) as beat:
        try:
            for i in range(SYSTEM_NODES):
                beat.add(system_node(f"{prefix}system-{i}"))
            for s in scenarios:
                pools = {dig(o, "metadata", "name"): o for o in s.objects if o.get("kind") == "NodePool"}
                for o in s.objects:
                    pool = pools.get(dig(o, "spec", "template", "spec", "nodeSelector", "karpenter.sh/nodepool"))
                    if o.get("kind") != "NodeSet" or pool is None:
                        continue
                    for node in pool_nodes(pool, max(int(dig(o, "spec", "replicas") or 0), 1), prefix=prefix,
                                           default_zone=s.default_zone):
                        beat.add(node)
                        instance_of[node["metadata"]["name"]] = node["metadata"]["labels"][
                            "node.kubernetes.io/instance-type"]
            wait(lambda: all(not any(t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or [])
                             for n in core.list_node(label_selector=MANAGED).items), 60)
            log(f"{len(beat.nodes)} nodes Ready")
            apply_objects([*extra, *daemonsets], api, log=log)
            _advertise(api, beat, daemonsets, plugins, instance_of)
            plugin_rows = [
                PodRow(PLUGINS, p.metadata.name, f"DaemonSet {ds['metadata']['name']}", p.spec.node_name)
                for ds in daemonsets for p in core.list_namespaced_pod(
                    "kube-system", label_selector=",".join(f"{k}={v}" for k, v in
                                                           ds["spec"]["selector"]["matchLabels"].items())).items
                if p.spec.node_name and p.metadata.owner_references
                and p.metadata.owner_references[0].name == ds["metadata"]["name"]]
            pods: dict[str, list[tuple[str, str]]] = {}
            for s in scenarios:  # as `cluster apply`: the namespace, the credentials, the objects
                apply_objects([o for o in s.objects if o["kind"] == "Namespace"], api, log=log)
                ensure_secrets(s.cluster, api, log=log)
                apply_objects([o for o in s.objects if o["kind"] != "Namespace"], api, skip_missing_kinds=True,
                              log=log)
                built = operator_pods(s.objects)
                for o in built:  # an object the operator made already is the one judged
                    try:
                        (core.create_namespaced_pod if o["kind"] == "Pod" else
                         core.create_namespaced_persistent_volume_claim)(o["metadata"]["namespace"], o)
                    except client.ApiException as exc:
                        if exc.status != 409:
                            raise
                pods[s.name] = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in built if o["kind"] == "Pod"]

            def judged() -> list[PodRow] | None:
                rows = [_pod_row(s.name, core.read_namespaced_pod(name, ns)) for s in scenarios
                        for ns, name in pods[s.name]]
                return rows if all(_judged(r) for r in rows) else None

            rows = wait(judged, timeout, step=2.0)
            return plugin_rows + (rows or [_pod_row(s.name, core.read_namespaced_pod(name, ns)) for s in scenarios
                                           for ns, name in pods[s.name]])
        finally:
            for s in scenarios:
                delete_cluster_scoped(api, s.objects)
                try:
                    core.delete_namespace(s.cluster.namespace, propagation_policy="Background")
                except Exception:  # noqa: BLE001 - best-effort clean-up of our own objects
                    pass
            for ds in daemonsets:
                try:
                    apps.delete_namespaced_daemon_set(ds["metadata"]["name"], "kube-system")
                except Exception:  # noqa: BLE001 - best-effort clean-up of our own objects
                    pass
            for o in extra:
                try:
                    if o["kind"] == "PersistentVolume":
                        core.delete_persistent_volume(o["metadata"]["name"])
                    else:
                        storage.delete_storage_class(o["metadata"]["name"])
                except Exception:  # noqa: BLE001 - best-effort clean-up of our own objects
                    pass


def _advertise(api: Any, beat: Heartbeat, daemonsets: list[dict[str, Any]], plugins: dict[str, Any],
               instance_of: dict[str, str], timeout: float = 120.0, settle: float = 10.0) -> None:
    """Advertise each plugin's resources on every node a pod of its DaemonSet is bound to, until
    every DaemonSet has all its pods bound and nothing changed for ``settle`` seconds."""
    # lazy: the kubernetes client is the optional [k8s] extra
    from kubernetes import client

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    done: set[tuple[str, str]] = set()
    last, since = None, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = []
        for ds, name in zip(daemonsets, plugins, strict=True):
            ds_name = ds["metadata"]["name"]
            selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
            status = apps.read_namespaced_daemon_set(ds_name, "kube-system").status
            nodes = sorted(p.spec.node_name for p in core.list_namespaced_pod("kube-system", label_selector=selector).items
                           if p.spec.node_name and p.metadata.owner_references
                           and p.metadata.owner_references[0].name == ds_name)
            for node in nodes:
                if node in instance_of and (name, node) not in done:
                    beat.advertise(node, advertised(name, instance_of[node]))
                    done.add((name, node))
            state.append((ds_name, status.desired_number_scheduled if status else None, tuple(nodes)))
        complete = all(desired is not None and len(nodes) >= desired for _, desired, nodes in state)
        if state != last:
            last, since = state, time.monotonic()
        elif complete and time.monotonic() - since >= settle:
            return
        time.sleep(2.0)


# ---------------------------------------------------------------- the examples, and one breaking case per rule


def _scenario(name: str, example: str, namespace: str, cluster_name: str | None = None,
              count: int | None = None) -> Scenario:
    spec = load_spec(EXAMPLES_DIR / example / "cluster.yaml")
    spec = replace(spec, namespace=namespace, name=cluster_name or spec.name,
                   node_sets=[replace(ns, count=count if count is not None else ns.count) for ns in spec.node_sets])
    rendered = render(spec.check())
    zone = next((ns.zone for ns in spec.node_sets if ns.zone), None) or f"{spec.aws.region}a"
    return Scenario(name, rendered.objects, rendered.plugin_values, spec, zone)


def example_scenarios(prefix: str) -> list[Scenario]:
    """The examples, each in a namespace and under a cluster name of this run (its NodePools, and so
    its nodes, are its own)."""
    return [_scenario(example, example, f"{prefix}{example}", cluster_name=f"{prefix}{name}")
            for example, name in (("cpu-small", "cpu-small"), ("h100-efa", "llm"), ("trn1", "trn1"))]


@dataclass(frozen=True)
class Break:
    """A rule broken on purpose: the scheduler's words for it, and ``cluster validate``'s."""

    rule: str
    example: str
    scheduler_says: str
    validate_says: str


BREAKS = (
    Break("taint", "cpu-small", "had untolerated taint", "does not tolerate taint team:NoSchedule"),
    Break("affinity", "h100-efa", "Insufficient nvidia.com/gpu", "nvidia device plugin's node affinity"),
    Break("allocatable", "cpu-small", "Insufficient memory", "but Karpenter models m7i.8xlarge as"),
    Break("zone", "trn1", "didn't match Pod's node affinity/selector", "matches no node of NodePool"),
)


def _first(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The first object of a kind: the first node set's (the accelerator one in h100-efa)."""
    return next(o for o in objs if o.get("kind") == kind)


def break_scenario(b: Break, prefix: str) -> Scenario:
    s = _scenario(f"break: {b.rule}", b.example, f"{prefix}break-{b.rule}", cluster_name=f"{prefix}{b.rule}",
                  count=1)
    pool, nodeset = _first(s.objects, "NodePool"), _first(s.objects, "NodeSet")
    if b.rule == "taint":
        pool["spec"]["template"]["spec"]["taints"].append({"key": "team", "value": "a", "effect": "NoSchedule"})
    elif b.rule == "affinity":
        pool["spec"]["template"]["metadata"]["labels"].pop("nvidia.com/gpu.present")
    elif b.rule == "allocatable":
        itype = get_instance_type(nodeset["spec"]["template"]["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"])
        memory = f"{addons.karpenter_allocatable(itype).memory_mib + 1024}Mi"
        for part in ("requests", "limits"):
            nodeset["spec"]["slurmd"]["resources"][part]["memory"] = memory
    elif b.rule == "zone":
        zone = nodeset["spec"]["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"]
        nodeset["spec"]["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] = zone[:-1] + "a"
    return s


def scheduling_table(rows: list[PodRow]) -> str:
    """Markdown: scenario, pod, owner, node or the scheduler's reason."""
    lines = ["| scenario | pod | owner | node / scheduler's reason |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.scenario} | {r.pod} | {r.owner} | {r.node or 'Pending: ' + r.reason} |" for r in rows]
    return "\n".join(lines)
