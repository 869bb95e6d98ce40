"""Benchmark: what the one spec loader costs over a bare ``yaml.safe_load`` of the same file.

For every shipped spec (sbatch/*.yaml, manifests/*/cluster.yaml), times loading it the way the CLI
does (read, parse with line marks and the duplicate-key check, schema check, typed spec) against
``yaml.safe_load`` of the same text alone, in the same process, and prints the ratio. The loader
must stay a small part of a command's start-up. No timing is asserted anywhere.

    .venv/bin/python benchmarks/specload.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from slinkyml import specload
from slinkyml.cluster import load_spec
from slinkyml.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parents[1]


def _per_call(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm caches (schema file, regexes)
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    specs = [(p, JobSpec.from_yaml) for p in sorted(REPO.glob("sbatch/*.yaml"))]
    specs += [(p, load_spec) for p in sorted(REPO.glob("manifests/*/cluster.yaml"))]
    print(f"{'spec':45s} {'safe_load ms':>12s} {'loader ms':>10s} {'schema ms':>10s} {'ratio':>6s}")
    for path, load in specs:
        text = path.read_text()
        kind = "cluster" if path.name == "cluster.yaml" else "job"
        data = yaml.safe_load(text)
        bare = _per_call(lambda: yaml.safe_load(text), args.repeat)  # noqa: B023
        full = _per_call(lambda: load(path), args.repeat)  # noqa: B023
        check = _per_call(lambda: specload.check(data, kind), args.repeat)  # noqa: B023
        print(f"{str(path.relative_to(REPO)):45s} {bare * 1e3:12.3f} {full * 1e3:10.3f} {check * 1e3:10.3f} "
              f"{full / bare:6.2f}")


if __name__ == "__main__":
    main()
