"""The record layer: Slurm's output → records keyed by field name, names with any character kept whole."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slinkyml.accounting import dashboard
from slinkyml.dispatch.executor import _accounting_facts
from slinkyml.dispatch.tracking import Tracker
from slinkyml.jobs import diagnose
from slinkyml.jobs.follow import accounting_state, job_state, wait
from slinkyml.slurm import records, states

DATA = Path(__file__).resolve().parent / "data"
#: a job name the schema allows that every old ``|`` parser cut: pipe, tab, both quotes, a newline, ``=``
NASTY = "train|v2\tq\"d'q \nnext X=y"


def test_a_name_with_pipes_tabs_quotes_and_newlines_stays_whole():
    fields = ("JobID", "JobName", "WorkDir", "State")
    text = records.SEP.join(["7", NASTY, "/w|d", "COMPLETED"]) + "\n" + records.SEP.join(["8", "b", "/x", "FAILED"])
    rows = records.split_records(text + "\n", fields)
    assert rows == [{"JobID": "7", "JobName": NASTY, "WorkDir": "/w|d", "State": "COMPLETED"},
                    {"JobID": "8", "JobName": "b", "WorkDir": "/x", "State": "FAILED"}]
    assert rows.malformed == 0


def test_rows_of_the_wrong_width_are_counted_not_guessed():
    sep = records.SEP
    rows = records.split_records(f"1{sep}a{sep}b{sep}c\n2{sep}x\n", ("A", "B", "C"))
    assert rows == [] and rows.malformed == 2  # one too wide, one cut short at the end


def test_squeue_format_fields_end_with_the_delimiter():
    sep = records.SEP
    text = f"5{sep}{NASTY}{sep}PENDING{sep}\n6{sep}n{sep}RUNNING{sep}\n"
    rows = records.split_records(text, ("JobID", "Name", "State"), trailing=True)
    assert [r["Name"] for r in rows] == [NASTY, "n"] and rows[1]["State"] == "RUNNING"
    assert records.squeue_args(("JobID", "Name"), ["-t", "all"]) == [
        "--noheader", f"--Format=JobID:{sep},Name:{sep}", "-t", "all"]


def test_scontrol_records_keep_names_and_comments_with_spaces_and_newlines():
    text = ("JobId=3 JobName=tr|a\tin \"q' \nv2 X=y UserId=root(0) GroupId=root(0) JobState=PENDING "
            "Reason=None Command=(null) WorkDir=/tmp Comment=a b=c  StdErr=/tmp/e StdIn=/dev/null "
            "StdOut=/tmp/o Power=\nJobId=4 JobName=plain UserId=bob(1) JobState=RUNNING\n")
    first, second = records.split_scontrol(text)
    assert first["JobName"] == "tr|a\tin \"q' \nv2 X=y" and first["UserId"] == "root(0)"
    assert first["Comment"] == "a b=c" and first["WorkDir"] == "/tmp" and first["StdOut"] == "/tmp/o"
    assert second == {"JobId": "4", "JobName": "plain", "UserId": "bob(1)", "JobState": "RUNNING"}


def test_scontrol_headers_are_skipped_and_multi_line_records_joined():
    text = ("Current Association Manager state\nAssociation Records\n"
            "ClusterName=c Account=root UserName= Partition= ID=1\n"
            "    SharesRaw/Norm/Level/Factor=1/0.00/1/0.00 UsageRaw/Norm/Efctv=36.25/1.00/1.00\n"
            "ClusterName=c Account=ml UserName=dave(1004) Partition= ID=3\n"
            "    UsageRaw/Norm/Efctv=0.50/0.01/0.01\n")
    rows = records.split_scontrol(text)
    assert [(r["Account"], r["UserName"], r["UsageRaw/Norm/Efctv"]) for r in rows] == [
        ("root", "", "36.25/1.00/1.00"), ("ml", "dave(1004)", "0.50/0.01/0.01")]


def test_several_scontrol_commands_in_one_process_are_told_apart_by_their_first_key():
    """``scontrol -o`` reading three commands from stdin (validate.ask_cluster): 22.05 with readline echoes
    each command after its prompt; without readline the bare prompt comes before the answer's first line."""
    echoed = ("scontrol: show partition\nPartitionName=debug Default=YES MaxTime=UNLIMITED Nodes=n[1-2]\n"
              "scontrol: show node\nNodeName=n1 CPUTot=4 State=IDLE\nNodeName=n2 CPUTot=4 State=DOWN+DRAIN\n"
              "scontrol: show assoc_mgr flags=assoc users=bob\nCurrent Association Manager state\n"
              "Association Records\nClusterName=c Account=physics UserName=bob(1001) Partition= ID=4\n"
              "scontrol: \n")
    bare = ("scontrol: PartitionName=debug Default=YES MaxTime=UNLIMITED Nodes=n[1-2]\n"
            "scontrol: NodeName=n1 CPUTot=4 State=IDLE\nNodeName=n2 CPUTot=4 State=DOWN+DRAIN\n"
            "scontrol: Current Association Manager state\nAssociation Records\n"
            "ClusterName=c Account=physics UserName=bob(1001) Partition= ID=4\nscontrol: ")
    keys = ("PartitionName", "NodeName", "ClusterName")
    want = [[{"PartitionName": "debug", "Default": "YES", "MaxTime": "UNLIMITED", "Nodes": "n[1-2]"}],
            [{"NodeName": "n1", "CPUTot": "4", "State": "IDLE"}, {"NodeName": "n2", "CPUTot": "4", "State": "DOWN+DRAIN"}],
            [{"ClusterName": "c", "Account": "physics", "UserName": "bob(1001)", "Partition": "", "ID": "4"}]]
    assert records.split_scontrol_many(echoed, keys) == want
    assert records.split_scontrol_many(bare, keys) == want


