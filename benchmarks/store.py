"""Benchmark: the incremental accounting store against sacct, in one run (issue 29's figures).

On the cluster ``$SLURM_CONF`` names (``eval "$(slinkyml dev env)"``), whose slurmdbd holds the records
(``benchmarks/store_fill.py`` fills it with real jobs), over the window ``--since`` (default 2026-01-01):

- ``sacct + parse``: the baseline, what ``--no-cache`` does (sacct with the reports' fields, then the one
  transform);
- ``cold sync``: a new store ingesting the window (goal ≤ 1.1× sacct + parse);
- ``usage``/``efficiency``/``report --html`` warm: the CLI as a user runs it (a process each, Python
  start-up included), the store synced just before, so each report's own sync finds nothing new; against
  the same command with ``--no-cache`` (goals: usage/efficiency ≤ 1 s, report ≤ 3 s); efficiency both
  as its per-user report and as CSV of every run (that one also writes a row per run);
- ``incremental sync after 1,000 jobs``: a 1,000-task array of ``true`` run to its end, then one sync
  (in process) against a ``sacct`` of exactly those 1,000 jobs (goal ≤ 2×);
- the store's size per million records.

``--synthetic-jobs N`` adds the read side at a size slurmdbd cannot be filled to here: N synthesised jobs
(each with 3 steps, benchmarks/accounting.py's real layout) written into a store of their own, then
usage/efficiency/report's reads and figures timed in process against parsing the same records' sacct text.
Those records never went through slurmdbd; the sync figures are the real cluster's only.

    nice -n 10 .venv/bin/python benchmarks/store.py [--since 2026-01-01] [--synthetic-jobs 1000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accounting import synthesise  # noqa: E402 - the sibling benchmark's sacct generator

from slinkyml.accounting import dashboard, efficiency, parse_when, sacct, usage  # noqa: E402
from slinkyml.accounting.backends.cli import CliBackend, slurm_time  # noqa: E402
from slinkyml.accounting.sacct_arrow import parse_sacct  # noqa: E402
from slinkyml.accounting.store import AccountingStore  # noqa: E402
from slinkyml.slurm import records  # noqa: E402
from slinkyml.slurm.runner import Slurm  # noqa: E402


def line(name: str, seconds: float, baseline: float | None = None, goal: str = "") -> None:
    ratio = f"{seconds / baseline:6.2f}x" if baseline else "       "
    print(f"  {name:44} {seconds:8.2f} s {ratio}  {goal}", flush=True)


def cli(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "slinkyml", *argv], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - t
    if done.returncode:
        raise SystemExit(f"slinkyml {' '.join(argv)}: {done.stderr.strip()[-400:]}")
    return seconds


def drained(slurm: Slurm, limit: float = 600) -> None:
    """Until slurmctld has sent slurmdbd everything (its DBD agent queue is empty)."""
    deadline = time.monotonic() + limit
    while records.dbd_agent_queue(slurm.run("sdiag", []).stdout) != 0 and time.monotonic() < deadline:
        time.sleep(1)


def live(since: str, work: Path) -> None:
    slurm = Slurm()
    backend = CliBackend(slurm)
    start = parse_when(since, "--since")
    drained(slurm)
    now = datetime.now(UTC).replace(microsecond=0)
    args = sacct.sacct_args(slurm_time(start), slurm_time(now))

    def baseline() -> tuple[float, float, str]:
        t = time.perf_counter()
        text = slurm.run("sacct", args, timeout=600).stdout
        fetch = time.perf_counter() - t
        t = time.perf_counter()
        parse_sacct(text)
        return fetch, time.perf_counter() - t, text

    fetch, parse, text = baseline()
    table = parse_sacct(text)
    jobs, steps = len(table.jobs), len(table.steps)
    print(f"window {since} → now: {jobs:,} job and {steps:,} step records in slurmdbd "
          f"({len(text) / 1e6:.0f} MB of sacct text)")
    line("sacct (baseline part 1)", fetch)
    line("parse (baseline part 2)", parse)
    store = AccountingStore(work / "live.duckdb", backend)
    t = time.perf_counter()
    stats = store.sync(start)
    cold = time.perf_counter() - t
    fetch2, parse2, _ = baseline()  # again after it: the machine's load drifts; the baseline is the mean
    line("sacct + parse again, after the cold sync", fetch2 + parse2)
    base = (fetch + parse + fetch2 + parse2) / 2
    line("cold sync (sacct + parse + write)", cold, base, "goal ≤ 1.1x sacct + parse (their mean)")
    size = store.path.stat().st_size
    env = {**os.environ, "SLINKYML_ACCOUNTING_STORE": str(work)}
    if "SLURM_CONF" not in env:
        env["SLURM_CONF"] = slurm.conf
    reports = (("usage", ["usage", "--since", since], "goal ≤ 1 s"),
               ("efficiency --summary", ["efficiency", "--since", since, "--summary"], "goal ≤ 1 s"),
               ("efficiency --csv (every run written)", ["efficiency", "--since", since, "--csv"], "goal ≤ 1 s"),
               ("report --html", ["report", "--since", since, "--html", str(work / "r.html")], "goal ≤ 3 s"))
    for name, argv, goal in reports:
        cli(argv, env)  # the page cache warm for both
        plain = cli([*argv, "--no-cache"], env)
        warm = cli(argv, env)
        read_only = cli([*argv, "--max-age", "3600"], env)
        line(f"{name} --no-cache (baseline)", plain)
        line(f"{name} warm, its own sync first", warm, plain, goal)
        line(f"{name} warm, --max-age (no sync)", read_only, plain, goal)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import slinkyml.accounting, slinkyml.accounting.store, rich.table"],
                   check=True)
    line("(of which Python start-up + the reports' imports)", time.perf_counter() - t)
    t = time.perf_counter()
    jobs_only = store.table(start, datetime.now(UTC), columns=usage.COLUMNS).jobs
    usage.usage(jobs_only, start, datetime.now(UTC), by=["account", "user"])
    line("usage in process: store read + report", time.perf_counter() - t, None, "goal ≤ 1 s")
    t = time.perf_counter()
    store.runs(start, datetime.now(UTC))
    line("efficiency in process: runs computed in the store", time.perf_counter() - t, None, "goal ≤ 1 s")
    # 1,000 new jobs, then an incremental sync against sacct of exactly those jobs
    store.sync()
    array = slurm.run("sbatch", ["--parsable", "--array=0-999", "-n1", "--mem=1M", "-o", "/dev/null", "--wrap", "true"],
                      cwd="/tmp").stdout.strip().split(";")[0]
    while slurm.run("squeue", ["-h", "-j", array, "-o", "%i"], check=False).stdout.strip():
        time.sleep(1)
    drained(slurm)
    time.sleep(2)
    t = time.perf_counter()
    new_text = slurm.run("sacct", sacct.sacct_args(slurm_time(start), slurm_time(datetime.now(UTC)), job_ids=[array]),
                         timeout=600).stdout
    fetch_new = time.perf_counter() - t
    t = time.perf_counter()
    inc = store.sync()
    incremental = time.perf_counter() - t
    new_jobs = len(parse_sacct(new_text).jobs)
    line(f"sacct of the {new_jobs:,} new jobs (baseline)", fetch_new)
    line(f"incremental sync ({inc.fetched_jobs:,} records fetched)", incremental, fetch_new, "goal ≤ 2x")
    records_now = inc.stored_jobs + inc.stored_steps
    size = store.path.stat().st_size
    print(f"  store: {inc.stored_jobs:,} jobs + {inc.stored_steps:,} steps in {size / 1e6:.1f} MB = "
          f"{size / records_now:.0f} B per record, {size / records_now:.0f} MB per million records "
          f"({size / inc.stored_jobs:.0f} MB per million jobs with their steps); cold sync kind {stats.kind}")


class Synthetic:
    """Synthesised records as a job source (the read-side figures at sizes slurmdbd cannot reach here)."""

    name = "synthetic"
    slurm = None

    def __init__(self, table: sacct.SacctTable):
        self.table = table

    def jobs(self, start, end, *, users=None, accounts=None, job_ids=None) -> sacct.SacctTable:
        return self.table


def synthetic(count: int, work: Path) -> None:
    text = synthesise(count * 4)
    t = time.perf_counter()
    table = parse_sacct(text)
    parse = time.perf_counter() - t
    del text
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    store = AccountingStore(work / "synthetic.duckdb", Synthetic(table))
    t = time.perf_counter()
    store.sync(start, now=end)
    write = time.perf_counter() - t
    size = store.path.stat().st_size
    rows = len(table.jobs) + len(table.steps)
    print(f"synthetic: {len(table.jobs):,} jobs + {len(table.steps):,} steps (not from slurmdbd), "
          f"store {size / 1e6:.0f} MB = {size / rows * 1e6 / 1e6:.0f} MB per million records")
    line("parse_sacct of their text (baseline)", parse)
    line("store write", write, parse)
    t = time.perf_counter()
    jobs = store.table(start, end, columns=usage.COLUMNS).jobs
    usage.usage(jobs, start, end, by=["account", "user"], now=end)
    line("usage: store read (usage's columns) + report", time.perf_counter() - t, parse, "goal ≤ 1 s")
    t = time.perf_counter()
    runs = store.runs(start, end)
    line("efficiency: runs computed in the store", time.perf_counter() - t, parse, "goal ≤ 1 s")
    t = time.perf_counter()
    few = store.table(start, end, columns=efficiency.COLUMNS, step_stats=True)
    efficiency.runs(few.jobs, few.steps)
    line("  (the same from a frame of the records)", time.perf_counter() - t, parse)
    t = time.perf_counter()
    whole = store.table(start, end)
    line("store read, jobs + steps (every column)", time.perf_counter() - t, parse)
    t = time.perf_counter()
    data = dashboard.collect(store.table(start, end, columns=dashboard.COLUMNS), None, start, end, now=end,
                             runs=store.runs(start, end))
    dashboard.render_html(data)
    line("report: store read (its columns) + runs + figures + HTML", time.perf_counter() - t, parse, "goal ≤ 3 s")
    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1) as pool:  # as `report` does (load_report(background=True))
        pending = pool.submit(store.runs, start, end)
        data = dashboard.collect(store.table(start, end, columns=dashboard.COLUMNS), None, start, end, now=end,
                                 runs=pending)
    dashboard.render_html(data)
    line("  the same, runs computed while the records are drawn", time.perf_counter() - t, parse, "goal ≤ 3 s")
    del runs, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", default="2026-01-01", help="the window's start (the reports' --since)")
    parser.add_argument("--synthetic-jobs", type=int, default=0, help="also time the reads over this many "
                        "synthesised jobs (each with 3 steps)")
    parser.add_argument("--no-live", action="store_true", help="only the synthetic part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slinkyml-store-bench-") as tmp:
        if not args.no_live:
            live(args.since, Path(tmp))
        if args.synthetic_jobs:
            synthetic(args.synthetic_jobs, Path(tmp))


if __name__ == "__main__":
    main()
