"""Submission paths on the real cluster: validation, sbatch and slurmrestd backends, CLI, injection."""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from pathlib import Path

import pytest

from slinkyml.jobs import validate
from slinkyml.jobs.follow import wait
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.jobs.restapi import RestApiBackend
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit
from slinkyml.jobs.validate import JobCheckError, check_job, problems, user_associations
from slinkyml.slurm import Slurm
from slinkyml.slurm.rest import api_version

pytestmark = pytest.mark.slurm
EVIL = "x $(touch {canary}) `touch {canary}`; touch {canary} \"dq\" 'sq' \\ \nline2"


def _echo_spec(tmp: Path, **extra) -> JobSpec:
    data = {"name": "echo", "launcher": "srun", "mem_per_node": "256M", "time_limit": "2",
            "entry": {"script": "/bin/echo", "args": ["hello"]}, "log_dir": str(tmp / "logs")}
    data.update(extra)
    return JobSpec.from_dict(data)


@pytest.mark.timeout(60)
def test_validation_says_what_is_wrong_in_one_line(local_cluster, slurm, shared_tmp):
    assert problems(_echo_spec(shared_tmp, nodes=2), slurm) == []
    bad = _echo_spec(shared_tmp, nodes=9, gpus_per_node=1, partition="short", time_limit="02:00:00",
                     account="physics")
    with pytest.raises(JobCheckError) as err:
        check_job(bad, slurm)
    text = err.value.one_line()
    assert "\n" not in text
    for needle in ("exceeds partition short's MaxTime 00:30:00", "with 1 CPUs, gpu:1", "the job needs 9",
                   "no association with account 'physics'"):
        assert needle in text
    with pytest.raises(JobCheckError, match="partition 'nope' does not exist"):
        check_job(_echo_spec(shared_tmp, partition="nope"), slurm)
    # host lists expand here (slurm/hostlist.py), as scontrol would: n[1-2] is in the partition, n[2,9] is not
    n = local_cluster.spec.node_prefix  # n on the session's cluster
    assert problems(_echo_spec(shared_tmp, nodes=2, nodelist=f"{n}[1-2]"), slurm) == []
    with pytest.raises(JobCheckError, match=rf"nodelist {n}\[2,9\] has nodes outside partition debug: {n}9"):
        check_job(_echo_spec(shared_tmp, nodes=2, nodelist=f"{n}[2,9]"), slurm)
    container = _echo_spec(shared_tmp, container={"image": "nvcr.io/nvidia/pytorch:24.07-py3"})
    if "--container-image" in slurm.run("srun", ["--help"]).stdout:  # pyxis loaded (tests/test_pyxis_live.py)
        assert problems(container, slurm) == []
    else:
        with pytest.raises(JobCheckError, match="no --container-image option .the pyxis SPANK plugin"):
            check_job(container, slurm)


