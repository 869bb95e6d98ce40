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
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cloudpickle
import pytest
from private_cluster import cancel_at_end, kept_workdir, private_cluster
from test_train_cluster import (
    _logs,
    _metrics,
    _release_if_requeued,
    _submit,
    _train_spec,
    _wait_done,
    _wait_steps,
    needs_torch,
)
from tiers import needs

from slinkyml.dev.slurm.cluster import ClusterUnhealthy
from slinkyml.dev.slurm.config import PREEMPTIBLE_PARTITION, URGENT_PARTITION
from slinkyml.dispatch import Executor, JobFailed
from slinkyml.jobs.follow import JobHeldBySlurm, job_state, wait
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm import protocol
from slinkyml.slurm.errors import AccountingUnavailable, JobNotFound
from slinkyml.slurm.runner import Slurm
from slinkyml.slurm.states import State
from slinkyml.train import FINAL_FILE

pytestmark = [pytest.mark.slurm, needs_torch]

EVERY = 4  # checkpoint interval of every run here
STEPS = 24
PREEMPT_GRACE_S = 30  # this cluster's GraceTime for jobs of its preemptible partition


@pytest.fixture(scope="module")
@needs("own_cluster")
def local_cluster():
    """A cluster of this module's own: these tests kill slurmctld and slurmd with -9, and Slurm 22.05
    restarting from older state can reuse job ids and drain nodes ("Duplicate jobid"); the session's
    cluster, which every other test uses, must never see that. With real preemption (GraceTime) and
    proctrack/cgroup."""
    yield from private_cluster("flt", subnet="10.205.0.0/24", port_base=7947, preempt_grace_s=PREEMPT_GRACE_S)


@pytest.fixture(scope="module")
def slurm(local_cluster):
    return local_cluster.slurm


@pytest.fixture(scope="module")
def workdir(request):
    """Logs, checkpoints and metrics of every run."""
    yield from kept_workdir(request, "faults")


@pytest.fixture(scope="module")
def own_jobs(slurm):
    yield from cancel_at_end(slurm)


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


def _known_to_slurmctld(slurm: Slurm, job_id: int) -> bool:
    try:
        return bool(slurm.show("job", str(job_id)))
    except JobNotFound:
        return False


