"""Fill the current cluster's slurmdbd with real job records for benchmarks/store.py.

Real jobs (benchmarks/scale.py's ``records`` step fills its own cluster with this too): 1,000-task arrays of ``true``
submitted one after another until sacct counts ``--records`` completed allocations since 2026-01-01,
so every record went through slurmctld, slurmstepd and slurmdbd. The cluster is the one
``$SLURM_CONF`` names (``eval "$(slinkyml dev env)"``); run it niced, it keeps both cores busy.

    nice -n 10 .venv/bin/python benchmarks/store_fill.py --records 50000
"""

from __future__ import annotations

import argparse
import time

from slinkyml.slurm.runner import Slurm


def completed(slurm: Slurm) -> int:
    """Completed allocations since 2026-01-01 (what the fill counts)."""
    out = slurm.run("sacct", ["-X", "-n", "-a", "-S", "2026-01-01", "-o", "JobID", "-s", "CD"], timeout=600).stdout
    return len(out.split())


def fill(slurm: Slurm, total: int, array: int = 1000) -> int:
    """Submit arrays until ``total`` completed records; returns the count reached."""
    have = completed(slurm)
    t0 = time.perf_counter()
    while have < total:
        count = min(array, total - have)
        submitted = slurm.run("sbatch", ["--parsable", f"--array=0-{count - 1}", "-n1", "--mem=1M", "-o", "/dev/null",
                                         "--wrap", "true"], cwd="/tmp", check=False)
        if submitted.returncode:  # MaxJobCount reached: finished tasks stay MinJobAge in slurmctld
            time.sleep(10)
            continue
        job = submitted.stdout.strip()
        while left := slurm.run("squeue", ["-h", "-j", job, "-o", "%i|%r"], check=False).stdout.splitlines():
            # a node that missed a heartbeat under load: slurmctld holds the tasks it could not launch
            held = [line.split("|")[0] for line in left if line.endswith("|launch failed requeued held")]
            if held:
                slurm.run("scontrol", ["release", *held], check=False)
            time.sleep(1)
        have += count
        print(f"  {have:,} records ({(have) / (time.perf_counter() - t0):.0f} tasks/s)", flush=True)
    return have


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    print(f"{fill(Slurm(), args.records):,} completed records")


if __name__ == "__main__":
    main()
