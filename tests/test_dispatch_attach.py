"""Reattaching to submit()/map_array() jobs from a new Python process (real cluster): state, results,
every rank's logs, cancel, HTML repr — from the submission record, or from sacct without one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cloudpickle
import pytest
from waiting import wait_until

from slinkyml.dispatch import ArrayJob, Executor, Job
from slinkyml.errors import SlinkyError

pytestmark = pytest.mark.slurm
cloudpickle.register_pickle_by_value(sys.modules[__name__])
REPO = str(Path(__file__).resolve().parent.parent)


@pytest.fixture
def records_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(tmp_path / "records"))
    return tmp_path / "records"


def rank_says(word: str) -> str:
    rank = os.environ.get("SLURM_PROCID", "?")
    print(f"rank {rank} says {word}", flush=True)
    return f"{word}-{rank}"


def fail_on_rank_1() -> int:
    if os.environ.get("SLURM_PROCID") == "1":
        raise KeyError("rank 1 lost its key")
    time.sleep(30)
    return 0


def double(x: int) -> int:
    return 2 * x


def nap(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def _in_new_process(code: str, slurm, cwd: Path) -> str:
    env = dict(os.environ, SLURM_CONF=slurm.conf or "",
               PYTHONPATH=os.pathsep.join([REPO, *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.timeout(240)
def test_attach_a_finished_two_task_job_elsewhere(slurm, shared_tmp, records_dir, monkeypatch):
    monkeypatch.chdir(shared_tmp)
    job = Executor(None, slurm=slurm, time=5, tasks_per_node=2, mem="1G").submit(rank_says, "hi")
    assert job.results(timeout=180) == ["hi-0", "hi-1"]
    out = _in_new_process(f"""
        from slinkyml.dispatch import Job
        job = Job.attach({job.job_id})
        print("STATE", job.state, job.results(timeout=30))
        print("LOG1", [line for line in job.stdout(rank=1).splitlines() if "says" in line])
        print("HTML", "<table>" in job._repr_html_() and "2/2" in job._repr_html_() and "1 node(s) × 2" in job._repr_html_())
    """, slurm, shared_tmp)
    assert "STATE COMPLETED ['hi-0', 'hi-1']" in out and "LOG1 ['rank 1 says hi']" in out and "HTML True" in out
    for path in records_dir.glob("*/*.json"):  # without the record: sacct's WorkDir and the files
        path.unlink()
    out = _in_new_process(f"""
        from slinkyml.dispatch import Job
        print("RESULTS", Job.attach("{job.job_id}").results(timeout=30))
    """, slurm, shared_tmp)
    assert "RESULTS ['hi-0', 'hi-1']" in out


@pytest.mark.timeout(240)
def test_cli_logs_and_diagnosis_of_a_submit_job(slurm, shared_tmp, records_dir, cli, monkeypatch):
    """`slinkyml jobs logs/status/why` for a submit() job: every rank's log, and the rank that raised."""
    monkeypatch.chdir(shared_tmp)
    job = Executor(None, slurm=slurm, time=5, tasks_per_node=2, mem="512M").submit(fail_on_rank_1)
    with pytest.raises(Exception, match="rank 1 raised KeyError"):
        job.result(timeout=180)
    wait_gone(slurm, job.job_id)
    code, out, _err = cli("jobs", "logs", job.job_id)
    assert code == 0 and f"{job.job_id}_0_log.out" in out and f"{job.job_id}_1_log.err" in out
    code, out, _err = cli("jobs", "status", job.job_id)
    host = slurm.run("sacct", ["-X", "-n", "-P", "-j", job.job_id, "-o", "NodeList"]).stdout.strip()
    assert code == 1 and f"rank 1 on {host} exited 1: KeyError: 'rank 1 lost its key'" in out, out
    code, out, _err = cli("jobs", "why", job.job_id)
    assert code == 1 and "in fail_on_rank_1" in out and f"{job.job_id}_1_log.err" in out


def wait_gone(slurm, job_id: str) -> None:
    wait_until(f"job {job_id} to leave the queue",
               lambda: not slurm.run("squeue", ["-h", "-j", job_id], check=False, retries=0).stdout.strip(),
               timeout=120, every=0.2)


@pytest.mark.timeout(240)
def test_attach_a_running_job_and_cancel_it(slurm, shared_tmp, records_dir):
    job = Executor(shared_tmp / "sub", slurm=slurm, time=5, mem="256M").submit(nap, 300)
    try:
        out = _in_new_process(f"""
            import time
            from slinkyml.dispatch import Job, JobFailed
            job = Job.attach({job.job_id})
            while job.state == "PENDING":
                time.sleep(0.5)
            print("WAS", job.state)
            job.cancel()
            try:
                job.result(timeout=60)
            except JobFailed as exc:
                print("ENDED", exc.info.state)
        """, slurm, shared_tmp)
    finally:
        slurm.run("scancel", [job.job_id], check=False, retries=0)
    assert "WAS RUNNING" in out and "ENDED CANCELLED" in out


@pytest.mark.timeout(240)
def test_attach_a_split_map_array(slurm, shared_tmp, records_dir):
    array = Executor(shared_tmp, slurm=slurm, time=5, mem="128M", max_array_size=3).map_array(
        double, range(10), chunk_size=2)
    assert len(array.array_ids) == 2  # 5 chunks over arrays of at most 3 tasks
    array.wait(timeout=200)
    out = _in_new_process(f"""
        from slinkyml.dispatch import ArrayJob
        array = ArrayJob.attach("{array.array_ids[1]}_0")
        print("RESULTS", array.results(timeout=30), len(array), "items done" in array._repr_html_())
    """, slurm, shared_tmp)
    assert f"RESULTS {[2 * i for i in range(10)]} 10 True" in out


def test_attach_says_what_is_wrong(slurm, shared_tmp, records_dir):
    with pytest.raises(SlinkyError, match="unknown to this client's records and to accounting"):
        Job.attach(999999, slurm=slurm)
    with pytest.raises(SlinkyError, match="no submission record here"):
        ArrayJob.attach(999999, slurm=slurm)
