"""Per training run: requeued segments stitched, CPU/memory/time/GPU efficiency (seff's formulas),
lost GPU-hours, and the wait split into submit→eligible and eligible→start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slinkyml.slurm.states import LOST_STATES

#: the step columns :func:`step_stats` reads (a store read of only these: steps are most of the records)
STEP_COLUMNS = ("job_id", "parent_key", "max_rss_bytes", "mem_used_bytes", "gpu_util_pct")
#: what :func:`runs` needs of a record's steps, per record: its largest step's memory and its steps'
#: GPU utilisation as sum and count (a run's mean is Σ sums / Σ counts over its segments). The store
#: keeps these per record at ingest, so a report over it reads no steps.
STEP_STATS = ("step_max_rss_bytes", "step_mem_used_bytes", "step_gpu_util_sum", "step_gpu_util_count")


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


#: the job columns :func:`runs` reads (a store read of these and the keys serves it)
COLUMNS = ("job_id", "segment", "name", "user", "account", "partition", "state", "job_id_display", "submit",
           "eligible", "start", "end", "elapsed_s", "cpu_time_s", "total_cpu_s", "timelimit_s", "req_mem_bytes",
           "alloc_mem_bytes", "nnodes", "alloc_gpus", "alloc_gpu_type", "array_job_id", "array_task_id")


def _in_run_order(jobs: pd.DataFrame) -> bool:
    """Whether each job id's rows already come in segment order, ties in row order: then grouping them
    as they stand gives what grouping them sorted by (job id, segment) gives, without moving a million
    rows (sacct's order usually is this one)."""
    ids = jobs["job_id"].to_numpy(dtype="float64", na_value=np.inf)
    segments = jobs["segment"].to_numpy(dtype="float64", na_value=np.inf)  # missing last, as sort_values
    order = np.lexsort((segments, ids))  # stable: ties keep their row order
    same = ids[order][1:] == ids[order][:-1]
    return bool(np.all(order[1:][same] > order[:-1][same]))


def runs(jobs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per job id (all ``--duplicates`` segments of a requeued job stitched together).
    ``jobs`` carrying :data:`STEP_STATS` (a store read) need no ``steps``."""
    if jobs.empty:
        return pd.DataFrame(columns=["job_id", "user", "account", "segments", "state"])
    if not all(column in jobs.columns for column in STEP_STATS):
        jobs = pd.concat([jobs.drop(columns=[c for c in STEP_STATS if c in jobs.columns]),
                          step_stats(jobs, steps)], axis=1)
    j = jobs[[*COLUMNS, *STEP_STATS]]
    if not _in_run_order(j):
        j = j.sort_values(["job_id", "segment"])
    j["gpu_seconds"] = j["alloc_gpus"].fillna(0) * j["elapsed_s"].fillna(0)
    j["lost_gpu_seconds"] = np.where(j["state"].isin(LOST_STATES), j["gpu_seconds"], 0.0)
    j["lost_cpu_seconds"] = np.where(j["state"].isin(LOST_STATES),
                                     j["cpu_time_s"].fillna(0), 0.0)
    j["wait_eligible_s"] = (j["eligible"] - j["submit"]).dt.total_seconds()
    j["wait_start_s"] = (j["start"] - j["eligible"]).dt.total_seconds()
    j["max_rss_bytes"] = j["step_max_rss_bytes"]  # per segment: its largest step
    j["mem_used_bytes"] = j["step_mem_used_bytes"]
    j["req_mem_bytes"] = j["req_mem_bytes"].fillna(j["alloc_mem_bytes"])
    j["time_efficiency"] = j["elapsed_s"] / j["timelimit_s"].where(j["timelimit_s"] > 0)
    grouped = j.groupby("job_id", sort=True)
    out = grouped.agg(
        name=("name", "last"), user=("user", "last"), account=("account", "last"),
        partition=("partition", "last"), segments=("segment", "count"), state=("state", "last"),
        first_submit=("submit", "first"), start=("start", "last"), end=("end", "last"),
        elapsed_s=("elapsed_s", "sum"), cpu_time_s=("cpu_time_s", "sum"),
        total_cpu_s=("total_cpu_s", "sum"), max_rss_bytes=("max_rss_bytes", "max"),
        mem_used_bytes=("mem_used_bytes", "max"), job=("job_id_display", "last"),
        timelimit_s=("timelimit_s", "last"), time_efficiency=("time_efficiency", "last"),
        req_mem_bytes=("req_mem_bytes", "max"), nnodes=("nnodes", "max"),
        gpus=("alloc_gpus", "max"), gpu_type=("alloc_gpu_type", "last"),
        gpu_seconds=("gpu_seconds", "sum"), lost_gpu_seconds=("lost_gpu_seconds", "sum"),
        lost_cpu_seconds=("lost_cpu_seconds", "sum"),
        gpu_util_sum=("step_gpu_util_sum", "sum"), gpu_util_count=("step_gpu_util_count", "sum"),
        wait_eligible_s=("wait_eligible_s", "sum"), wait_start_s=("wait_start_s", "sum"),
        array_job_id=("array_job_id", "first"), array_task_id=("array_task_id", "first"),
    ).reset_index()
    out["cpu_efficiency"] = np.where(out["cpu_time_s"] > 0,
                                     out["total_cpu_s"] / out["cpu_time_s"], np.nan)
    out["mem_efficiency"] = out["mem_used_bytes"] / out["req_mem_bytes"].where(
        out["req_mem_bytes"] > 0)
    out["gpu_util_pct"] = out["gpu_util_sum"] / out["gpu_util_count"].where(out["gpu_util_count"] > 0)
    out = out.drop(columns=["gpu_util_sum", "gpu_util_count"])
    out["gpu_hours"] = out["gpu_seconds"] / 3600
    out["lost_gpu_hours"] = out["lost_gpu_seconds"] / 3600
    out["lost_cpu_hours"] = out["lost_cpu_seconds"] / 3600
    return out


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
