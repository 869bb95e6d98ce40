"""The one transform (``sacct_arrow.parse_sacct``) in plain Python, for small answers: sacct's text →
records (dicts of the frames' columns: int or None, float with NaN, str or None, UTC datetime or None).

Why: on a small cluster a report's whole run was mostly importing pandas, pyarrow and numpy to parse a
few hundred lines. This reads the same text value for value as the frames hold it (the golden frames'
test checks every column of both), and declines what it does not cover (lines with the wrong field
count, job ids that are not numbers): the caller then takes the pandas path, so odd input never gives
a different answer, only a slower one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slinkyml.accounting import sacct_fields
from slinkyml.accounting.sacct_fields import FIELDS, job_id_parts, req_mem, req_mem_scale, timelimit_seconds
from slinkyml.accounting.tres import alloc_tres, parse_duration, parse_size, usage_tres
from slinkyml.errors import SlinkyError
from slinkyml.slurm.records import SEP

#: the frames' columns, in their order
COLUMNS = (
    "job_id", "job_id_display", "step", "array_job_id", "array_task_id", "het_job_id", "het_offset", "db_index",
    "name", "user", "account", "partition", "qos", "nodelist", "reservation", "cluster", "state", "exit_code",
    "submit", "eligible", "start", "end", "elapsed_s", "timelimit_s", "alloc_cpus", "nnodes", "req_mem_bytes",
    "alloc_cpu", "alloc_mem_bytes", "alloc_node", "alloc_billing", "alloc_gpus", "alloc_gpu_type", "req_cpu",
    "req_node", "req_billing", "req_gpus", "req_gpu_type", "total_cpu_s", "cpu_time_s", "max_rss_bytes",
    "mem_used_bytes", "gpu_util_pct", "segment", "parent_key", "key",
)
#: the columns that hold floats (NaN where missing)
FLOATS = frozenset({"elapsed_s", "timelimit_s", "alloc_cpus", "nnodes", "req_mem_bytes", "alloc_cpu", "alloc_mem_bytes",
                    "alloc_node", "alloc_billing", "alloc_gpus", "req_cpu", "req_node", "req_billing", "req_gpus",
                    "total_cpu_s", "cpu_time_s", "max_rss_bytes", "mem_used_bytes", "gpu_util_pct"})
_TEXTS = (("name", "JobName"), ("user", "User"), ("account", "Account"), ("partition", "Partition"),
          ("qos", "QOS"), ("nodelist", "NodeList"), ("reservation", "Reservation"), ("cluster", "Cluster"))
_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")
_DURATION = re.compile(r"(?:([0-9]+)-)?(?:([0-9]+):)?([0-9]+):([0-9]+(?:\.[0-9]+)?)")
_TRES_MEM = re.compile(r"(?:^|,)mem=([0-9.]+)([KMGTP]?)(?:,|$)")
_GPU_UTIL = re.compile(r"gres/gpuutil=([^,]*)")
_UNIT = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}
_UINT64_MAX = (1 << 64) - 1
#: the most records (steps included) read here: above, the Arrow transform's import is repaid (this reads
#: ~30 µs a record, the Arrow transform ~8 plus ~0.7 s of imports: equal near 30,000 on this machine)
LIMIT = 20_000


@dataclass
class Records:
    """Allocation rows and step rows, as ``sacct.SacctTable`` holds them in frames."""

    jobs: list[dict[str, Any]]
    steps: list[dict[str, Any]]


class Declined(Exception):
    """Input this reader leaves to the pandas transform (it gives the answer for such text)."""


def parse(text: str) -> Records:
    """sacct's text for :data:`~.sacct_fields.FIELDS` → records; :class:`Declined` for what only the
    pandas transform reads; :class:`SlinkyError` for a value sacct never prints, as that transform."""
    if text.count("\n") > LIMIT:
        raise Declined(f"more than {LIMIT} records")
    if "\r" in text:
        raise Declined("a carriage return (Arrow's reader ends lines there too)")
    rows = []
    for line in text.split("\n"):
        fields = line.split(SEP)
        if len(fields) == len(FIELDS):
            rows.append(fields)
        elif line.strip():  # whitespace-only lines are dropped, as the Arrow reader does
            raise Declined("a line with the wrong field count")
    out = [_record(fields) for fields in rows]
    if any(row["job_id"] is None for row in out):
        raise Declined("a job id that is not a number")
    _keys(out)
    return Records(jobs=[row for row in out if row["step"] is None], steps=[row for row in out if row["step"] is not None])


def _int(text: str) -> int | None:
    try:
        return int(text) if text.isdigit() else None
    except ValueError:  # a digit int() does not read (e.g. superscripts)
        return None


def _number(text: str) -> float:
    """A numeric field: empty → NaN; other text sacct never prints is an error."""
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise SlinkyError(f"sacct output not understood: cannot read {text[:40]!r} as a number") from None


def _time(text: str) -> datetime | None:
    found = _TIME.fullmatch(text)
    if not found:
        return None
    try:
        year, month, day, hour, minute, second = map(int, found.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None


def _total_cpu(text: str) -> float:
    found = _DURATION.fullmatch(text)
    if not found:
        return parse_duration(text)
    days, hours, minutes, seconds = found.groups()
    whole = float(int(hours or 0) * 3600 + int(minutes) * 60) + float(seconds)
    return float(int(days or 0) * 86400) + whole


def _max_rss(text: str) -> float:
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        return parse_size(text, "")


def _mem_used(text: str) -> float:
    found = _TRES_MEM.search(text)
    if not found:
        return math.nan
    return _number(found.group(1)) * _UNIT[found.group(2)]


def _gpu_util(text: str) -> float:
    if "gres/gpuutil" not in text:
        return math.nan
    found = _GPU_UTIL.search(text)
    value = found.group(1) if found else ""
    try:
        return float(value)
    except ValueError:
        part = text.partition("gres/gpuutil=")[2].partition(",")[0]
        try:
            return float(part)
        except ValueError:
            return usage_tres(text).get("gres/gpuutil", math.nan)


def _db_index(text: str) -> int | None:
    if text == "":
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > _UINT64_MAX:
        raise SlinkyError(f"sacct output not understood: DBIndex {text[:40]!r}")
    return int(text)


def _record(fields: list[str]) -> dict[str, Any]:
    f = dict(zip(FIELDS, fields, strict=True))
    jid = f["JobID"]
    head, dot, rest = jid.partition(".")
    raw_head = f["JobIDRaw"].partition(".")[0]
    job_id = _int(raw_head)
    base: int | None
    if head.isascii() and head.isdigit():
        base, task, het = int(head), None, None
    else:
        base, task, het = job_id_parts(head)
    row: dict[str, Any] = {
        "job_id": job_id, "job_id_display": head, "step": rest if dot else None,
        "array_job_id": base if "_" in jid else None, "array_task_id": task,
        "het_job_id": base if het is not None else None, "het_offset": het,
        "db_index": _db_index(f["DBIndex"]),
    }
    for name, field in _TEXTS:
        row[name] = f[field] or None
    row["state"] = f["State"].partition(" ")[0]
    row["exit_code"] = f["ExitCode"]
    for field in sacct_fields.TIMES:
        row[field.lower()] = _time(f[field])
    row["elapsed_s"] = _number(f["ElapsedRaw"])
    row["timelimit_s"] = timelimit_seconds(f["TimelimitRaw"])
    row["alloc_cpus"] = cpus = _number(f["AllocCPUS"])
    row["nnodes"] = nodes = _number(f["NNodes"])
    scale = req_mem_scale(f["ReqMem"])
    factor = cpus if scale == sacct_fields.PER_CPU else nodes if scale == sacct_fields.PER_NODE else 1.0
    row["req_mem_bytes"] = req_mem(f["ReqMem"]) * factor
    for prefix, field in (("alloc", "AllocTRES"), ("req", "ReqTRES")):
        values = alloc_tres(f[field])
        for i, name in enumerate(("cpu", "mem_bytes", "node", "billing", "gpus")):
            if not (prefix == "req" and name == "mem_bytes"):
                row[f"{prefix}_{name}"] = float(values[i])
        row[f"{prefix}_gpu_type"] = values[5]
    row["total_cpu_s"] = _total_cpu(f["TotalCPU"])
    row["cpu_time_s"] = _number(f["CPUTimeRAW"])
    row["max_rss_bytes"] = _max_rss(f["MaxRSS"])
    row["mem_used_bytes"] = _mem_used(f["TRESUsageInTot"])
    row["gpu_util_pct"] = _gpu_util(f["TRESUsageInAve"])
    return row


def _sort_key(value: Any) -> tuple[bool, Any]:
    """Missing values last, as pandas sorts them."""
    return (value is None, value if value is not None else 0)


def _keys(rows: list[dict[str, Any]]) -> None:
    """``segment`` (the runs of one job id numbered by submit time, then DBIndex), ``parent_key``,
    ``key``, and the steps' user/partition/QOS/account from their allocation (``sacct._add_keys`` and
    ``sacct._inherit_from_job``)."""
    allocs = sorted((row for row in rows if row["step"] is None),
                    key=lambda r: (r["job_id"], _sort_key(r["submit"]), _sort_key(r["db_index"])))
    segment: dict[tuple[int, int | None], int] = {}
    runs: dict[int, int] = {}
    for row in allocs:
        number = runs.get(row["job_id"], 0)
        runs[row["job_id"]] = number + 1
        segment.setdefault((row["job_id"], row["db_index"]), number)
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        row["segment"] = segment.get((row["job_id"], row["db_index"]), 0)
        row["parent_key"] = parent = f"{row['job_id']}#{row['segment']}"
        row["key"] = parent if row["step"] is None else f"{parent}.{row['step']}"
        if row["step"] is None:
            by_key.setdefault(row["key"], row)
    for row in rows:
        if row["step"] is None:
            continue
        alloc = by_key.get(row["parent_key"])
        if alloc is None:
            continue
        for name in ("user", "partition", "qos", "account"):
            if row[name] is None:
                row[name] = alloc[name]
