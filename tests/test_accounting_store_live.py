"""The accounting store on the live cluster: every report read from it equals the report computed straight
from sacct, after jobs that change state between syncs (running at one sync, ended at the next), an array
whose tasks split off their pending record between syncs, a job requeued (a new record for the same id), a
job cancelled while pending, and a slurmdbd restart with jobs that ended while it was down (their records
arrive once slurmctld's DBD agent queue drains; the store's watermark must not have moved past them: the
store here has no margin, so only the queue rule protects them).

Other tests' jobs may run at the same time on the shared cluster, so the report-by-report comparison is
over this module's own jobs (their ids, array tasks included); the CLI comparison is over a window that
ended before the comparison (records that change after it give the same numbers inside it)."""

from __future__ import annotations

import functools
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from tiers import needs
from waiting import wait_until

from slinkyml.accounting import dashboard, efficiency, sacct, usage
from slinkyml.accounting.backends.cli import CliBackend
from slinkyml.accounting.store import AccountingStore
from slinkyml.slurm import records

pytestmark = pytest.mark.slurm

FINAL = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL", "REQUEUED", "PREEMPTED"}


_wait = functools.partial(wait_until, timeout=180.0)


def _squeue_state(slurm, job_id: int) -> str:
    out = slurm.run("squeue", ["-h", "-j", str(job_id), "-o", "%T"], check=False).stdout.strip()
    return out.splitlines()[0] if out else ""


def _ours(table: sacct.SacctTable, ids: set[int]) -> sacct.SacctTable:
    """This module's records: its job ids and its arrays' tasks, and their steps."""
    jobs = table.jobs
    mask = jobs["job_id"].isin(ids) | jobs["array_job_id"].isin(ids)
    jobs = jobs[mask.fillna(False).to_numpy(dtype=bool)].reset_index(drop=True)
    records = set(zip(jobs["job_id"].astype("int64"), jobs["db_index"].astype("int64"), strict=True))
    steps = table.steps
    keep = [(j, d) in records for j, d in zip(steps["job_id"].astype("int64"), steps["db_index"].astype("int64"),
                                                strict=True)]
    return sacct.SacctTable(jobs=jobs, steps=steps[keep].reset_index(drop=True))


def _our_runs(runs: pd.DataFrame, ids: set[int]) -> pd.DataFrame:
    """This module's runs (of its job ids and its arrays' tasks)."""
    mask = runs["job_id"].isin(ids) | runs["array_job_id"].isin(ids)
    return runs[mask.fillna(False).to_numpy(dtype=bool)].reset_index(drop=True)


def _queue_empty(slurm) -> bool:
    return records.dbd_agent_queue(slurm.run("sdiag", [], check=False).stdout) == 0


