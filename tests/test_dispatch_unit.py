"""Notebook dispatch without a cluster: distributed env, array planning, batched tracking, API."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slinkyml import rendezvous
from slinkyml.dispatch import arrays, distributed
from slinkyml.dispatch.tracking import Tracker
from slinkyml.errors import SlinkyError
from slinkyml.slurm.errors import SlurmControllerDown, SlurmError
from slinkyml.slurm.records import SEP
from slinkyml.slurm.runner import Result


def test_hostlist_expansion_keeps_order_and_padding():
    assert distributed.expand_hostlist("n[1-3,7]") == ["n1", "n2", "n3", "n7"]
    assert distributed.expand_hostlist("gpu-a[08-10],login") == ["gpu-a08", "gpu-a09", "gpu-a10", "login"]
    assert distributed.expand_hostlist("n4") == ["n4"]


def test_master_port_depends_on_job_and_restart_and_is_the_same_everywhere():
    a = distributed.port_candidates(1234)
    assert a == distributed.port_candidates("1234")  # every node derives the same list
    assert a != distributed.port_candidates(1235)
    assert a[0] != distributed.port_candidates(1234, restart=1)[0]  # a requeued job gets a fresh store
    assert all(rendezvous.PORT_BASE <= p < rendezvous.PORT_BASE + rendezvous.PORT_SPAN for p in a)
    assert len(set(a)) == len(a)


def test_batch_script_exports_the_head_and_a_free_port(tmp_path):
    """The multi-task batch script's MASTER_ADDR/MASTER_PORT (bash, no Python started for it): the
    first host, and the job's first port candidate nothing listens on (the one task_env derives)."""
    import socket

    from slinkyml.dispatch.executor import HEAD_ENV_LINES

    conf = tmp_path / "slurm.conf"  # scontrol show hostnames reads a slurm.conf, talks to no daemon
    conf.write_text("ClusterName=probe\nSlurmctldHost=localhost\n")
    script = "\n".join(["set -euo pipefail", *HEAD_ENV_LINES, 'echo "$MASTER_ADDR $MASTER_PORT"'])
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(conf), "SLURM_JOB_ID": "99", "SLURM_JOB_NODELIST": "n[3-4]"}

    def run(**extra: str) -> list[str]:
        return subprocess.run(["bash", "-c", script], env={**env, **extra}, capture_output=True, text=True,
                              check=True).stdout.split()

    assert run() == ["n3", str(distributed.port_candidates(99)[0])]
    assert run(SLURM_RESTART_COUNT="2")[1] == str(distributed.port_candidates(99, 2)[0])
    assert run(SLURM_ARRAY_JOB_ID="55")[1] == str(distributed.port_candidates(55)[0])
    first = distributed.port_candidates(99)[0]
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", first))
        except OSError:
            pytest.skip(f"port {first} is in use by another process on this machine")
        busy.listen()
        assert run()[1] == str(distributed.port_candidates(99)[1])


def test_task_env_maps_slurm_to_torch_names():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "77",
           "SLURM_JOB_NODELIST": "n[3-4]"}
    out = distributed.task_env(env)
    assert out["RANK"] == "3" and out["WORLD_SIZE"] == "4" and out["LOCAL_RANK"] == "1"
    assert out["LOCAL_WORLD_SIZE"] == "2" and out["NODE_RANK"] == "1"
    assert out["MASTER_ADDR"] == "n3" and out["MASTER_PORT"] == str(distributed.port_candidates(77)[0])
    # the batch script's checked port wins over the derived one
    assert distributed.task_env({**env, "MASTER_ADDR": "n3", "MASTER_PORT": "31000"})["MASTER_PORT"] == "31000"


