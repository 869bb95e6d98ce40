"""The real slurm-operator (v1.2.1, the default) makes Slurm's pods on the kubelet node from
``manifests/cpu-small`` (``slinkyml cluster apply``; the Controller asks 1 CPU of this 2-CPU node instead of
2, nothing else changed), with the images built here
(``slinkyml/dev/images/slurm_images.py``) under the names the rendered manifests give Slinky's images: the
operator's own pod specs (commands, arguments, environment, mounts, users, probes, sidecars) run as the
operator writes them, and the probes it declares pass. The NodeSet and LoginSet name the worker and login
images with the training stack (``training_images.py``: Python, torch, DeepSpeed and slinkyml at
``/opt/slinkyml``, as ``containers/worker`` builds them), through the spec's ``image`` fields; the only
folder of this machine's in the pods is the jobs' shared one. Then what a user does on it: jobs from the
login pod, the tiny GPT trained across the NodeSet's two slurmd pods by ``slinkyml sbatch submit`` run in the
login pod, and Kubernetes-shaped faults (a slurmd pod deleted mid-training, the NodeSet scaled, the
slurmctld pod deleted), each handled by the operator's own controllers.

On a control plane of its own with the operator (port base 18400, bridge ``slkko0``, 10.248.0.0/24; a run
beside CI's: ``tests/private_cluster.py``'s ``kubelet_node``).
"""

from __future__ import annotations

import functools
import json
import shlex
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

from slinkyml.cluster import load_spec, names
from slinkyml.cluster.spec import SlurmCluster, to_dict
from slinkyml.demo.allreduce import expected_sum
from slinkyml.dev.images.slurm_images import SLURM_UID, slinky_name
from slinkyml.dev.images.training_images import VENV
from slinkyml.dev.kubernetes.kube import KubeControlPlane, Ports
from slinkyml.dev.kubernetes.kubenode import NodeSettings
from slinkyml.dev.kubernetes.operator_cluster import (
    GROUP,
    VERSION,
    HostFolder,
    OperatorPods,
    fit_spec,
    is_ready,
    statesave_volume,
)
from slinkyml.slurm.records import parse_scontrol_record
from slinkyml.train import FINAL_FILE, METRICS_FILE

pytestmark = pytest.mark.slow

#: clear of CI's plane (17400-17483), 17600/17700, test_kubelet_live's 18000 and test_dev_kube's 18100
#: (each + 100 beside a second run)
PORT_BASE = 18400
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "manifests" / "cpu-small" / "cluster.yaml"
RELEASE = "26.05"
#: the NodeSet's replicas as cpu-small renders them, both on this one node (oversubscribeNode)
REPLICAS = 2


@dataclass
class OperatorCluster:
    plane: KubeControlPlane
    pods: OperatorPods
    digests: dict[str, str]  # image name -> manifest digest, as imported
    images: dict[str, str]  # role (worker, login) -> the image with the training stack
    shared: Path  # a folder of the node's at the same path in the slurmd and login pods: the jobs' files
    applied_at: float  # time.monotonic() when `cluster apply` returned

    @property
    def cluster(self) -> SlurmCluster:
        return self.pods.cluster

    @property
    def folders(self) -> tuple[HostFolder, ...]:
        """The one folder of this machine's in the slurmd and login pods: the shared one (the training
        stack is in their images)."""
        return (HostFolder(str(self.shared), read_only=False),)

    @property
    def nodeset(self) -> str:
        return names.nodeset(self.cluster, self.cluster.node_sets[0])

    def login(self, *command: str, timeout: float = 300) -> str:
        """``command`` in the login pod that mounts the folders (stdout, then stderr)."""
        pod = self.pods.login_pod(self.folders)
        if pod is None:
            raise client.ApiException(reason="no Ready login pod with the folders")  # the probe's "not yet"
        return self.pods.exec(pod.metadata.name, "login", list(command), timeout=timeout)

    def pod(self, name: str):
        return self.pods.core.read_namespaced_pod(name, self.cluster.namespace)

    def nodes(self) -> dict[str, str]:
        """sinfo in the login pod: node -> state."""
        out = self.login("sinfo", "-h", "-N", "-o", "%N %t")
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def job(self, job_id: int) -> dict[str, str]:
        out = self.login("scontrol", "-o", "show", "job", str(job_id)).strip()
        return parse_scontrol_record(out.splitlines()[0]) if out.startswith("JobId=") else {}


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
        print(f"plane, operator, node and Slurm images ready in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        images = plane.node().import_training_images(RELEASE, log=print)
        print(f"worker and login images with the training stack on the node in {time.monotonic() - started:.1f} s")
        # the changes before apply: the Controller asks 1 CPU; the node sets and login name our images
        cluster = fit_spec(load_spec(EXAMPLE), images)
        spec_file = state / "cluster.yaml"
        spec_file.write_text(yaml.safe_dump(to_dict(cluster), sort_keys=False))
        shared = state / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        pods = OperatorPods(plane.api(), cluster)
        pods.core.create_persistent_volume(statesave_volume(cluster, state / "volumes" / "statesave"))
        applied = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "apply", str(spec_file),
                                  "--kubeconfig", str(plane.kubeconfig)],
                                 capture_output=True, text=True, timeout=300, check=False)
        assert applied.returncode == 0, applied.stderr
        yield OperatorCluster(plane, pods, digests, images, shared, time.monotonic())
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
        def relayed() -> bool:
            log = c.pods.core.read_namespaced_pod_log(pod.metadata.name, c.cluster.namespace, container="logfile")
            return f"slurmctld version {RELEASE}." in log and "Running as primary controller" in log

        try:
            wait_until("slurmctld's log in the logfile sidecar's", relayed, timeout=30.0, every=1.0,
                       retry_on=(client.ApiException,))
        except pytest.fail.Exception:  # say whether slurmctld wrote to a plain file instead of the FIFO
            file_type = c.pods.exec(pod.metadata.name, container, ["stat", "-c", "%F", "/var/log/slurm/slurmctld.log"])
            pytest.fail(f"the logfile sidecar relayed no slurmctld log; its SlurmctldLogFile is a {file_type.strip()}")
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


