"""Training jobs on the real local cluster: 2-node torchrun and DeepSpeed, preemption, time limit,
node failure. Tiny models and short runs; jobs are reused across assertions.

Requeued batch jobs get a BeginTime of now + the credential lifetime (~2 min) from slurmctld; the
tests release them after a few seconds with ``scontrol update JobId=… StartTime=now`` (an operator
action) so the suite stays short — the resume logic under test is unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from waiting import wait_until

from slinkyml.jobs.follow import job_state, release_requeued, wait
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit
from slinkyml.train import FINAL_FILE, METRICS_FILE

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PY = sys.executable  # the venv's interpreter; the nodes share this filesystem
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (pip install '.[train]')")
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed (pip install '.[train]')")
#: DeepSpeed on CPU JIT-builds its shm comm op (ninja, c++) in every rank: the Docker cluster's slurmd image has
#: no C++ toolchain, and the build folder is in the shared home (a rank there rebuilt the host's own op)
needs_host_toolchain = pytest.mark.netns_only("DeepSpeed JIT-builds its CPU shm op with ninja and c++ in every "
                                              "rank; the slurmd image has no C++ toolchain")


@pytest.fixture(scope="module")
def workdir():
    path = Path(tempfile.mkdtemp(prefix="slinkyml-train-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def own_jobs(slurm):
    ids: list[int] = []
    yield ids
    for job_id in ids:  # only our own jobs, and only if still around
        slurm.run("scancel", [str(job_id)], check=False, retries=0)


def _train_spec(work: Path, name: str, args: list[str], **extra) -> JobSpec:
    data = {"name": name, "nodes": 2, "mem_per_node": "1G", "time_limit": "00:10:00", "python": PY,
            "entry": {"module": "slinkyml.train", "args": args},
            "checkpoint_dir": str(work / name / "ckpt"), "log_dir": str(work / name / "logs"),
            "requeue": {"signal": "USR2", "grace_seconds": 10, "max_restarts": 2}}
    data.update(extra)
    return JobSpec.from_dict(data)


def _submit(slurm, spec: JobSpec, work: Path, own: list[int]) -> int:
    job_id = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=work).job_id
    own.append(job_id)
    return job_id


_held_since: dict[tuple[int | str, int], float] = {}


def _release_if_requeued(slurm, state) -> None:
    """Release a requeued job once it has been held REQUEUE_SETTLE_S (as dispatch's Job does):
    released at once, 24.11's slurmd can still refuse the new credential and the job fails."""
    from slinkyml.dispatch.executor import REQUEUE_SETTLE_S

    if state.state == "PENDING" and state.reason == "BeginTime":
        # per run: a run that requeued itself within a poll (never seen RUNNING) is held anew
        since = _held_since.setdefault((state.job_id, state.restarts), time.monotonic())
        if time.monotonic() - since >= REQUEUE_SETTLE_S:
            release_requeued(slurm, state.job_id)
    else:
        _held_since.pop((state.job_id, state.restarts), None)


def _wait_done(slurm, job_id: int, timeout: float = 240):
    return wait(slurm, job_id, timeout=timeout, poll=1.0,
                on_update=lambda s: _release_if_requeued(slurm, s))


def _metrics(spec: JobSpec) -> list[dict]:
    path = Path(spec.checkpoint_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_steps(slurm, job_id: int, spec: JobSpec, steps: int, timeout: float = 180) -> None:
    def reached() -> bool:
        if len(_metrics(spec)) >= steps:
            return True
        state = job_state(slurm, job_id)
        assert not state.finished, f"job {job_id} ended early: {state}"
        return False

    wait_until(f"job {job_id} to reach step {steps}", reached, timeout=timeout)


def _logs(spec: JobSpec) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(Path(spec.log_dir).glob("*")) if p.is_file())


# -- the time-limit job runs in the background while the others run -------------------------------
@pytest.fixture(scope="module")
def timelimit_job(slurm, workdir, own_jobs):
    """1-minute limit, signal 20 s before the end, one restart allowed: a run that writes a
    checkpoint file at its start (a time limit requeues only a run that checkpointed since it
    started) runs twice, then ends TIMEOUT.

    slurmctld checks limits every 30 s and sends the warning at the first check at most 30 s
    before it is due, here 10-40 s into each run (with 30 s it came as early as 4 s in on 24.11,
    racing the batch script's trap)."""
    spec = JobSpec.from_dict({
        "name": "timelimit", "launcher": "srun", "mem_per_node": "256M", "time_limit": "1",
        "entry": {"script": "/bin/bash", "args": ["-c", 'mkdir -p "$SLINKYML_CHECKPOINT_DIR" && '
                                                        'touch "$SLINKYML_CHECKPOINT_DIR/step" && exec sleep 600']},
        "log_dir": str(workdir / "timelimit"), "checkpoint_dir": str(workdir / "timelimit-ckpt"),
        "requeue": {"signal": "USR2", "grace_seconds": 20, "max_restarts": 1}})
    return spec, _submit(slurm, spec, workdir, own_jobs)


@pytest.mark.timeout(30)
def test_time_limit_job_is_queued(slurm, timelimit_job):
    _, job_id = timelimit_job
    assert job_state(slurm, job_id).state in ("PENDING", "RUNNING")


@pytest.mark.slurm2605
@needs_torch
@pytest.mark.timeout(300)
def test_two_node_torchrun_preempted_checkpoints_requeues_and_resumes(slurm, workdir, own_jobs):
    spec = _train_spec(workdir, "ddp", ["--steps", "24", "--checkpoint-every", "5", "--step-sleep", "0.3"])
    job_id = _submit(slurm, spec, workdir, own_jobs)
    _wait_steps(slurm, job_id, spec, 7)
    slurm.run("scancel", ["--signal=USR2", "--batch", str(job_id)])  # what --signal does before the end
    state = _wait_done(slurm, job_id)
    assert state.state == "COMPLETED" and state.restarts == 1
    rows = _metrics(spec)
    first = [r for r in rows if r["restart"] == 0]
    second = [r for r in rows if r["restart"] == 1]
    stopped = first[-1]["step"]
    assert [r["step"] for r in first] == list(range(1, stopped + 1)) and stopped >= 7
    assert [r["step"] for r in second] == list(range(stopped + 1, 25))  # no gap, no repeat
    # the loss curve continues from where it stopped instead of starting over
    assert second[0]["loss"] < first[0]["loss"] - 0.2
    assert abs(second[0]["loss"] - first[-1]["loss"]) < 0.2
    logs = _logs(spec)
    assert f"resumed from ckpt-{stopped:08d} at step {stopped}" in logs
    assert "requeueing (restart 1 of 2)" in logs
    assert logs.count("all-reduce check: world=2 sum=3 expected=3 ok") == 4  # 2 ranks x 2 runs
    final = json.loads((Path(spec.checkpoint_dir) / FINAL_FILE).read_text())
    assert final["steps"] == 24 and final["allreduce"]["ok"] and final["world_size"] == 2


@needs_torch
@needs_deepspeed
@needs_host_toolchain
@pytest.mark.timeout(300)
def test_two_node_deepspeed_zero2(slurm, workdir, own_jobs):
    spec = _train_spec(workdir, "ds", ["--deepspeed", "--steps", "4", "--checkpoint-every", "2"],
                       launcher="deepspeed", mem_per_node="2G",
                       deepspeed_config={"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0})
    _assert_zero2_trained(slurm, spec, _submit(slurm, spec, workdir, own_jobs))


def _assert_zero2_trained(slurm, spec, job_id: int) -> None:
    """A 2-rank ZeRO-2 run of 4 steps: completed, all-reduce right, loss down, one optimizer shard per rank."""
    state = _wait_done(slurm, job_id)
    logs = _logs(spec)
    assert state.state == "COMPLETED", logs[-3000:]
    final = json.loads((Path(spec.checkpoint_dir) / FINAL_FILE).read_text())
    assert final["deepspeed"] and final["steps"] == 4 and final["allreduce"] == {
        "world_size": 2, "sum": 3.0, "expected": 3.0, "ok": True}
    assert final["final_loss"] < final["first_loss"]
    # ZeRO-2 partitions optimizer state: one shard per rank in the checkpoint
    shards = list((Path(spec.checkpoint_dir) / "ckpt-00000004" / "state").glob("zero_pp_rank_*_optim_states.pt"))
    assert len(shards) == 2


@needs_torch
@pytest.mark.timeout(360)
@pytest.mark.usefixtures("exclusive_cluster")  # stops a slurmd
def test_node_failure_requeues_and_resumes_from_last_checkpoint(slurm, local_cluster, workdir, own_jobs):
    third, fourth = local_cluster.spec.node_names[2:4]
    spec = _train_spec(workdir, "nodefail", ["--steps", "30", "--checkpoint-every", "4", "--step-sleep", "0.3"],
                       nodelist=f"{third},{fourth}")
    job_id = _submit(slurm, spec, workdir, own_jobs)
    try:
        _wait_steps(slurm, job_id, spec, 10)
        local_cluster.daemon(f"slurmd-{fourth}").stop()
        # What slurmctld does by itself once SlurmdTimeout (60 s) passes without the node answering:
        slurm.run("scontrol", ["update", f"NodeName={fourth}", "State=DOWN", "Reason=slinkyml-test-node-failure"])
        wait(slurm, job_id, timeout=60, poll=0.5, until=lambda s: s.restarts >= 1 or s.finished)
    finally:
        local_cluster.up()  # restarts slurmd-n4 and RESUMEs the node
    state = _wait_done(slurm, job_id)
    assert state.state == "COMPLETED" and state.restarts == 1
    rows = _metrics(spec)
    resumed = [r for r in rows if r["restart"] == 1]
    before = [r["step"] for r in rows if r["restart"] == 0]
    start = resumed[0]["step"] - 1  # the checkpoint the second run resumed from
    logs = _logs(spec)
    # the newest checkpoint written before the failure: a periodic one, or the one the surviving
    # ranks wrote on slurmctld's SIGTERM (here n4's slurmstepd outlives its slurmd, so they can)
    assert 8 <= start <= max(before) and f"checkpoint saved: ckpt-{start:08d}" in logs
    assert not any(f"checkpoint saved: ckpt-{s:08d}" in logs for s in range(start + 1, max(before) + 1))
    assert [r["step"] for r in resumed] == list(range(start + 1, 31))
    assert f"resumed from ckpt-{start:08d}" in logs


@pytest.mark.timeout(300)
def test_time_limit_requeues_up_to_the_limit_and_no_further(slurm, timelimit_job):
    spec, job_id = timelimit_job
    state = _wait_done(slurm, job_id, timeout=280)
    logs = _logs(spec)
    assert state.state == "TIMEOUT" and state.restarts == 1, logs
    assert "requeueing (restart 1 of 1): reached its time limit: SIGUSR2" in logs
    assert "reached its time limit: SIGUSR2; not requeued (requeue.on: time_limit preemption node_failure, " \
           "restarts 1 of 1)" in logs