def test_one_gpu_per_task():
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "1",
           "SLURM_NTASKS_PER_NODE": "2", "CUDA_VISIBLE_DEVICES": "4,5", "MASTER_ADDR": "n1", "MASTER_PORT": "1"}
    distributed.setup(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["LOCAL_RANK"] == "1"


def test_array_plan_chunks_and_splits_at_max_array_size():
    plan = arrays.plan_array(500, max_array_size=5, chunk_size=40, max_parallel=6)
    assert plan.n_tasks == 13 and plan.chunks[-1] == (480, 20)
    assert sum(count for _, count in plan.chunks) == 500
    assert plan.arrays == ((0, 5), (5, 5), (10, 3))  # indices 0..4 < MaxArraySize
    assert plan.parallelism == 2  # the limit is shared by the three arrays
    auto = arrays.plan_array(1000, max_array_size=1001, target_tasks=16)
    assert auto.n_tasks == 16 and len(auto.arrays) == 1
    assert arrays.plan_array(0, max_array_size=10).n_tasks == 0
    with pytest.raises(SlinkyError):
        arrays.plan_array(5, max_array_size=0)


def test_chunk_keeps_per_item_results_and_errors():
    def f(x):
        if x == 2:
            raise ValueError("two")
        return x * 10

    out = arrays.Chunk(f, [(1,), (2,), (3,)])()
    assert [o.ok for o in out] == [True, False, True]
    assert out[0].value == 10 and out[2].value == 30
    assert out[1].error == "ValueError: two" and "Traceback" in out[1].traceback


class FakeSlurm:
    """Answers squeue/sacct from a table; counts calls; can pretend slurmctld is down."""

    conf = "fake"

    def __init__(self, states):
        self.states = states  # job id → (state, reason, raw exit status)
        self.calls: list[tuple[str, list[str]]] = []
        self.down = False

    def run(self, command, args=(), **_):
        self.calls.append((command, list(args)))
        if self.down:
            raise SlurmControllerDown("squeue: slurmctld is not reachable")
        if command == "squeue":
            wanted = args[args.index("-j") + 1].split(",")
            lines = ["".join(f"{value}{SEP}" for value in (jid, jid.split('_')[0], jid.split('_')[1] if '_' in jid
                                                           else 'N/A', st, reason, code, "n1"))
                     for jid, (st, reason, code) in self.states.items() if jid.split("_")[0] in wanted]
            return Result(("squeue",), 0, "\n".join(lines), "", 0.0)
        if command == "sacct":
            return Result(("sacct",), 0, "", "", 0.0)
        raise AssertionError(command)


def test_tracker_asks_once_per_refresh_for_any_number_of_jobs():
    states = {f"{100 + i}": ("RUNNING", "None", "0") for i in range(300)}
    states.update({f"500_{i}": ("PENDING", "JobArrayTaskLimit", "0") for i in range(200)})
    slurm = FakeSlurm(states)
    tracker = Tracker(slurm, min_interval=0.0)
    tracker.track(*states)
    assert tracker.refresh(force=True)
    assert len(slurm.calls) == 1  # 500 jobs, one squeue
    assert tracker.info("105", refresh=False).state == "RUNNING"
    assert tracker.info("500_7", refresh=False).reason == "JobArrayTaskLimit"


def test_tracker_is_rate_limited_and_backs_off_per_job():
    slurm = FakeSlurm({"1": ("RUNNING", "None", "0")})
    tracker = Tracker(slurm, min_interval=3600)
    tracker.track("1")
    tracker.refresh()
    for _ in range(50):
        tracker.info("1")
    assert len(slurm.calls) == 1


def test_tracker_reports_failure_details_and_caches_terminal_states():
    slurm = FakeSlurm({"7": ("OUT_OF_MEMORY", "OutOfMemory", str(9)), "8": ("CANCELLED by 0", "None", "15")})
    tracker = Tracker(slurm, min_interval=0.0)
    tracker.track("7", "8")
    tracker.refresh(force=True)
    oom, cancelled = tracker.info("7", refresh=False), tracker.info("8", refresh=False)
    assert oom.failed and oom.signal == 9 and "OUT_OF_MEMORY" in oom.describe()
    assert cancelled.state == "CANCELLED"
    tracker.refresh(force=True)
    assert len(slurm.calls) == 1  # nothing left to ask about


def test_tracker_waits_out_a_controller_outage_then_gives_up():
    slurm = FakeSlurm({"1": ("RUNNING", "None", "0")})
    tracker = Tracker(slurm, min_interval=0.0, outage_tolerance=3600)
    tracker.track("1")
    slurm.down = True
    tracker.refresh(force=True)  # no exception: the job keeps its last known state
    assert tracker.controller_down_for >= 0 and tracker.info("1", refresh=False).state == "SUBMITTED"
    slurm.down = False
    tracker.refresh(force=True)
    assert tracker.info("1", refresh=False).state == "RUNNING" and tracker.controller_down_for == 0
    strict = Tracker(FakeSlurm({}), min_interval=0.0, outage_tolerance=0.0)
    strict.track("2")
    strict.slurm.down = True
    strict.refresh(force=True)
    with pytest.raises(SlurmError, match="unreachable"):
        strict.refresh(force=True)


def test_dependencies_render_to_slurm_syntax():
    from slinkyml.dispatch.executor import _dependency_string

    assert _dependency_string(afterok=[12, "13"], afterany=14, singleton=True) == \
        "afterok:12:13,afterany:14,singleton"
    assert _dependency_string() is None


def test_slinkyml_submit_is_the_function_and_import_stays_light():
    code = ("import sys, slinkyml; f = slinkyml.submit; import slinkyml.dispatch as m; "
            "print(f is m.submit, slinkyml.submit is m.submit, slinkyml.Executor is m.Executor, "
            "[x for x in ('submitit', 'torch') if x in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "True", "[]"]


def test_bad_resources_are_one_line_errors():
    from slinkyml.dispatch import Executor

    with pytest.raises(SlinkyError, match="nodes"):
        Executor(nodes=0, max_array_size=1)
    with pytest.raises(SlinkyError, match="one task per GPU"):
        Executor(gpus_per_node=4, tasks_per_node=3, max_array_size=1)
    with pytest.raises(SlinkyError, match="time"):
        Executor(time="soon", max_array_size=1)


def test_a_task_unpickling_its_call_loads_no_executor_side(imported_by):
    """Every rank imports slinkyml.dispatch.task (hence the package) before its first step: the
    notebook side (executor, specs, YAML, the job layers) stays out of it."""
    assert imported_by("import slinkyml.dispatch.task", ("slinkyml.dispatch.executor", "slinkyml.jobs.spec",
                                                          "yaml", "submitit", "torch")) == []
    code = ("import sys, slinkyml.dispatch as d; d.TrainingJob; from slinkyml.dispatch import launch; "
            "assert launch is sys.modules['slinkyml.dispatch.launch'].launch")
    subprocess.run([sys.executable, "-c", code], check=True)
