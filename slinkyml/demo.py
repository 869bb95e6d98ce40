"""The main job (``make demo``): the whole product once, end to end, on the local cluster.

Each step prints what it did; a failing step stops the demo with a one-line error.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slinkyml.errors import SlinkyError


def _step(title: str, action: Callable[[], str]) -> None:
    print(f"\n== {title}", flush=True)
    started = time.monotonic()
    text = action()
    for line in text.rstrip().splitlines():
        print(f"   {line}")
    print(f"   ({time.monotonic() - started:.1f} s)", flush=True)


def run_demo(nodes: int = 4, workdir: str | None = None) -> int:
    from slinkyml.dev import LocalCluster

    work = Path(workdir or tempfile.mkdtemp(prefix="slinkyml-demo-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o777)
    cluster = LocalCluster(nodes=nodes, keep_running=True)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 60))

    _step("Render and validate the example Slinky cluster (manifests/cpu-small)", _cluster_manifests)

    def up() -> str:
        start = time.monotonic()
        cluster.up()
        s = cluster.spec
        return (f"Slurm {cluster.version}, {s.nodes} nodes {', '.join(s.node_names)} "
                f"in {time.monotonic() - start:.1f} s; SLURM_CONF={s.slurm_conf}")

    _step("Bring up the local Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd ×N, slurmrestd)", up)
    slurm = cluster.slurm

    def two_nodes() -> str:
        out = slurm.run("srun", ["-N2", "-l", "hostname"], timeout=60).stdout
        return "srun -N2 -l hostname →\n" + out.strip()

    _step("A 2-node srun", two_nodes)
    _step("The planner: 200B parameters on 64 A100-80GB as TP=8, PP=4, DP=2", _plan)
    _step("A 2-node torchrun training job submitted with sbatch", lambda: _training(slurm, work))
    _step("A Python function on 2 nodes × 2 tasks via submitit (all-reduce)", lambda: _submitit(work))
    _step("Accounting: sacct, usage and fair-share from slurmdbd", lambda: _accounting(slurm, since))
    print(f"\nDemo finished. Work files in {work}; the cluster keeps running (`slinkyml dev down` stops it).")
    return 0


def _cluster_manifests() -> str:
    from slinkyml.cluster import render_and_validate_example

    return render_and_validate_example("cpu-small")


def _plan() -> str:
    from slinkyml.plan import check, gpu_hardware, shape_from_params

    shape = shape_from_params(200e9)
    lines = []
    for gpu in ("a100-40gb", "a100-80gb"):
        best = check(shape, gpu_hardware(gpu), 64, (8, 4, 2), top=1, suggest=False).best
        verdict = (f"fits: ZeRO-{best.zero}, recompute {best.recompute}, offload {best.offload}, "
                   f"{best.peak / 2**30:.1f} of {best.capacity / 2**30:.0f} GiB") if best else "does not fit"
        lines.append(f"{gpu}: {verdict}")
    lines.append("(full arithmetic: slinkyml plan --params 200e9 --gpus 64 --gpu a100-80gb --check 8,4,2)")
    return "\n".join(lines)


def _training(slurm, work: Path) -> str:
    from slinkyml.jobs.demo import run_demo_training

    return run_demo_training(slurm, work)


def _submitit(work: Path) -> str:
    from slinkyml.dispatch import demo_allreduce

    return demo_allreduce(folder=work / "submitit")


def _accounting(slurm, since: str) -> str:
    from slinkyml.accounting import demo_summary

    return demo_summary(slurm, since)


def main(nodes: int = 4, workdir: str | None = None) -> int:
    try:
        return run_demo(nodes, workdir)
    except ImportError as exc:  # a part of the product missing from this install
        raise SlinkyError(f"demo step unavailable: {exc}") from None
