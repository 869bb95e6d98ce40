"""The real slurm-operator (v1.2.1, the default) makes Slurm's pods on the kubelet node from
``manifests/cpu-small`` (``slinkyml cluster apply``; the Controller asks 1 CPU of this 2-CPU node instead of
2, nothing else changed), with the images built here
(``slinkyml/dev/slurm_images.py``) under the names the rendered manifests give Slinky's images: the
operator's own pod specs (commands, arguments, environment, mounts, users, probes, sidecars) run as the
operator writes them, and the probes it declares pass.

On a control plane of its own with the operator (port base 18400, bridge ``slkko0``, 10.248.0.0/24; a run
beside CI's: ``tests/private_cluster.py``'s ``kubelet_node``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.stream import stream
from private_cluster import kubelet_node, port_shift, require_kubelet_node
from tiers import needs
from waiting import wait_until

from slinkyml.cluster import load_spec, names
from slinkyml.cluster.placement import controller_claim
from slinkyml.cluster.spec import SlurmCluster, to_dict
from slinkyml.dev.kube import KubeControlPlane, Ports
from slinkyml.dev.kubenode import NodeSettings
from slinkyml.dev.slurm_images import SLURM_UID, slinky_name

pytestmark = pytest.mark.slow

#: clear of CI's plane (17400-17483), 17600/17700, test_kubelet_live's 18000, test_dev_kube's 18100 and
#: test_kubelet_pods_live's 18200 (each + 100 beside a second run)
PORT_BASE = 18400
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "manifests" / "cpu-small" / "cluster.yaml"
RELEASE = "26.05"
LOCAL_CONTROLLER_CPU = "1"


@dataclass
class OperatorCluster:
    plane: KubeControlPlane
    cluster: SlurmCluster
    core: client.CoreV1Api
    apps: client.AppsV1Api
    digests: dict[str, str]  # image name -> manifest digest, as imported

    def owned_pods(self, kind: str) -> list[Any]:
        """The pods of the StatefulSet or Deployment the operator made for its object of ``kind``."""
        ns = self.cluster.namespace
        sets = [*self.apps.list_namespaced_stateful_set(ns).items, *self.apps.list_namespaced_deployment(ns).items]
        pods = []
        for owner in sets:
            if any(ref.kind == kind for ref in owner.metadata.owner_references or []):
                selector = ",".join(f"{k}={v}" for k, v in owner.spec.selector.match_labels.items())
                pods += self.core.list_namespaced_pod(ns, label_selector=selector).items
        return pods

    def exec(self, pod: str, container: str, command: list[str]) -> str:
        """What `kubectl exec` does: the command's stdout and stderr."""
        ws = stream(self.core.connect_get_namespaced_pod_exec, pod, self.cluster.namespace, container=container,
                    command=command, stderr=True, stdout=True, stdin=False, tty=False, _preload_content=False)
        try:
            ws.run_forever(timeout=120)
            return (ws.read_stdout() or "") + (ws.read_stderr() or "")
        finally:
            ws.close()


def _ready(pod: Any) -> bool:
    statuses = [*(pod.status.container_statuses or []), *(pod.status.init_container_statuses or [])]
    return (pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None and bool(statuses)
            and all(s.ready for s in statuses))


def _ready_pod(c: OperatorCluster, kind: str) -> Any:
    return next((p for p in c.owned_pods(kind) if _ready(p)), None)


#: the first start imports the images and starts every daemon on a 2-core machine under the tests' load
_wait = functools.partial(wait_until, timeout=300.0, every=1.0, retry_on=(client.ApiException,))


def _statesave_volume(cluster: SlurmCluster, path: Path) -> dict[str, Any]:
    """The Controller's state-save volume, as a CSI driver would provision it (here a folder of the node's,
    which a hostPath volume does not chown to the pod's fsGroup: owned by SlurmUser beforehand)."""
    path.mkdir(parents=True)
    os.chown(path, SLURM_UID, SLURM_UID)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{cluster.name}-statesave"},
            "spec": {"capacity": {"storage": cluster.controller.persistence_size},
                     "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(path), "type": "Directory"},
                     "claimRef": {"namespace": cluster.namespace, "name": controller_claim(cluster.name)}}}


