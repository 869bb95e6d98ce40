"""Checkpointable functions that survive preemption in multi-rank jobs.

submitit checkpoints rank 0 inside its signal handler and strands the other ranks in a collective.
Here the signal only sets a flag; :meth:`Checkpointable.should_stop` all-reduces it so every rank
stops after the same step, then rank 0 checkpoints and requeues once per event. ``USR2``:
checkpoint and requeue ourselves; ``TERM``: Slurm is already ending the job, checkpoint only.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, NoReturn

from slinkyml.slurm import Slurm

#: what this process has been asked to do: 0 nothing, 1 stop (TERM), 2 stop and requeue (USR2)
_STOP: dict[str, Any] = {"level": 0, "signal": ""}
#: the TaskCall running in this process (set by TaskCall.__call__), whose pickle is the checkpoint
_CURRENT: dict[str, Any] = {}

STOP_ONLY = 1
STOP_AND_REQUEUE = 2


class Preempted(Exception):
    """Raised in the job when it was stopped but cannot be requeued (restart limit reached)."""


def _handler(signum: int, _frame: Any) -> None:
    level = STOP_AND_REQUEUE if signum == signal.SIGUSR2 else STOP_ONLY
    if level > _STOP["level"]:
        _STOP["level"], _STOP["signal"] = level, signal.Signals(signum).name
    print(f"slinkyml: caught {signal.Signals(signum).name} at {time.strftime('%H:%M:%S')}: "
          "stopping at the next step boundary", file=sys.stderr, flush=True)


def install_handlers() -> None:
    """Replace submitit's per-rank handlers (rank 0 requeues mid-step) with flag setters."""
    signal.signal(signal.SIGUSR2, _handler)
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGCONT, signal.SIG_IGN)


class Checkpointable:
    """Base class for resumable callables (submitit's Checkpointable protocol, multi-rank safe).

    Keep progress on ``self`` and call ``if self.should_stop(): self.requeue()`` at step boundaries.
    """

    #: how many times the job may requeue itself; beyond that a stop raises :class:`Preempted`.
    max_restarts: int = 3

    @property
    def restarts(self) -> int:
        """How many times this job has been requeued (Slurm's restart count)."""
        return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)

    @property
    def rank(self) -> int:
        return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) or 0)

    def should_stop(self) -> bool:
        """Collective: True on every rank iff any rank got a stop signal. Call on all ranks."""
        level = self._agreed_level()
        self._stop_level = level
        return level > 0

    def _agreed_level(self) -> int:
        local = _STOP["level"]
        try:
            import torch.distributed as dist  # lazy: torch only where the task runs
        except ImportError:  # pragma: no cover - torch is optional for single-task functions
            return local
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return local
        import torch  # lazy: torch only where the task runs

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([local], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def checkpoint(self, *args: Any, **kwargs: Any):
        """submitit's hook: the callable to resume with (this object, in its current state)."""
        from submitit.helpers import DelayedSubmission  # lazy: submitit stays out of `import slinkyml`

        return DelayedSubmission(self, *args, **kwargs)  # type: ignore[arg-type]  # subclasses are callables

    def requeue(self) -> NoReturn:
        """Stop here on every rank: rank 0 saves the state and requeues; everyone exits."""
        level = getattr(self, "_stop_level", 0) or _STOP["level"] or STOP_AND_REQUEUE
        _barrier()
        if self.rank == 0:
            if level == STOP_AND_REQUEUE and self.restarts >= self.max_restarts:
                _barrier()
                raise Preempted(f"stopped after {self.restarts} restarts (max_restarts={self.max_restarts})")
            _save_checkpoint()
            if level == STOP_AND_REQUEUE:
                _requeue_once()
        _barrier()
        _exit()


def _barrier() -> None:
    try:
        import torch.distributed as dist  # lazy: torch only where the task runs
    except ImportError:  # pragma: no cover
        return
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        try:
            dist.barrier()
        except Exception as exc:  # a peer already went away (Slurm is killing the job): just exit
            print(f"slinkyml: barrier during stop failed ({exc}); exiting", file=sys.stderr, flush=True)


def _save_checkpoint() -> None:
    """Dump the running TaskCall (holding the user's object) over the job's submitted pickle."""
    task = _CURRENT.get("task")
    if task is None:
        return
    from submitit import JobEnvironment  # lazy: submitit stays out of `import slinkyml`
    from submitit.core import utils  # lazy: submitit stays out of `import slinkyml`

    delayed = task.checkpoint()
    delayed.set_timeout(task.timeout_min, max(0, task.max_restarts - task.restarts))
    path = JobEnvironment().paths.submitted_pickle
    with utils.temporary_save_path(path) as tmp:
        delayed.dump(tmp)
    print(f"slinkyml: checkpoint saved to {path}", file=sys.stderr, flush=True)


def requeue_marker(folder: str, job_id: str, restart: int) -> str:
    return os.path.join(folder, f".{job_id}.requeued.{restart}")


def _requeue_once() -> bool:
    """``scontrol requeue`` this job unless this event already requeued it; True if we did."""
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job_id = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    folder = os.environ.get("SUBMITIT_FOLDER", ".")
    marker = requeue_marker(folder, job_id, int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0))
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    Slurm().run("scontrol", ["requeue", job_id], timeout=30, retries=5)
    print(f"slinkyml: requeued job {job_id}", file=sys.stderr, flush=True)
    return True


def _exit() -> NoReturn:
    try:
        import torch.distributed as dist  # lazy: torch only where the task runs

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - leaving anyway
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    # SystemExit passes submitit's `except Exception`: no result pickle, the job is not "done"
    sys.exit(0)
