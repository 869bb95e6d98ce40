"""Submission paths on the real cluster: validation, sbatch and slurmrestd backends, CLI, injection."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slinkyml.jobs.follow import wait
from slinkyml.jobs.restapi import RestApiBackend
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit
from slinkyml.jobs.validate import JobCheckError, check_job, problems, user_associations

pytestmark = pytest.mark.slurm
EVIL = "x $(touch {canary}) `touch {canary}`; touch {canary} \"dq\" 'sq' \\ \nline2"


def _echo_spec(tmp: Path, **extra) -> JobSpec:
    data = {"name": "echo", "launcher": "srun", "mem_per_node": "256M", "time_limit": "2",
            "entry": {"script": "/bin/echo", "args": ["hello"]}, "log_dir": str(tmp / "logs")}
    data.update(extra)
    return JobSpec.from_dict(data)


@pytest.mark.timeout(60)
def test_validation_says_what_is_wrong_in_one_line(slurm, shared_tmp):
    assert problems(_echo_spec(shared_tmp, nodes=2), slurm) == []
    bad = _echo_spec(shared_tmp, nodes=9, gpus_per_node=1, partition="short", time_limit="02:00:00",
                     account="physics")
    with pytest.raises(JobCheckError) as err:
        check_job(bad, slurm)
    text = err.value.one_line()
    assert "\n" not in text
    for needle in ("exceeds partition short's MaxTime 00:30:00", "with gpu:1", "the job needs 9",
                   "no association with account 'physics'"):
        assert needle in text
    with pytest.raises(JobCheckError, match="partition 'nope' does not exist"):
        check_job(_echo_spec(shared_tmp, partition="nope"), slurm)


@pytest.mark.timeout(60)
def test_associations_from_the_controller_cache_agree_with_slurmdbd(slurm):
    """The fast path (slurmctld's assoc_mgr) gives what sacctmgr gives; misses are confirmed by sacctmgr."""
    for user in ("root", "alice", "bob"):
        fast = sorted(user_associations(slurm, user))
        db = slurm.run("sacctmgr", ["-nP", "show", "assoc", "where", f"user={user}",
                                    "format=account,partition"]).stdout.split()
        assert fast and fast == sorted(tuple(line.split("|", 1)) for line in db)
    calls = slurm.calls
    assert ("root", "") in user_associations(slurm, "root", "root")
    assert slurm.calls - calls == 1  # a hit costs one scontrol call, no sacctmgr
    assert user_associations(slurm, "nosuchuser") == []
    assert user_associations(slurm, "root", "physics") == []  # cache has root, not physics: sacctmgr confirms


@pytest.mark.timeout(90)
def test_injection_values_arrive_literally_and_run_nothing(slurm, shared_tmp):
    canary = shared_tmp / "pwned"
    evil = EVIL.format(canary=canary)
    dump = shared_tmp / "dump.py"
    dump.write_text("import json, os, sys\njson.dump({'argv': sys.argv[1:], 'env': os.environ['EVIL']}, "
                    "open(os.environ['OUT'], 'w'))\n")
    spec = _echo_spec(shared_tmp, name=evil.replace("\n", " "), python=sys.executable,
                      entry={"script": str(dump), "args": [evil, "$HOME", "*", ";"]},
                      env={"EVIL": evil, "OUT": str(shared_tmp / "out.json")})
    result = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=shared_tmp)
    state = wait(slurm, result.job_id, timeout=60, poll=0.5)
    assert state.state == "COMPLETED" and state.name == evil.replace("\n", " ")
    out = json.loads((shared_tmp / "out.json").read_text())
    assert out == {"argv": [evil, "$HOME", "*", ";"], "env": evil}
    assert not canary.exists()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["unix", "jwt"])
def test_restapi_backend_submits_the_same_script(slurm, local_cluster, shared_tmp, transport):
    if transport == "unix":
        sock = Path(local_cluster.spec.state_dir) / "run" / "slurmrestd.sock"
        backend = RestApiBackend.from_config(slurm=slurm, url=f"unix:{sock}")
    else:
        backend = RestApiBackend.from_config(slurm=slurm, url="http://127.0.0.1:6820",
                                             token=local_cluster.token("root"), user="root")
    assert backend.version == ("v0.0.38" if not slurm.version.at_least(23, 11) else "v0.0.40")
    spec = _echo_spec(shared_tmp, name=f"rest-{transport}", entry={"script": "/bin/echo", "args": ["via $(rest)"]})
    result = submit(spec, backend=backend, slurm=slurm, cwd=shared_tmp)
    state = wait(slurm, result.job_id, timeout=60, poll=0.5)
    assert state.state == "COMPLETED" and state.name == f"rest-{transport}"
    logs = list((shared_tmp / "logs").glob(f"rest-{transport}-{result.job_id}-r0-task0.log"))
    assert logs and logs[0].read_text() == "via $(rest)\n"


@pytest.mark.timeout(90)
def test_cli_render_dry_run_and_submit_wait(cli, shared_tmp, monkeypatch):
    job = shared_tmp / "job.yaml"
    job.write_text(f"name: cli-echo\nlauncher: srun\nmem_per_node: 256M\ntime_limit: '2'\n"
                   f"entry: {{script: /bin/echo, args: [cli]}}\nlog_dir: {shared_tmp / 'logs'}\n")
    code, out, _ = cli("sbatch", "render", str(job))
    assert code == 0 and out.startswith("#!/bin/bash")
    code, out, err = cli("sbatch", "submit", str(job), "--dry-run")
    assert code == 0 and "#SBATCH --job-name=cli-echo" in out and "nothing submitted" in err
    monkeypatch.chdir(shared_tmp)
    code, out, err = cli("sbatch", "submit", str(job), "--wait", "--timeout", "60")
    assert code == 0, err
    assert "Submitted batch job" in out and "COMPLETED" in out
    job_id = out.split("Submitted batch job ")[1].split()[0]
    code, out, _ = cli("jobs", "status", job_id)
    assert code == 0 and "COMPLETED" in out
    code, out, _ = cli("jobs", "logs", job_id)
    assert code == 0 and "[task0 r0] cli" in out


def test_cli_errors_are_one_line(cli, shared_tmp):
    bad = shared_tmp / "bad.yaml"
    bad.write_text("name: x\nentry: {module: m}\nrequeue: {max_restarts: -2}\n")
    code, out, err = cli("sbatch", "render", str(bad))
    assert code == 2 and err.strip() == "slinkyml: error: requeue.max_restarts: must be ≥ 0"
    code, _, err = cli("sbatch", "submit", str(shared_tmp / "missing.yaml"))
    assert code == 2 and err.startswith("slinkyml: error: ") and err.count("\n") == 1
    nope = shared_tmp / "nope.yaml"
    nope.write_text("name: x\npartition: nope\nentry: {module: m}\n")
    code, _, err = cli("sbatch", "submit", str(nope))
    assert code == 2 and "partition 'nope' does not exist" in err and err.count("\n") == 1