@pytest.fixture(scope="module")
@needs("kubelet")
def operator_cluster() -> Iterator[OperatorCluster]:
    require_kubelet_node()
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kubeop-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(PORT_BASE + port_shift()),
                             node=NodeSettings(*kubelet_node("slinkyml-op-node", "slkko", 248)))
    try:
        started = time.monotonic()
        plane.up(kubelet=True)
        digests = plane.node().import_slurm_images(RELEASE)
        print(f"plane, operator, node and images ready in {time.monotonic() - started:.1f} s")
        example = load_spec(EXAMPLE)
        # the one change: the Controller asks 1 CPU, not 2 (this node has 2 in all and CoreDNS asks 50m)
        cluster = replace(example, controller=replace(example.controller, cpu=LOCAL_CONTROLLER_CPU))
        spec_file = state / "cluster.yaml"
        spec_file.write_text(yaml.safe_dump(to_dict(cluster), sort_keys=False))
        api = plane.api()
        c = OperatorCluster(plane, cluster, client.CoreV1Api(api), client.AppsV1Api(api), digests)
        c.core.create_persistent_volume(_statesave_volume(cluster, state / "volumes" / "statesave"))
        applied = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "apply", str(spec_file),
                                  "--kubeconfig", str(plane.kubeconfig)],
                                 capture_output=True, text=True, timeout=300, check=False)
        assert applied.returncode == 0, applied.stderr
        yield c
    finally:
        plane.reset()
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.parametrize(("kind", "container", "component"), [
    ("Controller", "slurmctld", "slurmctld"),
    ("RestApi", "slurmrestd", "slurmrestd"),
])
def test_the_operators_pods_run_ready_on_our_images(operator_cluster: OperatorCluster, kind: str,
                                                      container: str, component: str) -> None:
    """The operator's pod of ``kind`` runs Ready with every container of it on our image under the name the
    manifest gives Slinky's, and the probes that pass are the ones the operator declares."""
    c = operator_cluster
    pod = _wait(f"a Ready pod of the operator's {kind}", lambda: _ready_pod(c, kind))
    image = slinky_name(component, RELEASE)
    main = next(x for x in pod.spec.containers if x.name == container)
    assert main.image == image and main.command is None  # the image's own entrypoint, as Slinky's
    statuses = {s.name: s for s in [*pod.status.container_statuses, *(pod.status.init_container_statuses or [])]}
    held = c.plane.node().imported()  # what the node's containerd holds under each name (it can pull nothing)
    for name, status in statuses.items():
        assert status.image == image and held[image] == c.digests[image], (name, status.image)
        assert status.started and status.ready and status.state.running, name
    if kind == "Controller":
        # slurmctld's own HTTP answers on its Slurm port: the operator's startup, liveness, readiness probes
        probes = {p: getattr(main, f"{p}_probe").http_get for p in ("startup", "liveness", "readiness")}
        assert {p: (h.path, h.port) for p, h in probes.items()} == {
            "startup": ("/livez", "slurmctld"), "liveness": ("/livez", "slurmctld"),
            "readiness": ("/readyz", "slurmctld")}
        assert pod.spec.security_context.run_as_user == SLURM_UID and "logfile" in statuses
        # the logfile sidecar relays what slurmctld writes to its SlurmctldLogFile (a FIFO the sidecar made)
        log = c.core.read_namespaced_pod_log(pod.metadata.name, c.cluster.namespace, container="logfile")
        assert f"slurmctld version {RELEASE}." in log and "Running as primary controller" in log
    else:
        assert main.readiness_probe.tcp_socket.port == 6820
        assert main.args[-1] == "0.0.0.0:6820" and pod.spec.containers[0].security_context.run_as_user == 65534


def test_slurmctld_answers_and_the_login_pod_is_ready(operator_cluster: OperatorCluster) -> None:
    """Through the Services and cluster DNS: `scontrol ping` in the controller pod reaches slurmctld at the
    address the operator's slurm.conf gives it (the Controller's Service), and the login pod turns Ready
    (the operator's probe: sackd's socket), its sackd running as slurm with slurm.conf fetched configless
    from that Service, so `sinfo` there lists the cluster's partition."""
    c = operator_cluster
    ctld = _wait("a Ready pod of the operator's Controller", lambda: _ready_pod(c, "Controller"))
    login = _wait("a Ready pod of the operator's LoginSet", lambda: _ready_pod(c, "LoginSet"))
    out = c.exec(ctld.metadata.name, "slurmctld", ["scontrol", "ping"])
    assert f"Slurmctld(primary) at {c.cluster.name}-controller-0 is UP" in out, out
    main = next(x for x in login.spec.containers if x.name == "login")
    assert main.readiness_probe._exec.command == ["test", "-S", "/run/slurm/sack.socket"]
    assert c.exec(login.metadata.name, "login", ["ps", "-o", "user=", "-C", "sackd"]).split() == ["slurm"]
    assert c.exec(login.metadata.name, "login", ["sinfo", "-h", "-o", "%P"]).split() == ["cpu*"]


