"""The demo's notebook-dispatch step: a 2-node × 2-task all-reduce submitted from Python."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from slinkyml.dispatch.distributed import init_process_group
from slinkyml.dispatch.executor import Executor
from slinkyml.errors import SlinkyError


def allreduce_task(offset: float = 1.0) -> dict[str, Any]:
    """Runs on every task: init torch.distributed from the Slurm env, all-reduce rank+offset."""
    import torch  # lazy: runs on the tasks only; torch costs ~1 s to import where the demo starts
    import torch.distributed as dist  # lazy: torch only where the task runs

    init_process_group()
    value = torch.tensor([float(dist.get_rank()) + offset])
    dist.all_reduce(value)
    out = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "local_rank": int(os.environ["LOCAL_RANK"]),
           "host": socket.gethostname(), "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
           "backend": dist.get_backend(), "sum": float(value.item())}
    dist.destroy_process_group()
    return out


def expected_sum(world_size: int, offset: float = 1.0) -> float:
    return float(sum(range(world_size)) + world_size * offset)


def demo_allreduce(nodes: int = 2, tasks_per_node: int = 2, *, folder: str | os.PathLike[str] | None = None,
                   mem: str = "2G", timeout: float = 300.0, **options: Any) -> str:
    """Submit the all-reduce from Python, wait, check every rank's sum; return a one-line summary."""
    folder = Path(folder) if folder is not None else Path.cwd() / ".slinkyml" / "submitit"
    start = time.monotonic()
    job = Executor(folder, nodes=nodes, tasks_per_node=tasks_per_node, mem=mem, **options).submit(
        allreduce_task, 1.0, name="demo-allreduce")
    results = job.results(timeout=timeout)
    want = expected_sum(nodes * tasks_per_node)
    wrong = [r["rank"] for r in results if r["sum"] != want]
    if wrong:
        raise SlinkyError(f"job {job.job_id}: ranks {wrong} got a wrong all-reduce sum (want {want:g})")
    hosts = sorted({r["host"] for r in results})
    return (f"submit: job {job.job_id} all-reduce over {len(results)} ranks on {','.join(hosts)} "
            f"({results[0]['backend']}, master {results[0]['master']}): sum {want:g} on every rank "
            f"in {time.monotonic() - start:.1f} s")
