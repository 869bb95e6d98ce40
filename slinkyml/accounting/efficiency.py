"""Per training run: requeued segments stitched, CPU/memory/time/GPU efficiency (seff's formulas),
lost GPU-hours, and the wait split into submit→eligible and eligible→start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from slinkyml.accounting.efficiency_sql import _CARRIED, COLUMNS, STEP_COLUMNS, STEP_STATS, runs_sql  # noqa: F401


def step_stats(jobs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """:data:`STEP_STATS` for each row of ``jobs`` (NaN and 0 for a record without steps)."""
    if steps.empty:
        nan = np.full(len(jobs), np.nan)
        return pd.DataFrame({"step_max_rss_bytes": nan, "step_mem_used_bytes": nan.copy(),
                             "step_gpu_util_sum": np.zeros(len(jobs)), "step_gpu_util_count": np.zeros(len(jobs))},
                            index=jobs.index)
    per_record = steps.groupby("parent_key").agg(
        step_max_rss_bytes=("max_rss_bytes", "max"), step_mem_used_bytes=("mem_used_bytes", "max"),
        step_gpu_util_sum=("gpu_util_pct", "sum"), step_gpu_util_count=("gpu_util_pct", "count"))
    out = per_record.reindex(jobs["key"].to_numpy())
    out.index = jobs.index
    out[["step_gpu_util_sum", "step_gpu_util_count"]] = \
        out[["step_gpu_util_sum", "step_gpu_util_count"]].fillna(0).astype("float64")
    return out.astype("float64")


def runs_frame(answer: pa.Table, dtypes: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`runs_sql`'s answer as a frame: a column carried from one record column (or counting it)
    in that column's dtype (``dtypes``: the transform's), the rest float64."""
    kinds = {pa.int64(): pd.Int64Dtype(), pa.string(): pd.StringDtype("pyarrow")}  # as the transform's
    frame = answer.to_pandas(types_mapper=kinds.get)
    for name in frame.columns:
        source = "job_id" if name == "job_id" else _CARRIED.get(name, "")
        if source in dtypes and frame[name].dtype != dtypes[source]:
            frame[name] = frame[name].astype(dtypes[source])
    return frame


def runs(jobs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per job id (all ``--duplicates`` segments of a requeued job stitched together).
    ``jobs`` carrying :data:`STEP_STATS` (a store read) need no ``steps``."""
    if jobs.empty:
        return pd.DataFrame(columns=["job_id", "user", "account", "segments", "state"])
    if not all(column in jobs.columns for column in STEP_STATS):
        jobs = pd.concat([jobs.drop(columns=[c for c in STEP_STATS if c in jobs.columns]),
                          step_stats(jobs, steps)], axis=1)
    records = pa.Table.from_pandas(jobs[[*COLUMNS, *STEP_STATS]], preserve_index=False)
    records = records.append_column("_row", pa.array(np.arange(len(jobs), dtype="int64")))
    import duckdb  # lazy: only runs from a frame need it here (the store has its own), not every accounting command

    with duckdb.connect() as con:
        con.register("records", records)
        answer = con.sql(runs_sql("records", "segment NULLS LAST, _row", ["_row"])).to_arrow_table()
    return runs_frame(answer, jobs.dtypes)


def summary(table: pd.DataFrame, by: str = "user") -> pd.DataFrame:
    """Per ``by``: runs, mean CPU/memory efficiency, GPU-hours and lost GPU/CPU-hours."""
    if table.empty:
        return pd.DataFrame(columns=[by, "runs"])
    return table.groupby(by).agg(
        runs=("job_id", "count"), requeued=("segments", lambda s: int((s > 1).sum())),
        cpu_efficiency=("cpu_efficiency", "mean"), mem_efficiency=("mem_efficiency", "mean"),
        time_efficiency=("time_efficiency", "mean"),
        gpu_hours=("gpu_hours", "sum"), lost_gpu_hours=("lost_gpu_hours", "sum"),
        lost_cpu_hours=("lost_cpu_hours", "sum"), wait_eligible_s=("wait_eligible_s", "mean"),
        wait_start_s=("wait_start_s", "mean")).reset_index()