@pytest.fixture(scope="module")
def workers(operator_cluster: OperatorCluster) -> list:
    """The NodeSet fitted to this node (``fit_nodeset``: its Karpenter labels, no requests, cgroup
    autodetect) with its rendered two replicas on it (``oversubscribeNode``) and the shared folder mounted in
    the slurmd and login pods; its pods once Ready and idle in sinfo of a login pod that mounts it."""
    c = operator_cluster
    c.pods.fit_login(c.folders)
    fitted = c.pods.fit_nodeset(c.plane.node().settings.name, replicas=REPLICAS, folders=c.folders)
    assert fitted["spec"]["replicas"] == REPLICAS and fitted["spec"]["oversubscribeNode"] is True
    _wait("a Ready login pod with the folders", lambda: c.pods.login_pod(c.folders))
    ready = _wait(f"{REPLICAS} Ready slurmd pods of the operator's NodeSet, idle in sinfo",
                  lambda: c.pods.registered_workers(REPLICAS))
    print(f"apply -> every slurmd pod registered: {time.monotonic() - c.applied_at:.1f} s")
    return ready


def test_the_operators_nodeset_pods_register_configless(operator_cluster: OperatorCluster, workers: list) -> None:
    """The operator's NodeSet controller makes the slurmd pods (privileged, `-Z --conf-server <controller
    Service>:6817 --conf 'Features=...'`); they turn Ready (slurmd's own `/readyz` on 6818) and register with
    slurmctld, configless, so `sinfo` in the login pod lists them idle."""
    c = operator_cluster
    slurmd = next(x for x in workers[0].spec.containers if x.name == "slurmd")
    assert slurmd.image == c.images["worker"] and slurmd.command is None
    assert slurmd.args[:3] == ["-Z", "--conf-server", f"{c.cluster.name}-controller.{c.cluster.namespace}:6817"]
    assert slurmd.readiness_probe.http_get.path == "/readyz" and slurmd.security_context.privileged


