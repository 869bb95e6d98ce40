"""`slinkyml cluster validate` of the examples: whole process, this tree against a git revision
(default: the one before the real-schema validation, 7ae8fd3), in alternating ABBA rounds; then
in-process, the validation of the rendered objects with and without the CEL rules (ABBA too);
with --server, in-process validation against the live API server's judgement of the same objects
(the local plane, `slinkyml dev kube up`, brought up if it is not running; ABBA rounds, each in a
namespace of its own: the Namespace, Secrets and ConfigMaps created, the rest dry-run applied, as
:func:`slinkyml.cluster.agreement.server` judges a case).

    .venv/bin/python benchmarks/cluster_validate.py [--rounds 11] [--against REF] [--server]

The machine is shared: each figure is printed with its baseline from the same rounds (medians and
minima), never asserted.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = ("manifests/cpu-small", "manifests/h100-efa")


def whole(tree: Path, example: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one process: on a loaded machine the CPU time
    is the steadier figure."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    code = "import sys; from slinkyml.cli import main; sys.argv[0] = 'slinkyml'; sys.exit(main())"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, "cluster", "validate", "-q", str(REPO / example)], cwd=tree, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def in_process(rounds: int) -> None:
    from slinkyml.cluster import EXAMPLES_DIR, load_spec, schemas
    from slinkyml.cluster.render import render
    from slinkyml.cluster.validate import validate_objects

    rendered = render(load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml"))
    validate_objects(rendered.objects, plugin_values=rendered.plugin_values)  # warm the caches
    real = schemas.check_rules

    def off(node: Any, value: Any, path: str = "", found: Any = None) -> Any:
        return schemas.Walk()

    times: dict[str, list[float]] = {"with CEL": [], "without CEL": []}
    for i in range(rounds):
        for label in (("with CEL", "without CEL") if i % 2 == 0 else ("without CEL", "with CEL")):
            schemas.check_rules = real if label == "with CEL" else off  # type: ignore[assignment]
            import slinkyml.cluster.validate as validate
            validate.check_rules = schemas.check_rules  # type: ignore[attr-defined]
            start = time.perf_counter()
            validate_objects(rendered.objects, plugin_values=rendered.plugin_values)
            times[label].append(time.perf_counter() - start)
    schemas.check_rules = real  # type: ignore[assignment]
    validate.check_rules = real  # type: ignore[attr-defined]
    print(f"\nin-process validate_objects(h100-efa, {len(rendered.objects)} objects), {rounds} ABBA rounds:")
    for label, values in times.items():
        print(f"  {label:12} median {statistics.median(values) * 1000:6.1f} ms  min {min(values) * 1000:6.1f} ms")


def against_server(rounds: int) -> None:
    import secrets

    from slinkyml.cluster import EXAMPLES_DIR, load_spec
    from slinkyml.cluster.agreement import delete_namespaces, in_namespace, server
    from slinkyml.cluster.apply import dynamic_client
    from slinkyml.cluster.render import render
    from slinkyml.cluster.validate import validate_objects
    from slinkyml.dev.kubernetes.kube import KubeControlPlane

    plane = KubeControlPlane().up()
    api = plane.api()
    dyn = dynamic_client(api)
    operator = plane.versions().get("slurm-operator")
    prefix = f"bench-{secrets.token_hex(3)}"
    names: list[str] = []
    try:
        for example in ("cpu-small", "h100-efa"):
            names = [f"{prefix}-{example}-{i}" for i in range(rounds + 1)]
            rendered = render(load_spec(EXAMPLES_DIR / example / "cluster.yaml"))
            server(api, dyn, in_namespace(rendered.objects, names[-1]), names[-1])  # warm discovery
            validate_objects(rendered.objects, plugin_values=rendered.plugin_values, webhook=operator)
            times: dict[str, list[float]] = {"offline": [], "server": []}
            for i in range(rounds):
                objs = in_namespace(rendered.objects, names[i])
                for side in (("offline", "server") if i % 2 == 0 else ("server", "offline")):
                    start = time.perf_counter()
                    if side == "offline":
                        validate_objects(objs, plugin_values=rendered.plugin_values, webhook=operator)
                    else:
                        server(api, dyn, objs, names[i])
                    times[side].append(time.perf_counter() - start)
            delete_namespaces(api, names)
            print(f"\n{example} ({len(rendered.objects)} objects), in process, {rounds} ABBA rounds against "
                  f"the live API server (slurm-operator {operator} webhook):")
            for side, values in times.items():
                print(f"  {side:8} median {statistics.median(values) * 1000:7.1f} ms  min {min(values) * 1000:7.1f} ms")
            print(f"  offline / server (medians): {statistics.median(times['offline']) / statistics.median(times['server']):.3f}x")
    finally:
        delete_namespaces(api, names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--against", default="7ae8fd3", metavar="REF")
    ap.add_argument("--server", action="store_true", help="only the in-process figure against the live API server")
    args = ap.parse_args()
    if args.server:
        against_server(args.rounds)
        return
    with tempfile.TemporaryDirectory(prefix="slinkyml-validate-") as tmp:
        ref = Path(tmp)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.against], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(ref)], input=archive, check=True)
        compileall.compile_dir(str(ref / "slinkyml"), quiet=1)
        compileall.compile_dir(str(REPO / "slinkyml"), quiet=1)
        trees = {"this tree": REPO, args.against: ref}
        for example in EXAMPLES:
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for tree in trees.values():
                whole(tree, example)  # warm the page cache
            for i in range(args.rounds):
                order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
                for name, tree in order:
                    times[name].append(whole(tree, example))
            print(f"cluster validate {example}, whole process, {args.rounds} ABBA rounds:")
            for name, values in times.items():
                walls, cpus = [w for w, _ in values], [c for _, c in values]
                print(f"  {name:12} wall median {statistics.median(walls):.3f} s (min {min(walls):.3f})  "
                      f"CPU median {statistics.median(cpus):.3f} s (min {min(cpus):.3f})")
            for i, label in enumerate(("wall", "CPU")):
                ratio = statistics.median(v[i] for v in times["this tree"]) / \
                    statistics.median(v[i] for v in times[args.against])
                print(f"  this tree / {args.against} ({label}): {ratio:.2f}x")
    in_process(args.rounds * 2)


if __name__ == "__main__":
    main()
