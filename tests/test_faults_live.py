"""Faults as production delivers them, against the real daemons of the local cluster: a 2-node
torchrun job of ``slinkyml.train`` (tiny model, checkpoint every few steps) is hit by each fault and
must end COMPLETED at its full step count, with at most one checkpoint interval trained twice, its
restarts counted, its cause recorded, and no ``slinkyml.train`` process left anywhere.

Node loss is staged as a replaced slurmd pod: every process in the node's network namespace
(slurmd, slurmstepd, torchrun, the ranks) killed -9, the node brought back by ``dev up``. Requeued
jobs are released from slurmctld's BeginTime hold after ``REQUEUE_SETTLE_S`` (see
test_train_cluster.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cloudpickle
import pytest
from test_train_cluster import _logs, _metrics, _submit, _train_spec, _wait_done, _wait_steps, needs_torch

from slinkyml.dev import LocalCluster
from slinkyml.dev.cluster import ClusterUnhealthy
from slinkyml.dev.config import PREEMPTIBLE_PARTITION, URGENT_PARTITION
from slinkyml.dispatch import Executor, JobFailed
from slinkyml.jobs.follow import job_state, wait
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm import protocol
from slinkyml.slurm.errors import AccountingUnavailable, JobNotFound
from slinkyml.train import FINAL_FILE

pytestmark = [pytest.mark.slurm, needs_torch]

EVERY = 4  # checkpoint interval of every run here
STEPS = 24
PREEMPT_GRACE_S = 30  # this cluster's GraceTime for jobs of its preemptible partition


@pytest.fixture(scope="module")
def local_cluster():
    """A cluster of this module's own: these tests kill slurmctld and slurmd with -9, and Slurm 22.05
    restarting from older state can reuse job ids and drain nodes ("Duplicate jobid"); the session's
    cluster, which every other test uses, must never see that. Removed afterwards."""
    state = Path(tempfile.mkdtemp(prefix="slinkyml-faults-cluster-", dir="/var/tmp"))
    cluster = LocalCluster(state, nodes=4, bridge="slkflt0", node_prefix="flt", subnet="10.205.0.0/24",
                           slurmctld_port=7947, slurmd_port=7948, slurmdbd_port=7949, slurmrestd_port=7950,
                           mariadb_port=14947, preempt_grace_s=PREEMPT_GRACE_S)
    saved = os.environ.get("SLURM_CONF")
    try:
        cluster.up()
        os.environ["SLURM_CONF"] = str(cluster.spec.slurm_conf)  # the CLI and Slurm() of these tests
        yield cluster
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        cluster.reset()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm(local_cluster):
    return local_cluster.slurm


@pytest.fixture(scope="module")
def workdir(request):
    """Logs, checkpoints and metrics of every run; kept when a test failed (for its logs)."""
    path = Path(tempfile.mkdtemp(prefix="slinkyml-faults-", dir="/tmp"))
    path.chmod(0o777)
    failed = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def own_jobs(slurm):
    ids: list[int] = []
    yield ids
    for job_id in ids:
        slurm.run("scancel", [str(job_id)], check=False, retries=0)


@pytest.fixture
def nodes(local_cluster):
    """Two nodes for the job (batch node first); the cluster is whole again afterwards."""
    yield local_cluster.spec.node_names[2:4]
    local_cluster.up()


def trainer_processes(spec: JobSpec) -> list[int]:
    """Every live ``slinkyml.train`` process of this spec's run, on any node (root reads /proc)."""
    found = []
    needle = f"{protocol.ENV_CHECKPOINT_DIR}={spec.checkpoint_dir}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"slinkyml.train" not in (entry / "cmdline").read_bytes():
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0") and \
                    (entry / "stat").read_text().split(")")[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_node(local_cluster, node: str) -> list[int]:
    """What losing a slurmd pod does: every process in the node's namespace killed -9 at once."""
    ns = local_cluster.spec.netns(node)
    pids = [int(p) for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                           check=True).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def run_with_fault(slurm, workdir, own_jobs, name: str, fault: Callable[[int, JobSpec], None], *,
                   at_step: int = 9, restarts: int | tuple[int, ...] = 1, steps: int = STEPS, extra_args: tuple[str, ...] = (),
                   timeout: float = 400, **spec_extra) -> tuple[JobSpec, int]:
    spec = _train_spec(workdir, name, ["--steps", str(steps), "--checkpoint-every", str(EVERY),
                                       "--step-sleep", "0.3", *extra_args], **spec_extra)
    job_id = _submit(slurm, spec, workdir, own_jobs)
    _wait_steps(slurm, job_id, spec, at_step, timeout=240)
    fault(job_id, spec)
    state = _wait_done(slurm, job_id, timeout=timeout)
    assert state.state == "COMPLETED", f"{state}\n{_logs(spec)[-4000:]}"
    allowed = restarts if isinstance(restarts, tuple) else (restarts,)
    assert state.restarts in allowed, f"{state}\n{_logs(spec)[-4000:]}"
    check_run(spec, job_id, steps)
    return spec, job_id


