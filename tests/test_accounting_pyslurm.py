"""The pyslurm backend's mapping of pyslurm 25.11 ``db.Job.to_dict(recursive=True)`` records.

PyPI's pyslurm builds only against Slurm 25.11 and this machine runs 22.05/24.11, so the records
here have pyslurm 25.11.2's shape as its source defines it (tests/data/accounting/
pyslurm_2511_jobs.json: the jobs of sacct_efficiency_2205.txt) plus crafted ones for pyslurm's
quirks. The CLI path parses the same jobs' sacct text: both must give the same frames."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from slinkyml.accounting import efficiency
from slinkyml.accounting.backends.pyslurm_backend import records_to_table, tres_string
from slinkyml.accounting.sacct_arrow import parse_sacct

DATA = Path(__file__).parent / "data" / "accounting"
COLUMNS = ["job_id", "job_id_display", "array_job_id", "array_task_id", "name", "user", "account",
           "partition", "qos", "state", "exit_code", "submit", "eligible", "start", "end",
           "elapsed_s", "timelimit_s", "alloc_cpus", "nnodes", "nodelist", "req_mem_bytes",
           "alloc_cpu", "alloc_mem_bytes", "alloc_node", "alloc_billing", "alloc_gpus",
           "req_cpu", "req_node", "cpu_time_s", "segment", "cluster"]


def _records() -> list[dict]:
    return json.loads((DATA / "pyslurm_2511_jobs.json").read_text())["jobs"]


def test_pyslurm_records_give_the_cli_parsers_rows():
    ours = records_to_table(_records()).jobs
    cli = parse_sacct((DATA / "sacct_efficiency_2205.txt").read_text()).jobs
    assert len(ours) == len(cli) == 6
    key = ["job_id"]
    pd.testing.assert_frame_equal(ours.sort_values(key)[COLUMNS].reset_index(drop=True),
                                  cli.sort_values(key)[COLUMNS].reset_index(drop=True),
                                  check_dtype=False)
    # pyslurm sums each step's whole CPU seconds (tot_cpu_sec; sacct adds the microseconds)
    lost = (cli.set_index("job_id")["total_cpu_s"] - ours.set_index("job_id")["total_cpu_s"])
    assert ((lost >= 0) & (lost < 3)).all(), lost
    runs = efficiency.runs(ours, parse_sacct("").steps).set_index("name")
    assert runs.loc["eff-busy", "time_efficiency"] == pytest.approx(runs.loc["eff-busy",
                                                                             "elapsed_s"] / 120)
    # no step rows from pyslurm: memory efficiency is unknown, not invented
    assert runs["mem_efficiency"].isna().all()


def test_pyslurm_quirks_array_task_zero_het_offset_zero_pending_range_limits():
    base = _records()[0]

    def job(**changes) -> dict:
        record = copy.deepcopy(base)
        record.update(changes)
        return record

    records = [
        job(id=50, array_id=50, array_task_id=None),  # task 0: pyslurm's u32_parse gives None
        job(id=51, array_id=50, array_task_id=1),
        job(id=52, array_id=52, array_task_id=None, array_tasks_waiting="4-9", state="PENDING",
            start_time=None, end_time=None, elapsed_time=None),
        job(id=60, heterogeneous_id=60, heterogeneous_offset=None),  # het leader: offset 0
        job(id=61, heterogeneous_id=60, heterogeneous_offset=1),
        job(id=70, time_limit="PartitionLimit"),  # NO_VAL
        job(id=71, time_limit=90),
    ]
    jobs = records_to_table(records).jobs.set_index("job_id")
    assert jobs.loc[[50, 51, 52, 60, 61], "job_id_display"].tolist() == [
        "50_0", "50_1", "52_[4-9]", "60+0", "60+1"]
    assert jobs.loc[[50, 51], "array_task_id"].tolist() == [0, 1]
    assert jobs.loc[[60, 61], "het_offset"].tolist() == [0, 1]
    assert pd.isna(jobs.at[70, "timelimit_s"]) and jobs.at[71, "timelimit_s"] == 90 * 60
    assert pd.isna(jobs.at[52, "start"])


def test_tres_dicts_become_sacct_tres_text():
    gpu = {"cpu": {"type": "cpu", "name": None, "count": 8, "type_and_name": "cpu"},
           "mem": {"type": "mem", "name": None, "count": 65536, "type_and_name": "mem"},
           "node": {"type": "node", "name": None, "count": 1, "type_and_name": "node"},
           "billing": None, "energy": None, "vmem": None, "pages": None, "fs": {},
           "gres": {"gpu": {"count": 4, "type": None, "name": "gpu", "type_and_name": "gres/gpu"},
                    "gpu:a100": {"count": 4, "type": "a100", "name": "gpu:a100",
                                 "type_and_name": "gres/gpu:a100"}},
           "license": {}, "interconnect": {}, "other": {}}
    assert tres_string(gpu) == "cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=65536M,node=1"
    assert tres_string(None) == ""
    record = dict(_records()[0], allocated_tres=gpu)
    row = records_to_table([record]).jobs.iloc[0]
    assert row["alloc_gpus"] == 4 and row["alloc_gpu_type"] == "a100"  # counted once
    assert row["alloc_mem_bytes"] == 64 * 2**30
