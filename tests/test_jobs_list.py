"""`slinkyml jobs list`: squeue/sacct output recorded on the 22.05 dev cluster (a name holding `|` and a
newline, an array, a requeued job), merged with slinkyml's records; and the live command."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slinkyml.jobs import records
from slinkyml.jobs.listing import merge_live, parse_sacct, parse_squeue, with_records

DATA = Path(__file__).parent / "data" / "listing"


def recorded() -> tuple[list, list]:
    return (parse_squeue((DATA / "squeue_2205.txt").read_text()),
            parse_sacct((DATA / "sacct_2205.txt").read_text()))


def test_squeue_rows_keep_odd_names_and_pending_reasons():
    live, _ended = recorded()
    by_id = {job.job_id: job for job in live}
    assert sorted(by_id) == ["5", "6_0", "6_1", "6_2", "6_3"]
    requeued = by_id["5"]
    assert requeued.name == "two\nlines|and bar" and requeued.workdir == "/tmp/runs-w"
    assert (requeued.state, requeued.reason, requeued.node_list, requeued.started) == ("PENDING", "BeginTime", "", "")
    assert (by_id["6_3"].state, by_id["6_3"].node_list, by_id["6_3"].nodes) == ("RUNNING", "r2", 1)


def test_sacct_rows_fold_runs_and_count_restarts():
    _live, ended = recorded()
    by_id = {job.job_id: job for job in ended}
    assert by_id["1"].name == "a very long job name with | bar and spaces in it"
    assert (by_id["1"].state, by_id["1"].exit_code, by_id["1"].ended) == ("COMPLETED", "0:0", "2026-12-01T13:43:46")
    # the job's one run ended REQUEUED: its next run is pending, so it has restarted once
    assert (by_id["5"].state, by_id["5"].restarts) == ("REQUEUED", 1)
    assert by_id["6_0"].ended == "" and by_id["6_0"].restarts == 0


def test_merge_prefers_slurmctlds_state_and_keeps_accountings_restarts():
    live, ended = recorded()
    merged = {job.job_id: job for job in merge_live(live, ended)}
    assert sorted(merged) == ["1", "3", "4", "5", "6_0", "6_1", "6_2", "6_3"]
    assert (merged["5"].state, merged["5"].restarts, merged["5"].source) == ("PENDING", 1, "squeue")
    assert merged["3"].source == "sacct"


def test_records_add_kind_and_the_jobs_slurm_forgot():
    live, ended = recorded()
    now = time.time()
    at = datetime(2026, 12, 1, 13, 44, 33, tzinfo=UTC).timestamp()  # when the recorded jobs were submitted
    saved = [records.SubmissionRecord("6", "array", "arr", "/w", log_dir="/w/logs", submitted_at=at + 1),
             records.SubmissionRecord("4", "sbatch", "true", "/w", log_dir="/w/logs", submitted_at=at - 21),
             records.SubmissionRecord("3", "sbatch", "other", "/w", log_dir="/x", submitted_at=at),
             records.SubmissionRecord("1", "sbatch", "a very long job name with | bar and spaces in it", "/w",
                                      log_dir="/y", submitted_at=at - 30 * 86400),
             records.SubmissionRecord("99", "submitit", "lost", "/w", folder="/w/.slinkyml", submitted_at=now),
             records.SubmissionRecord("98", "sbatch", "old", "/w", submitted_at=now - 10 * 86400)]
    since = datetime.now(UTC) - timedelta(days=1)
    merged = {job.job_id: job for job in with_records(merge_live(live, ended), saved, since=since)}
    assert {merged[f"6_{i}"].kind for i in range(4)} == {"array"} and merged["4"].log_dir == "/w/logs"
    assert merged["1"].kind == ""  # not submitted through slinkyml
    # records of earlier jobs under the same ids (another name; a month before): not these jobs
    assert (merged["3"].kind, merged["3"].log_dir, merged["1"].log_dir) == ("", "", "")
    assert (merged["99"].state, merged["99"].kind, merged["99"].source, merged["99"].log_dir) == \
        ("UNKNOWN", "submitit", "record", "/w/.slinkyml")
    assert "98" not in merged  # submitted before --since


@pytest.mark.parametrize(("argv", "needle"), [
    (["--state", "RUNNNING"], "argument --state: unknown job state RUNNNING"),
    (["--since", "yesterday"], "--since: cannot read 'yesterday'"),
    (["--all", "--user", "alice"], "--all and --user"),
])
def test_bad_options_are_one_line(cli, argv, needle):
    code, _out, err = cli("jobs", "list", *argv)
    assert code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_list_on_the_cluster(slurm, shared_tmp, cli, monkeypatch, own):
    """Mine by default (alice's job only with --all), states and names as Slurm has them, kinds from the
    records, --state, --json, and a recorded job Slurm never knew."""
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(shared_tmp / "records"))
    monkeypatch.chdir(shared_tmp)
    name = "list|me\tnow"
    code, out, err = cli("run", "--launcher", "srun", "-t", "2", "--mem", "64M", "--log-dir", str(shared_tmp / "logs"),
                         "-J", name, "--wait", "/bin/sh", "-c", "exit 3")
    failed = out.split("Submitted batch job ")[1].split()[0]
    own.append(failed)
    assert code == 3 and f"# reopen: slinkyml jobs status {failed} " in err, (out, err)
    code, out, _err = cli("run", "--launcher", "srun", "-t", "2", "--mem", "64M", "--log-dir", str(shared_tmp / "logs"),
                          "-J", "sleeper", "/bin/sleep", "120")
    running = out.split("Submitted batch job ")[1].split()[0]
    own.append(running)
    alices = str(slurm.sbatch("#!/bin/sh\nsleep 120\n", ["-J", "alices", "-t", "3", "--mem", "64M", "-o", "/dev/null"],
                              as_user="alice", cwd=shared_tmp))
    own.append(alices)
    records.save(records.SubmissionRecord("987654", "submitit", "forgotten", str(shared_tmp),
                                          folder=str(shared_tmp / "sub"), submitted_at=time.time()), slurm.conf)
    for _ in range(60):  # until slurmdbd has stored the ended job (its agent writes in the background)
        code, out, err = cli("jobs", "list", "--json")
        assert code == 0, err
        mine = {job["job_id"]: job for job in json.loads(out)}
        if mine[failed]["state"] != "UNKNOWN":
            break
        time.sleep(1)
    assert (mine[failed]["name"], mine[failed]["state"], mine[failed]["kind"], mine[failed]["exit_code"]) == \
        (name, "FAILED", "sbatch", "3:0")
    assert mine[failed]["log_dir"] == str(shared_tmp / "logs") and mine[failed]["workdir"] == str(shared_tmp)
    assert mine[running]["state"] in ("PENDING", "RUNNING") and mine[running]["kind"] == "sbatch"
    assert (mine["987654"]["state"], mine["987654"]["source"]) == ("UNKNOWN", "record")
    assert alices not in mine
    code, out, _err = cli("jobs", "list", "--all", "--json")
    everyone = {job["job_id"]: job for job in json.loads(out)}
    assert everyone[alices]["user"] == "alice" and failed in everyone
    code, out, _err = cli("jobs", "list", "--state", "FAILED")
    rows = out.splitlines()
    assert code == 0 and rows[0].split()[:2] == ["JOBID", "STATE"]
    assert failed in [row.split()[0] for row in rows[1:]] and all(row.split()[1] == "FAILED" for row in rows[1:])
    code, out, _err = cli("jobs", "list", "--since", "1h", "--user", "alice", "--json")
    alice = {job["job_id"]: job["user"] for job in json.loads(out)}
    assert code == 0 and alices in alice and set(alice.values()) == {"alice"}