def check_run(spec: JobSpec, job_id: int, steps: int) -> None:
    """Full step count, each resume from a checkpoint at most one interval old, no orphans."""
    rows = _metrics(spec)
    final = json.loads((Path(spec.checkpoint_dir) / FINAL_FILE).read_text())
    assert final["steps"] == steps
    by_run: dict[int, list[int]] = {}
    for row in rows:
        by_run.setdefault(row["restart"], []).append(row["step"])
    runs = [by_run[r] for r in sorted(by_run)]
    assert runs[0][0] == 1 and runs[-1][-1] == steps
    for before, after in zip(runs, runs[1:], strict=False):
        assert after == list(range(after[0], after[0] + len(after)))  # no gap inside a run
        retrained = before[-1] - (after[0] - 1)
        assert 0 <= retrained <= EVERY, f"re-trained {retrained} steps ({before[-1]} → resumed at {after[0]})"
    deadline = time.monotonic() + 30
    while trainer_processes(spec) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not trainer_processes(spec), "slinkyml.train processes outlived the job"


def events(spec: JobSpec, job_id: int) -> list[str]:
    return protocol.read_events(spec.log_dir, job_id)


# -- preemption paths ----------------------------------------------------------------------------------
@pytest.mark.timeout(600)
def test_usr2_to_the_batch_shell(slurm, workdir, own_jobs, cli):
    spec, job = run_with_fault(slurm, workdir, own_jobs, "usr2-batch", lambda j, s: slurm.run(
        "scancel", ["--signal=USR2", "--batch", str(j)]))
    assert events(spec, job) == ["r0 requeue preemption: SIGUSR2"]
    code, out, _ = cli("jobs", "status", str(job))  # what the user sees: restarts and their cause
    assert code == 0 and "COMPLETED" in out and "r0 requeue preemption: SIGUSR2" in out, out