@pytest.mark.timeout(60)
def test_the_check_asks_in_one_process_and_refuses_only_on_fresh_answers(slurm, shared_tmp, tmp_path, monkeypatch):
    """The command line's check: the three questions in one scontrol process, the same answers as asked one
    by one; passing on answers kept for this slurm.conf, but a refusal judged on fresh ones; a changed
    slurm.conf (or an old answer) asks again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    user = getpass.getuser()
    calls = slurm.calls
    live = validate.ask_cluster(slurm, user)
    assert slurm.calls - calls == 1  # one process for partitions, nodes and associations
    assert live.partitions == slurm.show("partition") and live.nodes == slurm.show("node")
    assert live.associations == user_associations(slurm, user)
    ok, too_big = _echo_spec(shared_tmp, nodes=2), _echo_spec(shared_tmp, nodes=9)

    def asked(spec: JobSpec, **kwargs: object) -> tuple[list[str], int]:
        before = slurm.calls
        found = problems(spec, slurm, cache=True, **kwargs)
        return found, slurm.calls - before

    assert asked(ok) == ([], 1)  # nothing kept yet: asked, then kept
    assert asked(ok) == ([], 0)  # kept: no process at all
    found, calls = asked(too_big)
    assert calls == 1 and "the job needs 9 node(s)" in found[0]  # a refusal rests on fresh answers
    kept = next((tmp_path / "cache" / "slinkyml").glob("cluster-answers-*.json"))
    data = json.loads(kept.read_text())
    data["partitions"] = [p for p in data["partitions"] if p.get("Default") != "YES"]  # an answer gone stale
    kept.write_text(json.dumps(data))
    assert asked(ok) == ([], 1)  # the kept answers would refuse: asked again, and the fresh ones pass
    assert asked(ok) == ([], 0)
    copy = tmp_path / "slurm.conf"  # the same cluster through another slurm.conf: its own key
    copy.write_bytes(Path(slurm.conf).read_bytes())
    other = Slurm(copy)
    before = other.calls
    assert problems(ok, other, cache=True) == [] and other.calls - before == 1
    assert problems(ok, other, cache=True) == [] and other.calls - before == 1
    copy.write_bytes(copy.read_bytes() + b"\n")  # slurm.conf changed: asked again
    assert problems(ok, other, cache=True) == [] and other.calls - before == 2
    monkeypatch.setattr(validate, "CACHE_MAX_AGE_S", 0.0)  # too old: asked again
    assert asked(ok) == ([], 1)


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


def _rest_backend(local_cluster, slurm, transport: str) -> RestApiBackend:
    spec = local_cluster.spec  # the session's cluster: its own socket and port (a second cluster has others)
    if transport == "unix":
        if local_cluster.version.restd_refuses_root:
            pytest.skip(f"Slurm {local_cluster.version} runs no unix-socket slurmrestd (it refuses root)")
        return RestApiBackend.from_config(slurm=slurm, url=f"unix:{spec.restd_socket}")
    return RestApiBackend.from_config(slurm=slurm, url=spec.restd_url, token=local_cluster.token("root"),
                                      user="root")


@pytest.mark.slurm2605
@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["unix", "jwt"])
def test_restapi_backend_submits_the_same_script(slurm, local_cluster, shared_tmp, transport):
    backend = _rest_backend(local_cluster, slurm, transport)
    # the newest OpenAPI version this Slurm serves: v0.0.38 on 22.05, v0.0.42 on 24.11
    assert backend.version == api_version(slurm.version) == slurm.version.restapi_versions[0]
    spec = _echo_spec(shared_tmp, name=f"rest-{transport}", entry={"script": "/bin/echo", "args": ["via $(rest)"]})
    result = submit(spec, backend=backend, slurm=slurm, cwd=shared_tmp)
    state = wait(slurm, result.job_id, timeout=60, poll=0.5)
    assert state.state == "COMPLETED" and state.name == f"rest-{transport}"
    logs = list((shared_tmp / "logs").glob(f"rest-{transport}-{result.job_id}-r0-task0.log"))
    assert logs and logs[0].read_text() == "via $(rest)\n"


REST_TASK = """import json, os, signal, socket, sys, time
def preempted(signum, frame):
    # what the trainer does: leave the marker the batch script looks for, then stop
    marker = os.path.join(os.environ["SLINKYML_LOG_DIR"],
                          f".preempted-{os.environ['SLURM_JOB_ID']}-r{os.environ['SLINKYML_RESTART_COUNT']}")
    open(marker, "w").close()
    print("task got", signal.Signals(signum).name, flush=True)
    sys.exit(0)
signal.signal(signal.SIGUSR2, preempted)
keys = ("SLURM_CONF", "PATH", "LANG", "SPEC_VAR", "SLURM_JOB_NUM_NODES", "SLURM_PROCID")
json.dump({"env": {k: os.environ.get(k) for k in keys}, "host": socket.gethostname(), "cwd": os.getcwd()},
          open(os.path.join(sys.argv[1], "task%s.json" % os.environ["SLURM_PROCID"]), "w"))
