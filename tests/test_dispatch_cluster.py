"""Notebook dispatch against the real local cluster (slurmctld, 4 slurmd): functions on 2 nodes ×
2 tasks, chunked/split arrays, failures, multi-rank preemption, a slurmctld restart.

Requeued jobs are held by slurmctld for ~2 min (BeginTime); ``Job`` releases its own requeued
Checkpointable jobs (``scontrol update StartTime=now``), which keeps the preemption test short.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import time

import cloudpickle
import pytest

from slinkyml.dispatch import Checkpointable, Executor, JobError, JobFailed
from slinkyml.dispatch.arrays import ItemError, max_array_size

pytestmark = pytest.mark.slurm
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (pip install '.[train]')")

# the functions below live in this test file, which the nodes cannot import by name
cloudpickle.register_pickle_by_value(sys.modules[__name__])




def _executor(slurm, folder, **kw) -> Executor:
    return Executor(folder, slurm=slurm, time=10, **kw)


def square(x: int) -> int:
    if x == 13:
        raise ValueError("unlucky")
    return x * x


def sleep_then(seconds: float, value):
    time.sleep(seconds)
    return value


@pytest.mark.slurm2605
@needs_torch
@pytest.mark.timeout(240)
def test_two_nodes_two_tasks_allreduce_every_rank(slurm, shared_tmp, own):
    from slinkyml.demo.allreduce import allreduce_task, expected_sum

    job = _executor(slurm, shared_tmp, nodes=2, tasks_per_node=2, mem="2G").submit(allreduce_task, 1.0)
    own.append(job.job_id)
    results = job.results(timeout=200)
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert all(r["world_size"] == 4 and r["sum"] == expected_sum(4) for r in results)
    assert [r["local_rank"] for r in results] == [0, 1, 0, 1]
    assert len({r["host"] for r in results}) == 2 and len({r["master"] for r in results}) == 1
    assert job.result() == results[0]
    assert job.state in ("COMPLETED", "COMPLETING")
    log = job.stdout()
    assert "[rank 0]" in log and "[rank 3]" in log
    assert job.job_id in job._repr_html_()


def test_max_array_size_comes_from_scontrol_show_config(slurm):
    assert slurm.show_config()["MaxArraySize"] == "1001"
    assert max_array_size(slurm) == 1001
    assert Executor(slurm=slurm).max_array_size == 1001


@pytest.mark.timeout(240)
def test_map_array_500_items_chunked_and_split_with_per_item_errors(slurm, shared_tmp, own):
    ex = _executor(slurm, shared_tmp, max_array_size=4)  # injected limit: forces a split
    arr = ex.map_array(square, range(500), chunk_size=50, max_parallel=8)
    own.extend(arr.array_ids)
    assert len(arr.array_ids) == 3 and len(arr.task_ids) == 10  # 4 + 4 + 2 array tasks
    scripts = [(shared_tmp / f"{a}_submission.sh").read_text() for a in arr.array_ids]
    assert ["--array=0-3%2" in scripts[0], "--array=0-3%2" in scripts[1], "--array=0-1%2" in scripts[2]] == [True] * 3
    values = arr.results(timeout=200, errors="return")
    assert len(values) == 500
    assert isinstance(values[13], ItemError) and "unlucky" in str(values[13])
    assert all(values[i] == i * i for i in range(500) if i != 13)
    with pytest.raises(ItemError, match="item 13"):
        arr.results()


@pytest.mark.timeout(120)
def test_dependencies_afterok_and_afterany(slurm, shared_tmp, own):
    ex = _executor(slurm, shared_tmp)
    first = ex.submit(sleep_then, 2, "first")
    second = ex.submit(sleep_then, 0, "second", afterok=first)
    third = ex.map_array(square, [1, 2, 3], afterany=[first, second])
    own.extend([first.job_id, second.job_id, *third.array_ids])
    dep = slurm.show("job", second.job_id)[0].get("Dependency", "")
    assert f"afterok:{first.job_id}" in dep
    assert second.result(timeout=100) == "second" and third.results(timeout=100) == [1, 4, 9]


@pytest.mark.timeout(120)
def test_cancelled_job_raises_promptly_with_its_state(slurm, shared_tmp, own):
    job = _executor(slurm, shared_tmp).submit(sleep_then, 300, None)
    own.append(job.job_id)
    deadline = time.monotonic() + 60
    while job.state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    job.cancel()
    cancelled_at = time.monotonic()
    with pytest.raises(JobFailed, match=r"CANCELLED") as err:
        job.result(timeout=60)
    assert err.value.info.state == "CANCELLED"
    print(f"cancel detected after {time.monotonic() - cancelled_at:.1f} s")
    # the task (it ignores SIGTERM) must not outlive its job: SIGKILL follows after KillWait
    pattern = str(shared_tmp)  # the executor folder is on the task's command line
    deadline = time.monotonic() + 30
    while _task_processes(pattern) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _task_processes(pattern) == []


def _task_processes(folder_pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", f"submitit.core._submit {folder_pattern}"], capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def boom():
    raise RuntimeError("kaboom from the node")


def oom(mb: int):
    blocks = []
    while True:
        blocks.append(bytearray(mb * 1024 * 1024))


@pytest.mark.timeout(120)
def test_failures_are_explained(slurm, shared_tmp, own):
    ex = _executor(slurm, shared_tmp)
    raised = ex.submit(boom)
    killed = ex.submit(sleep_then, 300, None)
    own.extend([raised.job_id, killed.job_id])
    with pytest.raises(JobError, match="RuntimeError: kaboom from the node") as err:
        raised.result(timeout=100)
    assert "Traceback" in err.value.traceback
    deadline = time.monotonic() + 60
    while killed.state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    slurm.run("scancel", ["--signal=KILL", killed.job_id])  # the process dies: no result
    with pytest.raises(JobFailed, match=r"job \d+ (FAILED|CANCELLED)"):
        killed.result(timeout=60)


def rank_1_raises_rank_0_waits() -> int:
    """Rank 1 raises; rank 0, in an all-reduce with it, fails afterwards on the lost connection."""
    import torch  # lazy: torch only where the task runs
    import torch.distributed as dist  # lazy: torch only where the task runs

    from slinkyml.dispatch.distributed import init_process_group

    init_process_group()
    if dist.get_rank() == 1:
        time.sleep(1)
        raise ValueError("rank one is unhappy")
    dist.all_reduce(torch.ones(1))
    return 0


@needs_torch
@pytest.mark.timeout(240)
def test_the_first_failing_rank_is_named_not_the_peer_that_lost_it(slurm, shared_tmp, own, cli):
    """Only rank 1 raises; rank 0 then raises "Connection closed by peer". Python, `jobs status` and
    `jobs why` all name rank 1's ValueError (the failure marker, first failure first)."""
    job = _executor(slurm, shared_tmp, nodes=2, tasks_per_node=1, mem="1G").submit(rank_1_raises_rank_0_waits)
    own.append(job.job_id)
    with pytest.raises(JobError, match="rank 1 raised ValueError: rank one is unhappy"):
        job.results(timeout=200)
    deadline = time.monotonic() + 60
    while slurm.run("squeue", ["-h", "-j", job.job_id], check=False, retries=0).stdout.strip() \
            and time.monotonic() < deadline:
        time.sleep(0.3)
    host = slurm.run("sacct", ["-n", "-P", "-j", f"{job.job_id}.0", "-o", "NodeList"]).stdout.split()
    code, out, _ = cli("jobs", "status", job.job_id)
    assert code == 1 and "(exception): rank 1 on " in out and "ValueError: rank one is unhappy" in out, out
    assert "Connection closed" not in out, out
    code, out, _ = cli("jobs", "why", job.job_id)
    assert code == 1 and f".failed-{job.job_id}-r0" in out and "user rank 1 on " in out, (out, host)


