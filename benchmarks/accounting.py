"""Benchmark: 1,000,000 sacct rows → DataFrame, and the usage report over them.

Rows are synthesised in the exact layout captured from the real cluster
(tests/data/accounting/sacct_2205.txt: allocation, batch/extern/srun steps, arrays, TRES with
GPUs). Compared with a plain ``pandas.read_csv(sep=...)`` of the same text, which only splits
fields (no types, no TRES, no keys).

    .venv/bin/python benchmarks/accounting.py [--rows 1000000]

parse_sacct is the one transform (Arrow). pandas 3 itself reads strings into pyarrow arrays, so the
plain ``read_csv`` baseline is about twice as fast with pyarrow present as without it.
"""

from __future__ import annotations

import argparse
import io
import random
import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa

from slinkyml.accounting import usage
from slinkyml.accounting.sacct import FIELDS, SEP
from slinkyml.accounting.sacct_arrow import parse_sacct

USERS = [("alice", "physics"), ("bob", "physics"), ("carol", "bio"), ("dave", "ml"),
         ("erin", "ml"), ("frank", "bio")]
STATES = ["COMPLETED"] * 8 + ["FAILED", "TIMEOUT", "CANCELLED by 1001", "OUT_OF_MEMORY"]
SHAPES = [  # (cpus, mem MB, nodes, gpus, type)
    (4, 2048, 1, 0, ""), (8, 16384, 1, 1, "a100"), (96, 1048576, 1, 8, "h100"),
    (192, 2097152, 2, 16, "h100"), (2, 1024, 1, 0, ""),
]


def _tres(cpus, mem, nodes, gpus, gtype):
    parts = [f"billing={cpus}", f"cpu={cpus}"]
    if gpus:
        parts += [f"gres/gpu:{gtype}={gpus}", f"gres/gpu={gpus}"]
    parts += [f"mem={mem}M", f"node={nodes}"]
    return ",".join(parts)


BASE = datetime(2026, 11, 1, tzinfo=UTC)
_DAYS: dict[int, str] = {}


def _fmt(offset: int) -> str:
    """``BASE`` + ``offset`` seconds as sacct prints it (the day's text made once per day)."""
    day, second = divmod(offset, 86400)
    text = _DAYS.get(day)
    if text is None:
        text = _DAYS[day] = (BASE + timedelta(days=day)).strftime("%Y-%m-%dT")
    hour, second = divmod(second, 3600)
    return f"{text}{hour:02d}:{second // 60:02d}:{second % 60:02d}"


def synthesise(rows: int, seed: int = 1) -> str:
    """``rows`` lines of ``sacct -P`` (FIELDS, SEP): jobs of USERS in SHAPES over November 2026, each with
    its batch, extern and one srun step; the same text for the same seed."""
    rng = random.Random(seed)
    at = {field: i for i, field in enumerate(FIELDS)}
    blank = [""] * len(FIELDS)
    lines: list[str] = []
    job = 100000
    db = 1
    while len(lines) < rows:
        job += 1
        db += 1
        user, account = rng.choice(USERS)
        cpus, mem, nodes, gpus, gtype = rng.choice(SHAPES)
        submit = rng.randrange(0, 30 * 86400)
        start = submit + rng.randrange(0, 600)
        elapsed = rng.randrange(1, 7200)
        state = rng.choice(STATES)
        tres = _tres(cpus, mem, nodes, gpus, gtype)
        array = rng.random() < 0.2
        jid = f"{job}_{rng.randrange(0, 100)}" if array else str(job)
        total = f"{elapsed * cpus // 60 // 60:02d}:{elapsed * cpus // 60 % 60:02d}:" \
                f"{elapsed * cpus % 60:02d}"
        alloc = list(blank)
        for field, value in (("JobID", jid), ("JobIDRaw", str(job)), ("DBIndex", str(db)), ("JobName", "train"),
                             ("User", user), ("Account", account), ("Partition", "gpu" if gpus else "cpu"),
                             ("QOS", "normal"), ("State", state), ("ExitCode", "0:0"), ("Submit", _fmt(submit)),
                             ("Eligible", _fmt(submit)), ("Start", _fmt(start)), ("End", _fmt(start + elapsed)),
                             ("ElapsedRaw", str(elapsed)), ("TimelimitRaw", "120"), ("AllocCPUS", str(cpus)),
                             ("NNodes", str(nodes)), ("NodeList", "n[1-2]" if nodes > 1 else "n1"),
                             ("ReqMem", f"{mem}M"), ("ReqTRES", tres), ("AllocTRES", tres), ("TotalCPU", total),
                             ("CPUTimeRAW", str(elapsed * cpus)), ("Cluster", "slinkyml")):
            if field in at:
                alloc[at[field]] = value
        lines.append(SEP.join(alloc))
        step_tres = tres.replace(f"billing={cpus},", "")
        for step in ("batch", "extern", "0"):
            rss = str(rng.randrange(10**6, 10**9))
            ave = f"cpu=00:{rng.randrange(0, 59):02d}:00,energy=0,fs/disk=39024,mem={rss}," \
                  f"pages=0,vmem=5644288" + (f",gres/gpuutil={rng.randrange(0, 100)}"
                                             if gpus and step == "0" else "")
            row = list(alloc)
            for field, value in (("JobID", f"{jid}.{step}"), ("JobIDRaw", f"{job}.{step}"), ("JobName", step),
                                 ("User", ""), ("Partition", ""), ("QOS", ""), ("ReqMem", ""), ("ReqTRES", ""),
                                 ("AllocTRES", step_tres), ("MaxRSS", rss), ("TRESUsageInAve", ave),
                                 ("TRESUsageInTot", ave), ("TimelimitRaw", "")):
                if field in at:
                    row[at[field]] = value
            lines.append(SEP.join(row))
    return "\n".join(lines[:rows]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    t = time.perf_counter()
    text = synthesise(args.rows)
    print(f"synthesised {args.rows:,} rows ({len(text) / 1e6:.0f} MB) in "
          f"{time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    plain = pd.read_csv(io.StringIO(text), sep=SEP, header=None, quoting=3)
    plain_s = time.perf_counter() - t
    t = time.perf_counter()
    table = parse_sacct(text)
    ours_s = time.perf_counter() - t
    assert len(table.jobs) + len(table.steps) == len(plain) == args.rows
    print(f"pandas.read_csv(sep=US) : {plain_s:6.2f} s  {args.rows / plain_s:>12,.0f} rows/s")
    print(f"slinkyml parse_sacct    : {ours_s:6.2f} s  {args.rows / ours_s:>12,.0f} rows/s "
          f"(pyarrow {pa.__version__}; jobs {len(table.jobs):,}, "
          f"steps {len(table.steps):,}, malformed {table.malformed})")
    print(f"ratio parse_sacct / read_csv rows/s: {plain_s / ours_s:.2f}")
    start, end = datetime(2026, 11, 8, tzinfo=UTC), datetime(2026, 11, 22, tzinfo=UTC)
    t = time.perf_counter()
    usage.usage(table.jobs, start, end, by=("account", "user", "gpu_type"))
    by_account = usage.usage(table.jobs, start, end, by=("account",))
    report_s = time.perf_counter() - t
    print(f"usage report (2 groupings, {len(table.jobs):,} jobs): {report_s:.2f} s")
    print(by_account[["account", "jobs", "cpu_hours", "gpu_hours"]].to_string(index=False))


if __name__ == "__main__":
    main()