def test_pipe_commands_drop_rows_of_another_width():
    rows = records.split_pipes("a|b\nc|d|e\n\n", ("X", "Y"))
    assert rows == [{"X": "a", "Y": "b"}] and rows.malformed == 1


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_recorded_sshare_sreport_and_sdiag_read_as_records(release):
    folder = DATA / f"slurm-{release}"
    shares = records.parse_sshare((folder / "sshare.txt").read_text())
    assert shares and {"Account", "User", "RawShares", "LevelFS"} <= set(shares[0])
    assert any(row["User"] == "alice" for row in shares)
    used = records.sreport_account_user((folder / "sreport.txt").read_text())
    assert used and all(row["Used"].strip().isdigit() for row in used if row["Used"].strip())
    rpcs = records.sdiag_rpc_counts((folder / "sdiag.txt").read_text())
    assert rpcs.get("REQUEST_JOB_INFO", 0) > 0 or rpcs.get("REQUEST_PARTITION_INFO", 0) > 0


@pytest.mark.parametrize("text, expected", [
    ("0:0", (0, None)), ("2:0", (2, None)), ("0:15", (0, 15)), ("", (None, None)),
    ("256", (1, None)), ("9", (0, 9)),  # squeue's raw wait status
])
def test_exit_status(text, expected):
    assert records.exit_status(text) == expected


def test_stored_names_compare_through_slurmdbds_quote_rewrite():
    assert records.stored_name('a"b') == "a`b"
    assert records.same_job_name('a"b', "a`b") and records.same_job_name("x", "x")
    assert not records.same_job_name("x", "y")


def test_one_set_of_lost_and_unfinished_states():
    assert set(states.LOST_STATES) <= states.FAILED | states.REQUEUEING
    assert {"REQUEUE_HOLD", "RESIZING", "RUNNING", "PENDING"} <= states.UNFINISHED
    assert not states.UNFINISHED & states.TERMINAL


# -- live: the name round-trips through every reader -------------------------------------------------

