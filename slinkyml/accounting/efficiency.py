"""Per training run: requeued segments stitched, CPU/memory/time/GPU efficiency (seff's formulas),
lost GPU-hours, and the wait split into submit→eligible and eligible→start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slinkyml.slurm.states import LOST_STATES

#: the step columns :func:`runs` reads (a store read of only these: steps are most of the records)
STEP_COLUMNS = ("job_id", "parent_key", "max_rss_bytes", "mem_used_bytes", "gpu_util_pct")


def runs(jobs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per job id (all ``--duplicates`` segments of a requeued job stitched together)."""
    if jobs.empty:
        return pd.DataFrame(columns=["job_id", "user", "account", "segments", "state"])
    j = jobs.sort_values(["job_id", "segment"]).copy()
    j["gpu_seconds"] = j["alloc_gpus"].fillna(0) * j["elapsed_s"].fillna(0)
    j["lost_gpu_seconds"] = np.where(j["state"].isin(LOST_STATES), j["gpu_seconds"], 0.0)
    j["lost_cpu_seconds"] = np.where(j["state"].isin(LOST_STATES),
                                     j["cpu_time_s"].fillna(0), 0.0)
    j["wait_eligible_s"] = (j["eligible"] - j["submit"]).dt.total_seconds()
    j["wait_start_s"] = (j["start"] - j["eligible"]).dt.total_seconds()
    util = steps.groupby("job_id")["gpu_util_pct"].mean() if not steps.empty else None
    largest = steps.groupby("parent_key")[["max_rss_bytes", "mem_used_bytes"]].max() if not steps.empty else None
    for column in ("max_rss_bytes", "mem_used_bytes"):  # per segment: the largest step (one grouping for both)
        j[column] = j["key"].map(largest[column]) if largest is not None else np.nan
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
        wait_eligible_s=("wait_eligible_s", "sum"), wait_start_s=("wait_start_s", "sum"),
        array_job_id=("array_job_id", "first"), array_task_id=("array_task_id", "first"),
    ).reset_index()
    out["cpu_efficiency"] = np.where(out["cpu_time_s"] > 0,
                                     out["total_cpu_s"] / out["cpu_time_s"], np.nan)
    out["mem_efficiency"] = out["mem_used_bytes"] / out["req_mem_bytes"].where(
        out["req_mem_bytes"] > 0)
    out["gpu_util_pct"] = out["job_id"].map(util) if util is not None else np.nan
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
