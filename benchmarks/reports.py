"""The reports as whole processes on the cluster at hand (interpreter, imports, Slurm calls, output), each
beside the Slurm tool a user would run instead, in ABBA pairs (``benchmarks/drivers/pairs.py``).

    .venv/bin/python benchmarks/reports.py [--pairs 10] [--since 1d] [--against REF] [--only NAME ...]

``usage --json`` (through the store, and ``--no-cache`` from sacct) vs ``sreport cluster utilization``;
``efficiency --json`` (store, and ``--no-cache``) vs ``sacct`` of the window; ``fairshare --json`` and ``fairshare --explain`` (of
``$SLINKYML_BENCH_USER``, default root) vs ``sshare -a``; ``jobs list --json``
vs ``squeue``. ``--against REF`` adds a third side, the slinkyml of that git revision (extracted and
byte-compiled like this tree), so a change's before and after come from one run (rounds ABC, CBA, ...).
Prints each side's median wall and CPU time (user + system of the process) and the median of per-pair
ratios with its 95 % interval; the goal (issue 40) is 0.4 s per report on a small cluster. Reads only:
submits nothing (the store's sync writes the store, as a report does).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
from pairs import abba, paired  # noqa: E402 - benchmarks/drivers/pairs.py: ABBA rounds, per-pair ratios

REPO = Path(__file__).resolve().parent.parent
#: the console script's own start (slinkyml/cli's main), from the tree on PYTHONPATH
LAUNCH = "import sys; from slinkyml.cli import main; sys.argv[0] = 'slinkyml'; sys.exit(main())"


def cases(since: str) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (slinkyml's arguments, the Slurm tool's command)."""
    window = ["--since", since]
    return {
        "usage --json": (["usage", "--json", *window], ["sreport", "-n", "cluster", "utilization"]),
        "usage --json --no-cache": (["usage", "--json", "--no-cache", *window],
                                    ["sreport", "-n", "cluster", "utilization"]),
        "efficiency --json": (["efficiency", "--json", *window],
                              ["sacct", "-a", "-P", "-S", f"now-{since.rstrip('d')}days"]),
        "efficiency --json --no-cache": (["efficiency", "--json", "--no-cache", *window],
                                         ["sacct", "-a", "-P", "-S", f"now-{since.rstrip('d')}days"]),
        "fairshare --json": (["fairshare", "--json"], ["sshare", "-a", "-P"]),
        "fairshare --explain": (["fairshare", "--explain", os.environ.get("SLINKYML_BENCH_USER", "root")],
                                ["sshare", "-a", "-P"]),
        "jobs list --json": (["jobs", "list", "--json"], ["squeue"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--since", default="1d")
    ap.add_argument("--against", metavar="REF", help="also run the slinkyml of this git revision (before/after)")
    ap.add_argument("--only", action="append", metavar="NAME", help="only this report (repeatable), e.g. "
                    "'fairshare --json'")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # users keep their .pyc
    chosen = {name: case for name, case in cases(args.since).items() if not args.only or name in args.only}
    cpu: dict[str, list[float]] = {}

    def run(side: str, argv: list[str], tree: Path | None = None) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        # in the tree's directory: `python -c` puts the working directory first on sys.path
        subprocess.run([sys.executable, "-c", LAUNCH, *argv] if tree else argv, cwd=tree,
                       env={**env, "PYTHONPATH": str(tree)} if tree else env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.setdefault(side, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="slinkyml-reports-") as tmp:
        trees = {"ours": REPO}
        if args.against:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.against, "slinkyml"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            trees["before"] = Path(tmp)
        for tree in trees.values():
            compileall.compile_dir(tree / "slinkyml", quiet=1)
        for name, (ours, theirs) in chosen.items():
            cpu.clear()
            sides = {side: (lambda side=side, tree=tree, ours=ours: run(side, ours, tree)) for side, tree in trees.items()}
            sides["slurm"] = lambda theirs=theirs: run("slurm", theirs)
            rounds = abba(sides, args.pairs)
            row: dict[str, object] = {"against": " ".join(theirs[:3])}
            for side in rounds:
                row[f"{side}_s"] = round(statistics.median(rounds[side]), 3)
                row[f"{side}_cpu_s"] = round(statistics.median(cpu[side]), 3)
            row["vs_slurm"] = paired(rounds["ours"], rounds["slurm"])
            if "before" in rounds:
                row["vs_before"] = paired(rounds["ours"], rounds["before"])
            out[name] = row
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