def task_gives_up(item: int, after: float) -> int:
    """Items whose task ends as a whole (SystemExit is not an item's error: the task stops there)."""
    time.sleep(after)
    if item in (1, 3):
        raise SystemExit(f"item {item} gives up")
    return item


@pytest.mark.timeout(240)
def test_failing_array_tasks_are_named_first_to_fail_first(slurm, shared_tmp, own, cli):
    """Two tasks of a map_array end as a whole: task 3 first, task 1 later. `jobs status|why` of the
    array name task 3 (the first to fail, by the time Slurm says each ended) with its rank, host and
    exception from the run protocol's marker; of task 1 itself, task 1's."""
    arr = _executor(slurm, shared_tmp, mem="256M").map_array(task_gives_up, [0, 1, 2, 3], [0, 15, 0, 0],
                                                            chunk_size=1)
    own.extend(arr.array_ids)
    (array_id,), tasks = arr.array_ids, arr.task_ids
    deadline = time.monotonic() + 200
    while not arr.done():
        assert time.monotonic() < deadline, arr.state
        time.sleep(1)
    while slurm.run("squeue", ["-h", "-r", "-j", array_id], check=False, retries=0).stdout.strip() \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    ended = dict(line.split("|") for line in slurm.run("sacct", ["-X", "-n", "-P", "-j", array_id,
                                                                  "-o", "JobID,End"]).stdout.split())
    assert ended[tasks[3]] < ended[tasks[1]], ended
    hosts = {t: slurm.run("sacct", ["-X", "-n", "-P", "-j", t, "-o", "NodeList"]).stdout.strip() for t in tasks}
    code, out, _ = cli("jobs", "status", array_id)
    assert code == 1 and "2 of 4 array tasks failed; the first to fail: " in out, out
    assert f"job {tasks[3]} FAILED (exception): rank 0 on {hosts[tasks[3]]} exited 1: SystemExit: item 3 gives up" in out, out
    code, out, _ = cli("jobs", "why", array_id)
    assert code == 1 and out.startswith(f"2 of 4 array tasks failed; the first to fail: job {tasks[3]} FAILED"), out
    assert f".failed-{tasks[3]}-r0" in out and "item 3 gives up" in out, out
    code, out, _ = cli("jobs", "status", tasks[1])
    assert code == 1 and f"job {tasks[1]} FAILED (exception): rank 0 on {hosts[tasks[1]]} exited 1: SystemExit: " \
        "item 1 gives up" in out and "array tasks failed" not in out, out
    code, out, _ = cli("jobs", "status", tasks[0])
    assert code == 0 and "COMPLETED" in out, out
    code, out, err = cli("jobs", "why", f"{array_id}_[1-3]")
    assert code == 2 and "give a job's number or one array task" in err, err


