"""The torch.distributed environment of a Slurm task: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT.

Translated from ``SLURM_*`` so ``init_process_group()`` works in a submitted function; the port
comes from :mod:`slinkyml.rendezvous` (the batch script checks it is free: executor.HEAD_ENV_LINES).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, MutableMapping

from slinkyml.rendezvous import port_candidates
from slinkyml.slurm.hostlist import expand_hostlist


def task_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The torch.distributed variables of this task, from Slurm's (MASTER_* kept if already set)."""
    env = os.environ if environ is None else environ
    ntasks = int(env.get("SLURM_NTASKS", "1") or 1)
    nnodes = int(env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1")) or 1)
    local_world = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] or str(max(1, ntasks // nnodes))
    out = {
        "RANK": env.get("SLURM_PROCID", "0"),
        "WORLD_SIZE": str(ntasks),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": local_world,
        "NODE_RANK": env.get("SLURM_NODEID", "0"),
        "GROUP_RANK": env.get("SLURM_NODEID", "0"),
    }
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        out["MASTER_ADDR"], out["MASTER_PORT"] = env["MASTER_ADDR"], env["MASTER_PORT"]
    else:  # not started by our batch script (executor.HEAD_ENV_LINES): derive without the check
        job_id = env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID") or "0"
        hosts = expand_hostlist(env.get("SLURM_JOB_NODELIST", "")) or ["127.0.0.1"]
        out["MASTER_ADDR"] = hosts[0]
        out["MASTER_PORT"] = str(port_candidates(job_id, int(env.get("SLURM_RESTART_COUNT", "0") or 0))[0])
    return out


def setup(environ: MutableMapping[str, str] | None = None, *, bind_gpu: bool = True) -> dict[str, str]:
    """Export the task's torch.distributed variables; bind it to its own GPU (one task per GPU)."""
    env = os.environ if environ is None else environ
    values = task_env(env)
    env.update(values)
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    local_world = int(values["LOCAL_WORLD_SIZE"])
    if bind_gpu and len(visible) > 1 and len(visible) == local_world:
        # every task of the node sees all the node's GPUs: keep only its own, so "cuda:0" is its GPU
        env["CUDA_VISIBLE_DEVICES"] = visible[int(values["LOCAL_RANK"])]
        env["SLINKYML_GPU_BOUND"] = "1"
    return values


def default_backend() -> str:
    """nccl where this task has a GPU, gloo otherwise."""
    import torch  # lazy (here and below): `import slinkyml.dispatch` must not load torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_process_group(backend: str | None = None, **kwargs):
    """``torch.distributed.init_process_group`` from the Slurm environment (idempotent)."""
    import torch.distributed as dist  # lazy: torch only where the task runs

    if dist.is_initialized():
        return dist.group.WORLD
    setup()
    backend = backend or default_backend()
    if backend == "nccl":
        import torch  # lazy: torch only where the task runs

        torch.cuda.set_device(0 if os.environ.get("SLINKYML_GPU_BOUND") else int(os.environ["LOCAL_RANK"]))
    kwargs.setdefault("timeout", datetime.timedelta(minutes=10))
    dist.init_process_group(backend=backend, init_method="env://", **kwargs)
    return dist.group.WORLD
