"""Start-up of the commands people type most: ``slinkyml --help``, ``sbatch render`` and
``sbatch submit --dry-run --no-check``, each a whole process (interpreter included).

    .venv/bin/python benchmarks/startup.py [--rounds 21] [--against REF]

Baseline in the same process: a bare ``python -c pass`` of the same interpreter and site (the
floor every command pays), timed in the same shuffled rounds; each command prints its median and
its ratio to that floor. ``--against REF`` also extracts the slinkyml of a git revision (``git
archive``, byte-compiled like this tree) into a temporary folder and times the same commands from
it in the same rounds: the ratio this tree / REF answers "did start-up get slower?" (the render
runs each tree's own shipped spec, and REF's spec in both). No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import compileall
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = "sbatch/torchrun-ddp.yaml"


def commands(ref_tree: Path | None) -> dict[str, list[str]]:
    out = {"--help": ["--help"], "sbatch render": ["sbatch", "render", SPEC],
           "sbatch submit --dry-run": ["sbatch", "submit", "--dry-run", "--no-check", SPEC]}
    if ref_tree is not None:
        out["sbatch render (REF's spec)"] = ["sbatch", "render", str(ref_tree / SPEC)]
    return out


def run_once(tree: Path, argv: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    code = "import sys; from slinkyml.cli import main; sys.argv[0] = 'slinkyml'; sys.exit(main())"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *argv] if argv else [sys.executable, "-c", "pass"],
                   cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--against", metavar="REF", help="a git revision of this repository to compare with")
    args = ap.parse_args()
    trees = {"this tree": REPO}
    with tempfile.TemporaryDirectory(prefix="slinkyml-startup-") as tmp:
        if args.against:
            ref = Path(tmp)
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.against], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(ref)], input=archive, check=True)
            trees[f"REF {args.against}"] = ref
        for tree in trees.values():
            compileall.compile_dir(tree / "slinkyml", quiet=1)
        cmds = commands(trees.get(f"REF {args.against}"))
        cases = [("bare python", "this tree", [])] + [(c, t, argv) for c, argv in cmds.items() for t in trees]
        times: dict[tuple[str, str], list[float]] = {(c, t): [] for c, t, _ in cases}
        rng = random.Random(0)
        for _ in range(args.rounds):
            rng.shuffle(cases)
            for cmd, tree, argv in cases:
                times[(cmd, tree)].append(run_once(trees[tree], argv))
    floor = times[("bare python", "this tree")]
    print(f"bare python (the floor): {statistics.median(floor) * 1e3:.1f} ms, median of {args.rounds} rounds")
    for cmd in cmds:
        line = [f"{cmd:28s}"]
        for tree in trees:
            ours = times[(cmd, tree)]
            line.append(f"{tree}: {statistics.median(ours) * 1e3:6.1f} ms "
                        f"({statistics.median(ours) / statistics.median(floor):.2f}x the floor)")
        if args.against:
            ours, ref = times[(cmd, "this tree")], times[(cmd, f"REF {args.against}")]
            line.append(f"this/REF {statistics.median(ours) / statistics.median(ref):.3f} "
                        f"(paired {statistics.median(a / b for a, b in zip(ours, ref, strict=True)):.3f})")
        print("  ".join(line))


if __name__ == "__main__":
    main()
