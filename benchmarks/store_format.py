"""Benchmark: which format holds the incremental accounting store, Parquet (pyarrow) or DuckDB.

Both are measured on the same typed frames (``parse_sacct`` of synthesised sacct text in the real
layout, benchmarks/accounting.py; each job record with 3 steps) for what the store does:

- ``write``: the whole store once (the cold sync's write);
- ``append``: 1,000 new jobs (an incremental sync's write): a new Parquet part file against a DuckDB
  ``DELETE`` of their records plus ``INSERT`` in one transaction;
- ``read jobs``: a report window's allocation rows back as the pandas frame the reports take (same
  dtypes as ``parse_sacct`` gives), after the 1,000-job append;
- ``read all``: jobs and steps (what ``efficiency`` and ``report`` read);
- ``size``: bytes on disk.

Ratios are DuckDB / Parquet in the same process. DuckDB is optional here (``pip install duckdb``);
without it only the Parquet figures print.

    .venv/bin/python benchmarks/store_format.py [--jobs 250000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accounting import synthesise  # noqa: E402 - the sibling benchmark's sacct generator

from slinkyml.accounting.sacct_arrow import parse_sacct  # noqa: E402

try:
    import duckdb
except ImportError:  # the comparison is optional: the store itself needs only pyarrow
    duckdb = None


def _arrow(df: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(df, preserve_index=False)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _timed(fn, repeat: int = 1):
    """Best of ``repeat`` runs (reads are repeated: the first pays the page cache for both sides)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def parquet_side(root: Path, jobs: pd.DataFrame, steps: pd.DataFrame, new_jobs: pd.DataFrame,
                 new_steps: pd.DataFrame, cut: pd.Timestamp) -> dict[str, float]:
    root.mkdir()
    out: dict[str, float] = {}
    out["write"], _ = _timed(lambda: (pq.write_table(_arrow(jobs), root / "jobs-0.parquet"),
                                      pq.write_table(_arrow(steps), root / "steps-0.parquet")))
    out["append"], _ = _timed(lambda: (pq.write_table(_arrow(new_jobs), root / "jobs-1.parquet"),
                                       pq.write_table(_arrow(new_steps), root / "steps-1.parquet")))

    def read(kind: str) -> pd.DataFrame:
        tables = [pq.read_table(p) for p in sorted(root.glob(f"{kind}-*.parquet"))]
        table = pa.concat_tables(tables)
        end = table.column("end")
        keep = pa.compute.or_(pa.compute.is_null(end), pa.compute.greater_equal(end, pa.scalar(cut, end.type)))
        return table.filter(keep).to_pandas()

    out["read jobs"], got = _timed(lambda: read("jobs"), 3)
    out["rows"] = len(got)
    out["read all"], _ = _timed(lambda: (read("jobs"), read("steps")), 3)
    out["size"] = _size(root)
    return out


def duckdb_side(path: Path, jobs: pd.DataFrame, steps: pd.DataFrame, new_jobs: pd.DataFrame,
                new_steps: pd.DataFrame, cut: pd.Timestamp) -> dict[str, float]:
    out: dict[str, float] = {}
    con = duckdb.connect(str(path))
    jobs_a, steps_a = _arrow(jobs), _arrow(steps)
    for name, value in (("jobs_a", jobs_a), ("steps_a", steps_a), ("nj", _arrow(new_jobs)), ("ns", _arrow(new_steps))):
        con.register(name, value)

    def write() -> None:
        con.execute("CREATE TABLE jobs AS SELECT * FROM jobs_a")
        con.execute("CREATE TABLE steps AS SELECT * FROM steps_a")
        con.execute("CHECKPOINT")

    def append() -> None:
        con.execute("BEGIN")
        con.execute("DELETE FROM jobs WHERE db_index IN (SELECT db_index FROM nj)")
        con.execute("DELETE FROM steps WHERE db_index IN (SELECT db_index FROM nj)")
        con.execute("INSERT INTO jobs SELECT * FROM nj")
        con.execute("INSERT INTO steps SELECT * FROM ns")
        con.execute("COMMIT")

    out["write"], _ = _timed(write)
    out["append"], _ = _timed(append)
    schema_jobs, schema_steps = jobs_a.schema, steps_a.schema

    def read(kind: str) -> pd.DataFrame:
        table = con.sql(f"SELECT * FROM {kind} WHERE \"end\" IS NULL OR \"end\" >= '{cut.isoformat()}'"
                        ).to_arrow_table()
        # back to the frames' own dtypes (DuckDB returns its own types: strings, timestamps with zone)
        schema = schema_jobs if kind == "jobs" else schema_steps
        return table.cast(schema).to_pandas()

    out["read jobs"], got = _timed(lambda: read("jobs"), 3)
    out["rows"] = len(got)
    out["read all"], _ = _timed(lambda: (read("jobs"), read("steps")), 3)
    con.close()
    out["size"] = _size(path)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=250_000, help="job records (each with 3 steps)")
    args = parser.parse_args()
    t = time.perf_counter()
    table = parse_sacct(synthesise((args.jobs + 1000) * 4))
    jobs, steps = table.jobs, table.steps
    new_ids = set(jobs["db_index"].iloc[-1000:].tolist())
    new_jobs, old_jobs = jobs[jobs["db_index"].isin(new_ids)], jobs[~jobs["db_index"].isin(new_ids)]
    new_steps, old_steps = steps[steps["db_index"].isin(new_ids)], steps[~steps["db_index"].isin(new_ids)]
    print(f"{len(old_jobs):,} jobs + {len(old_steps):,} steps, then 1,000 more jobs "
          f"(synthesised and parsed in {time.perf_counter() - t:.1f} s)")
    cut = pd.Timestamp("2026-11-08", tz="UTC")
    with tempfile.TemporaryDirectory(prefix="slinkyml-store-format-") as tmp:
        pq_out = parquet_side(Path(tmp) / "parquet", old_jobs, old_steps, new_jobs, new_steps, cut)
        dd_out = duckdb_side(Path(tmp) / "store.duckdb", old_jobs, old_steps, new_jobs, new_steps, cut) \
            if duckdb is not None else None
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'':12} {'Parquet':>10} {'DuckDB':>10} {'DuckDB/Parquet':>15}")
    for name in ("write", "append", "read jobs", "read all", "size"):
        mine = pq_out[name]
        theirs = dd_out[name] if dd_out else float("nan")
        unit = "MB" if name == "size" else "s"
        scale = 1e6 if name == "size" else 1
        print(f"{name:12} {mine / scale:9.3f}{unit[0]} {theirs / scale:9.3f}{unit[0]} {theirs / mine:14.2f}x")
    print(f"rows read per window: Parquet {pq_out['rows']:,}, DuckDB "
          f"{dd_out['rows'] if dd_out else 'n/a':,}; duckdb {duckdb.__version__ if duckdb else 'not installed'}, "
          f"pyarrow {pa.__version__}")


if __name__ == "__main__":
    main()