@pytest.mark.timeout(600)
def test_usr2_to_all_steps(slurm, workdir, own_jobs):
    """scancel --signal without --batch: only the steps (torchrun's agents, the ranks) get it."""
    spec, job = run_with_fault(slurm, workdir, own_jobs, "usr2-steps", lambda j, s: slurm.run(
        "scancel", ["--signal=USR2", str(j)]))
    assert events(spec, job) == ["r0 requeue preemption: SIGUSR2"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_usr2_to_the_whole_job(slurm, workdir, own_jobs):
    """--full: the batch shell and every step at once (the agents get it twice)."""
    spec, job = run_with_fault(slurm, workdir, own_jobs, "usr2-full", lambda j, s: slurm.run(
        "scancel", ["--signal=USR2", "--full", str(j)]))
    assert events(spec, job) == ["r0 requeue preemption: SIGUSR2"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_to_the_steps(slurm, workdir, own_jobs):
    """What GraceTime preemption delivers first (SIGCONT+SIGTERM to the steps): the ranks
    checkpoint, and the job, still RUNNING, is requeued by its batch script."""
    def term(job_id: int, _spec: JobSpec) -> None:
        slurm.run("scancel", ["--signal=CONT", str(job_id)])
        slurm.run("scancel", ["--signal=TERM", str(job_id)])

    spec, job = run_with_fault(slurm, workdir, own_jobs, "term-steps", term)
    assert events(spec, job) == ["r0 requeue preemption: SIGTERM"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_scontrol_requeue(slurm, workdir, own_jobs):
    """slurmctld requeues and SIGTERMs every step: the ranks checkpoint within KillWait."""
    spec, job = run_with_fault(slurm, workdir, own_jobs, "requeue", lambda j, s: slurm.run(
        "scontrol", ["requeue", str(j)]))
    # Slurm requeued it; the batch shell may be killed (KillWait) before it writes its event line
    assert events(spec, job) in ([], ["r0 slurm preemption: SIGTERM"]), events(spec, job)
    rows = _metrics(spec)
    stopped = max(r["step"] for r in rows if r["restart"] == 0)
    assert min(r["step"] for r in rows if r["restart"] == 1) == stopped + 1  # the SIGTERM checkpoint


@pytest.mark.slow
@pytest.mark.timeout(700)
def test_slurm_preemption_with_grace_time(slurm, workdir, own_jobs, nodes):
    """Slurm's own preemption (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE): a job of
    the urgent partition needs the training job's nodes, so slurmctld sends the training job's steps
    SIGCONT+SIGTERM and gives it GraceTime. Nothing here signals the job: the ranks checkpoint on
    Slurm's SIGTERM, the job is requeued (by its batch script within the grace, or by slurmctld
    after it), waits for the urgent job, and resumes where it stopped."""
    urgent: list[int] = []

    def submit_urgent(_job_id: int, _spec: JobSpec) -> None:
        out = slurm.run("sbatch", ["--parsable", f"--partition={URGENT_PARTITION}", "--nodes=2",
                                   f"--nodelist={','.join(nodes)}", "--exclusive", "--time=2",
                                   "--output=/dev/null", "--wrap=sleep 10"]).stdout
        urgent.append(int(out.strip().split(";")[0]))
        own_jobs.append(urgent[0])

    spec, job = run_with_fault(slurm, workdir, own_jobs, "slurm-preempt", submit_urgent,
                               partition=PREEMPTIBLE_PARTITION, nodelist=",".join(nodes))
    assert events(spec, job) in (["r0 requeue preemption: SIGTERM"], ["r0 slurm preemption: SIGTERM"]), \
        events(spec, job)
    rows = _metrics(spec)
    stopped = max(r["step"] for r in rows if r["restart"] == 0)
    assert min(r["step"] for r in rows if r["restart"] == 1) == stopped + 1  # the SIGTERM checkpoint
    assert job_state(slurm, urgent[0]).state == "COMPLETED"  # the preemptor got the nodes and ran


# -- failures --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(700)
def test_worker_node_loss(slurm, local_cluster, workdir, own_jobs, nodes):
    def lose_worker(_job_id: int, _spec: JobSpec) -> None:
        assert kill_node(local_cluster, nodes[1])
        time.sleep(25)
        local_cluster.up()  # a new slurmd, as a replaced pod brings

    # Slurm 22.05 may deliver the signal it queued for the lost node's step once the node is back,
    # to the re-launched step of the same id: one more (recorded) restart, nothing lost
    spec, job = run_with_fault(slurm, workdir, own_jobs, "worker-loss", lose_worker, nodelist=",".join(nodes),
                               restarts=(1, 2))
    lines = events(spec, job)
    assert lines[0].startswith("r0 requeue node_failure: ") and len(lines) == job_state(slurm, job).restarts, lines


@pytest.mark.slow
@pytest.mark.timeout(700)
def test_batch_node_loss(slurm, local_cluster, workdir, own_jobs, nodes):
    def lose_batch_node(_job_id: int, _spec: JobSpec) -> None:
        assert kill_node(local_cluster, nodes[0])
        time.sleep(25)
        local_cluster.up()

    run_with_fault(slurm, workdir, own_jobs, "batch-loss", lose_batch_node, nodelist=",".join(nodes))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_during_checkpoint_write(slurm, workdir, own_jobs):
    """Rank 0 killed -9 while its checkpoint is only a .tmp directory: the run resumes from the
    previous complete checkpoint, never from the half-written one."""
    def kill_mid_write(_job_id: int, spec: JobSpec) -> None:
        ckpt = Path(spec.checkpoint_dir)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(ckpt.glob(".tmp-ckpt-*")):
                for pid in trainer_processes(spec):
                    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    if b"RANK=0" in env and b"LOCAL_RANK=0" in env:
                        os.kill(pid, signal.SIGKILL)
                        return
            time.sleep(0.001)
        pytest.fail("no checkpoint write seen")

    # a model whose optimizer state takes a while to write (and the kill a chance to land in it)
    spec, job = run_with_fault(slurm, workdir, own_jobs, "kill-ckpt", kill_mid_write, at_step=5,
                               extra_args=("--hidden", "384", "--layers", "4"))
    assert events(spec, job)[0].startswith("r0 requeue node_failure: "), events(spec, job)
    assert "checkpoint ckpt-" not in _logs(spec) or "unreadable" not in _logs(spec)


@pytest.mark.timeout(400)
def test_user_error_fails_promptly_with_its_reason(slurm, workdir, own_jobs):
    """A rank that raises is a bug, not bad luck: FAILED at once, not requeued, the reason in one
    line (rank, host, exception)."""
    spec = _train_spec(workdir, "user-error", ["--steps", "4", "--model", "no-such-model"])
    job_id = _submit(slurm, spec, workdir, own_jobs)
    state = wait(slurm, job_id, timeout=240, poll=1.0)
    assert state.state == "FAILED" and state.restarts == 0, _logs(spec)[-3000:]
    (line,) = events(spec, job_id)
    assert re.match(r"r0 failed user_error: user rank [01] on \S+: SystemExit: unknown --model 'no-such-model'",
                    line), line
    assert not trainer_processes(spec)


# -- the controller -----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_controller_crash_mid_run(slurm, local_cluster, workdir, own_jobs):
    def crash(_job_id: int, _spec: JobSpec) -> None:
        os.kill(local_cluster.daemon("slurmctld").pid, signal.SIGKILL)
        time.sleep(5)
        local_cluster.up()

    spec, job = run_with_fault(slurm, workdir, own_jobs, "ctld-mid", crash, restarts=0)
    assert events(spec, job) == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_time_limit_warning(slurm, workdir, own_jobs):
    """--signal=B:USR2@60 on a 3-minute limit: slurmctld checks limits every 30 s and sends the
    warning at the first check at most 30 s before it is due (send_job_warn_signal: warn_time +
    PERIODIC_TIMEOUT + now >= end_time), so 90-120 s into each run. The run needs more training
    time (80 steps of ≥ 1.5 s) than one run can give, however fast the machine: every run stops on
    the warning at a checkpoint and the next resumes from it, until the run completes."""
    spec, job = run_with_fault(slurm, workdir, own_jobs, "timelimit-train", lambda j, s: None, at_step=2,
                               steps=80, extra_args=("--step-sleep", "1.5"), time_limit="3", timeout=800,
                               restarts=(1, 2, 3, 4, 5),
                               requeue={"signal": "USR2", "grace_seconds": 60, "max_restarts": 5})
    lines = events(spec, job)
    assert lines and all(line.endswith("requeue preemption: SIGUSR2") for line in lines), lines
    assert len(lines) == job_state(slurm, job).restarts, lines


def _return_nodes(slurm, local_cluster) -> None:
    """Test clean-up: this cluster's drained nodes back to service once their jobs are gone."""
    deadline = time.monotonic() + 60
    while slurm.run("squeue", ["-h", "-t", "R,CG"], check=False).stdout.strip() and time.monotonic() < deadline:
        time.sleep(1)
    nodes = ",".join(local_cluster.spec.node_names)
    slurm.run("scontrol", ["update", f"NodeName={nodes}", "State=RESUME"], check=False, retries=0)


@pytest.mark.timeout(120)
def test_dev_up_is_not_healthy_while_a_node_is_drained_by_slurm(slurm, local_cluster):
    node = local_cluster.spec.node_names[0]
    slurm.run("scontrol", ["update", f"NodeName={node}", "State=DRAIN", "Reason=Duplicate jobid"])
    try:
        with pytest.raises(ClusterUnhealthy, match=rf"node {node} drain\w* \(Duplicate jobid"):
            local_cluster.up()
        assert local_cluster.running  # nothing was stopped
    finally:
        slurm.run("scontrol", ["update", f"NodeName={node}", "State=RESUME"])
    local_cluster.up()  # healthy again


@pytest.mark.timeout(180)
def test_mariadb_down_is_named(slurm, local_cluster):
    """slurmdbd up, its MariaDB stopped: the error names the database, not slurmdbd."""
    local_cluster.daemon("mariadb").stop()
    try:
        with pytest.raises(AccountingUnavailable, match="slurmdbd cannot reach its database.*MariaDB"):
            slurm.run("sacct", ["-X", "-n", "-S", "now-1hour"], retries=0, timeout=120)
    finally:
        local_cluster.up()


# -- last: these two can leave this module's nodes drained ("Duplicate jobid"), so nothing runs after them

def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@pytest.mark.xfail(strict=False, reason="issue 12: slurmctld killed -9 a second after submission can restart from older state on 22.05 and drain nodes (Duplicate jobid); racy by nature, reported, not yet dependable")
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_controller_crash_right_after_a_map_array(slurm, local_cluster, shared_tmp):
    """The issue's case: slurmctld killed -9 a second after a map_array. Every task either finishes
    or the wait fails naming the tasks Slurm holds (and the drained nodes) within the bound: never a
    bare TimeoutError after the caller's whole timeout; and `dev up` does not call such a cluster
    healthy."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    arr = Executor(shared_tmp, slurm=slurm, time=5).map_array(nap, [3.0] * 16, chunk_size=1)
    try:
        time.sleep(1)
        os.kill(local_cluster.daemon("slurmctld").pid, signal.SIGKILL)
        try:
            local_cluster.up()
        except ClusterUnhealthy as exc:
            print(f"dev up: {exc}")
        started = time.monotonic()
        try:
            assert arr.results(timeout=300) == [3.0] * 16
        except JobFailed as exc:
            assert "held by Slurm" in str(exc) and time.monotonic() - started < 200, exc
            with pytest.raises(ClusterUnhealthy):
                local_cluster.up()
    finally:
        for array_id in arr.array_ids:
            slurm.run("scancel", [array_id], check=False, retries=0)
        _return_nodes(slurm, local_cluster)


@pytest.mark.xfail(strict=False, reason="issue 12: slurmctld killed -9 a second after submission can restart from older state on 22.05 and drain nodes (Duplicate jobid); racy by nature, reported, not yet dependable")
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_controller_crash_right_after_submission(slurm, local_cluster, workdir, own_jobs):
    """slurmctld killed -9 a second after sbatch returned. Either the job survives in the saved
    state and completes whole, or (Slurm 22.05 saves its state a few seconds late: the restarted
    controller purges the job as "defunct" while its first launch may already run) the job is gone:
    then slinkyml says so in one line, no process of it is left, and no node is drained."""
    spec = _train_spec(workdir, "ctld-submit", ["--steps", "12", "--checkpoint-every", str(EVERY)])
    job_id = _submit(slurm, spec, workdir, own_jobs)
    time.sleep(1)
    os.kill(local_cluster.daemon("slurmctld").pid, signal.SIGKILL)
    local_cluster.up()
    try:
        state = _wait_done(slurm, job_id, timeout=400)
    except JobNotFound as exc:
        print(f"outcome: the job was lost by slurmctld ({exc})")
        assert f"job {job_id} is unknown to slurmctld" in str(exc)
        deadline = time.monotonic() + 90
        while trainer_processes(spec) and time.monotonic() < deadline:
            time.sleep(1)
        assert not trainer_processes(spec), "the lost job's processes run on outside Slurm"
    else:
        print("outcome: the job survived the crash")
        assert state.state == "COMPLETED", f"{state}\n{_logs(spec)[-4000:]}"
        check_run(spec, job_id, 12)
    local_cluster.up()  # healthy: raises ClusterUnhealthy on a drained node or a held job
