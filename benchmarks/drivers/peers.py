"""One measured submission of benchmarks/peers.py, as a fresh process (as a user's script or notebook
kernel starts): the tool's import, its submission and, for ``map``, its wait for results all count.

    python benchmarks/drivers/peers.py ttfs    slinkyml|submitit DIR OUT   (ttfs-light: ranks import nothing)
    python benchmarks/drivers/peers.py map     slinkyml|submitit DIR ITEMS CHUNK_SIZE
    python benchmarks/drivers/peers.py requeue slinkyml|submitit DIR STARTED RESUMED

Prints ``JOB <id> ...`` (every job id it submitted). The functions live in this ``__main__``, so
both tools pickle them by value; only the tool a run measures is imported.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

#: how often a waiting tool looks for results: slinkyml's own (``slinkyml.dispatch.executor._POLL_S``, which
#: benchmarks/peers.py checks), for submitit too (its ``result()`` sleeps 1 s between looks)
POLL_S = 0.2


def first_step_light(path: str) -> float:
    """The light probe: each rank writes the wall clock of its start to ``path.RANK`` (no import)."""
    now = time.time()
    Path(f"{path}.{os.environ.get('SLURM_PROCID', '0')}").write_text(repr(now))
    return now


def first_step(path: str) -> float:
    """The probe: every task is one rank; rank 0 writes the wall clock of its first all-reduce."""
    import torch
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:  # plain submitit: its own helper sets the variables
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    now = time.time()
    if dist.get_rank() == 0:
        Path(f"{path}.0").write_text(repr(now))
    dist.destroy_process_group()
    return now


def double_all(items: list[int]) -> list[int]:
    """One array task's chunk of items (the same chunks for every tool)."""
    return [2 * x for x in items]


def count_to(started: str, resumed: str) -> int:
    """The requeue probe: the first run writes ``started`` and sleeps (it is requeued long before
    it ends); a run after a requeue (SLURM_RESTART_COUNT ≥ 1) writes ``resumed`` and returns."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    Path(resumed if restarts else started).write_text(repr(time.time()))
    if not restarts:
        time.sleep(120)
    return restarts


def chunks(items: int, size: int) -> list[list[int]]:
    return [list(range(start, min(start + size, items))) for start in range(0, items, size)]


def main() -> int:
    task, tool, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    rest = sys.argv[4:]
    if tool == "slinkyml":
        from slinkyml.dispatch import Checkpointable, Executor

        def executor(**kw):
            return Executor(folder, **kw)

        if task.startswith("ttfs"):
            probe = first_step_light if task == "ttfs-light" else first_step
            job = executor(nodes=2, mem="1G", time=5).submit(probe, rest[0])
            print("JOB", job.job_id)
        elif task == "map":
            items, size = int(rest[0]), int(rest[1])
            array = executor(mem="128M", time=5).map_array(double_all, chunks(items, size), chunk_size=1)
            print("JOB", *array.array_ids)
            assert [x for part in array.results(timeout=600) for x in part] == [2 * i for i in range(items)]
        else:
            class CountTo(Checkpointable):
                def __call__(self) -> int:
                    return count_to(*rest)

            print("JOB", executor(mem="256M", time=10).submit(CountTo()).job_id)
    else:
        import submitit

        def executor(**kw):
            ex = submitit.AutoExecutor(folder=str(folder / "%j"), cluster="slurm")
            ex.update_parameters(**kw)
            return ex

        if task.startswith("ttfs"):
            probe = first_step_light if task == "ttfs-light" else first_step
            job = executor(nodes=2, tasks_per_node=1, timeout_min=5, slurm_mem="1G").submit(probe, rest[0])
            print("JOB", job.job_id)
        elif task == "map":
            items, size = int(rest[0]), int(rest[1])
            jobs = executor(timeout_min=5, slurm_mem="128M", slurm_array_parallelism=1000).map_array(
                double_all, chunks(items, size))
            print("JOB", *sorted({str(j.job_id).split("_")[0] for j in jobs}))
            while not all(j.done() for j in jobs):  # slinkyml's poll, not result()'s 1 s sleep
                time.sleep(POLL_S)
            assert [x for j in jobs for x in j.result()] == [2 * i for i in range(items)]
        else:
            class SubmititCountTo(submitit.helpers.Checkpointable):
                def __call__(self) -> int:
                    return count_to(*rest)

            print("JOB", executor(timeout_min=10, slurm_mem="256M").submit(SubmititCountTo()).job_id)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