@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_a_nasty_job_name_round_trips_through_every_reader(slurm, shared_tmp, own, cli, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))  # the CLI's Slurm() is this cluster's
    held = slurm.sbatch("#!/bin/bash\ntrue\n", ["--job-name", NASTY, "--hold", "-o", str(shared_tmp / "%j.out"),
                                                 f"--chdir={shared_tmp}"])
    own.append(str(held))
    assert job_state(slurm, held).name == NASTY  # scontrol show job
    queued = records.squeue(slurm, ("JobID", "Name", "State"), ["-j", str(held)])
    assert queued == [{"JobID": str(held), "Name": NASTY, "State": "PENDING"}]
    assert str(held) in set(dashboard.pending_jobs(slurm)["job_id"])
    tracker = Tracker(slurm, min_interval=0.0)
    tracker.track(str(held))
    tracker.refresh(force=True)
    assert tracker.info(str(held), refresh=False).state == "PENDING"
    slurm.run("scontrol", ["release", str(held)])
    final = wait(slurm, held, timeout=60, poll=0.5, name=NASTY)
    assert final.state.startswith("COMPLETED")
    deadline = time.monotonic() + 30
    while True:  # slurmdbd records the job a moment after it ends (first as "allocation", no WorkDir)
        try:
            remembered = accounting_state(slurm, held)
            if remembered.finished and remembered.workdir:
                break
        except Exception:  # noqa: BLE001 - not in accounting yet
            pass
        assert time.monotonic() < deadline, "the job never reached accounting"
        time.sleep(0.5)
    assert records.same_job_name(NASTY, remembered.name) and remembered.workdir == str(shared_tmp)
    facts = _accounting_facts(slurm, str(held))
    assert facts is not None and facts["WorkDir"] == str(shared_tmp)
    assert records.same_job_name(NASTY, facts["JobName"])
    code, out, err = cli("jobs", "status", "--json", str(held))
    assert code == 0, err
    [shown] = json.loads(out)
    assert records.same_job_name(NASTY, shown["name"]) and shown["finished"] and shown["exit_status"] == 0
    assert shown["diagnosis"] is None and shown["workdir"] == str(shared_tmp)
    steps = diagnose._steps(slurm, str(held))
    assert steps and steps[0]["JobID"] == str(held) and steps[0]["State"] == "COMPLETED"


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_jobs_status_json_carries_a_failed_jobs_diagnosis(slurm, shared_tmp, own, cli, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    job = slurm.sbatch("#!/bin/bash\necho boom >&2\nexit 3\n", ["--job-name", "fails|here", "-o",
                                                                  str(shared_tmp / "%j.out"), f"--chdir={shared_tmp}"])
    own.append(str(job))
    wait(slurm, job, timeout=60, poll=0.5)
    code, out, err = cli("jobs", "status", "--json", str(job))
    assert code == 1, err  # a failed job, as the table says
    [shown] = json.loads(out)
    assert shown["name"] == "fails|here" and shown["state"].startswith("FAILED") and shown["exit_status"] == 3
    assert shown["diagnosis"]["exit_code"] == "3" and shown["diagnosis"]["summary"].startswith(f"job {job} FAILED")


def test_version_branches_live_in_version_py():
    """Every decision on the Slurm release or its OpenAPI version is a SlurmVersion property or a
    function of slurm/version.py; no other module compares releases."""
    import re as regex

    from slinkyml.slurm.version import SlurmVersion, flat_job_body

    assert not SlurmVersion(22, 5, 8).sacct_knows_stdout and SlurmVersion(23, 2).sacct_knows_stdout
    assert SlurmVersion(24, 5).cgroup_plugin_can_be_disabled and not SlurmVersion(23, 11).cgroup_plugin_can_be_disabled
    assert SlurmVersion(25, 11).matches_pyslurm("25.11.0") and not SlurmVersion(22, 5).matches_pyslurm("25.11.0")
    assert flat_job_body("v0.0.38") and not flat_job_body("v0.0.41")
    package = Path(__file__).resolve().parent.parent / "slinkyml"
    # a comparison with a release or an OpenAPI version (which root runs, "system" or "26.05", is no branch)
    branch = regex.compile(r"\.at_least\(|version\s*(==|!=|<=|>=|<|>)\s*[\"'(](?!system)|\.(major|minor)\s*[<>=]")
    found = [f"{path.relative_to(package)}:{n}" for path in package.rglob("*.py") if path.name != "version.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if branch.search(line)]
    assert found == []


@pytest.mark.slurm
@pytest.mark.timeout(150)
@pytest.mark.parametrize("via", ["sbatch", "restapi"])
def test_a_spec_named_with_pipes_tabs_and_quotes_round_trips_through_both_submit_backends(
        via, slurm, local_cluster, restapi, shared_tmp, own, cli, monkeypatch):
    """A JobSpec's name (one line: the schema allows `|`, tabs and quotes) through sbatch and slurmrestd,
    then back from scontrol, squeue, sacct and `jobs status --json`."""
    from slinkyml.jobs.restapi import RestApiBackend
    from slinkyml.jobs.spec import JobSpec
    from slinkyml.jobs.submit import SbatchBackend, submit

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    name = f"{via}|v2\tq\"d'q x=y"
    spec = JobSpec.from_dict({"name": name, "launcher": "srun", "mem_per_node": "64M", "time_limit": "2",
                              "entry": {"script": "/bin/true"}, "log_dir": str(shared_tmp / "logs")})
    backend = (SbatchBackend(slurm) if via == "sbatch" else
               RestApiBackend.from_config(slurm=slurm, url=restapi["url"], token=restapi["token"], user=restapi["user"]))
    job = submit(spec, backend=backend, slurm=slurm, cwd=shared_tmp).job_id
    own.append(str(job))
    assert job_state(slurm, job).name == name
    final = wait(slurm, job, timeout=90, poll=0.5, name=name)
    assert final.state.startswith("COMPLETED") and final.name == name
    deadline = time.monotonic() + 30
    # slurmdbd may first hold the job as "allocation" without a WorkDir (its end came before its start)
    while not (rows := records.sacct(slurm, ("JobName", "State", "WorkDir"), ["-X", "-j", str(job)])) or \
            rows[-1]["State"] != "COMPLETED" or not rows[-1]["WorkDir"]:
        assert time.monotonic() < deadline, "the job never reached accounting"
        time.sleep(0.5)
    assert records.same_job_name(name, rows[-1]["JobName"])
    code, out, err = cli("jobs", "status", "--json", str(job))
    assert code == 0 and json.loads(out)[0]["name"] == name, err


def test_the_agents_backlog_is_read_from_sdiag_not_the_dbd_queue():
    """Slurm 22.05's and 26.05's sdiag print both; a requeued job is released only at 0 (jobs.follow)."""
    text = "Server thread count:  3\nAgent queue size:     2\nAgent count:          1\nDBD Agent queue size: 0\n"
    assert records.agent_backlog(text) == 3
    assert records.agent_backlog(text.replace("queue size:     2", "queue size:     0").replace("count:          1",
                                                                                             "count:          0")) == 0
    assert records.agent_backlog("DBD Agent queue size: 5\nAgent count: 0\n") is None
    assert records.agent_backlog("sdiag: error: Unable to contact slurm controller") is None
