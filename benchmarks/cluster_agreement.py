"""`cluster validate` against the live API server and the slurm-operator's webhooks, and the real
kube-scheduler's placement of every example (slinkyml/cluster/agreement.py, placement.py).

Prints the confusion table of the mutated corpus (offline accept/reject x server accept/reject),
the reasons where offline is stricter, the misses (must be none) and, per case, offline time as a
ratio to the server's round trip measured in the same process; then the scheduling table of the
three examples and of one breaking case per rule.
Needs the local control plane: `slinkyml dev kube up` (brought up here if it is not running).
With --schema: the corpus generated from the schemas (slinkyml/cluster/schemacorpus.py, 2,000+
cases) instead, its confusion table per kind. --offline-verdicts FILE writes that corpus's offline
verdicts (tests/data/schema_corpus_verdicts.json, compared by tests/test_cluster_schemacorpus.py)
and needs no plane.
Usage: .venv/bin/python benchmarks/cluster_agreement.py [--seed N] [--no-placement] [--schema [--limit N] [--only TEXT]]
       .venv/bin/python benchmarks/cluster_agreement.py --offline-verdicts tests/data/schema_corpus_verdicts.json
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from pathlib import Path

from slinkyml.cluster import schemacorpus
from slinkyml.cluster.agreement import (
    confusion,
    confusion_by_kind,
    offline,
    run,
    verdict_text,
    with_readme_table,
)
from slinkyml.cluster.corpus import SEED, bases, cases
from slinkyml.cluster.placement import BREAKS, break_scenario, example_scenarios, place, scheduling_table
from slinkyml.dev.kubernetes.kube import KubeControlPlane


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-placement", action="store_true", help="only the agreement corpus")
    parser.add_argument("--schema", action="store_true", help="the corpus generated from the schemas")
    parser.add_argument("--limit", type=int, default=0, help="--schema: every Nth case only (0: all)")
    parser.add_argument("--only", metavar="TEXT", help="--schema: only the cases whose name contains TEXT")
    parser.add_argument("--readme", action="store_true",
                        help="--schema: write the per-kind table into README.md (between its markers)")
    parser.add_argument("--alone", action="store_true",
                        help="every case in a namespace of its own, all its objects applied (default: beside its "
                             "example's render, only the objects it changed dry-run; agreement.run)")
    parser.add_argument("--offline-verdicts", metavar="FILE", help="write the generated corpus's offline verdicts")
    args = parser.parse_args()
    if args.offline_verdicts:
        rows = [[c.name, verdict_text(offline(c.objects, c.plugin_values))] for c in schemacorpus.cases()]
        with open(args.offline_verdicts, "w") as out:
            json.dump(rows, out, indent=0)
            out.write("\n")
        print(f"wrote {len(rows)} offline verdicts to {args.offline_verdicts}")
        return
    plane = KubeControlPlane().up()
    api = plane.api()
    corpus = schemacorpus.cases() if args.schema else cases(args.seed)
    if args.schema and args.limit:
        corpus = corpus[::args.limit]
    if args.schema and args.only:
        corpus = [c for c in corpus if args.only in c.name]
    start = time.perf_counter()
    rows = run(api, corpus, prefix=f"agree-{secrets.token_hex(3)}",
               operator_version=plane.versions().get("slurm-operator"), bases=None if args.alone else bases())
    print(f"## agreement ({time.perf_counter() - start:.0f} s, seed {args.seed})\n")
    print(confusion(rows))
    if args.schema:
        print("\n" + confusion_by_kind(rows))
    if args.schema and args.readme:
        readme = Path(__file__).resolve().parent.parent / "README.md"
        readme.write_text(with_readme_table(readme.read_text(), confusion_by_kind(rows)))
        print(f"wrote the table into {readme}")
    if args.schema:
        stricter = [r for r in rows if r.unexplained]
        print(f"\noffline stricter without a run-time reason: {len(stricter)}")
        for r in stricter:
            print(f"- {r.case.name[:150]}: {[str(i)[:160] for s, i in r.offline.issues if s == 'admission'][:2]}")
    misses = [r for r in rows if r.miss]
    print(f"\nmisses: {len(misses)}")
    for r in misses:
        print(f"- {r.case.name}: {r.verdicts[0][1].message}")
    ratio = statistics.median(r.offline_seconds / r.server_seconds for r in rows if r.server_seconds)
    print(f"offline validate / server judgement per case (median; {'whole' if args.alone else 'changed'} "
          f"objects on the server): {ratio:.3f}x "
          f"({statistics.median(r.offline_seconds for r in rows) * 1000:.1f} ms vs "
          f"{statistics.median(r.server_seconds for r in rows) * 1000:.1f} ms)")
    if args.no_placement or args.schema:
        return
    prefix = f"sched-{secrets.token_hex(2)}-"
    scenarios = [*example_scenarios(prefix), *(break_scenario(b, prefix) for b in BREAKS)]
    start = time.perf_counter()
    placed = place(api, scenarios, prefix)
    print(f"\n## placement ({time.perf_counter() - start:.0f} s)\n")
    print(scheduling_table(placed))


if __name__ == "__main__":
    main()
