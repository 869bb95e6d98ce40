"""Efficiency by seff's definition on real jobs, checked against sacct's raw fields: a single-task
job, three tasks on one node, three tasks over two nodes (``-n3 --mem-per-cpu=300M``) each holding
~100 MiB, and a 2-task array; plus the sreport window rounding that ``usage`` warns about."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slinkyml.accounting import efficiency, sacct, usage
from slinkyml.accounting.backends.cli import CliBackend, slurm_time
from slinkyml.accounting.tres import parse_size, split_tres

pytestmark = pytest.mark.slurm

#: each task writes 100 MiB and holds it past two accounting samples (JobAcctGatherFrequency=1): with the
#: machine's python3; on the Docker cluster with the slurmd image's perl (the image has no Python, and the
#: host's Python may lie in a home alice and bob cannot enter, as pyenv's in root's does)
HOG = ("perl -e 'my $x = \"x\" x (100 * 2**20); sleep 4'" if os.environ.get("SLINKYML_TEST_CLUSTER") == "docker"
       else "python3 -c \"import time; b = b'x' * (100 * 2**20); time.sleep(4)\"")
JOBS = {
    "single": ("alice", ["-n1", "--mem=400M"], f"srun {HOG}"),
    "node": ("bob", ["-n3", "-N1", "--mem-per-cpu=300M"], f"srun {HOG}"),
    "nodes": ("carol", ["-n3", "-N2", "--mem-per-cpu=300M"], f"srun {HOG}"),
    "busy": ("dave", ["-n2", "--time=2"], "srun bash -c 'end=$((SECONDS+3)); "
             "while [ $SECONDS -lt $end ]; do :; done'"),
    "array": ("alice", ["-n1", "--array=0-1", "--time=1"], "sleep 2"),
}
RAW = ("JobID", "JobIDRaw", "TRESUsageInTot", "ReqMem", "AllocTRES", "TotalCPU", "CPUTimeRAW",
       "ElapsedRaw", "TimelimitRaw", "NTasks", "MaxRSS", "NNodes")


@pytest.fixture(scope="module")
def finished(local_cluster):
    slurm = local_cluster.slurm
    work = Path(tempfile.mkdtemp(prefix="slinkyml-eff-", dir="/tmp"))
    os.chmod(work, 0o777)
    started = datetime.now(UTC)
    ids = {name: slurm.sbatch(f"#!/bin/bash\n{command}\n",
                              [*args, "-A", "physics" if user in ("alice", "bob") else
                               "bio" if user == "carol" else "ml", "-J", f"eff-{name}",
                               "--output", str(work / "%j.out")], as_user=user)
           for name, (user, args, command) in JOBS.items()}
    backend = CliBackend(slurm)
    deadline = time.monotonic() + 240
    while True:
        table = backend.jobs(started - timedelta(minutes=1), datetime.now(UTC) + timedelta(minutes=1),
                             job_ids=list(ids.values()))
        done = table.jobs[table.jobs["state"].isin(["COMPLETED", "FAILED", "TIMEOUT"])]
        if len(done) >= len(JOBS) + 1 and set(table.steps["step"]) >= {"0", "batch"}:
            break
        assert time.monotonic() < deadline, table.jobs[["job_id_display", "state"]]
        time.sleep(2)
    raw = slurm.run("sacct", ["-P", "-n", "--noconvert", "-o", ",".join(RAW), "-j",
                              ",".join(map(str, ids.values()))]).stdout
    folder = os.environ.get("SLINKYML_RECORD_FIXTURES")
    if folder:  # the recorded-output test's input (tests/data/accounting/sacct_efficiency_*.txt)
        args = sacct.sacct_args(slurm_time(started - timedelta(minutes=1)),
                                slurm_time(datetime.now(UTC)), job_ids=list(ids.values()))
        release = f"{slurm.version.major}{slurm.version.minor:02d}"
        Path(folder, f"sacct_efficiency_{release}.txt").write_text(slurm.run("sacct", args).stdout)
    yield dict(ids=ids, table=table, raw=[dict(zip(RAW, line.split("|"), strict=True))
                                          for line in raw.splitlines() if line.strip()],
               slurm=slurm, started=started)
    shutil.rmtree(work, ignore_errors=True)


def _seff_by_hand(raw: list[dict], job_id: int) -> dict[str, float]:
    """seff (Slurm 24.11+) from sacct's raw fields, independently of slinkyml's parser."""
    rows = [r for r in raw if r["JobIDRaw"].partition(".")[0] == str(job_id)]
    alloc = next(r for r in rows if r["JobIDRaw"] == str(job_id))
    steps = [r for r in rows if "." in r["JobIDRaw"]]
    used = max(parse_size(split_tres(r["TRESUsageInTot"]).get("mem", "0"), "") for r in steps)
    req = parse_size(alloc["ReqMem"].rstrip("cn"), "M")
    total_cpu = sum(_seconds(r["TotalCPU"]) for r in [alloc])
    return dict(mem_used=used, req_mem=req, mem_efficiency=used / req,
                cpu_efficiency=total_cpu / float(alloc["CPUTimeRAW"]),
                time_efficiency=(float(alloc["ElapsedRaw"]) / (float(alloc["TimelimitRaw"]) * 60)
                                 if alloc["TimelimitRaw"].isdigit() else float("nan")),
                max_rss=max(float(r["MaxRSS"] or 0) for r in steps))


def _seconds(text: str) -> float:
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


@pytest.mark.parametrize("name", ["single", "node", "nodes", "busy"])
def test_efficiency_equals_seff_from_raw_sacct(finished, name):
    job_id = finished["ids"][name]
    runs = efficiency.runs(finished["table"].jobs, finished["table"].steps).set_index("job_id")
    run, seff = runs.loc[job_id], _seff_by_hand(finished["raw"], job_id)
    print(name, {k: run[k] for k in ("mem_used_bytes", "req_mem_bytes", "mem_efficiency",
                                     "cpu_efficiency", "time_efficiency", "nnodes")}, seff)
    assert run["mem_used_bytes"] == seff["mem_used"]
    assert run["req_mem_bytes"] == seff["req_mem"]
    assert run["mem_efficiency"] == pytest.approx(seff["mem_efficiency"], rel=1e-12)
    assert run["cpu_efficiency"] == pytest.approx(seff["cpu_efficiency"], rel=1e-9)
    if name == "busy":
        assert run["time_efficiency"] == pytest.approx(seff["time_efficiency"], rel=1e-12)
        assert 0 < run["cpu_efficiency"] <= 1.05
    else:
        tasks = {"single": 1, "node": 3, "nodes": 3}[name]
        # every task held 100 MiB: the step total counts all of them, on every node
        assert seff["mem_used"] >= tasks * 100 * 2**20
        assert run["req_mem_bytes"] == (400 if name == "single" else 900) * 2**20
        if tasks > 1:  # the old definition (one task's peak per node's share) undercounts
            nnodes = run["nnodes"]
            assert run["mem_efficiency"] > seff["max_rss"] / (seff["req_mem"] / nnodes) * 0.99


def test_array_tasks_keep_their_array_ids(finished):
    base = finished["ids"]["array"]
    runs = efficiency.runs(finished["table"].jobs, finished["table"].steps)
    mine = runs[runs["array_job_id"] == base].sort_values("array_task_id")
    assert mine["job"].tolist() == [f"{base}_0", f"{base}_1"]
    assert mine["array_task_id"].astype(int).tolist() == [0, 1]
    assert (mine["time_efficiency"] > 0).all() and (mine["time_efficiency"] < 0.2).all()


def test_cli_efficiency_shows_seff_columns(finished, cli):
    import json

    since = (finished["started"] - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    code, out, err = cli("efficiency", "--since", since, "--job", str(finished["ids"]["nodes"]),
                         "--job", str(finished["ids"]["array"]), "--json")
    assert code == 0, err
    rows = {r["job"]: r for r in json.loads(out)}
    base = finished["ids"]["array"]
    assert {f"{base}_0", f"{base}_1", str(finished["ids"]["nodes"])} <= set(rows)
    nodes = rows[str(finished["ids"]["nodes"])]
    assert nodes["mem_efficiency"] > 0.33 and nodes["req_mem_bytes"] == 900 * 2**20
    assert rows[f"{base}_0"]["array_job_id"] == base and rows[f"{base}_0"]["array_task_id"] == 0


def test_sreport_rounds_windows_to_hours_as_usage_says(finished, cli):
    """sreport for a window off the hour equals sreport for the window ``usage`` names."""
    backend = CliBackend(finished["slurm"])
    began = finished["started"].replace(microsecond=0)
    start, end = began - timedelta(minutes=25, seconds=20), began + timedelta(minutes=25, seconds=40)
    lo, hi = usage.sreport_window(start, end)
    assert lo.minute == hi.minute == 0 and hi - lo >= timedelta(hours=1)
    assert (lo, hi) != (start, end)
    backend.rollup(lo.to_pydatetime(), hi.to_pydatetime())
    odd = backend.sreport_account_user(start, end)
    whole = backend.sreport_account_user(lo.to_pydatetime(), hi.to_pydatetime())
    assert odd.to_dict("records") == whole.to_dict("records")
    code, out, err = cli("usage", "--since", start.strftime("%Y-%m-%dT%H:%M:%S"),
                         "--until", end.strftime("%Y-%m-%dT%H:%M:%S"))
    assert code == 0 and f"sreport would report {lo:%Y-%m-%d %H:%M}" in " ".join(out.split())
    code, out, err = cli("usage", "--since", lo.strftime("%Y-%m-%dT%H:%M:%S"),
                         "--until", hi.strftime("%Y-%m-%dT%H:%M:%S"))
    assert code == 0 and "sreport would report" not in out
