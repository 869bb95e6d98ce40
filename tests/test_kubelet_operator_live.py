"""The real slurm-operator (v1.2.1, the default) makes Slurm's pods on the kubelet node from
``manifests/cpu-small`` (``slinkyml cluster apply``; the Controller asks 1 CPU of this 2-CPU node instead of
2, nothing else changed), with the images built here
(``slinkyml/dev/images/slurm_images.py``) under the names the rendered manifests give Slinky's images: the
operator's own pod specs (commands, arguments, environment, mounts, users, probes, sidecars) run as the
operator writes them, and the probes it declares pass.

On a control plane of its own with the operator (port base 18400, bridge ``slkko0``, 10.248.0.0/24; a run
beside CI's: ``tests/private_cluster.py``'s ``kubelet_node``).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from private_cluster import kubelet_node, port_shift, require_kubelet_node
from tiers import needs
from waiting import wait_until

from slinkyml.cluster import load_spec
from slinkyml.cluster.spec import SlurmCluster, to_dict
from slinkyml.dev.images.slurm_images import SLURM_UID, slinky_name
from slinkyml.dev.kubernetes.kube import KubeControlPlane, Ports
from slinkyml.dev.kubernetes.kubenode import NodeSettings
from slinkyml.dev.kubernetes.operator_cluster import OperatorPods, fit_spec, statesave_volume

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
    pods: OperatorPods
    digests: dict[str, str]  # image name -> manifest digest, as imported

    @property
    def cluster(self) -> SlurmCluster:
        return self.pods.cluster


#: the first start imports the images and starts every daemon on a 2-core machine under the tests' load
_wait = functools.partial(wait_until, timeout=300.0, every=1.0, retry_on=(client.ApiException,))


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
        cluster = fit_spec(load_spec(EXAMPLE))  # the one change before apply: the Controller asks 1 CPU
        spec_file = state / "cluster.yaml"
        spec_file.write_text(yaml.safe_dump(to_dict(cluster), sort_keys=False))
        c = OperatorCluster(plane, OperatorPods(plane.api(), cluster), digests)
        c.pods.core.create_persistent_volume(statesave_volume(cluster, state / "volumes" / "statesave"))
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
    pod = _wait(f"a Ready pod of the operator's {kind}", lambda: c.pods.ready(kind))
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
        log = c.pods.core.read_namespaced_pod_log(pod.metadata.name, c.cluster.namespace, container="logfile")
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
    ctld = _wait("a Ready pod of the operator's Controller", lambda: c.pods.ready("Controller"))
    login = _wait("a Ready pod of the operator's LoginSet", lambda: c.pods.ready("LoginSet"))
    out = c.pods.exec(ctld.metadata.name, "slurmctld", ["scontrol", "ping"])
    assert f"Slurmctld(primary) at {c.cluster.name}-controller-0 is UP" in out, out
    main = next(x for x in login.spec.containers if x.name == "login")
    assert main.readiness_probe._exec.command == ["test", "-S", "/run/slurm/sack.socket"]
    assert c.pods.exec(login.metadata.name, "login", ["ps", "-o", "user=", "-C", "sackd"]).split() == ["slurm"]
    assert c.pods.exec(login.metadata.name, "login", ["sinfo", "-h", "-o", "%P"]).split() == ["cpu*"]


def test_the_operators_nodeset_pods_register_configless(operator_cluster: OperatorCluster) -> None:
    """The operator's NodeSet controller makes the slurmd pod (privileged, `-Z --conf-server <controller
    Service>:6817 --conf 'Features=...'`); it turns Ready (slurmd's own `/readyz` on 6818) and registers with
    slurmctld, configless, so `sinfo` in the login pod lists it idle."""
    c = operator_cluster
    nodeset = c.pods.fit_nodeset(c.plane.node().settings.name)
    replicas = nodeset["spec"]["replicas"]
    workers = _wait(f"{replicas} Ready slurmd pods of the operator's NodeSet, idle in sinfo",
                    lambda: c.pods.registered_workers(replicas))
    slurmd = next(x for x in workers[0].spec.containers if x.name == "slurmd")
    assert slurmd.image == slinky_name("slurmd", RELEASE) and slurmd.command is None
    assert slurmd.args[:3] == ["-Z", "--conf-server", f"{c.cluster.name}-controller.{c.cluster.namespace}:6817"]
    assert slurmd.readiness_probe.http_get.path == "/readyz" and slurmd.security_context.privileged


def test_a_job_from_the_login_pod_runs_in_the_nodeset_pod(operator_cluster: OperatorCluster) -> None:
    """A user's first job, as on EKS: `srun` in the login pod (`kubectl exec`) runs in the operator's slurmd
    pod, whose name is the Slurm node's, and its output comes back to the login pod; then `sbatch` of a
    script from the login pod ends COMPLETED with exit code 0:0 in `scontrol show job`."""
    c = operator_cluster
    workers = _wait("the fitted NodeSet's slurmd pod idle in sinfo", lambda: c.pods.registered_workers(1))
    login = c.pods.ready("LoginSet").metadata.name
    out = c.pods.exec(login, "login", ["srun", "-N1", "-n1", "-t", "1", "bash", "-c",
                                       'echo "job=$SLURM_JOB_ID node=$SLURMD_NODENAME host=$(hostname)"'])
    line = next((x for x in out.splitlines() if x.startswith("job=")), out)
    worker = workers[0].metadata.name
    assert line.split()[1:] == [f"node={worker}", f"host={worker}"], out
    submitted = c.pods.exec(login, "login", ["sbatch", "--parsable", "-N1", "-t", "1", "--wrap", "sleep 1"])
    job = submitted.strip().split(";")[0]
    assert job.isdigit(), submitted

    def finished() -> str:
        show = c.pods.exec(login, "login", ["scontrol", "show", "job", job])
        return show if "JobState=COMPLETED" in show or "JobState=FAILED" in show else ""

    show = _wait(f"job {job} finished", finished, timeout=120)
    assert "JobState=COMPLETED" in show and "ExitCode=0:0" in show, show
