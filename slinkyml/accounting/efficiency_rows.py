"""``slinkyml efficiency`` over plain records (``sacct_rows``), for small answers: the runs
``efficiency.runs`` computes with DuckDB from the frames (its ``_RULES`` and ``_RATIOS``), without
pandas, pyarrow, numpy or DuckDB, whose imports were most of a small report's run time.

The rules are the SQL's, read in Python: a missing number (NaN in the frames, NULL in DuckDB) is None;
``last``/``first`` take the last/first record with a value, in segment order; a sum over one record is
its value or 0, over several the values in segment order added one after the other (DuckDB's
``list_sum``), missing ones skipped; the steps' GPU utilisation per record is pandas' group sum
(``usage_rows.group_sums``, as ``efficiency.step_stats``). tests/test_efficiency_rows.py compares the printed tables of both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from slinkyml.accounting.rows import Rows
from slinkyml.accounting.usage_rows import group_sums
from slinkyml.slurm.states import LOST_STATES

#: what ``slinkyml efficiency`` prints, in order
COLUMNS = ("job", "job_id", "array_job_id", "array_task_id", "name", "user", "account", "segments", "state",
           "cpu_efficiency", "mem_efficiency", "time_efficiency", "mem_used_bytes", "req_mem_bytes", "gpu_util_pct",
           "gpu_hours", "lost_gpu_hours", "lost_cpu_hours", "wait_eligible_s", "wait_start_s")
_TEXT = frozenset({"job", "name", "user", "account", "state"})
_LOST = frozenset(LOST_STATES)
Record = dict[str, Any]


def _value(value: Any) -> Any:
    """A missing number is None (NaN in the frames became NULL in DuckDB)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _coalesce(value: Any, default: float) -> Any:
    return default if value is None else value


def _positive(value: Any) -> Any:
    """``CASE WHEN value > 0 THEN value END``."""
    return value if value is not None and value > 0 else None


