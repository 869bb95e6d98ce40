"""Local cluster start-up and launch latency: cold and warm `dev up`, `srun -N2 true`.

Prints absolute times and ratios against a baseline measured in the same process (the cost of
starting a trivial process, `true`, via subprocess), since machines here are noisy.
It uses its own state directory, bridge, subnet and ports, so it runs beside the default cluster.
Usage: .venv/bin/python benchmarks/dev_cluster.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from slinkyml.dev import LocalCluster


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=10, help="srun samples (default 10)")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="slinkyml-bench-", dir="/var/tmp"))
    # Same munge socket as the default cluster would clash; the benchmark shares munge only when
    # the default cluster is down. Otherwise it times a down/up cycle of the default cluster.
    options = dict(nodes=4, keep_running=True)
    default = LocalCluster(**options)
    bench = default if default.running else LocalCluster(state, **options)
    baseline = statistics.median(timed(lambda: subprocess.run(["true"], check=True)) for _ in range(20))

    if bench is default:
        print("default cluster is running: timing a warm down→up cycle of it (no cold start)")
        bench.down()
        cold = None
    else:
        cold = timed(bench.up)
        bench.down()
    warm = timed(bench.up)
    noop = timed(bench.up)
    slurm = bench.slurm
    srun = [timed(lambda: slurm.run("srun", ["-N2", "true"], timeout=60)) for _ in range(args.repeat)]
    med = statistics.median(srun)
    print(f"baseline: subprocess `true`             {baseline * 1e3:8.2f} ms")
    if cold is not None:
        print(f"cold dev up (new state dir, DB init)   {cold:8.2f} s   = {cold / baseline:10.0f}× baseline")
    print(f"warm dev up (state kept)               {warm:8.2f} s   = {warm / baseline:10.0f}× baseline")
    print(f"dev up when already running (no-op)    {noop * 1e3:8.1f} ms  = {noop / baseline:10.1f}× baseline")
    print(f"srun -N2 true, median of {args.repeat:<3}          {med * 1e3:8.1f} ms  = {med / baseline:10.1f}× baseline"
          f"  (min {min(srun) * 1e3:.1f} ms)")
    if bench is not default:
        bench.reset()


if __name__ == "__main__":
    main()