def test_the_pods_run_the_training_images_with_only_the_shared_folder(operator_cluster: OperatorCluster,
                                                                      workers: list) -> None:
    """The spec's ``image`` fields reach the pods: every container of the slurmd pods runs the worker image
    and every one of the login pod the login image, as containerd holds them; the only folder of this
    machine's in them is the shared one; the training stack imports in a slurmd pod from the image's venv
    (not the host's), and the login pod's ``slinkyml`` is the image's."""
    c = operator_cluster
    login = c.pods.login_pod(c.folders)
    assert login is not None
    held = c.plane.node().imported()
    for pod, image in [*((w, c.images["worker"]) for w in workers), (login, c.images["login"])]:
        statuses = [*pod.status.container_statuses, *(pod.status.init_container_statuses or [])]
        assert {x.image for x in [*pod.spec.containers, *(pod.spec.init_containers or [])]} == {image}
        assert {s.image for s in statuses} == {image} and image in held, pod.metadata.name
        host_paths = {v.host_path.path for v in pod.spec.volumes or [] if v.host_path}
        assert host_paths == {str(c.shared)}, (pod.metadata.name, host_paths)
    out = c.pods.exec(workers[0].metadata.name, "slurmd", [
        f"{VENV}/bin/python", "-c", "import sys, torch, deepspeed, slinkyml; "
        "print('stack', sys.prefix, torch.__version__, deepspeed.__version__, slinkyml.__file__)"], timeout=300)
    line = next((x.split()[1:] for x in out.splitlines() if x.startswith("stack ")), None)
    assert line is not None and len(line) == 4, out  # stderr (DeepSpeed's warnings) follows stdout
    prefix, torch_version, deepspeed_version, package = line
    assert prefix == VENV and package.startswith(f"{VENV}/lib/"), out
    assert torch_version.startswith("2.13.0") and deepspeed_version == "0.19.8", out
    which = c.login("bash", "-c", "command -v slinkyml python; slinkyml --help >/dev/null && echo ok")
    assert which.split() == [f"{VENV}/bin/slinkyml", f"{VENV}/bin/python", "ok"], which


def test_nodeset_pods_come_from_the_cluster_spec(operator_cluster: OperatorCluster, workers: list) -> None:
    """The slurmd pods are the NodeSet `cluster render` makes of manifests/cpu-small, as the operator makes
    them: its own pods (no StatefulSet between), named NodeSet-ordinal, its replicas; slurmd registered each
    as a dynamic node with the NodeSet's features and the pod's IP as its address."""
    c = operator_cluster
    assert (c.cluster.name, c.nodeset, c.cluster.node_sets[0].count) == ("cpu-small", "cpu-small-cpu", REPLICAS)
    owned = c.pods.owned("NodeSet")
    assert sorted(p.metadata.name for p in owned) == [f"{c.nodeset}-{i}" for i in range(REPLICAS)]
    assert all(p.metadata.owner_references[0].name == c.nodeset for p in owned)

    def status() -> dict:
        return c.pods.objects.get_namespaced_custom_object(
            GROUP, VERSION, c.cluster.namespace, "nodesets", c.nodeset).get("status", {})

    try:  # the operator's status update follows its pods'
        _wait("the NodeSet's status to count its pods ready", lambda: status().get("readyReplicas") == REPLICAS,
              timeout=60)
    except BaseException:
        print(f"NodeSet status: {status()}")
        raise
    for pod in owned:
        node = parse_scontrol_record(c.login("scontrol", "-o", "show", "node", pod.metadata.name).splitlines()[0])
        assert set(node["AvailableFeatures"].split(",")) == {"cpu-small-cpu", "cpu", "m7i_8xlarge"}, node
        assert node["NodeAddr"] == pod.status.pod_ip, (node["NodeAddr"], pod.status.pod_ip)


def test_a_job_from_the_login_pod_runs_in_the_nodeset_pod(operator_cluster: OperatorCluster, workers: list) -> None:
    """A user's first job, as on EKS: `srun` in the login pod (`kubectl exec`) runs in the operator's slurmd
    pods, whose names are the Slurm nodes', and its output comes back to the login pod; then `sbatch` of a
    script from the login pod ends COMPLETED with exit code 0:0 in `scontrol show job`."""
    c = operator_cluster
    out = c.login("srun", f"-N{REPLICAS}", "-t", "1", "bash", "-c",
                  'echo "job=$SLURM_JOB_ID node=$SLURMD_NODENAME host=$(hostname)"')
    lines = sorted(x.split()[1:] for x in out.splitlines() if x.startswith("job="))
    assert lines == [[f"node={p.metadata.name}", f"host={p.metadata.name}"] for p in workers], out
    submitted = c.login("sbatch", "--parsable", "-N1", "-t", "1", "--wrap", "sleep 1")
    job = submitted.strip().split(";")[0]
    assert job.isdigit(), submitted

    def finished() -> str:
        show = c.login("scontrol", "show", "job", job)
        return show if "JobState=COMPLETED" in show or "JobState=FAILED" in show else ""

    show = _wait(f"job {job} finished", finished, timeout=120)
    assert "JobState=COMPLETED" in show and "ExitCode=0:0" in show, show


