"""The daily loop on the real cluster: `slinkyml run`, `--wait` passing the exit code through, the
first failing rank in `jobs status`/`why`/`--wait`, logs after Slurm forgot the job, `--follow`."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from slinkyml.jobs import records
from slinkyml.jobs.follow import accounting_state, find_logs

pytestmark = pytest.mark.slurm
RAISES = """\
import torch.distributed as dist
dist.init_process_group("gloo")
print("rank", dist.get_rank(), "ready", flush=True)
if dist.get_rank() == 1:
    raise RuntimeError("boom on rank 1")
import time; time.sleep(60)
"""


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("records")
    old = os.environ.get("SLINKYML_RECORDS_DIR")
    os.environ["SLINKYML_RECORDS_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("SLINKYML_RECORDS_DIR", None)
    else:
        os.environ["SLINKYML_RECORDS_DIR"] = old


@pytest.fixture(scope="module")
def failed_job(slurm, records_dir, tmp_path_factory):
    """A 2-node torchrun job whose rank 1 raises, submitted with `slinkyml run --wait` (in a subprocess:
    the exit status is the CLI's own)."""
    import subprocess

    work = Path(tmp_path_factory.mktemp("daily"))
    os.chmod(work, 0o777)
    (work / "train.py").write_text(RAISES)
    repo = str(Path(__file__).resolve().parent.parent)  # this checkout's slinkyml, from any cwd
    env = dict(os.environ, SLURM_CONF=slurm.conf or "",
               PYTHONPATH=os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])]))
    # 1G: the node's torchrun agent and rank each import torch (PyPI's CUDA build: ~530 MB RSS alone), and
    # the local cluster enforces --mem (task/cgroup): with 400M rank 0 was OOM-killed
    proc = subprocess.run([sys.executable, "-m", "slinkyml", "run", "-N", "2", "--mem", "1G", "-t", "3",
                           "--python", sys.executable, "--wait", "train.py", "--lr", "3"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=170)
    assert "Submitted batch job" in proc.stdout, proc.stderr
    job_id = int(proc.stdout.split("Submitted batch job ")[1].split()[0])
    return job_id, work, proc


@pytest.mark.timeout(200)
def test_run_wait_exits_with_the_jobs_code_and_names_the_failing_rank(slurm, failed_job):
    job_id, _work, proc = failed_job
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"job {job_id} FAILED (exception): rank 1 on ") and "RuntimeError: boom on rank 1" in last
    code = accounting_state(slurm, job_id).exit_code.partition(":")[0]
    assert proc.returncode == int(code) != 0, proc.stderr


@pytest.mark.timeout(60)
def test_status_and_why_name_rank_host_and_exception(slurm, failed_job, cli):
    job_id, _work, _proc = failed_job
    host = slurm.show("node")[1]["NodeName"]  # torchrun's rank 1 runs on the job's second node
    code, out, _err = cli("jobs", "status", str(job_id))
    assert code == 1 and f"rank 1 on {host} exited 1: RuntimeError: boom on rank 1" in out
    assert "143" not in out  # not the SIGTERM the other rank got
    code, out, _err = cli("jobs", "why", str(job_id))
    assert code == 1 and '[rank1]:     raise RuntimeError("boom on rank 1")' in out
    assert "Root Cause (first observed failure)" in out and "task 1: Exited with exit code 1" in out


