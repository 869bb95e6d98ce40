"""Why a run ended: decide.sh over the table of data/run_causes.json, as the batch script and the
submitit launcher both run it. Slurm's side is squeue's recorded answers (a stub on PATH prints
what squeue printed on the local cluster); tests/test_faults_live.py produces each cause for real."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slinkyml import specload
from slinkyml.jobs.render import render_sbatch
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm import causes, protocol

SHELLCHECK = shutil.which("shellcheck")
#: what Slurm 22.05 wrote into srun's stderr on the local cluster (tests/test_faults_live.py)
CGROUP_OOM = ("srun: error: c3: task 0: Out Of Memory\nslurmstepd-c3: error: Detected 1 oom-kill event(s) in "
              "StepId=9.0. Some of your processes may have been killed by the cgroup out-of-memory handler.")
#: Slurm 26.05.5's slurmstepd words it differently (seen on the local 26.05 cluster)
CGROUP_OOM_2605 = "[2026-12-01T14:31:24.951] error: Detected 1 oom_kill event in StepId=2.0. Some of the step tasks have been OOM Killed."
OVER_MEMORY_KILL = "slurmstepd-c1: error: Exceeded job memory limit"
TIME_LIMIT_LINE = "slurmstepd-c1: error: *** STEP 5.0 ON c1 CANCELLED AT 2026-12-01T13:45:17 DUE TO TIME LIMIT ***"
SCANCEL_LINE = "slurmstepd-c1: error: *** STEP 3.0 ON c1 CANCELLED AT 2026-12-01T13:44:14 ***"


@pytest.fixture
def slurm_says(tmp_path, monkeypatch):
    """Put a squeue on PATH that answers as the real one did: ``%T %r`` and ``%e`` for the job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def say(state: str = "RUNNING None", end: float | None = None) -> None:
        end_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(end or time.time() + 3600))
        squeue = bin_dir / "squeue"
        squeue.write_text(f"#!/bin/bash\nif [[ $* == *%e* ]]; then echo {end_text}; else echo '{state}'; fi\n")
        squeue.chmod(0o755)

    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    say()
    return say


def _decide(tmp_path: Path, *, step_errors: str = "", rank_failure: str = "", marker: str | None = None,
            **kwargs) -> causes.Decision:
    (tmp_path / "err").write_text(step_errors)
    (tmp_path / "failed").write_text(rank_failure)
    if marker is not None:
        (tmp_path / "preempted").write_text(marker)
    options = dict(job_id="7", requeue_on=causes.default_requeue_on(), max_restarts=3, grace_s=60,
                   step_errors=tmp_path / "err", failure_marker=tmp_path / "failed",
                   preempted_marker=tmp_path / "preempted")
    return causes.decide(**{**options, **kwargs})


def test_a_run_that_ended_well_has_no_cause(tmp_path, slurm_says):
    assert _decide(tmp_path, status=0) == causes.Decision("", "", "")


def test_time_limit_without_a_checkpoint_is_not_requeued(tmp_path, slurm_says):
    """The issue's case: -t 1 with a 60 s grace. The warning is the time limit's, not a preemption,
    and a run that never checkpointed would only start over: it ends, held to its TIMEOUT."""
    now = time.time()
    slurm_says(end=now + 55)
    decision = _decide(tmp_path, status=1, stop_signal="SIGUSR2", signal_at=now)
    assert (decision.cause, decision.action) == ("time_limit", "failed")
    assert decision.detail == "SIGUSR2 (no checkpoint since the run started)"
    assert decision.message == "reached its time limit"


def test_time_limit_after_a_checkpoint_requeues(tmp_path, slurm_says):
    now = time.time()
    slurm_says(end=now + 80)  # slurmctld sends the warning up to its 30 s check period early
    assert _decide(tmp_path, status=0, stop_signal="SIGUSR2", signal_at=now, marker="USR2\n").action == "requeue"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "step-8.pt").write_text("x")  # a checkpoint written since the run started, no marker
    decision = _decide(tmp_path, status=0, stop_signal="SIGUSR2", signal_at=now, checkpoint_dir=str(ckpt),
                       run_started=now - 100)
    assert (decision.cause, decision.action) == ("time_limit", "requeue")


def test_an_early_warning_signal_is_a_preemption(tmp_path, slurm_says):
    """``scancel --signal=USR2`` (or PreemptParameters=send_user_signal) long before the end."""
    now = time.time()
    slurm_says(end=now + 3000)
    decision = _decide(tmp_path, status=0, stop_signal="SIGUSR2", signal_at=now, marker="USR2\n")
    assert (decision.cause, decision.action, decision.detail) == ("preemption", "requeue", "SIGUSR2")


