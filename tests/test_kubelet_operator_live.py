"""The real slurm-operator (v1.2.1, the default) makes Slurm's pods on the kubelet node from
``manifests/cpu-small`` applied unchanged (``slinkyml cluster apply``), with the images built here
(``slinkyml/dev/slurm_images.py``) under the names the rendered manifests give Slinky's images: the
operator's own pod specs (commands, arguments, environment, mounts, users, probes, sidecars) run as the
operator writes them, and the probes it declares pass.

On a control plane of its own with the operator (port base 18400, bridge ``slkko0``, 10.248.0.0/24).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream
from private_cluster import port_shift
from tiers import needs
from waiting import wait_until

from slinkyml.cluster import load_spec
from slinkyml.cluster.placement import controller_claim
from slinkyml.cluster.spec import SlurmCluster
from slinkyml.dev.kube import KubeControlPlane, Ports
from slinkyml.dev.kubenode import CNI_BIN_DIR, CONTAINERD, NodeSettings
from slinkyml.dev.slurm_images import SLURM_UID, slinky_name

pytestmark = pytest.mark.slow

#: clear of CI's plane (17400-17483), 17600/17700, test_kubelet_live's 18000, test_dev_kube's 18100 and
#: test_kubelet_pods_live's 18200 (each + 100 beside a second run)
PORT_BASE = 18400
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "manifests" / "cpu-small" / "cluster.yaml"
RELEASE = "26.05"


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
    if os.geteuid() != 0:
        pytest.skip("the kubelet node needs root (network namespaces, cgroups, mounts)")
    if not (os.access(CONTAINERD, os.X_OK) and (CNI_BIN_DIR / "bridge").is_file()):
        pytest.skip("Debian's containerd and containernetworking-plugins are not installed (`make setup`)")
    shift = port_shift()
    other = 1 if shift else 0  # a second run beside CI's gets its own bridge and subnet too
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kubeop-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(PORT_BASE + shift),
                             node=NodeSettings("slinkyml-op-node", f"slkko{other}", f"10.{248 + other}.0.0/24"))
    try:
        started = time.monotonic()
        plane.up(kubelet=True)
        digests = plane.node().import_slurm_images(RELEASE)
        print(f"plane, operator, node and images ready in {time.monotonic() - started:.1f} s")
        cluster = load_spec(EXAMPLE)
        api = plane.api()
        c = OperatorCluster(plane, cluster, client.CoreV1Api(api), client.AppsV1Api(api), digests)
        c.core.create_persistent_volume(_statesave_volume(cluster, state / "volumes" / "statesave"))
        applied = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "apply", str(EXAMPLE),
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