def _on_this_node(c: OperatorCluster) -> dict[str, Any]:
    """What this node is not that EKS's nodes of the NodeSet's pool are, given after `apply` (and said in
    docs/local-kubernetes-cluster.md): the node carries the labels Karpenter would give it; the slurmd pods
    request nothing (the m7i.8xlarge's 31 CPUs are not on a 2-CPU machine: POD_CPUS and POD_MEMORY are 0);
    one replica (the operator's slurmd pods are one per node, a required anti-affinity, and this plane has
    one node); cgroup.conf says ``CgroupPlugin=autodetect`` (these machines are cgroup v1; the rendered
    cgroup/v2 stops slurmd). The NodeSet's pods made before are deleted (its update strategy is OnDelete, as
    rendered). Returns the NodeSet as the operator then reads it."""
    ns, objects = c.cluster.namespace, client.CustomObjectsApi(c.core.api_client)
    name = names.nodeset(c.cluster, c.cluster.node_sets[0])
    nodeset = objects.get_namespaced_custom_object("slinky.slurm.net", "v1beta1", ns, "nodesets", name)
    c.core.patch_node(c.plane.node().settings.name,
                      {"metadata": {"labels": nodeset["spec"]["template"]["spec"]["nodeSelector"]}})
    config = c.core.read_namespaced_config_map(names.slurm_config(c.cluster), ns)
    cgroup = config.data["cgroup.conf"].replace("CgroupPlugin=cgroup/v2", "CgroupPlugin=autodetect")
    c.core.patch_namespaced_config_map(config.metadata.name, ns, {"data": {"cgroup.conf": cgroup}})
    ctld = _ready_pod(c, "Controller").metadata.name
    _wait("the controller pod to see the new cgroup.conf", lambda: "autodetect" in c.exec(
        ctld, "slurmctld", ["cat", "/etc/slurm/cgroup.conf"]), timeout=180)
    assert "error" not in c.exec(ctld, "slurmctld", ["scontrol", "reconfigure"]).lower()
    patched = objects.patch_namespaced_custom_object("slinky.slurm.net", "v1beta1", ns, "nodesets", name,
                                                     {"spec": {"replicas": 1, "slurmd": {"resources": None}}})
    for pod in c.core.list_namespaced_pod(ns).items:
        if any(r.kind == "NodeSet" for r in pod.metadata.owner_references or []):
            c.core.delete_namespaced_pod(pod.metadata.name, ns)
    return patched


def test_the_operators_nodeset_pods_register_configless(operator_cluster: OperatorCluster) -> None:
    """The operator's NodeSet controller makes the slurmd pod (privileged, `-Z --conf-server <controller
    Service>:6817 --conf 'Features=...'`); it turns Ready (slurmd's own `/readyz` on 6818) and registers with
    slurmctld, configless, so `sinfo` in the login pod lists it idle."""
    c = operator_cluster
    nodeset = _on_this_node(c)
    replicas = nodeset["spec"]["replicas"]

    def ready_workers() -> list[Any]:
        pods = [p for p in c.core.list_namespaced_pod(c.cluster.namespace).items
                if any(r.kind == "NodeSet" for r in p.metadata.owner_references or [])]
        fresh = [p for p in pods if p.spec.containers[0].resources.requests is None]  # of the patched template
        return fresh if len(fresh) == len(pods) == replicas and all(map(_ready, pods)) else []

    workers = _wait(f"{replicas} Ready slurmd pods of the operator's NodeSet", ready_workers)
    slurmd = next(x for x in workers[0].spec.containers if x.name == "slurmd")
    assert slurmd.image == slinky_name("slurmd", RELEASE) and slurmd.command is None
    assert slurmd.args[:3] == ["-Z", "--conf-server", f"{c.cluster.name}-controller.{c.cluster.namespace}:6817"]
    assert slurmd.readiness_probe.http_get.path == "/readyz" and slurmd.security_context.privileged
    login = _ready_pod(c, "LoginSet").metadata.name
    names = sorted(p.metadata.name for p in workers)

    def idle() -> dict[str, str]:
        out = c.exec(login, "login", ["sinfo", "-h", "-N", "-o", "%N %t"])
        nodes = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        return nodes if sorted(n for n, s in nodes.items() if s == "idle") == names else {}

    _wait("every slurmd pod idle in sinfo", idle)
