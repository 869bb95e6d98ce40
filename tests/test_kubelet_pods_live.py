"""A Slurm cluster in pods on the kubelet node, made from ``manifests/cpu-small`` without the operator
(``slinkyml/dev/kubernetes/kubeslurm.py``, until the operator's own pods run here: docs/kubernetes.md):
MariaDB + slurmdbd pods and accounting from the login pod, the NodeSet's slurmd pods managed by a real
StatefulSet, the tiny GPT trained across two slurmd pods by ``slinkyml sbatch submit`` run in the login
pod, Kubernetes-shaped faults (a slurmd pod deleted mid-training, scaling, the slurmctld pod deleted).

On a control plane of its own (port base 18200, bridge ``slkkp0``, 10.250.0.0/24), without the operator.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.stream import stream
from private_cluster import kubelet_node, port_shift, require_kubelet_node
from tiers import needs
from waiting import wait_until

import slinkyml
from slinkyml.cluster import load_spec
from slinkyml.dev.kubernetes import kubeslurm
from slinkyml.dev.kubernetes.kube import KubeControlPlane, Ports
from slinkyml.dev.kubernetes.kubenode import NodeSettings
from slinkyml.slurm.records import parse_scontrol_record
from slinkyml.train import FINAL_FILE, METRICS_FILE

pytestmark = pytest.mark.slow

#: clear of CI's plane (17400-17483), of 17600/17700 and of test_kubelet_live's 18000 (and 18100)
PORT_BASE = 18200
REPO = Path(__file__).resolve().parents[1]
SOURCE = Path(slinkyml.__file__).resolve().parents[1]  # the tree these tests import (a worktree, or REPO)


@dataclass
class PodsCluster:
    plane: KubeControlPlane
    spec: kubeslurm.PodClusterSpec
    core: client.CoreV1Api
    apps: client.AppsV1Api
    applied_at: float  # time.monotonic() when the objects were applied

    def exec_streams(self, pod: str, command: list[str], timeout: float = 300) -> tuple[str, str]:
        """What `kubectl exec` does (API server -> kubelet -> containerd's streaming server): stdout and
        stderr apart (with preloaded content the client turns an output that is JSON into a Python repr)."""
        ws = stream(self.core.connect_get_namespaced_pod_exec, pod, self.spec.namespace, command=command,
                    stderr=True, stdout=True, stdin=False, tty=False, _preload_content=False)
        try:
            ws.run_forever(timeout=timeout)
            return ws.read_stdout() or "", ws.read_stderr() or ""
        finally:
            ws.close()

    def exec(self, pod: str, command: list[str]) -> str:
        out, err = self.exec_streams(pod, command)
        return out + err

    def login(self, *command: str) -> str:
        return self.exec(self.spec.login, list(command))

    def pod(self, name: str):
        return self.core.read_namespaced_pod(name, self.spec.namespace)

    def nodes(self) -> dict[str, str]:
        """sinfo in the login pod: node -> state."""
        out = self.login("sinfo", "-h", "-N", "-o", "%N %t")
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def job(self, job_id: int) -> dict[str, str]:
        out = self.login("scontrol", "-o", "show", "job", str(job_id)).strip()
        return parse_scontrol_record(out.splitlines()[0]) if out.startswith("JobId=") else {}


#: an ApiException is a pod being replaced: ask again
_wait = functools.partial(wait_until, timeout=180.0, retry_on=(client.ApiException,))


def _running(c: PodsCluster, name: str):
    pod = c.pod(name)
    ready = pod.status.phase == "Running" and all(s.ready for s in pod.status.container_statuses or [])
    return pod if ready and pod.metadata.deletion_timestamp is None else None


@pytest.fixture(scope="module")
@needs("kubelet")
def pods() -> Iterator[PodsCluster]:
    require_kubelet_node()
    shift = port_shift()
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kubepods-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(PORT_BASE + shift),
                             node=NodeSettings(*kubelet_node("slinkyml-pods-node", "slkkp", 250)))
    try:
        started = time.monotonic()
        plane.up(kubelet=True, operator=False)
        plane.node().import_slurm_images("26.05")
        print(f"plane, node and images ready in {time.monotonic() - started:.1f} s")
        # the training stack, mounted read-only: the venv, the Python it was made from, this source tree
        # and the one the venv's editable install names (the same in CI)
        stack = tuple(sorted({sys.prefix, sys.base_prefix, str(SOURCE), str(REPO)}))
        spec = kubeslurm.PodClusterSpec.from_cluster(
            load_spec(REPO / "manifests" / "cpu-small" / "cluster.yaml"), shared=state / "shared",
            max_cpus=1, max_memory_mib=2048, host_paths=stack, env=(("PYTHONPATH", str(SOURCE)),))
        api = plane.api()
        applied = time.monotonic()
        kubeslurm.apply(spec, kubeslurm.Keys(), api)
        c = PodsCluster(plane, spec, client.CoreV1Api(api), client.AppsV1Api(api), applied)
        for name in (spec.database, spec.accounting, spec.controller, spec.login):
            _wait(f"pod {name} to run", lambda n=name: _running(c, n))
        workers = [f"{spec.nodeset}-{i}" for i in range(spec.replicas)]
        _wait("the slurmd pods to register", lambda: all(c.nodes().get(w) == "idle" for w in workers))
        print(f"apply -> every slurmd registered: {time.monotonic() - applied:.1f} s")
        yield c
    finally:
        plane.reset()
        shutil.rmtree(state, ignore_errors=True)


def test_nodeset_pods_come_from_the_cluster_spec(pods: PodsCluster) -> None:
    """The StatefulSet is the NodeSet `cluster render` makes of manifests/cpu-small: its name, replicas and
    features; kube-controller-manager made its pods, and slurmd registered each as a dynamic node."""
    s = pods.spec
    assert (s.cluster, s.nodeset, s.replicas) == ("cpu-small", "cpu-small-cpu", 2)
    sts = pods.apps.read_namespaced_stateful_set(s.nodeset, s.namespace)
    assert sts.status.ready_replicas == 2
    owned = [p for p in pods.core.list_namespaced_pod(s.namespace).items
             if any(o.kind == "StatefulSet" and o.name == s.nodeset for o in p.metadata.owner_references or [])]
    assert sorted(p.metadata.name for p in owned) == ["cpu-small-cpu-0", "cpu-small-cpu-1"]
    node = parse_scontrol_record(pods.login("scontrol", "-o", "show", "node", "cpu-small-cpu-0").splitlines()[0])
    assert set(node["AvailableFeatures"].split(",")) == {"cpu-small-cpu", "cpu", "m7i_8xlarge"}
    assert node["NodeAddr"] == pods.pod("cpu-small-cpu-0").status.pod_ip


def test_accounting_from_the_login_pod(pods: PodsCluster) -> None:
    """slurmctld registered the cluster with the slurmdbd pod (MariaDB in its own pod), and sacctmgr/sacct
    in the login pod read it."""
    s = pods.spec
    clusters = _wait("the cluster in slurmdbd", lambda: pods.login(
        "sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster,ControlHost").split())
    assert [line.split("|")[0] for line in clusters] == [s.cluster], clusters
    out = pods.login("srun", "-N2", "-t", "2", "--job-name=acct-check", "hostname")
    assert sorted(out.split()) == ["cpu-small-cpu-0", "cpu-small-cpu-1"], out
    rows = _wait("the job in sacct", lambda: [r for r in pods.login(
        "sacct", "-n", "-P", "-X", "--name=acct-check", "-o", "JobID,State,NNodes,Cluster").split() if r])
    assert rows[-1].split("|")[1:] == ["COMPLETED", "2", s.cluster], rows


def _train_spec(pods: PodsCluster) -> Path:
    """sbatch/torchrun-ddp.yaml made to fit this node: 1 CPU and no GPU per pod, the tiny model, checkpoints
    every 4 steps on the node's shared folder (a hostPath every pod mounts at the same path)."""
    data = yaml.safe_load((REPO / "sbatch" / "torchrun-ddp.yaml").read_text())
    for key in ("gpus_per_node", "cpus_per_task", "exclusive", "network", "instance_type"):
        data.pop(key, None)
    work = pods.spec.shared / "ddp"
    work.mkdir(exist_ok=True)
    data.update({"time_limit": "00:10:00", "mem_per_node": "1G", "python": f"{sys.prefix}/bin/python",
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


def test_train_from_the_login_pod_and_a_deleted_slurmd_pod_resumes(pods: PodsCluster) -> None:
    """`slinkyml sbatch submit` in the login pod trains the tiny GPT on both slurmd pods; deleting the other
    pod than the batch node's mid-run: the StatefulSet makes it again with a new address, Slurm fails the run on that node and
    requeues it, and the second run resumes from the newest checkpoint (at most one interval lost)."""
    s = pods.spec
    path = _train_spec(pods)
    work = path.parent
    submitted = time.monotonic()
    out = pods.login("bash", "-c", f"cd {work} && {sys.prefix}/bin/slinkyml sbatch submit {path}")
    job_id = int(next(w for w in out.split() if w.isdigit()))
    ckpt = work / "ckpt"
    _wait("the first training step", lambda: _metrics(ckpt), timeout=300, every=0.2)
    now = time.monotonic()
    print(f"submit -> first training step: {now - submitted:.1f} s (apply -> it, the tests before included: "
          f"{now - pods.applied_at:.1f} s)")
    _wait("step 10", lambda: len(_metrics(ckpt)) >= 10, timeout=240)
    # the pod that is not the batch node, as test_train_cluster.py's node failure (deleting the batch node's
    # pod works too: slurmctld requeues the job itself when the new slurmd does not know it, "Batch JobId=N
    # missing from batch node", but waits ~100 s for the old node's job to end)
    batch_host = pods.job(job_id)["BatchHost"]
    victim = next(f"{s.nodeset}-{i}" for i in range(2) if f"{s.nodeset}-{i}" != batch_host)
    old_ip = pods.pod(victim).status.pod_ip
    pods.core.delete_namespaced_pod(victim, s.namespace)
    new = _wait("the StatefulSet to recreate the pod", lambda: (p := _running(pods, victim)) and p.status.pod_ip
                != old_ip and p, timeout=120)
    print(f"{victim}: {old_ip} -> {new.status.pod_ip}")

    def settled() -> dict[str, str] | None:
        job = pods.job(job_id)
        if job.get("JobState") == "PENDING" and job.get("Reason") == "BeginTime":
            # requeued: slurmctld holds it for the credential lifetime (~2 min); release it as an operator
            # would (test_train_cluster does the same), the resume under test is unchanged
            pods.login("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        return job if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") else None

    job = _wait("the job to end", settled, timeout=400, every=2)
    assert job["JobState"] == "COMPLETED" and int(job["Restarts"]) >= 1, job
    node = parse_scontrol_record(pods.login("scontrol", "-o", "show", "node", victim).splitlines()[0])
    assert node["NodeAddr"] == new.status.pod_ip  # the dynamic node followed the pod to its new address
    rows = _metrics(ckpt)
    before = [r["step"] for r in rows if r["restart"] == 0]
    resumed = [r for r in rows if r["restart"] >= 1]
    start = resumed[0]["step"] - 1  # the checkpoint the resumed run started from
    assert max(before) - start <= 4, (start, max(before))  # at most one checkpoint interval lost
    assert rows[-1]["step"] == 30 and (ckpt / FINAL_FILE).exists()

    # the reports, from the cluster's own slurmdbd, in the login pod
    reports = {}
    for command in ("usage", "efficiency", "fairshare"):
        args = [] if command == "fairshare" else ["--since", "1h"]
        out, _ = pods.exec_streams(s.login, [f"{sys.prefix}/bin/slinkyml", command, *args, "--json"])
        reports[command] = json.loads(out)
        print(f"slinkyml {command}: {json.dumps(reports[command])[:600]}")
    trained = [r for r in reports["efficiency"] if r["job_id"] == job_id]
    # two runs of one job (the first ended by the node's failure), both with CPU time gathered in the pods
    assert [(r["state"], r["segments"]) for r in trained] == [("COMPLETED", 2)], reports["efficiency"]
    assert trained[0]["cpu_efficiency"] and trained[0]["mem_used_bytes"], trained
    assert [(r["user"], r["account"]) for r in reports["usage"]] == [("root", "root")], reports["usage"]
    assert reports["usage"][0]["jobs"] >= 2 and reports["usage"][0]["cpu_hours"] > 0, reports["usage"]
    assert "root/root" in {r["key"] for r in reports["fairshare"]}, reports["fairshare"]


def test_scaling_the_statefulset_shows_in_sinfo(pods: PodsCluster) -> None:
    """Scale up: a third slurmd pod registers; scale down: its pod is gone and Slurm no longer has it
    answering."""
    s = pods.spec
    pods.apps.patch_namespaced_stateful_set_scale(s.nodeset, s.namespace, {"spec": {"replicas": 3}})
    third = f"{s.nodeset}-2"
    _wait("the third node idle in sinfo", lambda: pods.nodes().get(third) == "idle")
    pods.apps.patch_namespaced_stateful_set_scale(s.nodeset, s.namespace, {"spec": {"replicas": 2}})
    _wait("the third pod to go", lambda: third not in {p.metadata.name for p in pods.core.list_namespaced_pod(
        s.namespace).items})
    state = _wait("Slurm to see the node gone", lambda: (st := pods.nodes().get(third, "gone")) != "idle" and st,
                  timeout=s.slurmd_timeout_s * 4)
    print(f"{third} after scale-in: {state}")
    assert state == "gone" or state.endswith("*") or state.startswith("down"), state
    assert all(pods.nodes().get(f"{s.nodeset}-{i}") == "idle" for i in (0, 1))


def test_a_deleted_slurmctld_pod_loses_no_job(pods: PodsCluster) -> None:
    """slurmctld's pod deleted while one job runs and another waits: its StatefulSet makes it again at a new
    address, it reads its state back from the node's hostPath, the nodes and the login pod find it by
    name, and both jobs complete, the running one never requeued."""
    s = pods.spec

    def sbatch(*args: str) -> int:
        out = pods.login("sbatch", "--parsable", "-N2", "-t", "5", f"--chdir={s.shared}", "-o", "/dev/null", *args)
        return int(out.strip().split(";")[0])

    running = sbatch("--wrap", "sleep 45")
    _wait("the first job to run", lambda: pods.job(running).get("JobState") == "RUNNING", timeout=60)
    waiting = sbatch("--wrap", "true")  # both nodes' one CPU are taken: it waits
    assert pods.job(waiting).get("JobState") == "PENDING"
    old_ip = pods.pod(s.controller).status.pod_ip
    pods.core.delete_namespaced_pod(s.controller, s.namespace)
    new = _wait("the StatefulSet to recreate slurmctld", lambda: (p := _running(pods, s.controller))
                and p.status.pod_ip != old_ip and p, timeout=120)
    print(f"{s.controller}: {old_ip} -> {new.status.pod_ip}")

    def ended(job_id: int) -> str | None:
        rows = pods.login("sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "State").split()
        return rows[0] if rows and rows[0] not in ("PENDING", "RUNNING", "REQUEUED") else None

    assert _wait("the running job to end", lambda: ended(running), timeout=240, every=2) == "COMPLETED"
    assert _wait("the waiting job to end", lambda: ended(waiting), timeout=120, every=2) == "COMPLETED"
    assert pods.job(running).get("Restarts", "0") == "0"