@pytest.mark.timeout(60)
def test_logs_from_accounting_with_or_without_the_record(slurm, failed_job, records_dir, cli):
    job_id, work, _proc = failed_job
    state = accounting_state(slurm, job_id)  # what is left once slurmctld forgot the job
    assert state.workdir == str(work) and state.name == "train"
    assert find_logs(slurm, state).batch_log == work / "logs" / f"train-{job_id}.out"
    saved = records_dir / "saved"
    saved.mkdir()
    for path in records_dir.glob("*/*"):  # the journal of sbatch jobs and any job's own file
        if path.is_file():
            path.rename(saved / path.name)  # no record: sacct's WorkDir and the rendered layout
    try:
        logs = find_logs(slurm, state)
        assert [r.name for r in logs.rank_logs()] == ["node0", "node1"]
    finally:
        for path in saved.iterdir():
            path.rename(records.records_dir(slurm.conf) / path.name)
    code, out, _err = cli("jobs", "logs", str(job_id), "--rank", "1")
    assert code == 0 and "[rank1]: RuntimeError: boom on rank 1" in out and "ready" in out
    code, out, _err = cli("jobs", "logs", str(job_id), "-n", "2")
    assert code == 0 and out.strip().splitlines()[-1].startswith(f"==> job {job_id} FAILED (exception): rank 1")


@pytest.mark.timeout(60)
def test_logs_of_removed_files_exit_1_with_the_reason(slurm, failed_job, cli, tmp_path):
    job_id, work, _proc = failed_job
    moved = tmp_path / "moved"
    (work / "logs").rename(moved)
    try:
        code, _out, err = cli("jobs", "logs", str(job_id))
    finally:
        moved.rename(work / "logs")
    assert code == 1 and "log files are gone" in err and str(work / "logs" / f"train-{job_id}.out") in err


@pytest.mark.timeout(120)
def test_sbatch_submit_wait_passes_the_exit_code_through(slurm, shared_tmp, records_dir, cli, monkeypatch):
    spec = shared_tmp / "exit.yaml"
    spec.write_text("name: exit7\nlauncher: srun\nmem_per_node: 128M\ntime_limit: '2'\n"
                    f"log_dir: {shared_tmp}/logs\nentry: {{script: /bin/sh, args: ['-c', 'exit 7']}}\n")
    monkeypatch.chdir(shared_tmp)
    code, out, _err = cli("sbatch", "submit", str(spec), "--wait")
    assert code == 7, out
    assert out.strip().splitlines()[-1].endswith("exited 7")


@pytest.mark.timeout(120)
def test_follow_shows_every_line_once_in_order(slurm, shared_tmp, records_dir, cli, monkeypatch):
    """Fast output, repeated lines and a long job: --follow prints each line exactly once."""
    monkeypatch.chdir(shared_tmp)
    script = "for i in $(seq 1 400); do echo line $i; echo same; done; sleep 3; echo tail; printf partial"
    code, out, _err = cli("run", "--launcher", "srun", "--mem", "128M", "-t", "2", "--log-dir",
                          str(shared_tmp / "logs"), "--follow", "/bin/bash", "-c", script)
    assert code == 0, out
    shown = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("  [task0 r0] ")]
    expected = [w for i in range(1, 401) for w in (f"line {i}", "same")] + ["tail", "partial"]
    assert shown == expected


def test_run_builds_the_same_spec_as_yaml(cli, tmp_path):
    saved = tmp_path / "job.yaml"
    code, out, err = cli("run", "-N", "2", "--gpus-per-node", "0", "-t", "0:30:00", "-p", "short", "-A", "ml",
                         "--env", "A=1", "--env", "B=x=y", "--dry-run", "--no-check", "--save-spec", str(saved),
                         "-m", "pkg.train", "--lr", "3", "-N", "9")
    assert code == 0, err
    from slinkyml.jobs.render import render_sbatch
    from slinkyml.jobs.spec import JobSpec, interpreter

    spec = JobSpec.from_yaml(saved)
    assert spec.python is None and out == render_sbatch(interpreter(spec)[0])  # as submitted: this interpreter
    assert (spec.nodes, spec.partition, spec.account, spec.time_limit) == (2, "short", "ml", "0:30:00")
    assert spec.entry.module == "pkg.train" and spec.entry.args == ("--lr", "3", "-N", "9")
    assert dict(spec.env) == {"A": "1", "B": "x=y"} and spec.name == "train"