print("task waiting for the warning signal", flush=True)
time.sleep(150)
print("task: no signal came", flush=True)
"""


@pytest.mark.slurm2605
@pytest.mark.timeout(240)
def test_restapi_submit_carries_the_job_options(slurm, local_cluster, shared_tmp, monkeypatch):
    """One job through the newest submit API (v0.0.42 on 24.11: {set, number} numbers, environment
    as a list, kill_warning_* instead of "signal"; v0.0.38 on 22.05), its options checked in
    scontrol and sacct, its environment inside the tasks, and the warning signal before the end."""
    monkeypatch.setenv("LANG", "C.UTF-8")  # handed over in the request's environment (EXPORTED_ENV)
    backend = _rest_backend(local_cluster, slurm, "jwt")
    task = shared_tmp / "task.py"
    task.write_text(REST_TASK)
    spec = JobSpec.from_dict({
        "name": "rest-options", "launcher": "srun", "nodes": 2, "tasks_per_node": 1, "mem_per_node": "256M",
        "time_limit": "2", "python": sys.executable, "entry": {"script": str(task), "args": [str(shared_tmp)]},
        "env": {"SPEC_VAR": "from the spec"}, "log_dir": "logs",  # relative: to the working directory
        "requeue": {"signal": "USR2", "grace_seconds": 60, "max_restarts": 0}})
    path, _ = SlurmJobRequest.from_spec(spec).restapi_body("", version=backend.version, cwd=str(shared_tmp), environment={})
    assert path == f"/slurm/{slurm.version.restapi_versions[0]}/job/submit"
    job_id = submit(spec, backend=backend, slurm=slurm, cwd=shared_tmp).job_id

    job = slurm.show("job", str(job_id))[0]
    assert job["JobName"] == "rest-options" and job["TimeLimit"] == "00:02:00"
    assert job["NumNodes"].split("-")[0] == "2" and job["NumTasks"] == "2"
    assert job["MinMemoryNode"] == "256M" and job["Requeue"] == "1"
    assert job["WorkDir"] == str(shared_tmp)
    assert job["StdOut"] == str(shared_tmp / "logs" / f"rest-options-{job_id}.out")

    # The warning is due 60 s before the 2-minute limit; slurmctld sends it at its first 30-s limit
    # check inside [due - 30 s, due], i.e. 30-60 s into the run. The tasks stop on it: the time
    # limit's warning (not a preemption), no restarts left, so the allocation is held to its end and
    # Slurm records TIMEOUT.
    state = wait(slurm, job_id, timeout=200, poll=1.0)
    assert state.state == "TIMEOUT", state
    tasks = [json.loads((shared_tmp / f"task{rank}.json").read_text()) for rank in (0, 1)]
    assert len({t["host"] for t in tasks}) == 2
    for t in tasks:
        assert t["cwd"] == str(shared_tmp)
        # from the request's environment; a Docker cluster's tasks see the containers' own slurm.conf
        assert t["env"]["SLURM_CONF"] == str(getattr(local_cluster.spec, "slurm_conf_in_jobs",
                                                     local_cluster.spec.slurm_conf))
        assert t["env"]["PATH"] == os.environ["PATH"] and t["env"]["LANG"] == "C.UTF-8"
        assert t["env"]["SPEC_VAR"] == "from the spec" and t["env"]["SLURM_JOB_NUM_NODES"] == "2"
    logs = shared_tmp / "logs"
    task_logs = "".join(p.read_text() for p in sorted(logs.glob(f"rest-options-{job_id}-r0-task*.log")))
    assert task_logs.count("task got SIGUSR2") == 2 and "no signal came" not in task_logs
    batch = (logs / f"rest-options-{job_id}.out").read_text()
    assert "reached its time limit: SIGUSR2; not requeued (requeue.on: time_limit preemption node_failure, " \
           "restarts 0 of 0)" in batch
    if backend.version != "v0.0.38":  # kill_warning_flags BATCH_JOB (= sbatch's "B:"): the batch shell traps it
        assert "SIGUSR2 received; forwarding to the training processes" in batch

    fields = ("JobName", "State", "Timelimit", "NNodes", "WorkDir")
    acct: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and acct.get("State") != "TIMEOUT":  # slurmdbd lags a little
        out = slurm.run("sacct", ["-X", "-n", "-P", "-j", str(job_id), "-o", ",".join(fields)],
                        check=False).stdout.strip().splitlines()
        acct = dict(zip(fields, out[0].split("|"), strict=True)) if out else {}
        time.sleep(1)
    assert acct == {"JobName": "rest-options", "State": "TIMEOUT", "Timelimit": "00:02:00", "NNodes": "2",
                    "WorkDir": str(shared_tmp)}


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
    task_log = out.split("cli-echo-" + job_id + "-r0-task0.log <==")[1]
    assert code == 0 and task_log.splitlines()[1:] == ["cli"]  # each log under its own header


def test_cli_errors_are_one_line(cli, shared_tmp):
    bad = shared_tmp / "bad.yaml"
    bad.write_text("name: x\nentry: {module: m}\nrequeue: {max_restarts: -2}\n")
    code, out, err = cli("sbatch", "render", str(bad))
    assert code == 2 and err == f"slinkyml: error: {bad}:3: requeue.max_restarts: must be between 0 and 1000, got -2\n"
    code, _, err = cli("sbatch", "submit", str(shared_tmp / "missing.yaml"))
    assert code == 2 and err.startswith("slinkyml: error: ") and err.count("\n") == 1
    nope = shared_tmp / "nope.yaml"
    nope.write_text("name: x\npartition: nope\nentry: {module: m}\n")
    code, _, err = cli("sbatch", "submit", str(nope))
    assert code == 1 and "partition 'nope' does not exist" in err and err.count("\n") == 1  # job check failed
