"""Local cluster start-up and launch latency: cold and warm `dev up`, `srun -N2 true`, on the
machine's Slurm and, beside it, on Slurm 26.05 from its Debian root (``--slurm-version``).

Prints absolute times and ratios against a baseline measured in the same process (the cost of
starting a trivial process, `true`, via subprocess), since machines here are noisy, and the 26.05
cluster's figures as ratios to the system one's.
The system cluster: the default one when it runs (a warm down→up cycle of it), else one in its own
state directory. The 26.05 cluster always gets its own state directory, bridge, subnet, node names
and ports (:data:`RELEASE_NAMES`), so it runs beside any other; its root is built first if missing
(timed separately: a one-time cost).
Usage: .venv/bin/python benchmarks/dev_cluster.py [--repeat N] [--slurm-version system,26.05]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from slinkyml.dev import LocalCluster
from slinkyml.dev.slurm import roots
from slinkyml.slurm.roots import SYSTEM

#: names and ports of the benchmark's own 26.05 cluster (nothing else here uses them)
RELEASE_NAMES = dict(bridge="slkbn26", node_prefix="bw", subnet="10.228.0.0/24", slurmctld_port=9817,
                     slurmd_port=9818, slurmdbd_port=9819, slurmrestd_port=9820, mariadb_port=16306)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(cluster: LocalCluster, repeat: int, cold: bool) -> dict[str, float | None]:
    """cold up (a new state dir) or a down first, then warm up, no-op up and ``srun -N2 true``."""
    figures: dict[str, float | None] = {"cold": None}
    if cold:
        figures["cold"] = timed(cluster.up)
    cluster.down()
    figures["warm"] = timed(cluster.up)
    figures["noop"] = timed(cluster.up)
    slurm = cluster.slurm
    srun = [timed(lambda: slurm.run("srun", ["-N2", "true"], timeout=60)) for _ in range(repeat)]
    figures["srun"], figures["srun_min"] = statistics.median(srun), min(srun)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=10, help="srun samples (default 10)")
    parser.add_argument("--slurm-version", default="system,26.05",
                        help="comma-separated: system and/or 26.05 (default both)")
    args = parser.parse_args()
    wanted = [v.strip() for v in args.slurm_version.split(",") if v.strip()]
    baseline = statistics.median(timed(lambda: subprocess.run(["true"], check=True)) for _ in range(20))
    print(f"baseline: subprocess `true`             {baseline * 1e3:8.2f} ms")
    results: dict[str, dict[str, float | None]] = {}
    for release in wanted:
        options = dict(nodes=4, keep_running=True)
        if release == SYSTEM:
            default = LocalCluster(**options)
            bench = default if default.running else LocalCluster(
                Path(tempfile.mkdtemp(prefix="slinkyml-bench-", dir="/var/tmp")), **options)
            if bench is default:
                print("system: the default cluster is running: timing a warm down→up cycle of it (no cold start)")
        else:
            built = timed(lambda release=release: roots.install(release))  # a no-op when the root is there
            if built > 1:
                print(f"{release}: built its root in {built:.1f} s (once per machine)")
            bench = LocalCluster(Path(tempfile.mkdtemp(prefix=f"slinkyml-bench-{release}-", dir="/var/tmp")),
                                 slurm_version=release, gpus=0, **RELEASE_NAMES, **options)
            default = None
        try:
            results[release] = measure(bench, args.repeat, cold=bench is not default)
            version = bench.version
        finally:
            if bench is not default:
                bench.reset()
        r = results[release]
        print(f"== Slurm {version} ({release})")
        if r["cold"] is not None:
            print(f"cold dev up (new state dir, DB init)   {r['cold']:8.2f} s   = {r['cold'] / baseline:10.0f}× baseline")
        print(f"warm dev up (state kept)               {r['warm']:8.2f} s   = {r['warm'] / baseline:10.0f}× baseline")
        print(f"dev up when already running (no-op)    {r['noop'] * 1e3:8.1f} ms  = {r['noop'] / baseline:10.1f}× baseline")
        print(f"srun -N2 true, median of {args.repeat:<3}          {r['srun'] * 1e3:8.1f} ms  = "
              f"{r['srun'] / baseline:10.1f}× baseline  (min {r['srun_min'] * 1e3:.1f} ms)")
    others = [v for v in results if v != SYSTEM]
    if SYSTEM in results:
        base = results[SYSTEM]
        for release in others:
            r = results[release]
            ratios = {k: r[k] / base[k] for k in ("cold", "warm", "noop", "srun") if r[k] and base[k]}
            print(f"{release} / system: " + ", ".join(f"{k} {v:.2f}×" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
