"""The jobs of sacct_efficiency_2205.txt as pyslurm 25.11.2 ``db.Job.to_dict(recursive=True)``
records (pyslurm_2511_jobs.json), following pyslurm/db/job.pyx, db/tres.pyx and db/stats.pyx at
tag v25.11.2: epoch times (None for unset), minutes for time_limit (None for UNLIMITED), MiB for
memory and TRES mem, 0 turned into None for array_task_id/heterogeneous_offset/db_index, TRES as
attribute dicts plus name-keyed gres/fs/license dicts, stats summing whole CPU seconds per step.
Run from the repository root: ``python tests/data/accounting/make_pyslurm_2511_jobs.py``.
"""

import json
from datetime import UTC, datetime
from pathlib import Path

from slinkyml.accounting.sacct import FIELDS, SEP
from slinkyml.accounting.tres import parse_size, split_tres

HERE = Path(__file__).parent

TRES_IDS = {"cpu": 1, "mem": 2, "energy": 3, "node": 4, "billing": 5, "fs/disk": 6, "vmem": 7, "pages": 8}

def epoch(text):
    if not text or text in ("Unknown", "None"):
        return None
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())

def tres(text):
    if not text:
        return None
    out = {"raw_str": None, "cpu": None, "mem": None, "energy": None, "node": None, "billing": None,
           "fs": {}, "vmem": None, "pages": None, "gres": {}, "license": {}, "interconnect": {}, "other": {}}
    for key, value in split_tres(text).items():
        if key == "mem":
            count = int(parse_size(value, "M") // 2**20)
        else:
            count = int(value)
        typ, _, name = key.partition("/")
        item = {"type": typ, "name": name or None, "id": TRES_IDS.get(key), "count": count,
                "type_and_name": key}
        if typ == "gres" and (name == "gpu" or name.startswith("gpu:")):
            gtype = name.split(":", 1)[1] if ":" in name else None
            out["gres"][name] = {"count": count, "type": gtype, "id": None, "name": name,
                                 "type_and_name": f"gres/{name}"}
        elif typ in ("gres", "fs", "license", "interconnect"):
            out[typ][name] = item
        else:
            out[typ] = item
    return out

def seconds(text):
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return int((int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2])

def record(row, steps):
    head = row["JobID"]
    base, _, task = head.partition("_")
    exit_code, _, signal = row["ExitCode"].partition(":")
    return {
        "account": row["Account"], "admin_comment": None, "num_nodes": int(row["NNodes"]),
        "array_id": int(base) if task else None,
        "array_tasks_parallel": None,
        "array_task_id": (int(task) or None) if task.isdigit() else None,  # u32_parse: 0 -> None
        "array_tasks_waiting": None, "association_id": 7, "block_id": None,
        "cluster": row["Cluster"], "constraints": [], "container": [],
        "db_index": int(row["DBIndex"]), "derived_exit_code": 0, "derived_exit_code_signal": 0,
        "comment": None, "elapsed_time": int(row["ElapsedRaw"]) or None,
        "eligible_time": epoch(row["Eligible"]), "end_time": epoch(row["End"]), "extra": None,
        "exit_code": int(exit_code), "exit_code_signal": int(signal), "failed_node": None,
        "heterogeneous_id": None, "heterogeneous_offset": None, "id": int(row["JobIDRaw"]),
        "name": row["JobName"], "mcs_label": None, "nodelist": row["NodeList"],
        "partition": row["Partition"], "priority": 1, "qos": row["QOS"], "requeue_count": 0,
        "cpus": int(row["AllocCPUS"]),
        "memory": int(parse_size(row["ReqMem"], "M") // 2**20) if row["ReqMem"] else None,
        "requested_reservations": [], "reservation": None, "reservation_id": None,
        "script": None, "environment": {}, "start_time": epoch(row["Start"]),
        "state": row["State"].split(" ")[0], "state_reason": "None", "cancelled_by": None,
        "submit_time": epoch(row["Submit"]), "submit_command": "sbatch ...",
        "suspended_time": None, "system_comment": None,
        "time_limit": int(row["TimelimitRaw"]) if row["TimelimitRaw"].isdigit() else None,
        "user_id": 1001, "user_name": row["User"], "wckey": None, "wckey_id": None,
        "working_directory": "/tmp", "lineage": "/slinkyml/0-root/...", "licenses": [],
        "standard_input": "/dev/null", "standard_output": "/tmp/%j.out", "standard_error": "/tmp/%j.out",
        "segment_size": None, "scheduler": "BACKFILL", "start_rpc_received": True,
        "tres": tres(row["AllocTRES"]), "gres": {}, "gpus": {},
        "allocated_tres": tres(row["AllocTRES"]), "requested_tres": tres(row["ReqTRES"]),
        "steps": {},
        "stats": {"total_cpu_time": sum(int(seconds(s["TotalCPU"])) for s in steps),  # tot_cpu_sec: whole seconds per step
                  "user_cpu_time": 0, "system_cpu_time": 0,
                  "elapsed_cpu_time": int(row["ElapsedRaw"]) * int(row["AllocCPUS"]),
                  "consumed_energy": 0, "disk_read": 0, "disk_write": 0, "page_faults": 0,
                  "resident_memory": 0, "virtual_memory": 0},
    }

rows = [dict(zip(FIELDS, line.split(SEP), strict=True)) for line in
        (HERE / "sacct_efficiency_2205.txt").read_text().splitlines() if line]
allocs = [r for r in rows if "." not in r["JobIDRaw"]]
records = [record(a, [s for s in rows if s["JobIDRaw"].startswith(a["JobIDRaw"] + ".")]) for a in allocs]
json.dump({"source": "pyslurm v25.11.2 db.Job.to_dict(recursive=True) shape (pyslurm/db/job.pyx, "
           "db/tres.pyx, db/stats.pyx), values of the jobs in sacct_efficiency_2205.txt; "
           "steps left empty", "jobs": records},
          (HERE / "pyslurm_2511_jobs.json").open("w"), indent=1)
print(len(records))