class Steps(Checkpointable):
    """Counts steps with an all-reduce each; rank 0 reports progress in a file."""

    def __init__(self, steps: int, progress: str):
        self.steps, self.progress = steps, progress
        self.step, self.total, self.starts = 0, 0.0, []

    def __call__(self):
        import torch
        import torch.distributed as dist

        from slinkyml.dispatch.distributed import init_process_group

        init_process_group()
        self.starts.append((self.restarts, self.step))
        while self.step < self.steps:
            value = torch.tensor([1.0])
            dist.all_reduce(value)
            self.total += value.item()
            self.step += 1
            if dist.get_rank() == 0:
                pathlib.Path(self.progress).write_text(str(self.step))
            time.sleep(0.3)
            if self.should_stop():
                self.requeue()
        return {"rank": dist.get_rank(), "step": self.step, "total": self.total, "starts": self.starts}


@pytest.mark.slurm2605
@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_preempted_multi_rank_checkpointable_resumes_at_the_right_step(slurm, shared_tmp, own):
    progress = shared_tmp / "progress"
    job = _executor(slurm, shared_tmp, nodes=2, tasks_per_node=2, mem="2G").submit(Steps(24, str(progress)))
    own.append(job.job_id)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not (progress.exists() and int(progress.read_text() or 0) >= 4):
        assert not job.done(), job.stderr()
        time.sleep(0.2)
    slurm.run("scancel", ["--signal=USR2", job.job_id])  # a preemption notice (what --signal sends)
    results = job.results(timeout=200)
    (restart0, first), (restart1, resumed_at) = results[0]["starts"]
    assert (restart0, first, restart1) == (0, 0, 1) and resumed_at >= 4
    for r in results:  # every rank resumed from rank 0's state: no step lost, none repeated
        assert r["step"] == 24 and r["total"] == 24 * 4 and r["starts"] == results[0]["starts"]
    requeues = list(shared_tmp.glob(f".{job.job_id}.requeued.*"))
    assert [p.name for p in requeues] == [f".{job.job_id}.requeued.0"]  # exactly once for the event
    assert slurm.show("job", job.job_id)[0]["Restarts"] == "1"


def wait_for(path: str, value):
    while not os.path.exists(path):
        time.sleep(0.2)
    return value


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("exclusive_cluster")  # stops slurmctld (the Docker cluster: its container, its state kept)
def test_tracking_survives_a_slurmctld_restart(local_cluster, slurm, shared_tmp, own):
    release = str(shared_tmp / "release")
    ex = _executor(slurm, shared_tmp)
    arr = ex.map_array(wait_for, [release] * 6, list(range(6)), chunk_size=1)
    single = ex.submit(wait_for, release, "single")
    own.extend([*arr.array_ids, single.job_id])
    tracker = ex.tracker
    ctld = local_cluster.daemon("slurmctld")
    try:
        deadline = time.monotonic() + 120
        while single.state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.3)
        ctld.stop()
        assert not single.done() and not arr.done()  # no exception while slurmctld is away
        tracker.refresh(force=True)
        # (another test session's `up()` may restart slurmctld meanwhile: only count the outage)
        assert tracker.outages >= 1 and single.state == "RUNNING"  # last known state kept
        pathlib.Path(release).touch()  # the jobs finish while slurmctld is down
        time.sleep(2)
    finally:
        local_cluster.up()
    assert single.result(timeout=120) == "single"
    assert arr.results(timeout=120) == list(range(6))
    tracker.refresh(force=True)
    assert tracker.controller_down_for == 0


@pytest.mark.timeout(60)
def test_bad_account_is_a_one_line_error(slurm, shared_tmp):
    from slinkyml.errors import SlinkyError

    with pytest.raises(SlinkyError) as err:
        _executor(slurm, shared_tmp, account="no-such-account").submit(square, 2)
    assert "\n" not in err.value.one_line() and "account" in str(err.value).lower()


def test_folder_is_world_writable(slurm, shared_tmp):
    folder = shared_tmp / "jobs"
    _executor(slurm, folder)._backend()
    assert os.stat(folder).st_mode & 0o777 == 0o777