def _train_spec(c: OperatorCluster) -> Path:
    """sbatch/torchrun-ddp.yaml made to fit this node: no GPU, EFA or instance type, 1 GiB, the tiny
    model, checkpoints every 4 steps on the shared folder (the same path in every pod)."""
    data = yaml.safe_load((REPO / "sbatch" / "torchrun-ddp.yaml").read_text())
    for key in ("gpus_per_node", "cpus_per_task", "exclusive", "network", "instance_type"):
        data.pop(key, None)
    work = c.shared / "ddp"
    work.mkdir(exist_ok=True)
    data.update({"time_limit": "00:10:00", "mem_per_node": "1G", "python": f"{VENV}/bin/python",
                 "checkpoint_dir": str(work / "ckpt"), "log_dir": str(work / "logs"),
                 "requeue": {"signal": "USR2", "grace_seconds": 10, "max_restarts": 2},
                 "entry": {"module": "slinkyml.train",
                           "args": ["--steps", "30", "--checkpoint-every", "4", "--step-sleep", "0.3"]}})
    path = work / "torchrun-ddp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _metrics(ckpt: Path) -> list[dict]:
    path = ckpt / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _running(c: OperatorCluster, name: str, not_ip: str):
    """Pod ``name``, once Ready at another address than ``not_ip``."""
    pod = c.pod(name)
    return pod if is_ready(pod) and pod.status.pod_ip != not_ip else None


def test_train_from_the_login_pod_and_a_deleted_slurmd_pod_resumes(operator_cluster: OperatorCluster,
                                                                    workers: list) -> None:
    """`slinkyml sbatch submit` in the login pod trains the tiny GPT on both slurmd pods; the pod that is not
    the batch node's deleted mid-run: the operator's NodeSet controller makes it again by the same name at a
    new address, Slurm fails the run on that node and the run requeues, and the second run resumes from the
    newest checkpoint (at most one interval lost)."""
    c = operator_cluster
    path = _train_spec(c)
    work = path.parent
    submitted = time.monotonic()
    out = c.login("bash", "-c", f"cd {work} && {VENV}/bin/slinkyml sbatch submit {path}")
    ids = [w for w in out.split() if w.isdigit()]
    assert ids, out
    job_id = int(ids[0])
    ckpt = work / "ckpt"
    _wait("the first training step", lambda: _metrics(ckpt), timeout=300, every=0.2)
    now = time.monotonic()
    print(f"submit -> first training step: {now - submitted:.1f} s (apply -> it, the tests before included: "
          f"{now - c.applied_at:.1f} s)")
    _wait("step 10", lambda: len(_metrics(ckpt)) >= 10, timeout=240)
    batch_host = c.job(job_id)["BatchHost"]
    victim = next(p.metadata.name for p in workers if p.metadata.name != batch_host)
    old_ip = c.pod(victim).status.pod_ip
    c.pods.core.delete_namespaced_pod(victim, c.cluster.namespace)
    new = _wait("the operator to recreate the pod", lambda: _running(c, victim, old_ip), timeout=180)
    print(f"{victim}: {old_ip} -> {new.status.pod_ip}")

    def settled() -> dict[str, str] | None:
        job = c.job(job_id)
        if job.get("JobState") == "PENDING" and job.get("Reason") == "BeginTime":
            # requeued: slurmctld holds it for the credential lifetime (~2 min); release it as an operator
            # would (test_train_cluster does the same), the resume under test is unchanged
            c.login("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        return job if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") else None

    job = _wait("the job to end", settled, timeout=400, every=2)
    assert job["JobState"] == "COMPLETED" and int(job["Restarts"]) >= 1, job
    node = parse_scontrol_record(c.login("scontrol", "-o", "show", "node", victim).splitlines()[0])
    assert node["NodeAddr"] == new.status.pod_ip  # the dynamic node followed the pod to its new address
    rows = _metrics(ckpt)
    before = [r["step"] for r in rows if r["restart"] == 0]
    resumed = [r for r in rows if r["restart"] >= 1]
    start = resumed[0]["step"] - 1  # the checkpoint the resumed run started from
    assert max(before) - start <= 4, (start, max(before))  # at most one checkpoint interval lost
    assert rows[-1]["step"] == 30 and (ckpt / FINAL_FILE).exists()


