"""Benchmark: Slurm's ``--json`` against the record layer's delimited text, for the same jobs.

slurm/records.py reads ``\\x1f``-delimited text; ``sacct``/``squeue`` also serve ``--json``. For the
jobs accounting and slurmctld hold now (the local cluster: `make bench` starts it), times each command
both ways, output to records keyed by field name (the command's run included, which is most of it),
in the same process, alternating, and prints the ratio json / text. No timing is asserted anywhere.

    .venv/bin/python benchmarks/records.py [--repeat 5] [--since 2026-01-01]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from slinkyml.slurm import Slurm, records

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "User", "WorkDir", "NodeList")
SQUEUE_FIELDS = ("JobID", "Name", "State", "Reason", "NodeList")


def sacct_text(slurm: Slurm, since: str) -> int:
    return len(records.sacct(slurm, SACCT_FIELDS, ["-a", "-X", "-S", since, "-E", "now"], timeout=300))


def sacct_json(slurm: Slurm, since: str) -> int:
    data = json.loads(slurm.run("sacct", ["--json", "-a", "-X", "-S", since, "-E", "now"], timeout=300).stdout)
    rows = [{"JobID": str(job["job_id"]), "JobName": job["name"], "State": str(job["state"]),
             "User": job["user"], "WorkDir": job.get("working_directory", ""), "NodeList": job.get("nodes", "")}
            for job in data["jobs"]]
    return len(rows)


def squeue_text(slurm: Slurm, since: str) -> int:
    return len(records.squeue(slurm, SQUEUE_FIELDS, ["-t", "all"]))


def squeue_json(slurm: Slurm, since: str) -> int:
    data = json.loads(slurm.run("squeue", ["--json", "-t", "all"]).stdout)
    rows = [{"JobID": str(job["job_id"]), "Name": job["name"], "State": str(job["job_state"])} for job in data["jobs"]]
    return len(rows)


def _median(fn: Callable[[Slurm, str], int], slurm: Slurm, since: str) -> tuple[float, int]:
    start = time.perf_counter()
    count = fn(slurm, since)
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--since", default="2020-01-01")
    args = parser.parse_args()
    slurm = Slurm()
    print(f"Slurm {slurm.version}")
    for name, text, as_json in (("sacct", sacct_text, sacct_json), ("squeue", squeue_text, squeue_json)):
        times: dict[str, list[float]] = {"text": [], "json": []}
        counts = {}
        for _ in range(args.repeat):
            for kind, fn in (("text", text), ("json", as_json)):
                seconds, counts[kind] = _median(fn, slurm, args.since)
                times[kind].append(seconds)
        text_s, json_s = statistics.median(times["text"]), statistics.median(times["json"])
        print(f"{name:7s} text {text_s * 1e3:8.1f} ms ({counts['text']} records)   --json {json_s * 1e3:8.1f} ms "
              f"({counts['json']} records)   ratio json/text {json_s / text_s:.2f}")


if __name__ == "__main__":
    main()
