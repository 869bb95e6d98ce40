"""The reports as whole processes on the cluster at hand (interpreter, imports, Slurm calls, output), each
beside the Slurm tool a user would run instead, in ABBA pairs (``benchmarks/drivers/pairs.py``).

    .venv/bin/python benchmarks/reports.py [--pairs 10] [--since 1d]

``usage --json`` (through the store, and ``--no-cache`` from sacct) vs ``sreport cluster utilization``;
``efficiency --json`` vs ``sacct`` of the window; ``fairshare --json`` vs ``sshare -a``; ``jobs list --json``
vs ``squeue``. Prints each median and the median of per-pair ratios with its 95 % interval; the goal
(issue 40) is 0.4 s per report on a small cluster. Reads only: submits nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
from pairs import abba, paired  # noqa: E402 - benchmarks/drivers/pairs.py: ABBA rounds, per-pair ratios

SLINKYML = str(Path(sys.executable).parent / "slinkyml")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--since", default="1d")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # users keep their .pyc
    window = ["--since", args.since]
    cases = {
        "usage --json": ([SLINKYML, "usage", "--json", *window], ["sreport", "-n", "cluster", "utilization"]),
        "usage --json --no-cache": ([SLINKYML, "usage", "--json", "--no-cache", *window],
                                    ["sreport", "-n", "cluster", "utilization"]),
        "efficiency --json": ([SLINKYML, "efficiency", "--json", *window],
                              ["sacct", "-a", "-P", "-S", f"now-{args.since.rstrip('d')}days"]),
        "fairshare --json": ([SLINKYML, "fairshare", "--json"], ["sshare", "-a", "-P"]),
        "jobs list --json": ([SLINKYML, "jobs", "list", "--json"], ["squeue"]),
    }

    def run(argv: list[str]) -> None:
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    out: dict[str, object] = {}
    for name, (ours, theirs) in cases.items():
        rounds = abba({"ours": lambda ours=ours: run(ours), "theirs": lambda theirs=theirs: run(theirs)}, args.pairs)
        out[name] = {"s": round(statistics.median(rounds["ours"]), 3), "against": " ".join(theirs[:3]),
                     "their_s": round(statistics.median(rounds["theirs"]), 3),
                     **paired(rounds["ours"], rounds["theirs"])}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
