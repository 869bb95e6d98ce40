"""sacct's fields, its arguments and the per-value rules of the one transform, in the standard library
only: the pandas transform (``sacct_arrow.py``) and the plain one for small answers (``sacct_rows.py``)
share them, so both read a value the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from slinkyml.accounting.tres import parse_size
from slinkyml.slurm import records

#: sacct fields, in the order requested (``--format``); all exist on 22.05 and 24.11.
FIELDS = (
    "JobID", "JobIDRaw", "DBIndex", "JobName", "User", "Account", "Partition", "QOS", "State",
    "ExitCode", "Submit", "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "AllocCPUS",
    "NNodes", "NodeList", "ReqMem", "ReqTRES", "AllocTRES", "TotalCPU", "CPUTimeRAW", "MaxRSS",
    "TRESUsageInAve", "Reservation", "Cluster", "TRESUsageInTot",
)
TIMES = ("Submit", "Eligible", "Start", "End")


def sacct_args(start: str, end: str, *, users: list[str] | None = None,
               accounts: list[str] | None = None, job_ids: list[int] | None = None,
               duplicates: bool = True) -> list[str]:
    """sacct arguments for :data:`FIELDS` over [start, end] (sacct's own time syntax)."""
    args = records.sacct_args(FIELDS, ["--noconvert", "-S", start, "-E", end])
    if duplicates:
        args.append("--duplicates")  # requeued runs: every segment, not only the last
    if job_ids:
        args += ["--jobs", ",".join(map(str, job_ids))]
    elif users:
        args += ["--user", ",".join(users)]
    else:
        args.append("--allusers")
    if accounts:
        args += ["--accounts", ",".join(accounts)]
    return args


def slurm_time(value: datetime) -> str:
    """A datetime → sacct/sreport syntax, in UTC (the runner sets TZ=UTC)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_text(slurm: Any, start: datetime, end: datetime, *, users: Sequence[str] | None = None,
               accounts: Sequence[str] | None = None, job_ids: Sequence[Any] | None = None) -> str:
    """sacct's answer for the window (every record, steps included), as text for either transform."""
    args = sacct_args(slurm_time(start), slurm_time(end), users=list(users) if users else None,
                      accounts=list(accounts) if accounts else None, job_ids=list(job_ids) if job_ids else None)
    return slurm.run("sacct", args, timeout=300).stdout


def job_id_parts(head: str) -> tuple[int | None, int | None, int | None]:
    """(base, array task, het offset) of a JobID head such as ``7_3``, ``10+1`` or ``7_[4-9]``."""
    base, underscore, rest = head.partition("_")
    if underscore:
        task, plus, het = rest.partition("+")
    else:
        task = None
        base, plus, het = head.partition("+")
    return (int(base) if base.isdigit() else None,
            int(task) if task and task.isdigit() else None,
            int(het) if plus and het.isdigit() else None)


def timelimit_seconds(text: object) -> float:
    """TimelimitRaw (minutes) in seconds; NaN for none (missing, UNLIMITED, ...)."""
    if not isinstance(text, str) or text in ("", "UNLIMITED", "Partition_Limit", "INVALID"):
        return math.nan
    try:
        return float(text) * 60.0
    except ValueError:
        return math.nan


def req_mem(text: object) -> float:
    """ReqMem's number in bytes: ``900M`` (since 21.08 the job's total request) or, before,
    ``300Mc`` (per CPU) / ``900Mn`` (per node) — see ``sacct.req_mem_total``."""
    if not isinstance(text, str) or not text:
        return math.nan
    return parse_size(text.rstrip("cn"), "M")


PER_CPU, PER_NODE = 2.0, 3.0


def req_mem_scale(text: object) -> float:
    """ReqMem's unit: 1 = the job's total, :data:`PER_CPU` (``c``), :data:`PER_NODE` (``n``)."""
    text = text if isinstance(text, str) else ""
    return PER_CPU if text.endswith("c") else PER_NODE if text.endswith("n") else 1.0
