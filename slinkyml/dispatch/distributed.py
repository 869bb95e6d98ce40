"""The torch.distributed environment of a Slurm task: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT.

Translated from ``SLURM_*`` so ``init_process_group()`` works in a submitted function; the port
comes from :mod:`slinkyml.rendezvous`.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Mapping, MutableMapping

from slinkyml.rendezvous import port_candidates
from slinkyml.slurm.hostlist import expand_hostlist


def port_is_free(port: int, host: str = "") -> bool:
    """Whether we can bind ``port`` here (the head node), i.e. no other job's store is on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(job_id: int | str, restart: int = 0) -> int:
    """The first free candidate port (collision check); the first candidate if all are taken."""
    candidates = port_candidates(job_id, restart)
    return next((p for p in candidates if port_is_free(p)), candidates[0])


def head_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """MASTER_ADDR/MASTER_PORT, computed in the batch script (it runs on the head node)."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID") or "0"
    restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
    hosts = expand_hostlist(env.get("SLURM_JOB_NODELIST", "")) or [socket.gethostname()]
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(choose_port(job_id, restart))}


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
    else:  # not started by our batch script: derive without the check (same on every node)
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


def _main() -> None:
    """``python -m slinkyml.dispatch.distributed``: print ``export`` lines for the batch script."""
    for key, value in head_env().items():
        print(f"export {key}={value}")


if __name__ == "__main__":
    _main()