#: a notebook's cell, run with the image's Python in the login pod: two tasks, one per slurmd pod, all-reduce
_NOTEBOOK_CELL = """import json, slinkyml
from slinkyml.demo.allreduce import allreduce_task
job = slinkyml.submit(allreduce_task, 1.0, nodes={nodes}, tasks_per_node=1, mem="1G", time=5, folder={folder!r})
print("RESULTS " + json.dumps(job.results(timeout=300)))
"""


def test_a_notebook_function_from_the_login_pod_runs_in_both_pods(operator_cluster: OperatorCluster,
                                                                  workers: list) -> None:
    """`slinkyml.submit(fn)` from Python in the login pod, with the training image's own Python, as a notebook
    there has it: its two tasks run one in each slurmd pod and all-reduce over the pods' network."""
    c = operator_cluster
    cell = _NOTEBOOK_CELL.format(nodes=REPLICAS, folder=str(c.shared / "notebook"))
    out = c.login("bash", "-c", f"cd {c.shared} && {VENV}/bin/python -c {shlex.quote(cell)}", timeout=400)
    line = next((x for x in out.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, out
    results = json.loads(line.removeprefix("RESULTS "))
    assert [r["rank"] for r in results] == list(range(REPLICAS))
    assert all(r["world_size"] == REPLICAS and r["sum"] == expected_sum(REPLICAS) for r in results), results
    assert sorted(r["host"] for r in results) == sorted(p.metadata.name for p in c.pods.owned("NodeSet")), results


def test_scaling_the_nodeset_shows_in_sinfo(operator_cluster: OperatorCluster, workers: list) -> None:
    """The NodeSet scaled up: the operator makes a third slurmd pod and it registers idle; scaled down: the
    operator drains that node, deletes its pod, and the node takes no job."""
    c = operator_cluster
    ns = c.cluster.namespace
    third = f"{c.nodeset}-{REPLICAS}"
    c.pods.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", c.nodeset,
                                                  {"spec": {"replicas": REPLICAS + 1}})
    _wait("the third node idle in sinfo", lambda: c.nodes().get(third) == "idle")
    c.pods.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", c.nodeset,
                                                  {"spec": {"replicas": REPLICAS}})
    _wait("the third pod to go", lambda: third not in {p.metadata.name for p in c.pods.owned("NodeSet")})
    state = _wait("Slurm to see the node gone", lambda: (st := c.nodes().get(third, "gone")) != "idle" and st)
    print(f"{third} after scale-in: {state}")
    # the operator drains a node before it deletes its pod (seen: `drain`); gone if it prunes the record
    assert state == "gone" or state.startswith("drain"), state
    assert all(c.nodes().get(f"{c.nodeset}-{i}") == "idle" for i in range(REPLICAS))


def test_a_deleted_slurmctld_pod_loses_no_job(operator_cluster: OperatorCluster, workers: list) -> None:
    """slurmctld's pod deleted while one job runs and another waits: the operator's Controller StatefulSet
    makes it again at a new address, it reads its state back from its PersistentVolume, the slurmd and login
    pods find it by its Service, and both jobs complete, the running one never requeued."""
    c = operator_cluster

    def sbatch(*args: str) -> int:
        out = c.login("sbatch", "--parsable", f"-N{REPLICAS}", "-t", "5", f"--chdir={c.shared}", "-o", "/dev/null",
                      *args)
        return int(out.strip().split(";")[0])

    running = sbatch("--exclusive", "--wrap", "sleep 45")
    _wait("the first job to run", lambda: c.job(running).get("JobState") == "RUNNING", timeout=60)
    waiting = sbatch("--wrap", "true")  # the first has both nodes to itself: it waits
    assert c.job(waiting).get("JobState") == "PENDING"
    ctld = c.pods.ready("Controller")
    old_ip = ctld.status.pod_ip
    c.pods.core.delete_namespaced_pod(ctld.metadata.name, c.cluster.namespace)
    new = _wait("the StatefulSet to recreate slurmctld", lambda: _running(c, ctld.metadata.name, old_ip), timeout=180)
    print(f"{ctld.metadata.name}: {old_ip} -> {new.status.pod_ip}")

    def ended(job_id: int) -> str | None:
        state = c.job(job_id).get("JobState")
        return state if state and state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING") else None

    assert _wait("the running job to end", lambda: ended(running), timeout=240, every=2) == "COMPLETED"
    assert _wait("the waiting job to end", lambda: ended(waiting), timeout=120, every=2) == "COMPLETED"
    assert c.job(running).get("Restarts", "0") == "0"