def _divide(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a / b


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    """``(epoch_us(later) - epoch_us(earlier)) / 1000000``."""
    if later is None or earlier is None:
        return None
    return ((later - earlier) // timedelta(microseconds=1)) / 1000000


def _gpu_seconds(r: Record) -> float:
    return _coalesce(r["alloc_gpus"], 0) * _coalesce(r["elapsed_s"], 0)


#: (column, how, value of one record): the rules of ``efficiency._RULES``, same order
_RULES: tuple[tuple[str, str, Callable[[Record], Any]], ...] = (
    ("name", "last", lambda r: r["name"]), ("user", "last", lambda r: r["user"]),
    ("account", "last", lambda r: r["account"]), ("partition", "last", lambda r: r["partition"]),
    ("segments", "count", lambda r: r["segment"]), ("state", "last", lambda r: r["state"]),
    ("first_submit", "first", lambda r: r["submit"]), ("start", "last", lambda r: r["start"]),
    ("end", "last", lambda r: r["end"]), ("elapsed_s", "sum", lambda r: r["elapsed_s"]),
    ("cpu_time_s", "sum", lambda r: r["cpu_time_s"]), ("total_cpu_s", "sum", lambda r: r["total_cpu_s"]),
    ("max_rss_bytes", "max", lambda r: r["step_max_rss_bytes"]),
    ("mem_used_bytes", "max", lambda r: r["step_mem_used_bytes"]), ("job", "last", lambda r: r["job_id_display"]),
    ("timelimit_s", "last", lambda r: r["timelimit_s"]),
    ("time_efficiency", "last", lambda r: _divide(r["elapsed_s"], _positive(r["timelimit_s"]))),
    ("req_mem_bytes", "max", lambda r: _coalesce(r["req_mem_bytes"], r["alloc_mem_bytes"])),
    ("nnodes", "max", lambda r: r["nnodes"]), ("gpus", "max", lambda r: r["alloc_gpus"]),
    ("gpu_type", "last", lambda r: r["alloc_gpu_type"]), ("gpu_seconds", "sum", _gpu_seconds),
    ("lost_gpu_seconds", "sum", lambda r: _gpu_seconds(r) if r["state"] in _LOST else 0),
    ("lost_cpu_seconds", "sum", lambda r: _coalesce(r["cpu_time_s"], 0) if r["state"] in _LOST else 0),
    ("gpu_util_sum", "sum", lambda r: r["step_gpu_util_sum"]),
    ("gpu_util_count", "sum", lambda r: r["step_gpu_util_count"]),
    ("wait_eligible_s", "sum", lambda r: _seconds(r["eligible"], r["submit"])),
    ("wait_start_s", "sum", lambda r: _seconds(r["start"], r["eligible"])),
    ("array_job_id", "first", lambda r: r["array_job_id"]), ("array_task_id", "first", lambda r: r["array_task_id"]),
)


def _single(how: str, value: Any) -> Any:
    if how == "sum":
        return float(_coalesce(value, 0))
    if how == "count":
        return int(value is not None)
    return value


def _several(how: str, values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if how == "last":
        return present[-1] if present else None
    if how == "first":
        return present[0] if present else None
    if how == "max":
        return max(present) if present else None
    if how == "count":
        return len(present)
    total = None
    for v in present:
        total = float(v) if total is None else total + float(v)
    return _coalesce(total, 0.0)


def _step_stats(jobs: Sequence[Record], steps: Sequence[Record]) -> list[Record]:
    """Each record with ``efficiency.STEP_STATS`` of its steps (None and 0 without steps)."""
    per: dict[str, tuple[list[float], list[float]]] = {}
    for step in steps:
        rss, mem = per.setdefault(step["parent_key"], ([], []))
        for kept, value in ((rss, step["max_rss_bytes"]), (mem, step["mem_used_bytes"])):
            if not math.isnan(value):
                kept.append(value)
    util = [step["gpu_util_pct"] for step in steps]
    sums = group_sums([(step["parent_key"],) for step in steps], [util])
    counts: dict[str, int] = {}
    for step, value in zip(steps, util, strict=True):
        counts[step["parent_key"]] = counts.get(step["parent_key"], 0) + (not math.isnan(value))
    out = []
    for job in jobs:
        rss, mem = per.get(job["key"], ([], []))
        out.append({**{k: _value(v) for k, v in job.items()}, "step_max_rss_bytes": max(rss) if rss else None,
                    "step_mem_used_bytes": max(mem) if mem else None,
                    "step_gpu_util_sum": sums.get((job["key"],), [0.0])[0],
                    "step_gpu_util_count": float(counts.get(job["key"], 0))})
    return out


def runs(jobs: Sequence[Record], steps: Sequence[Record]) -> list[Record]:
    """One run per job id (its records stitched in segment order, then as sacct printed them), ordered
    by job id, with seff's ratios."""
    by_job: dict[int, list[Record]] = {}
    for record in _step_stats(jobs, steps):
        by_job.setdefault(record["job_id"], []).append(record)
    out = []
    for job_id in sorted(by_job):
        records = by_job[job_id]
        if len(records) == 1:
            run = {column: _single(how, rule(records[0])) for column, how, rule in _RULES}
        else:
            ordered = sorted(records, key=lambda r: r["segment"])  # stable: ties keep sacct's order
            run = {column: _several(how, [_value(rule(r)) for r in ordered]) for column, how, rule in _RULES}
        run = {k: _value(v) for k, v in run.items()}
        run["job_id"] = job_id
        run["cpu_efficiency"] = _divide(run["total_cpu_s"], _positive(run["cpu_time_s"]))
        run["mem_efficiency"] = _divide(run["mem_used_bytes"], _positive(run["req_mem_bytes"]))
        run["gpu_util_pct"] = _divide(run["gpu_util_sum"], _positive(run["gpu_util_count"]))
        for kind in ("gpu", "lost_gpu", "lost_cpu"):
            run[f"{kind}_hours"] = _divide(run[f"{kind}_seconds"], 3600)
        out.append(run)
    return out


def table(jobs: Sequence[Record], steps: Sequence[Record]) -> Rows:
    """What ``slinkyml efficiency`` prints of the runs of these records."""
    return printed(runs(jobs, steps))


def printed(found: Sequence[Record]) -> Rows:
    """What ``slinkyml efficiency`` prints of these runs (:func:`runs`', or the store's ``runs_rows``)."""
    data = [[run[c] for c in COLUMNS] for run in found]
    numeric = frozenset(COLUMNS) - _TEXT if data else frozenset()  # an empty frame's columns are objects
    return Rows(list(COLUMNS), data, numeric)
