"""Held array tasks on the real cluster: a task Slurm itself put on hold after requeueing it is
released and finishes; a task that stays held fails the wait, named, within the bound — not a
silent wait to the caller's timeout."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest
from waiting import wait_until

from slinkyml.dispatch import Executor, JobFailed
from slinkyml.dispatch.tracking import JobInfo
from slinkyml.slurm import states
from slinkyml.slurm.states import State

pytestmark = pytest.mark.slurm
cloudpickle.register_pickle_by_value(sys.modules[__name__])




def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def nap_then_linger(seconds: float) -> float:
    """Returns at once; the task's process then lingers at exit (after submitit wrote the result)."""
    import atexit

    atexit.register(time.sleep, seconds)
    return seconds


def _squeue_state(slurm, task: str) -> str:
    return slurm.run("squeue", ["-h", "-r", "-t", "all", "-j", task, "-o", "%T %r"], check=False).stdout.strip()


def _wait_running(slurm, task: str) -> None:
    wait_until(f"{task} to run", lambda: slurm.run("squeue", ["-h", "-r", "-j", task, "-o", "%T"],
                                                    check=False).stdout.strip() == State.RUNNING, timeout=60)


def test_held_reasons_are_recognised():
    assert states.is_held("launch failed requeued held")
    assert states.is_held("job requeued in held state") and states.is_held("JobHeldUser")
    assert not states.is_held("BeginTime") and not states.is_held("Resources")


@pytest.mark.timeout(240)
def test_a_task_slurm_holds_is_released_and_finishes(slurm, shared_tmp, own):
    ex = Executor(shared_tmp, slurm=slurm, time=5)
    # longer than the cluster's KillWait (10 s): submitit bypasses the requeue's SIGTERM, so a shorter
    # nap finished and wrote its result before the SIGKILL, and results() never saw the task held
    arr = ex.map_array(nap, [15.0, 15.0, 15.0], chunk_size=1)
    own.extend(arr.array_ids)
    arr.held.release_after = 1.0
    _wait_running(slurm, arr.task_ids[1])
    # Slurm's own requeue-and-hold, as after a failed launch ("job requeued in held state")
    slurm.run("scontrol", ["requeuehold", arr.task_ids[1]])
    assert arr.results(timeout=200) == [15.0, 15.0, 15.0]
    assert arr.held.releases >= 1


@pytest.mark.timeout(240)
def test_a_task_that_stays_held_fails_naming_it_within_the_bound(slurm, shared_tmp, own):
    ex = Executor(shared_tmp, slurm=slurm, time=5)
    arr = ex.map_array(nap, [30.0, 30.0], chunk_size=1, max_parallel=1)
    own.extend(arr.array_ids)
    arr.held.fail_after = 5.0
    slurm.run("scontrol", ["hold", arr.task_ids[1]])  # a hold nobody will lift
    started = time.monotonic()
    with pytest.raises(JobFailed) as err:
        arr.results(timeout=200)
    assert time.monotonic() - started < 60
    assert f"held by Slurm: {arr.task_ids[1]} (JobHeld" in str(err.value)


@pytest.mark.timeout(240)
def test_a_task_requeued_held_after_its_result_is_cancelled_not_left_held(slurm, shared_tmp, own):
    """Slurm requeues a task that has written its result (submitit lets the function finish through
    the requeue's SIGTERM): results() returns the results and cancels the task, held in the queue,
    instead of leaving it there (releasing it would run the function twice); the others are untouched."""
    ex = Executor(shared_tmp, slurm=slurm, time=5)
    arr = ex.map_array(nap_then_linger, [30.0, 0.0], chunk_size=1)
    own.extend(arr.array_ids)
    held_task, other = arr.task_ids
    deadline = time.monotonic() + 120
    while not arr._result_pickle(0).exists():  # the result is written; the process lingers at exit
        assert time.monotonic() < deadline, f"no result from {held_task}: {_squeue_state(slurm, held_task)}"
        time.sleep(0.3)
    slurm.run("scontrol", ["requeuehold", held_task])
    while not _squeue_state(slurm, held_task).startswith("PENDING"):
        assert time.monotonic() < deadline, _squeue_state(slurm, held_task)
        time.sleep(0.3)
    assert "held" in _squeue_state(slurm, held_task)
    assert arr.results(timeout=120) == [30.0, 0.0]
    assert arr.leftovers_cancelled == [held_task] and arr.held.releases == 0
    assert _squeue_state(slurm, held_task).split()[0] in ("CANCELLED", "")  # gone from the queue, never rerun
    assert _squeue_state(slurm, other).split()[0] in ("COMPLETED", "")
    assert arr.results() == [30.0, 0.0] and arr.leftovers_cancelled == [held_task]  # once


def test_held_tasks_are_described_by_reason():
    from slinkyml.dispatch.executor import describe_held

    held = [JobInfo("9_1", "PENDING", reason="launch failed requeued held"),
            JobInfo("9_4", "PENDING", reason="launch failed requeued held"), JobInfo("9_2", "PENDING", reason="JobHeldUser")]
    assert describe_held(held) == "held by Slurm: 9_1, 9_4 (launch failed requeued held); 9_2 (JobHeldUser)"
