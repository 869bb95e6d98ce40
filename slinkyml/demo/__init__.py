"""The main job (``make demo``, ``slinkyml demo``): the whole product once, end to end, on the
local cluster. Demo code lives here, not in the library packages it drives.

Each step prints what it did; a failing step stops the demo with a one-line error.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slinkyml.accounting import fairshare_report, usage_report
from slinkyml.accounting.render import text_table
from slinkyml.accounting.timeparse import parse_when
from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.helm import check_key_paths
from slinkyml.cluster.render import render
from slinkyml.cluster.validate import validate_objects
from slinkyml.demo.allreduce import demo_allreduce
from slinkyml.demo.training import run_demo_training
from slinkyml.dev import LocalCluster
from slinkyml.errors import SlinkyError
from slinkyml.plan import check, gpu_hardware, shape_from_params
from slinkyml.slurm.runner import Slurm


def _step(title: str, action: Callable[[], str]) -> None:
    print(f"\n== {title}", flush=True)
    started = time.monotonic()
    text = action()
    for line in text.rstrip().splitlines():
        print(f"   {line}")
    print(f"   ({time.monotonic() - started:.1f} s)", flush=True)


def main(nodes: int = 4, workdir: str | None = None, docker: bool = False) -> int:
    work = Path(workdir or tempfile.mkdtemp(prefix="slinkyml-demo-", dir="/tmp"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        os.chmod(work, 0o777)
    except OSError as exc:
        raise SlinkyError(f"--workdir {str(work)[:200]}: cannot create: {exc.strerror or exc}") from None
    cluster: Any = LocalCluster(nodes=nodes, keep_running=True)
    if docker:
        # lazy: the docker extra (testcontainers), only for this cluster
        from slinkyml.dev.docker.cluster import DockerCluster

        cluster = DockerCluster(nodes=nodes, keep_running=True)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 60))

    _step("Render and validate the example Slinky cluster (manifests/cpu-small)", cluster_example)

    def up() -> str:
        start = time.monotonic()
        cluster.up()
        s = cluster.spec
        if docker:  # every step's Slurm commands (submitit's too) are the cluster's: its `dev env`
            os.environ["SLURM_CONF"] = str(s.slurm_conf)
            os.environ["PATH"] = f"{s.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        return (f"Slurm {cluster.version}, {s.nodes} nodes {', '.join(s.node_names)} "
                f"in {time.monotonic() - start:.1f} s; SLURM_CONF={s.slurm_conf}")

    where = " as Docker containers" if docker else ""
    _step(f"Bring up the local Slurm cluster{where} (munge, MariaDB, slurmdbd, slurmctld, slurmd ×N, slurmrestd)", up)
    slurm = cluster.slurm

    def two_nodes() -> str:
        out = slurm.run("srun", ["-N2", "-l", "hostname"], timeout=60).stdout
        return "srun -N2 -l hostname →\n" + out.strip()

    _step("A 2-node srun", two_nodes)
    _step("The planner: 200B parameters on 64 A100-80GB as TP=8, PP=4, DP=2", _plan)
    _step("A 2-node torchrun training job submitted with sbatch", lambda: run_demo_training(slurm, work))
    _step("A Python function on 2 nodes × 2 tasks via submitit (all-reduce)", lambda: demo_allreduce(folder=work / "submitit"))
    _step("Accounting: sacct, usage and fair-share from slurmdbd", lambda: demo_summary(slurm, since))
    down = "slinkyml dev down --docker" if docker else "slinkyml dev down"
    print(f"\nDemo finished. Work files in {work}; the cluster keeps running (`{down}` stops it).")
    return 0


def cluster_example(name: str = "cpu-small") -> str:
    """Render + validate ``manifests/<name>/cluster.yaml``; a one-paragraph summary for demos.

    Raises :class:`~slinkyml.errors.SlinkyError` if the example does not validate.
    """
    spec_path = EXAMPLES_DIR / name / "cluster.yaml"
    cluster = load_spec(spec_path)
    rendered = render(cluster)
    issues = validate_objects(rendered.objects, plugin_values=rendered.plugin_values)
    bad_keys = check_key_paths(rendered.helm_values)
    if issues or bad_keys:
        first = str(issues[0]) if issues else f"helm values: unknown key {bad_keys[0]}"
        raise SlinkyError(f"example {name}: {len(issues) + len(bad_keys)} problem(s); first: {first}")
    kinds = Counter(o["kind"] for o in rendered.objects)
    nodes = ", ".join(f"{ns.count} x {ns.instance_type} ({ns.partition or ns.name})" for ns in cluster.node_sets)
    return (f"cluster {cluster.name} (Slurm {cluster.slurm_version}, namespace {cluster.namespace}): "
            f"{len(rendered.objects)} objects valid against the Slinky v1beta1 CRDs and Kubernetes schemas "
            f"[{', '.join(f'{k} x{v}' for k, v in sorted(kinds.items()))}]; node sets: {nodes}; "
            f"Helm values: all key paths exist in the slurm chart")


def demo_summary(slurm: Slurm | None = None, since: str = "1d") -> str:
    """A short usage + fair-share table as plain text (printed at the end of ``make demo``)."""
    start = parse_when(since, "since")
    report = usage_report(start, datetime.now(UTC), by=("account", "user"), slurm=slurm)
    lines = [f"Usage since {start:%Y-%m-%d %H:%M} UTC (CPU-hours, pro-rated):"]
    cols = ["account", "user", "jobs", "cpu_hours", "gpu_hours"] + \
        (["cost_usd"] if "cost_usd" in report else [])
    lines.append(text_table(report[cols] if len(report) else report.reindex(columns=cols)))
    fs = fairshare_report(slurm=slurm)
    users = fs[fs["is_user"]]
    lines.append("")
    lines.append(f"Fair-share ({fs.attrs['algorithm']}):")
    lines.append(text_table(users[["account", "user", "raw_shares", "raw_usage", "level_fs",
                                   "fairshare"]].sort_values("fairshare", ascending=False)))
    return "\n".join(lines)


def _plan() -> str:
    shape = shape_from_params(200e9)
    lines = []
    for gpu in ("a100-40gb", "a100-80gb"):
        best = check(shape, gpu_hardware(gpu), 64, (8, 4, 2), top=1, suggest=False).best
        verdict = (f"fits: ZeRO-{best.zero}, recompute {best.recompute}, offload {best.offload}, "
                   f"{best.peak / 2**30:.1f} of {best.capacity / 2**30:.0f} GiB") if best else "does not fit"
        lines.append(f"{gpu}: {verdict}")
    lines.append("(full arithmetic: slinkyml plan --params 200e9 --gpus 64 --gpu a100-80gb --check 8,4,2)")
    return "\n".join(lines)
