"""Optional pyslurm backend: ``pyslurm.db.Jobs`` records mapped onto the sacct layout.

PyPI's pyslurm builds only against Slurm 25.11, so it is used only where a matching one imports.
Its records lack requeued runs, step rows and deleted users' names; those rows stay empty.
"""

from __future__ import annotations

import os
from typing import Any

from slinkyml.accounting.backends.cli import SlurmctldShares
from slinkyml.accounting.sacct import SacctTable
from slinkyml.accounting.sacct_arrow import rows_to_table
from slinkyml.errors import SlinkyError
from slinkyml.slurm.runner import Slurm

#: TRES kinds that pyslurm keeps as attributes of TrackableResources (the rest are in dicts)
_TRES_ATTRIBUTES = ("billing", "cpu", "energy", "mem", "node", "pages", "vmem")
_TRES_GROUPS = ("fs", "gres", "interconnect", "license", "other")


def available(slurm: Slurm | None = None) -> str | None:
    """None when usable, else the reason it is not."""
    try:
        import pyslurm  # noqa: F401  (optional: imported only to ask whether it is there)
    except ImportError:
        return "pyslurm is not installed (PyPI has it only for Slurm 25.11)"
    version = getattr(pyslurm, "__version__", "")
    installed = (slurm or Slurm()).version
    if not installed.matches_pyslurm(version):
        return f"pyslurm {version} does not match Slurm {installed}"
    return None


class PyslurmBackend(SlurmctldShares):
    name = "pyslurm"

    def __init__(self, slurm: Slurm | None = None):
        self.slurm = slurm or Slurm()
        if self.slurm.conf:  # libslurm reads $SLURM_CONF when pyslurm first loads it: this cluster's
            os.environ["SLURM_CONF"] = self.slurm.conf
        reason = available(self.slurm)
        if reason:
            raise SlinkyError(f"--backend pyslurm: {reason}")

    def jobs(self, start, end, *, users=None, accounts=None, job_ids=None) -> SacctTable:
        """``pyslurm.db.Jobs.load`` → :func:`records_to_table` (the one sacct parser)."""
        import pyslurm  # optional dependency, present (checked in __init__)

        flt = pyslurm.db.JobFilter(start_time=start, end_time=end, users=users or None,
                                   accounts=accounts or None, ids=job_ids or None)
        return records_to_table([job.to_dict(recursive=True)
                                 for job in pyslurm.db.Jobs.load(flt).values()])



def records_to_table(records: list[dict]) -> SacctTable:
    """pyslurm 25.11 ``db.Job.to_dict(recursive=True)`` records → the one sacct transform's tables."""
    return rows_to_table([record_fields(record, index)
                          for index, record in enumerate(records, start=1)])


def _text(value) -> str:
    return "" if value is None else str(value)


def _when(epoch: Any) -> int | None:
    """pyslurm times are epoch seconds, None where Slurm has none (sacct prints Unknown)."""
    if not epoch or not isinstance(epoch, int | float):
        return None
    return int(epoch)


def _duration(seconds) -> str:
    seconds = int(seconds or 0)
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def tres_string(tres: dict | None) -> str:
    """A TrackableResources dict → sacct's TRES text (``billing=2,cpu=2,gres/gpu=4,mem=1024M``).

    pyslurm keeps cpu/mem/node/... as attributes (each ``{"type", "name", "count", ...}``; mem's
    count in MiB) and gres/fs/license/... in dicts by name; an empty allocation is None."""
    if not isinstance(tres, dict):
        return ""
    items: list[Any] = [tres.get(name) for name in _TRES_ATTRIBUTES]
    for group in _TRES_GROUPS:
        items += list((tres.get(group) or {}).values())
    parts = []
    for item in items:
        if not isinstance(item, dict) or item.get("count") is None:
            continue
        name = item.get("type_and_name") or item.get("type") or ""
        count = int(item["count"])
        parts.append(f"{name}={count}M" if name == "mem" else f"{name}={count}")
    return ",".join(sorted(parts))


def _job_id(record: dict) -> str:
    """sacct's JobID: ``7``, ``7_3``, ``7_[4-9]`` (a pending array range) or ``10+1``.

    pyslurm turns 0 into None for ``array_task_id`` and ``heterogeneous_offset`` (its u32_parse
    treats 0 as unset), so a set array/het id with no task/offset means task/offset 0."""
    job_id = int(record["id"])
    array_id, task = record.get("array_id"), record.get("array_task_id")
    if array_id:
        waiting = record.get("array_tasks_waiting")
        if task is None and waiting:
            return f"{array_id}_[{waiting}]"
        return f"{array_id}_{task or 0}"
    het_id = record.get("heterogeneous_id")
    if het_id:
        return f"{het_id}+{record.get('heterogeneous_offset') or 0}"
    return str(job_id)


def _timelimit(value) -> str:
    """pyslurm: minutes, None for UNLIMITED, the string ``PartitionLimit`` for NO_VAL."""
    if value is None:
        return "UNLIMITED"
    if isinstance(value, str):
        return "Partition_Limit" if value == "PartitionLimit" else value
    return str(int(value))


def record_fields(record: dict, index: int) -> dict[str, Any]:
    """One pyslurm 25.11 ``db.Job.to_dict(recursive=True)`` record → its sacct allocation row."""
    stats = record.get("stats") or {}
    elapsed = int(record.get("elapsed_time") or 0)
    cpus = int(record.get("cpus") or 0)
    memory = record.get("memory")
    return {
        "JobID": _job_id(record), "JobIDRaw": str(int(record["id"])),
        "DBIndex": int(record.get("db_index") or index), "JobName": _text(record.get("name")),
        "User": _text(record.get("user_name")), "Account": _text(record.get("account")),
        "Partition": _text(record.get("partition")), "QOS": _text(record.get("qos")),
        "State": _text(record.get("state")),
        "ExitCode": f"{int(record.get('exit_code') or 0)}:"
                    f"{int(record.get('exit_code_signal') or 0)}",
        "Submit": _when(record.get("submit_time")), "Eligible": _when(record.get("eligible_time")),
        "Start": _when(record.get("start_time")), "End": _when(record.get("end_time")),
        "ElapsedRaw": elapsed, "TimelimitRaw": _timelimit(record.get("time_limit")),
        "AllocCPUS": cpus, "NNodes": int(record.get("num_nodes") or 0),
        "NodeList": _text(record.get("nodelist")),
        "ReqMem": f"{int(memory)}M" if memory else "",
        "ReqTRES": tres_string(record.get("requested_tres")),
        "AllocTRES": tres_string(record.get("allocated_tres")),
        "TotalCPU": _duration(stats.get("total_cpu_time")),
        "CPUTimeRAW": int(stats.get("elapsed_cpu_time") or elapsed * cpus),
        "MaxRSS": "", "TRESUsageInAve": "", "Reservation": _text(record.get("reservation")),
        "Cluster": _text(record.get("cluster")), "TRESUsageInTot": "",
    }