def test_sigterm_by_the_time_limit_and_by_scancel(tmp_path, slurm_says):
    slurm_says("COMPLETING TimeLimit")
    decision = _decide(tmp_path, status=143, stop_signal="SIGTERM", step_errors=TIME_LIMIT_LINE)
    assert decision.cause == "time_limit" and decision.detail.startswith(TIME_LIMIT_LINE)
    slurm_says("COMPLETING None")
    decision = _decide(tmp_path, status=143, stop_signal="SIGTERM", step_errors=SCANCEL_LINE,
                       requeue_on=("any_failure",))
    assert (decision.cause, decision.action) == ("cancelled", "failed")


def test_grace_time_preemption_while_running_requeues(tmp_path, slurm_says):
    decision = _decide(tmp_path, status=0, stop_signal="SIGTERM", marker="TERM\n")
    assert (decision.cause, decision.action) == ("preemption", "requeue")
    slurm_says("COMPLETING None")  # scontrol requeue: Slurm requeues it itself
    decision = _decide(tmp_path, status=0, stop_signal="SIGTERM", step_errors="*** JOB 4 ON c1 CANCELLED AT "
                       "2026-12-01T13:44:14 DUE TO JOB REQUEUE ***")
    assert (decision.cause, decision.action) == ("preemption", "slurm")


@pytest.mark.parametrize("evidence", [{"step_errors": CGROUP_OOM}, {"step_errors": CGROUP_OOM_2605},
                                      {"step_errors": OVER_MEMORY_KILL},
                                      {"rank_failure": "user rank 0 on c1: MemoryError: \n"}],
                         ids=["cgroup", "cgroup-26.05", "OverMemoryKill", "MemoryError"])
def test_out_of_memory_is_its_own_cause_and_never_requeues_by_default(tmp_path, slurm_says, evidence):
    decision = _decide(tmp_path, status=1, **evidence)
    assert (decision.cause, decision.action) == ("oom", "failed")
    assert _decide(tmp_path, status=1, requeue_on=("oom",), **evidence).action == "requeue"


def test_the_first_failing_rank_is_the_cause(tmp_path, slurm_says):
    lines = "user rank 1 on c2: ValueError: bad shape\ncommunication rank 0 on c1: RuntimeError: Connection closed by peer\n"
    decision = _decide(tmp_path, status=1, rank_failure=lines)
    assert (decision.cause, decision.action) == ("user_error", "failed")
    assert decision.detail == "user rank 1 on c2: ValueError: bad shape"


def test_a_killed_launcher_reads_alike_from_python_and_bash(tmp_path, slurm_says):
    """subprocess says -9, bash's wait says 137: one fact, "killed by signal 9"."""
    from_python = _decide(tmp_path, status=-9)
    assert from_python == _decide(tmp_path, status=137)
    assert (from_python.cause, from_python.detail) == ("node_failure", "killed by signal 9")


def test_srun_lines_decide_alike_for_both(tmp_path, slurm_says):
    killed = "srun: error: c2: task 1: Killed"
    assert _decide(tmp_path, status=1, step_errors=killed).cause == "node_failure"
    exited = "srun: error: c1: task 0: Exited with exit code 1\n" + killed
    assert _decide(tmp_path, status=1, step_errors=exited).cause == "user_error"
    assert _decide(tmp_path, status=1, step_errors="srun: error: Node failure on c2").cause == "node_failure"
    assert _decide(tmp_path, status=2).detail == "exit status 2"


def test_restarts_run_out(tmp_path, slurm_says):
    decision = _decide(tmp_path, status=0, stop_signal="SIGTERM", restart=3, max_restarts=3)
    assert (decision.cause, decision.action) == ("preemption", "failed")


def test_every_rule_names_a_cause_and_a_fact_the_function_reads():
    facts = set(re.findall(r"^\s+(\w+)\) matched=", causes.DECIDE_SH.read_text(), re.M))
    for rule in causes.table()["rules"]:
        assert rule["cause"] in causes.causes()
        assert set(rule["when"]) <= facts, rule
        for regex in rule["when"].values():
            assert "\t" not in regex and "\\d" not in regex  # one TAB-separated line; POSIX ERE has no \d
            re.compile(regex)


def test_the_schema_accepts_exactly_the_causes_that_can_requeue():
    node = specload.schema("job")["$defs"]["requeue"]["properties"]["on"]
    assert tuple(node["items"]["enum"]) == causes.requeue_causes() == protocol.REQUEUE_CAUSES
    assert "cancelled" not in causes.requeue_causes()
    assert causes.default_requeue_on() == ("time_limit", "preemption", "node_failure")