@pytest.mark.parametrize(("argv", "needle"), [
    (["--dry-run"], "give a script"),
    (["-N", "0", "x.py"], "nodes: must be"),
    (["--env", "NOEQUALS", "x.py"], "--env 'NOEQUALS': expected KEY=VALUE"),
    (["--launcher", "mpi", "x.py"], "launcher"),
    (["/bin/true"], "entry.script: the torchrun launcher runs Python"),
])
def test_run_bad_flags_are_one_line(cli, argv, needle):
    code, out, err = cli("run", "--no-check", *argv)
    assert code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.timeout(120)
def test_why_recognises_a_launch_failure(slurm, shared_tmp, records_dir, cli, monkeypatch):
    monkeypatch.chdir(shared_tmp)
    code, out, _err = cli("run", "--launcher", "srun", "--mem", "128M", "-t", "2", "--log-dir", str(shared_tmp / "logs"),
                          "--wait", str(shared_tmp / "no-such-program"))
    job_id = out.split("Submitted batch job ")[1].split()[0]
    assert code != 0 and "(launch failure)" in out.strip().splitlines()[-1], out
    code, out, _err = cli("jobs", "why", job_id)
    assert code == 1 and "no-such-program" in out and "No such file or directory" in out, out


def _python_without_torch() -> str:
    """An interpreter the nodes have that cannot import torch (the venv's base, or the system's)."""
    import subprocess

    for python in (getattr(sys, "_base_executable", ""), "/usr/bin/python3"):
        if python and os.path.exists(python) and "No module named 'torch'" in subprocess.run(
                [python, "-c", "import torch"], capture_output=True, text=True).stderr:
            return python
    pytest.skip("no interpreter without torch on this machine")  # never a pass: the test did not run


@pytest.mark.timeout(120)
def test_run_without_python_runs_the_submitting_interpreter(slurm, shared_tmp, records_dir, cli, monkeypatch):
    """No --python, no python: in the spec: the ranks run the interpreter that submitted (submitit's rule)."""
    monkeypatch.chdir(shared_tmp)
    (shared_tmp / "which.py").write_text("import sys; print('interpreter', sys.executable)\n")
    logs = shared_tmp / "which-logs"
    code, out, _err = cli("run", "--launcher", "srun", "--mem", "128M", "-t", "2", "--log-dir", str(logs), "--wait",
                          str(shared_tmp / "which.py"))
    assert code == 0, out
    job_id = out.split("Submitted batch job ")[1].split()[0]
    ran = "".join(path.read_text() for path in logs.glob(f"*{job_id}*") if path.suffix in (".out", ".log"))
    assert f"interpreter {sys.executable}" in ran, ran


@pytest.mark.timeout(120)
def test_a_rank_that_dies_before_training_is_named_with_its_error_line(local_cluster, slurm, shared_tmp, records_dir,
                                                                       cli, monkeypatch):
    """torchrun under a python without torch: the rank's log holds the interpreter's one line (no traceback);
    `--wait`, `jobs status` and `jobs why` name the rank and quote it."""
    monkeypatch.chdir(shared_tmp)
    python = _python_without_torch()
    code, out, _err = cli("run", "--python", python, "--mem", "256M", "-t", "2", "--log-dir",
                          str(shared_tmp / "notorch-logs"), "--wait", "-m", "slinkyml.train", "--steps", "1")
    job_id = out.split("Submitted batch job ")[1].split()[0]
    node = re.escape(local_cluster.spec.node_prefix)
    said = re.compile(rf"\(exception\): rank 0 on {node}\d+ exited 1: {re.escape(python)}: Error while finding module "
                      r"specification for 'torch.distributed.run' \(ModuleNotFoundError: No module named 'torch'\)")
    assert code == 1 and said.search(out.strip().splitlines()[-1]), out
    code, out, _err = cli("jobs", "status", job_id)
    assert code == 1 and said.search(out), out
    code, out, _err = cli("jobs", "why", job_id)
    assert code == 1 and said.search(out) and "-r0-node0.log:1 <==" in out, out