@pytest.fixture(scope="module")
@needs("disruptive")  # stops and restarts slurmdbd
def history(local_cluster, tmp_path_factory):
    """The scenario, with syncs between its steps; returns the store, the window and the job ids."""
    slurm = local_cluster.slurm
    work = Path(tempfile.mkdtemp(prefix="slinkyml-store-", dir="/tmp"))
    os.chmod(work, 0o777)
    out = ["--output", str(work / "%j.out"), "--chdir", str(work)]
    backend = CliBackend(slurm)
    store = AccountingStore(tmp_path_factory.mktemp("store") / "live.duckdb", backend, margin_s=0)
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    syncs = [store.sync(since)]  # cold, before any of ours
    ids: dict[str, int] = {}
    ids["long"] = slurm.sbatch("#!/bin/bash\nsrun sleep 12\n", [*out, "-A", "physics", "-n1", "-J", "store-long"],
                               as_user="alice")
    ids["array"] = slurm.sbatch("#!/bin/bash\nsleep 2\n", [*out, "-A", "physics", "-n1", "--array=0-5%2",
                                                          "-J", "store-array"], as_user="bob")
    ids["requeue"] = slurm.sbatch("#!/bin/bash\nsleep 6\n", [*out, "-A", "ml", "-n1", "--requeue",
                                                             "-J", "store-requeue"], as_user="dave")
    ids["fail"] = slurm.sbatch("#!/bin/bash\nsleep 1\nexit 3\n", [*out, "-A", "bio", "-n1", "-J", "store-fail"],
                               as_user="carol")
    ids["cancelled"] = slurm.sbatch("#!/bin/bash\ntrue\n", [*out, "-A", "ml", "-n1", "--begin=now+600",
                                                            "-J", "store-cancelled"], as_user="dave")
    _wait("slurmdbd to record the long job running", lambda: backend.jobs(
        since, datetime.now(UTC) + timedelta(minutes=1), job_ids=[ids["long"]]).jobs["state"].tolist() == ["RUNNING"])
    syncs.append(store.sync())  # the long job RUNNING, the array partly pending
    running = store.table(since, datetime.now(UTC) + timedelta(seconds=1)).jobs
    long_state = running.loc[running["job_id"] == ids["long"], "state"].tolist()
    _wait("the requeue job to run", lambda: _squeue_state(slurm, ids["requeue"]) == "RUNNING")
    slurm.run("scontrol", ["requeue", str(ids["requeue"])])
    slurm.run("scancel", [str(ids["cancelled"])])
    syncs.append(store.sync())  # a REQUEUED record and its pending successor; the long job still running
    # slurmdbd restart, with jobs that start and end while it is down
    dbd = local_cluster.daemon("slurmdbd")
    dbd.stop()
    try:
        ids["outage"] = slurm.sbatch("#!/bin/bash\nsleep 1\n", [*out, "-A", "physics", "-n1", "-J", "store-outage"],
                                     as_user="alice")
        ids["outage2"] = slurm.sbatch("#!/bin/bash\ntrue\n", [*out, "-A", "bio", "-n1", "-J", "store-outage2"],
                                      as_user="carol")
        _wait("the outage jobs to end", lambda: not _squeue_state(slurm, ids["outage"])
              and not _squeue_state(slurm, ids["outage2"]), timeout=120)
        time.sleep(1)
        with pytest.raises(Exception) as down:  # noqa: PT011 - the runner's Slurm error, whatever its class
            store.sync()
        down_message = str(down.value)
    finally:
        local_cluster.up()  # slurmdbd back (the rest is running: a no-op for them)
    syncs.append(store.sync())  # right after the restart: slurmctld may still be sending the backlog
    # everything to its end, slurmctld's queue to slurmdbd drained, then the last sync
    all_ids = list(ids.values())

    def finished() -> bool:
        table = backend.jobs(since, datetime.now(UTC) + timedelta(minutes=1), job_ids=all_ids)
        return (set(table.jobs["state"]) <= FINAL and int((table.jobs["job_id"] == ids["requeue"]).sum()) >= 2
                and int(table.jobs["array_job_id"].eq(ids["array"]).fillna(False).sum()) == 6
                and _queue_empty(slurm))

    _wait("every job to end in slurmdbd", finished, timeout=300, every=2)
    time.sleep(1)
    syncs.append(store.sync())
    until = datetime.now(UTC).replace(microsecond=0)
    yield dict(store=store, backend=backend, since=since, until=until, ids=ids, syncs=syncs, slurm=slurm,
               long_state=long_state, down_message=down_message)
    shutil.rmtree(work, ignore_errors=True)


def test_syncs_were_incremental_and_saw_the_intermediate_states(history):
    kinds = [s.kind for s in history["syncs"]]
    assert kinds[0] == "cold" and set(kinds[1:]) == {"incremental"}
    assert history["long_state"] == ["RUNNING"]  # what the later sync had to replace
    assert "slurmdbd" in history["down_message"] or "accounting" in history["down_message"]


