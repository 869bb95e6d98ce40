"""The login-pod job, started from Python: a JobSpec dispatched through submitit (one launcher per
node), 2-node torchrun DDP and 2-node DeepSpeed (ZeRO-2 on CPU, via torchrun), final loss back."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest

from slinkyml.dispatch.launch import launch, prepare
from slinkyml.errors import SpecError
from slinkyml.jobs.spec import JobSpec

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _spec(work, name: str, args: list[str], **extra) -> JobSpec:
    data = {"name": name, "nodes": 2, "mem_per_node": "1G", "time_limit": "00:10:00", "python": sys.executable,
            "entry": {"module": "slinkyml.train", "args": args},
            "checkpoint_dir": str(work / name / "ckpt"), "log_dir": str(work / name / "logs"),
            "requeue": {"signal": "USR2", "grace_seconds": 10, "max_restarts": 2}}
    data.update(extra)
    return JobSpec.from_dict(data)


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("torch", "deepspeed")),
                    reason="torch and deepspeed are not installed (pip install '.[train]')")
@pytest.mark.timeout(400)
def test_two_node_torchrun_and_deepspeed_from_python(slurm, shared_tmp):
    ddp = _spec(shared_tmp, "nb-ddp", ["--steps", "6", "--checkpoint-every", "3"])
    ds = _spec(shared_tmp, "nb-ds", ["--deepspeed", "--steps", "4", "--checkpoint-every", "2"],
               launcher="deepspeed", mem_per_node="2G",
               deepspeed_config={"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0})
    # the DeepSpeed job on the netns cluster only: DeepSpeed JIT-builds its CPU shm op with ninja and c++ in
    # every rank, and the Docker cluster's slurmd image has no C++ toolchain (test_train_cluster's
    # needs_host_toolchain); the torchrun job runs on both (docs/docker-cluster.md)
    specs = [ddp] if os.environ.get("SLINKYML_TEST_CLUSTER") == "docker" else [ddp, ds]
    jobs = [launch(spec, folder=shared_tmp / "submitit", slurm=slurm) for spec in specs]
    try:
        finals = [job.result(timeout=360) for job in jobs]
    finally:
        for job in jobs:
            slurm.run("scancel", [job.job_id], check=False, retries=0)
    ddp_final = finals[0]
    assert ddp_final["steps"] == 6 and ddp_final["world_size"] == 2 and not ddp_final["deepspeed"]
    if len(finals) > 1:
        ds_final = finals[1]
        assert ds_final["steps"] == 4 and ds_final["world_size"] == 2 and ds_final["deepspeed"]
    for final in finals:
        assert final["allreduce"]["ok"] and final["final_loss"] < final["first_loss"]
    steps = jobs[0].metrics()
    assert [m["step"] for m in steps] == list(range(1, 7)) and steps[-1]["loss"] == pytest.approx(
        ddp_final["final_loss"], rel=1e-4)
    log = jobs[0].stdout()
    assert "--rdzv-endpoint" in log and "[rank 1]" in log  # one launcher per node, labelled


def test_unsupported_launchers_are_spec_errors(shared_tmp):
    spec = _spec(shared_tmp, "x", [], launcher="deepspeed", deepspeed_via="deepspeed")
    with pytest.raises(SpecError, match="deepspeed_via"):
        prepare(spec)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (pip install '.[train]')")
@pytest.mark.timeout(400)
def test_the_launcher_decides_as_the_batch_script_does(slurm, shared_tmp):
    """Through submitit the same decide.sh runs: a rank that raises is a user error (FAILED at once,
    not requeued, its line in the events file); the preemption signal to the steps is a preemption
    (checkpoint, requeue, resume to the end)."""
    from slinkyml.dispatch import JobError
    from slinkyml.slurm import protocol

    bad = _spec(shared_tmp, "nb-bad", ["--steps", "4", "--model", "no-such-model"])
    job = launch(bad, folder=shared_tmp / "submitit", slurm=slurm)
    try:
        with pytest.raises(JobError, match="the program failed .*: user rank [01] on "):
            job.result(timeout=300)
    finally:
        slurm.run("scancel", [job.job_id], check=False, retries=0)
    (line,) = protocol.read_events(bad.log_dir, job.job_id)
    assert line.startswith("r0 failed user_error: user rank ") and "unknown --model 'no-such-model'" in line, line

    good = _spec(shared_tmp, "nb-preempt", ["--steps", "24", "--checkpoint-every", "4", "--step-sleep", "0.3"])
    job = launch(good, folder=shared_tmp / "submitit", slurm=slurm)
    try:
        deadline = time.monotonic() + 240
        while len(job.metrics()) < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
        slurm.run("scancel", ["--signal=USR2", job.job_id])  # to the steps, long before the time limit
        final = job.result(timeout=300)
    finally:
        slurm.run("scancel", [job.job_id], check=False, retries=0)
    assert final["steps"] == 24 and final["restart"] == 1
    assert protocol.read_events(good.log_dir, job.job_id) == ["r0 requeue preemption: SIGUSR2"]