def test_the_batch_script_carries_the_same_function_and_rules():
    script = render_sbatch(JobSpec.from_dict({"name": "j", "entry": {"module": "m"}}))
    assert causes.shell_function() in script
    assert causes.cause_rules() in script and causes.requeue_rules() in script
    assert "# -- run as a program" not in script  # it would decide as soon as it is defined


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_decide_sh_is_shellcheck_clean():
    proc = subprocess.run([SHELLCHECK, "-s", "bash", "--severity=style", str(causes.DECIDE_SH)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_the_rendered_script_decides_an_oom_and_records_it(tmp_path, slurm_says):
    """The whole script with a stub srun that ends as an OOM-killed step does: FAILED, one event."""
    bin_dir = tmp_path / "bin"
    (bin_dir / "scontrol").write_text("#!/bin/sh\n[ \"$1\" = show ] && echo n1\nexit 0\n")
    (tmp_path / "srun.err").write_text(CGROUP_OOM + "\n")
    (bin_dir / "srun").write_text(f"#!/bin/bash\ncat {tmp_path / 'srun.err'} >&2\nexit 1\n")
    for name in ("scontrol", "srun"):
        (bin_dir / name).chmod(0o755)
    spec = JobSpec.from_dict({"name": "oom", "launcher": "srun", "entry": {"script": "/bin/true"},
                              "log_dir": str(tmp_path / "logs")})
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(spec))
    env = {**os.environ, "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "SLURM_NNODES": "1"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "slinkyml: out of memory: over its --mem" in proc.stderr
    assert protocol.read_events(tmp_path / "logs", 7) == ["r0 failed oom: srun: error: c3: task 0: Out Of Memory"]


# -- warnings before it goes wrong --------------------------------------------------------------------
def test_a_time_limit_with_no_room_to_checkpoint_is_warned_about():
    from slinkyml.jobs.request import SlurmJobRequest

    def warnings(time_limit: str, grace: int = 60) -> list[str]:
        spec = JobSpec.from_dict({"name": "j", "entry": {"module": "m"}, "time_limit": time_limit,
                                  "requeue": {"grace_seconds": grace}})
        return SlurmJobRequest.from_spec(spec).warnings()

    (line,) = warnings("1")  # the issue's -t 1: the 60 s warning arrives at the start
    assert line.startswith("time limit 1 (60 s) is not above the stop signal's grace plus a checkpoint (150 s")
    assert warnings("2") and warnings("00:02:30") and not warnings("00:02:31") and not warnings("3")
    assert not warnings("1", grace=10)  # 10 + 30 + 10 s fit in a minute


def test_sbatch_check_reads_the_scripts_own_directives():
    from slinkyml.jobs.shapecheck import script_warnings

    assert script_warnings("#!/bin/bash\n#SBATCH -t 2\n#SBATCH --signal=B:USR2@60\nsrun x\n")
    assert script_warnings("#!/bin/bash\n#SBATCH --time=1\n#SBATCH --signal=USR1\n")  # sbatch's lead: 60 s
    assert not script_warnings("#!/bin/bash\n#SBATCH --time=10\n#SBATCH --signal=B:USR2@60\n")
    assert not script_warnings("#!/bin/bash\n#SBATCH --time=1\n")  # no signal: nothing to stop early
    assert not script_warnings("#!/bin/bash\necho\n#SBATCH --time=1\n#SBATCH --signal=USR2@60\n")  # not directives


def test_dry_run_prints_the_warning(tmp_path, cli):
    job = tmp_path / "job.yaml"
    job.write_text("name: short\nentry: {module: m}\ntime_limit: '1'\n")
    code, out, err = cli("sbatch", "submit", "--dry-run", "--no-check", str(job))
    assert code == 0 and "# warning: time limit 1 (60 s) is not above the stop signal's grace" in err, err


def test_a_warning_only_the_ranks_got_is_timed_by_their_marker(tmp_path, slurm_says):
    """Slurm 22.05's REST API sends --signal to the steps only: the batch shell never traps it, so
    the marker the ranks wrote after their checkpoint says when it came (at the latest)."""
    slurm_says(end=time.time() + 30)
    decision = _decide(tmp_path, status=0, stop_signal="SIGUSR2", marker="USR2\n", max_restarts=0)
    assert (decision.cause, decision.action) == ("time_limit", "failed")
    slurm_says(end=time.time() + 3000)
    assert _decide(tmp_path, status=0, stop_signal="SIGUSR2", marker="USR2\n").cause == "preemption"


def test_scancel_is_read_from_the_batch_logs_own_part(tmp_path, slurm_says):
    """slurmstepd writes the batch step's "*** JOB … CANCELLED AT … ***" into the batch log, not into
    srun's stderr; only what this run added counts (the log is appended across restarts)."""
    log = tmp_path / "job.out"
    earlier = "srun: error: Node failure on c2\n"
    log.write_text(earlier + "slinkyml: requeueing after node_failure\n" + SCANCEL_LINE.replace("STEP 3.0", "JOB 3") + "\n")
    slurm_says("COMPLETING None")
    decision = _decide(tmp_path, status=143, stop_signal="SIGTERM", job_output=str(log), job_output_from=len(earlier),
                       requeue_on=("any_failure",))
    assert (decision.cause, decision.action) == ("cancelled", "failed")
