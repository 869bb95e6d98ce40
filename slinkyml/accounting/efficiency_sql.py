"""The SQL of ``efficiency.runs`` (one row per job id, requeued segments stitched, seff's ratios), in the
standard library only: DuckDB runs it over a frame from sacct and over the store's tables, and the store's
plain read (``slinkyml efficiency`` on a small cluster) needs it without importing pandas.
"""

from __future__ import annotations

from collections.abc import Sequence

from slinkyml.slurm.states import LOST_STATES

#: the step columns :func:`step_stats` reads (a store read of only these: steps are most of the records)
STEP_COLUMNS = ("job_id", "parent_key", "max_rss_bytes", "mem_used_bytes", "gpu_util_pct")
#: what :func:`runs` needs of a record's steps, per record: its largest step's memory and its steps'
#: GPU utilisation as sum and count (a run's mean is Σ sums / Σ counts over its segments). The store
#: keeps these per record at ingest, so a report over it reads no steps.
STEP_STATS = ("step_max_rss_bytes", "step_mem_used_bytes", "step_gpu_util_sum", "step_gpu_util_count")


#: the job columns :func:`runs` reads (a store read of these and the keys serves it)
COLUMNS = ("job_id", "segment", "name", "user", "account", "partition", "state", "job_id_display", "submit",
           "eligible", "start", "end", "elapsed_s", "cpu_time_s", "total_cpu_s", "timelimit_s", "req_mem_bytes",
           "alloc_mem_bytes", "nnodes", "alloc_gpus", "alloc_gpu_type", "array_job_id", "array_task_id")


#: each run's columns from its records' values in segment order, in one table that both sources compile:
#: (column, how, SQL over one record), how one of last/first (non-missing, as pandas' groupby), sum
#: (missing as 0), max (missing if all are), count (of non-missing). The same SQL serves a frame from sacct
#: and the store's tables, so a report from either is the same one.
_GPU_SECONDS = "coalesce(alloc_gpus, 0) * coalesce(elapsed_s, 0)"
_LOST = "state IN (" + ", ".join(f"'{state}'" for state in LOST_STATES) + ")"
_RULES: tuple[tuple[str, str, str], ...] = (
    ("name", "last", "name"), ("user", "last", '"user"'), ("account", "last", "account"),
    ("partition", "last", '"partition"'), ("segments", "count", "segment"), ("state", "last", "state"),
    ("first_submit", "first", "submit"), ("start", "last", "start"), ("end", "last", '"end"'),
    ("elapsed_s", "sum", "elapsed_s"), ("cpu_time_s", "sum", "cpu_time_s"), ("total_cpu_s", "sum", "total_cpu_s"),
    ("max_rss_bytes", "max", "step_max_rss_bytes"),  # per segment: its largest step
    ("mem_used_bytes", "max", "step_mem_used_bytes"), ("job", "last", "job_id_display"),
    ("timelimit_s", "last", "timelimit_s"),
    ("time_efficiency", "last", "elapsed_s / CASE WHEN timelimit_s > 0 THEN timelimit_s END"),
    ("req_mem_bytes", "max", "coalesce(req_mem_bytes, alloc_mem_bytes)"), ("nnodes", "max", "nnodes"),
    ("gpus", "max", "alloc_gpus"), ("gpu_type", "last", "alloc_gpu_type"),
    ("gpu_seconds", "sum", _GPU_SECONDS),
    ("lost_gpu_seconds", "sum", f"CASE WHEN {_LOST} THEN {_GPU_SECONDS} ELSE 0 END"),
    ("lost_cpu_seconds", "sum", f"CASE WHEN {_LOST} THEN coalesce(cpu_time_s, 0) ELSE 0 END"),
    ("gpu_util_sum", "sum", "step_gpu_util_sum"), ("gpu_util_count", "sum", "step_gpu_util_count"),
    ("wait_eligible_s", "sum", "(epoch_us(eligible) - epoch_us(submit)) / 1000000"),
    ("wait_start_s", "sum", "(epoch_us(start) - epoch_us(eligible)) / 1000000"),
    ("array_job_id", "first", "array_job_id"), ("array_task_id", "first", "array_task_id"),
)
#: computed from a run's columns (seff's ratios; GPU-hours)
_RATIOS = (
    ("cpu_efficiency", "CASE WHEN cpu_time_s > 0 THEN total_cpu_s / cpu_time_s END"),
    ("mem_efficiency", "mem_used_bytes / CASE WHEN req_mem_bytes > 0 THEN req_mem_bytes END"),
    ("gpu_util_pct", "gpu_util_sum / CASE WHEN gpu_util_count > 0 THEN gpu_util_count END"),
    ("gpu_hours", "gpu_seconds / 3600"), ("lost_gpu_hours", "lost_gpu_seconds / 3600"),
    ("lost_cpu_hours", "lost_cpu_seconds / 3600"),
)
#: a run's column that carries one record column as it is (or counts it) keeps that column's dtype
_CARRIED = {column: sql.strip('"') for column, how, sql in _RULES if how != "sum" and sql.strip('"').isidentifier()}


def _single(how: str, sql: str) -> str:
    """A rule over a job id's one record (most job ids have one: no aggregation needed)."""
    return {"sum": f"coalesce({sql}, 0)", "count": f"({sql} IS NOT NULL)::BIGINT"}.get(how, sql)


def _aggregate(how: str, sql: str) -> str:
    """A rule over a job id's records, ordered by ``_o``; sums in that order, so they never depend on
    how DuckDB splits the work."""
    return {"last": f"max_by({sql}, _o)", "first": f"min_by({sql}, _o)", "max": f"max({sql})",
            "count": f"count({sql})", "sum": f"coalesce(list_sum(list(({sql})::DOUBLE ORDER BY _o)), 0)"}[how]


def runs_sql(source: str, order: str, order_columns: Sequence[str] = ()) -> str:
    """SQL for one row per job id over ``source`` (records with ``COLUMNS`` and ``STEP_STATS``), its
    records taken in ``order`` (an ORDER BY list: segment order, ties as sacct printed them) over
    those columns and ``order_columns``."""
    read = ", ".join(f'"{c}"' for c in dict.fromkeys([*COLUMNS, *STEP_STATS, *order_columns]))
    single = ", ".join(f"{_single(how, sql)} AS \"{column}\"" for column, how, sql in _RULES)
    several = ", ".join(f"{_aggregate(how, sql)} AS \"{column}\"" for column, how, sql in _RULES)
    kept = ", ".join(f'"{column}"' for column, _, _ in _RULES if not column.startswith("gpu_util_"))
    ratios = ", ".join(f"{sql} AS {column}" for column, sql in _RATIOS)
    return (f"WITH w AS NOT MATERIALIZED (SELECT {read} FROM {source} WHERE job_id IS NOT NULL), "
            "multi AS (SELECT job_id FROM w GROUP BY job_id HAVING count(*) > 1), "
            f"r AS (SELECT job_id, {single} FROM w ANTI JOIN multi USING (job_id) "
            f"UNION ALL SELECT job_id, {several} FROM (SELECT w.*, row_number() OVER (PARTITION BY job_id "
            f"ORDER BY {order}) AS _o FROM w SEMI JOIN multi USING (job_id)) GROUP BY job_id) "
            f"SELECT job_id, {kept}, {ratios} FROM r ORDER BY job_id")