def test_store_records_equal_sacct(history):
    """Frame for frame (dtypes, values, keys), this module's records from the store and from sacct."""
    ids = set(history["ids"].values())
    for start in (history["since"], history["since"] + (history["until"] - history["since"]) / 2):
        stored = _ours(history["store"].table(start, history["until"]), ids)
        direct = _ours(history["backend"].jobs(start, history["until"]), ids)
        # in sacct's row order, to the last bit (reports sum floats in row order)
        pd.testing.assert_frame_equal(stored.jobs, direct.jobs, check_exact=True)
        pd.testing.assert_frame_equal(stored.steps, direct.steps, check_exact=True)
        if start == history["since"]:
            assert len(direct.jobs) == 12  # long, 6 array tasks, 2 requeue runs, fail, 2 outage jobs
            requeue = stored.jobs[stored.jobs["job_id"] == history["ids"]["requeue"]]
            assert requeue["state"].iloc[0] == "REQUEUED" and requeue["segment"].tolist() == [0, 1]
            assert set(history["ids"].values()) - {history["ids"]["cancelled"]} <= \
                set(stored.jobs["job_id"]) | set(stored.jobs["array_job_id"].dropna())


def test_every_report_equals_the_direct_one(history):
    """usage (and cost), efficiency (lost hours, waits), its summary and every dashboard figure."""
    ids = set(history["ids"].values())
    start, until = history["since"], history["until"]
    stored = _ours(history["store"].table(start, until), ids)
    direct = _ours(history["backend"].jobs(start, until), ids)
    for by in (["account", "user"], ["partition"], ["user", "gpu_type"]):
        pd.testing.assert_frame_equal(usage.usage(stored.jobs, start, until, by=by, now=until),
                                      usage.usage(direct.jobs, start, until, by=by, now=until), check_exact=True)
    runs_stored, runs_direct = efficiency.runs(stored.jobs, stored.steps), efficiency.runs(direct.jobs, direct.steps)
    pd.testing.assert_frame_equal(runs_stored, runs_direct, check_exact=True)
    assert runs_stored.loc[runs_stored["job_id"] == history["ids"]["requeue"], "segments"].tolist() == [2]
    pd.testing.assert_frame_equal(efficiency.summary(runs_stored), efficiency.summary(runs_direct), check_exact=True)
    # what the commands read: only their columns
    few = _ours(history["store"].table(start, until, step_columns=efficiency.STEP_COLUMNS), ids)
    pd.testing.assert_frame_equal(efficiency.runs(few.jobs, few.steps), runs_direct, check_exact=True)
    with_stats = _ours(history["store"].table(start, until, step_stats=True), ids)  # no steps: their statistics
    assert with_stats.steps.empty
    pd.testing.assert_frame_equal(efficiency.runs(with_stats.jobs, with_stats.steps), runs_direct, check_exact=True)
    few = _ours(history["store"].table(start, until, columns=efficiency.COLUMNS, step_stats=True), ids)
    pd.testing.assert_frame_equal(efficiency.runs(few.jobs, few.steps), runs_direct, check_exact=True)
    in_store = _our_runs(history["store"].runs(start, until), ids)  # what `efficiency` and `report` read
    pd.testing.assert_frame_equal(in_store, runs_direct, check_exact=True)
    few = _ours(history["store"].table(start, until, columns=(*usage.COLUMNS, "array_job_id", "db_index")), ids)
    pd.testing.assert_frame_equal(usage.usage(few.jobs, start, until, now=until),
                                  usage.usage(direct.jobs, start, until, now=until), check_exact=True)
    b = dashboard.collect(direct, None, start, until, now=until)
    page = _ours(history["store"].table(start, until, columns=(*dashboard.COLUMNS, "array_job_id")), ids)
    # every column and steps; the steps' statistics; what `report` reads: its columns and the store's runs
    for read, runs in ((stored, None), (with_stats, None), (page, in_store)):
        a = dashboard.collect(read, None, start, until, now=until, runs=runs)
        for name in ("usage_over_time", "usage_by", "runs", "distributions", "lost", "waits", "top_jobs"):
            left, right = getattr(a, name), getattr(b, name)
            if isinstance(left, dict):
                assert left.keys() == right.keys(), name
                for key in left:
                    pd.testing.assert_frame_equal(left[key], right[key], obj=f"{name}[{key}]", check_exact=True)
            else:
                pd.testing.assert_frame_equal(left, right, obj=name, check_exact=True)
        b.generated, b.pending = a.generated, a.pending  # the build time and squeue now: not from the records
        assert dashboard.render_html(a) == dashboard.render_html(b)