def assert_no_trainers(spec: JobSpec, why: str, within: float) -> None:
    """No ``slinkyml.train`` process of this run is left once ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while trainer_processes(spec) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not trainer_processes(spec), why


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
    assert_no_trainers(spec, "slinkyml.train processes outlived the job", within=30)


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
    # (its detail: the stop signal, or slurmstepd's "*** STEP … CANCELLED AT … DUE TO JOB REQUEUE ***")
    lines = events(spec, job)
    assert lines == [] or (len(lines) == 1 and lines[0].startswith("r0 slurm preemption: ")), lines
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
    lines = events(spec, job)
    assert len(lines) == 1 and lines[0].startswith(("r0 requeue preemption: ", "r0 slurm preemption: ")), lines
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

    # the kill slurmctld sent the lost node for r0 waits in its retry queue until that node answers; the
    # requeued job is released only once that queue is empty (release_requeued), else the kill, delivered
    # late, ended r1's step on the node (then r2's) and the job failed with its restarts spent
    spec, job = run_with_fault(slurm, workdir, own_jobs, "worker-loss", lose_worker, nodelist=",".join(nodes))
    lines = events(spec, job)
    assert len(lines) == 1 and lines[0].startswith("r0 requeue node_failure: "), lines


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


def processes_with_argv(argv: list[str]) -> list[int]:
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == wanted:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.timeout(180)
def test_proctrack_cgroup_ends_a_process_that_left_its_step(slurm, local_cluster):
    """proctrack/cgroup on this cluster: a process that detached from its step (setsid, its parent
    gone, re-parented to PID 1) still ends with the step. proctrack/linuxproc follows parent PIDs
    and would leave it running on outside Slurm."""
    assert "proctrack/cgroup" in slurm.run("scontrol", ["show", "config"]).stdout
    escapee = ["sleep", str(7000 + os.getpid() % 1000)]
    result = slurm.run("srun", ["--nodes=2", f"--nodelist={','.join(local_cluster.spec.node_names[:2])}",
                                "bash", "-c", f"setsid {' '.join(escapee)} </dev/null >/dev/null 2>&1 & echo left"],
                       timeout=120)
    assert result.stdout.split() == ["left", "left"], result.stdout
    deadline = time.monotonic() + 30
    while processes_with_argv(escapee) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_with_argv(escapee), "a process that left its step outlived it"


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
    # the warning comes within its grace of the end: the time limit's, not a preemption's
    assert lines and all(line.endswith("requeue time_limit: SIGUSR2") for line in lines), lines
    assert len(lines) == job_state(slurm, job).restarts, lines


# -- one cause per ending, from Slurm's own facts (slinkyml/data/run_causes.json) ------------------------
def _plain_spec(workdir: Path, name: str, code: str, **extra) -> JobSpec:
    """A one-node job of plain Python under srun (no trainer, no checkpoint, no failure marker)."""
    script = workdir / f"{name}.py"
    script.write_text(code)
    data = {"name": name, "launcher": "srun", "python": sys.executable, "entry": {"script": str(script)},
            "log_dir": str(workdir / name / "logs"), "time_limit": "00:05:00"}
    data.update(extra)
    return JobSpec.from_dict(data)


def _status_line(cli, job_id: int) -> str:
    code, out, _ = cli("jobs", "status", str(job_id))
    return out


@pytest.mark.timeout(300)
def test_time_limit_without_a_checkpoint_is_timeout_not_preemption(slurm, workdir, own_jobs, cli):
    """The issue's `slinkyml run -N 1 -t 1 sleeper.py`: the 60 s warning arrives at the start. It is the
    time limit's, the run never checkpointed, so it is not requeued however many restarts are left;
    the allocation is held to its end, so Slurm itself records TIMEOUT."""
    spec = _plain_spec(workdir, "sleeper", "import time\nwhile True:\n    time.sleep(1)\n", time_limit="1")
    job_id = _submit(slurm, spec, workdir, own_jobs)
    state = wait(slurm, job_id, timeout=240, poll=1.0)
    assert state.state == "TIMEOUT" and state.restarts == 0, (state, _logs(spec)[-3000:])
    assert events(spec, job_id) == ["r0 failed time_limit: SIGUSR2 (no checkpoint since the run started)"]
    line = _status_line(cli, job_id)
    assert "TIMEOUT (time limit)" in line and "no checkpoint since the run started" in line, line
    assert "preempt" not in line, line


@pytest.mark.timeout(300)
def test_out_of_memory_is_its_own_cause_and_is_not_requeued(slurm, workdir, own_jobs, cli):
    """task/cgroup's ConstrainRAMSpace on this cluster: 1 GB touched under --mem 300M. The kernel's
    OOM killer in the job's memory cgroup ends it (srun: "Out Of Memory", slurmstepd: "oom-kill
    event"); sacct says OUT_OF_MEMORY; an OOM never requeues by default (the same run would only run
    out again), however many restarts are left."""
    spec = _plain_spec(workdir, "oom", "blocks = [bytearray(1 << 30)]\nprint('survived', flush=True)\n",
                       mem_per_node="300M")
    job_id = _submit(slurm, spec, workdir, own_jobs)
    state = wait(slurm, job_id, timeout=240, poll=1.0)
    assert state.state in ("OUT_OF_MEMORY", "FAILED") and state.restarts == 0, (state, _logs(spec)[-3000:])
    steps = slurm.run("sacct", ["-n", "-P", "-j", str(job_id), "-o", "JobID,State"]).stdout
    assert f"{job_id}.0|OUT_OF_MEMORY" in steps, steps
    (line,) = events(spec, job_id)
    assert line.startswith("r0 failed oom: srun: error: ") and "Out Of Memory" in line, line
    status = _status_line(cli, job_id)
    assert "(out of memory)" in status and "kernel's OOM killer" in status and "node failure" not in status, status
    assert "survived" not in _logs(spec)


@pytest.mark.timeout(300)
def test_scancel_is_cancelled_and_never_requeued(slurm, workdir, own_jobs, cli):
    spec = _plain_spec(workdir, "cancelled", "import time\nprint('up', flush=True)\ntime.sleep(600)\n",
                       requeue={"on": ["any_failure"], "max_restarts": 3})
    job_id = _submit(slurm, spec, workdir, own_jobs)
    deadline = time.monotonic() + 120
    while "up" not in _logs(spec) and time.monotonic() < deadline:
        time.sleep(0.5)
    slurm.run("scancel", [str(job_id)])
    state = wait(slurm, job_id, timeout=120, poll=1.0)
    assert state.state.startswith("CANCELLED") and state.restarts == 0, state
    # the batch shell decides within KillWait: one line, or none if Slurm killed it first
    lines = events(spec, job_id)
    assert lines == [] or (len(lines) == 1 and lines[0].startswith("r0 failed cancelled: ")
                           and "CANCELLED AT" in lines[0] and "DUE TO" not in lines[0]), lines
    assert "(cancelled)" in _status_line(cli, job_id)


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
    slurm.run("scontrol", ["update", f"NodeName={node}", "State=DRAIN", "Reason=Prolog/Epilog failure"])
    try:
        with pytest.raises(ClusterUnhealthy, match=rf"node {node} drain\w* \(Prolog/Epilog failure"):
            local_cluster.up()
        assert local_cluster.running  # nothing was stopped
    finally:
        slurm.run("scontrol", ["update", f"NodeName={node}", "State=RESUME"])
    local_cluster.up()  # healthy again


@pytest.mark.timeout(180)
def test_dev_up_resumes_a_duplicate_jobid_drain_once_nothing_of_the_clash_is_left(slurm, local_cluster, shared_tmp):
    """A node drained with "Duplicate jobid" goes back to service at the next `up` when no step
    runs there of a job slurmctld does not place on it (here: only a job slurmctld does place)."""
    busy, idle = local_cluster.spec.node_names[:2]
    job = int(slurm.run("sbatch", ["--parsable", f"--nodelist={busy}", "--time=2", "--output=/dev/null",
                                   "--wrap=sleep 60"], cwd=str(shared_tmp)).stdout.strip().split(";")[0])
    try:
        deadline = time.monotonic() + 60
        while job_state(slurm, job).state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
        nodes = f"{busy},{idle}"
        slurm.run("scontrol", ["update", f"NodeName={nodes}", "State=DRAIN", "Reason=Duplicate jobid"])
        assert sorted(local_cluster.up().resume_duplicate_jobid_drains()) == []  # up resumed both already
        drained = slurm.run("sinfo", ["-h", "-N", "-t", "drain,drained,draining", "-o", "%N"]).stdout.split()
        assert busy not in drained and idle not in drained, drained
        assert job_state(slurm, job).state == "RUNNING"  # its job untouched
    finally:
        slurm.run("scancel", [str(job)], check=False, retries=0)


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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_controller_crash_right_after_a_map_array(slurm, fresh_cluster, shared_tmp):
    """The issue's case: slurmctld killed -9 a second after a map_array. Every task either finishes
    or the wait fails naming the tasks Slurm holds (and the drained nodes) within the bound: never a
    bare TimeoutError after the caller's whole timeout; and `dev up` does not call such a cluster
    healthy."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    settle()
    arr = Executor(shared_tmp, slurm=slurm, time=5).map_array(nap, [3.0] * 16, chunk_size=1)
    try:
        time.sleep(1)
        os.kill(fresh_cluster.daemon("slurmctld").pid, signal.SIGKILL)
        try:
            fresh_cluster.up()
        except ClusterUnhealthy as exc:
            print(f"dev up: {exc}")
        started = time.monotonic()
        try:
            assert arr.results(timeout=300) == [3.0] * 16
        except JobFailed as exc:
            assert "held by Slurm" in str(exc) and time.monotonic() - started < 200, exc
            with pytest.raises(ClusterUnhealthy):
                fresh_cluster.up()
    finally:
        for array_id in arr.array_ids:
            slurm.run("scancel", [array_id], check=False, retries=0)
        _return_nodes(slurm, fresh_cluster)


