"""Benchmark: the accounting dashboard over a 100,000-record window (issue goal: ≤ 5 s, ≤ 20 MB).

Rows are synthesised as in benchmarks/accounting.py (the real sacct layout, steps included). The
baseline is sacct parsing of the same text in the same process; the dashboard's own work
(figures → HTML) is printed as a ratio to it, plus the absolute time and the page size.

    .venv/bin/python benchmarks/dashboard.py [--records 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accounting import synthesise  # noqa: E402 - the sibling benchmark's generator

from slinkyml.accounting import dashboard  # noqa: E402
from slinkyml.accounting.fairshare import parse_sshare  # noqa: E402
from slinkyml.accounting.sacct_arrow import parse_sacct  # noqa: E402

SSHARE = Path(__file__).resolve().parent.parent / "tests" / "data" / "accounting" / "sshare_fairtree_2205.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="job records (each with 3 steps)")
    args = parser.parse_args()
    text = synthesise(args.records * 4)
    shares = parse_sshare(SSHARE.read_text())
    start, end = pd.Timestamp("2026-11-01", tz="UTC"), pd.Timestamp("2026-12-01", tz="UTC")
    t0 = time.perf_counter()
    table = parse_sacct(text)
    t1 = time.perf_counter()
    data = dashboard.collect(table, shares, start, end, now=end)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = dashboard.write(data, Path(tmp) / "dashboard.html")
        size = path.stat().st_size
    t3 = time.perf_counter()
    parse, figures, html = t1 - t0, t2 - t1, t3 - t2
    print(f"{len(table.jobs):,} job records over 30 days, bins of {data.bin}")
    print(f"  sacct parse (baseline)   {parse:6.2f} s")
    print(f"  figures (DataFrames)     {figures:6.2f} s  = {figures / parse:.2f}x parse")
    print(f"  HTML                     {html:6.2f} s  = {html / parse:.2f}x parse")
    print(f"  dashboard total          {figures + html:6.2f} s  (goal ≤ 5 s)  page {size / 1e6:.2f} MB (goal ≤ 20 MB)")


if __name__ == "__main__":
    main()