def test_cli_reports_from_the_store_equal_no_cache(history, cli):
    """The commands themselves: ``usage``/``efficiency`` with the store (default) and with --no-cache,
    over a window that ended before this comparison, for the scenario's users (records of other jobs still
    on their way to slurmdbd would reach one snapshot and not the other)."""
    since = history["since"].strftime("%Y-%m-%dT%H:%M:%S")
    until = history["until"].strftime("%Y-%m-%dT%H:%M:%S")
    users = [arg for name in ("alice", "bob", "carol", "dave") for arg in ("--user", name)]  # the scenario's
    for command in (("usage", "--by", "account,user", *users), ("usage", "--by", "partition", *users)):
        code, cached, err = cli(*command, "--since", since, "--until", until, "--json")
        assert code == 0, err
        code, plain, err = cli(*command, "--since", since, "--until", until, "--json", "--no-cache")
        assert code == 0, err
        assert json.loads(cached) == json.loads(plain)
    code, out, err = cli("accounting", "status", "--json")
    assert code == 0 and json.loads(out)["jobs"] >= 1, err


def test_library_reports_read_the_store_by_default(history, accounting_store_dir):
    """``usage_report``/``efficiency_report``/``cost_report`` go through the store as the commands do (a
    store appears in the user's store dir) and equal the same call with ``cache=False``."""
    from slinkyml.accounting import cost_report, efficiency_report, usage_report

    start, until, slurm = history["since"], history["until"], history["backend"].slurm
    users = ["alice", "bob", "carol", "dave"]  # the scenario's (other tests' jobs may reach slurmdbd meanwhile)
    stored = usage_report(start, until, users=users, slurm=slurm)
    assert list(accounting_store_dir.glob("*.duckdb")) and len(stored) >= 2
    pd.testing.assert_frame_equal(stored, usage_report(start, until, users=users, slurm=slurm, cache=False),
                                  check_exact=True)
    runs = efficiency_report(start, until, users=users, slurm=slurm)
    direct = efficiency_report(start, until, users=users, slurm=slurm, cache=False)
    assert {history["ids"][name] for name in ("long", "requeue", "fail")} <= set(runs["job_id"])
    assert runs.loc[runs["job_id"] == history["ids"]["requeue"], "segments"].tolist() == [2]
    pd.testing.assert_frame_equal(runs, direct, check_exact=True)
    pd.testing.assert_frame_equal(cost_report(start, until, users=users, slurm=slurm),
                                  cost_report(start, until, users=users, slurm=slurm, cache=False), check_exact=True)


def test_serve_reads_the_store_and_syncs_once_per_interval(local_cluster, tmp_path):
    """``report --serve --refresh 5``: the page comes from the store, which the server's builder thread
    syncs once per interval however many requests arrive (here ~60 over ~12 s: at most 1 + 12/5 syncs)."""
    env = {**os.environ, "SLINKYML_ACCOUNTING_STORE": str(tmp_path), "SLURM_CONF": local_cluster.slurm.conf}
    server = subprocess.Popen([sys.executable, "-m", "slinkyml", "report", "--serve", "--port", "0", "--refresh", "5",
                               "--since", "1h"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline() if server.stdout else ""
        port = int(first.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        started = time.monotonic()
        pages = 0
        while time.monotonic() - started < 12:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/")
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            pages += answer.status == 200 and b'<section id="fairshare">' in body
            time.sleep(0.2)
        elapsed = time.monotonic() - started
    finally:
        server.terminate()
        server.wait(timeout=30)
    info = AccountingStore(next(tmp_path.glob("*.duckdb")), CliBackend(local_cluster.slurm)).status()
    assert pages >= 20
    assert 1 <= info["syncs"] <= 1 + int(elapsed // 5) + 1, info
    assert info["jobs"] >= 0 and info["covered_since"]
