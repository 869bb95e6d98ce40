"""slurmrestd backend: slurmdbd's OpenAPI job records filled into the one sacct transform's columns
(:func:`~slinkyml.accounting.sacct_arrow.rows_to_table`, no text in between), so every backend gives
identical DataFrames. Shares and slurmctld's settings come from the CLI: 22.05's slurmrestd serves
neither the live fair-share tree nor ``scontrol show config``."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from slinkyml.accounting.backends.cli import SlurmctldShares
from slinkyml.accounting.sacct import SacctTable
from slinkyml.accounting.sacct_arrow import rows_to_table
from slinkyml.slurm import states
from slinkyml.slurm.rest import RestClient, api_version
from slinkyml.slurm.runner import Slurm


class RestBackend(SlurmctldShares):
    name = "restapi"

    def __init__(self, slurm: Slurm | None = None, *, url: str | None = None, token: str | None = None,
                 user: str | None = None):
        self.slurm = slurm or Slurm()
        self.client = RestClient.from_config(url, token, user, timeout=120, slurm_conf=self.slurm.conf)
        self.api = f"slurmdb/{api_version(self.slurm.version, 'slurmdb')}"

    def jobs(self, start: datetime, end: datetime, *, users=None, accounts=None,
             job_ids=None) -> SacctTable:
        ago = max(0, int(time.time() - start.timestamp()))
        data = self.client.request("GET", f"/{self.api}/jobs", query={"start_time": f"now-{ago}"})
        records = data.get("jobs", [])
        t0, t1 = start.timestamp(), end.timestamp()
        keep = []
        wanted = set(job_ids or ())
        for job in records:
            if wanted and not ({job.get("job_id"), _num((job.get("array") or {}).get("job_id")),
                                _num((job.get("het") or {}).get("job_id"))} & wanted):
                continue  # like sacct --jobs: an array or het job id selects all its parts
            if users and job.get("user") not in users:
                continue
            if accounts and job.get("account") not in accounts:
                continue
            tm = job.get("time", {})
            begin = _num(tm.get("start")) or _num(tm.get("eligible")) or 0
            finish = _num(tm.get("end")) or time.time()
            if begin and (begin > t1 or finish < t0):
                continue
            keep.append(job)
        return records_to_table(keep)



def _num(value) -> float | None:
    """v0.0.38 gives plain numbers; v0.0.4x gives {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return None if value is None else float(value)


def _ts(value) -> int | None:
    """Epoch seconds; None where Slurm has none (0, unset: sacct's Unknown)."""
    number = _num(value)
    return int(number) if number else None


def _tres(items) -> str:
    parts = []
    for item in items or []:
        name = item.get("type", "")
        if item.get("name"):
            name += "/" + item["name"] if name != "gres" or "/" not in item["name"] else ""
        count = _num(item.get("count"))
        if count is None:
            continue
        value = f"{int(count)}M" if item.get("type") == "mem" else f"{int(count)}"
        parts.append(f"{name}={value}")
    return ",".join(sorted(parts))


def _state(value) -> str:
    """v0.0.38: ``{"current": "REQUEUED"}``; v0.0.4x: base state plus flags, e.g. a requeued run's
    record is ``{"current": ["PENDING", "REQUEUED"]}`` (24.11), which sacct shows as REQUEUED."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, list):
        flags = [flag for flag in states.STATE_FLAGS if flag in value]
        value = flags[0] if flags else (value[0] if value else "")
    return str(value or "")


def _cpu_time(t: dict) -> str:
    total = t.get("total", {}) if isinstance(t, dict) else {}
    seconds = (_num(total.get("seconds")) or 0) + (_num(total.get("microseconds")) or 0) / 1e6
    minutes, sec = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours:02d}:{minutes:02d}:{sec:06.3f}"


def _exit(value) -> str:
    if isinstance(value, dict):
        rc = _num(value.get("return_code")) or 0
        sig = value.get("signal", {}) or {}
        signal = _num(sig.get("id") if isinstance(sig, dict) else sig) or 0
        return f"{int(rc)}:{int(signal)}"
    return "0:0"


def record_fields(job: dict, index: int) -> dict[str, Any]:
    """One slurmdbd job record → the sacct field values of its allocation row."""
    tm = job.get("time", {})
    array = job.get("array", {}) or {}
    het = job.get("het", {}) or {}
    job_id = int(job["job_id"])
    display = str(job_id)
    task, array_job = _num(array.get("task_id")), _num(array.get("job_id"))
    if array_job and task is not None:
        display = f"{int(array_job)}_{int(task)}"
    offset, het_job = _num(het.get("job_offset")), _num(het.get("job_id"))
    if het_job and offset is not None:
        display = f"{int(het_job)}+{int(offset)}"
    elapsed = _num(tm.get("elapsed")) or 0
    cpus = 0
    for item in (job.get("tres", {}) or {}).get("allocated", []) or []:
        if item.get("type") == "cpu":
            cpus = int(_num(item.get("count")) or 0)
    limit = _num(tm.get("limit"))
    mem = _num((job.get("required", {}) or {}).get("memory"))
    return {
        "JobID": display, "JobIDRaw": str(job_id), "DBIndex": index, "JobName": job.get("name", ""),
        "User": job.get("user", "") or "", "Account": job.get("account", "") or "",
        "Partition": job.get("partition", "") or "", "QOS": job.get("qos", "") or "",
        "State": _state(job.get("state")), "ExitCode": _exit(job.get("exit_code")),
        "Submit": _ts(tm.get("submission")), "Eligible": _ts(tm.get("eligible")),
        "Start": _ts(tm.get("start")), "End": _ts(tm.get("end")),
        "ElapsedRaw": int(elapsed),
        "TimelimitRaw": "UNLIMITED" if limit is None else str(int(limit)),
        "AllocCPUS": cpus, "NNodes": int(_num(job.get("allocation_nodes")) or 0),
        "NodeList": job.get("nodes", "") or "",
        "ReqMem": f"{int(mem)}M" if mem else "",
        "ReqTRES": _tres((job.get("tres", {}) or {}).get("requested")),
        "AllocTRES": _tres((job.get("tres", {}) or {}).get("allocated")),
        "TotalCPU": _cpu_time(tm), "CPUTimeRAW": int(elapsed * cpus), "MaxRSS": "",
        "TRESUsageInAve": "", "TRESUsageInTot": "", "Reservation": "", "Cluster": job.get("cluster", "") or "",
    }


def records_to_table(records: list[dict]) -> SacctTable:
    """slurmdbd job records → the one sacct transform (allocation rows)."""
    return rows_to_table([record_fields(job, index) for index, job in enumerate(records, start=1)])