#: slurmctld's state save thread writes at most this often (src/slurmctld/state_save.c SAVE_MAX_WAIT)
STATE_SAVE_S = 5


@pytest.fixture
def fresh_cluster(local_cluster):
    """This module's cluster from empty state: a controller crash must meet only the jobs of its
    own test. (After one crash, the restarted controller hands out job ids again and can hold
    records older than the truth; a second crash on top of that stages two faults at once.)"""
    local_cluster.reset()
    yield local_cluster.up()
    local_cluster.reset()
    local_cluster.up()


def settle() -> None:
    """Longer than a save interval without a change: what slurmctld saved is what is true."""
    time.sleep(STATE_SAVE_S + 1)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("saved_just_before", [True, False], ids=["not-saved", "saved-pending"])
def test_controller_crash_right_after_submission(slurm, fresh_cluster, workdir, own_jobs, saved_just_before):
    """slurmctld killed -9 a second or two after sbatch returned. Its state thread saves at once
    after a quiet spell, then at most every 5 s, so what the restarted controller knows depends on
    when the last save was:

    - "not-saved": a save just before the submission (a partition update) → the job's own save
      is due after the crash: the job is gone ("Purged files for defunct batch JobId"); slinkyml
      says so in one line and no process of it is left (slurmctld kills its first run as an orphan);
    - "saved-pending": a quiet controller saves on the submission at once, the launch follows, the
      next save cannot come before the crash → the job is launched again where its first run
      still ends, the node drains ("Duplicate jobid"), the job is held. The wait fails within a
      minute naming the hold and the node; once the first run is gone, `dev up` resumes the node
      and names the held job; released, the run completes whole;
    - under load either can turn into the third: the job survived in the saved state and completes.
    """
    spec = _train_spec(workdir, f"ctld-submit-{saved_just_before}",
                       ["--steps", "12", "--checkpoint-every", str(EVERY)])
    settle()
    crash_after_s = 2.0
    if saved_just_before:
        slurm.run("scontrol", ["update", "PartitionName=short", "MaxTime=00:30:00"])  # a save, now
        time.sleep(0.5)
        crash_after_s = 1.0
    job_id = _submit(slurm, spec, workdir, own_jobs)
    time.sleep(crash_after_s)
    os.kill(fresh_cluster.daemon("slurmctld").pid, signal.SIGKILL)
    try:
        fresh_cluster.up()
    except ClusterUnhealthy as exc:  # the duplicate launch can be that quick
        print(f"dev up: {exc}")
    try:  # by name too: once lost, its id is handed out again
        state = wait(slurm, job_id, timeout=400, poll=1.0, name=spec.name,
                     on_update=lambda s: _release_if_requeued(slurm, s))
    except JobNotFound as exc:
        print(f"outcome: the job was lost by slurmctld ({exc})")
        assert f"job {job_id} is unknown to slurmctld" in str(exc)
        assert_no_trainers(spec, "the lost job's processes run on outside Slurm", within=90)
    except JobHeldBySlurm as exc:
        # saved PENDING, launched before the crash: the restarted controller launched it again
        # where its first run still ran ("Duplicate jobid": nodes drained, the job held)
        print(f"outcome: the job was held by Slurm after a duplicate launch ({exc})")
        assert f"job {job_id} is held by Slurm (launch_failed_requeued_held)" in str(exc)
        assert_no_trainers(spec, "the first run's processes outlived the duplicate launch", within=90)
        # `up` resumes the "Duplicate jobid" drains now that nothing of the clash is left, and
        # names the held job as what is still wrong
        with pytest.raises(ClusterUnhealthy, match=rf"jobs held by Slurm after a failed launch: [^(]*\b{job_id}\b") as info:
            fresh_cluster.up()
        assert "Duplicate jobid" not in str(info.value), info.value
        slurm.run("scontrol", ["release", str(job_id)])  # the operator's release: the run resumes
        state = _wait_done(slurm, job_id, timeout=400)
        assert state.state == "COMPLETED", f"{state}\n{_logs(spec)[-4000:]}"
        check_run(spec, job_id, 12)
    else:
        if state.state == State.CANCELLED and not _known_to_slurmctld(slurm, job_id):
            # lost as in "not-saved", but its orphaned first run was killed and recorded before the wait
            # asked: slurmctld knows no such job, accounting has it CANCELLED (seen once at load ~15)
            print(f"outcome: the job was lost by slurmctld; accounting recorded its killed run ({state})")
            assert_no_trainers(spec, "the lost job's processes run on outside Slurm", within=90)
        else:
            print("outcome: the job survived the crash")
            assert state.state == "COMPLETED", f"{state}\n{_logs(spec)[-4000:]}"
            check_run(spec, job_id, 12)
    fresh_cluster.up()  # healthy: raises ClusterUnhealthy on a drained node or a held job
