"""What submitit pickles and runs in each task: the user's function plus the task's set-up
(torch.distributed variables, multi-rank-safe signal handlers for Checkpointable functions).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from slinkyml.dispatch import checkpointable, distributed
from slinkyml.slurm import protocol


class TaskCall:
    """``fn(*args, **kwargs)`` in a Slurm task, with the distributed environment set up."""

    def __init__(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None, *,
                 distributed: bool = True, timeout_min: int = 60, max_restarts: int = 3):
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.distributed = distributed
        self.timeout_min = timeout_min
        self.max_restarts = max_restarts

    @property
    def restarts(self) -> int:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)

    def __call__(self) -> Any:
        if self.distributed:
            distributed.setup()
        if isinstance(self.fn, checkpointable.Checkpointable):
            checkpointable.install_handlers()
            checkpointable._CURRENT["task"] = self
            self.fn.max_restarts = self.max_restarts
        try:
            return self.fn(*self.args, **self.kwargs)
        except Exception as exc:
            record_task_failure(exc)
            raise

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
        return f"TaskCall({name})"


class CheckpointableTaskCall(TaskCall):
    """A TaskCall of a Checkpointable: submitit sees ``checkpoint`` and may requeue it (plain
    functions get none, so submitit keeps its default: requeue on preemption, not on timeout)."""

    def checkpoint(self) -> Any:
        """submitit's hook: resume with this call, the user's object in its current state."""
        from submitit.helpers import DelayedSubmission  # lazy: submitit stays out of `import slinkyml`

        return DelayedSubmission(self)


def record_task_failure(exc: BaseException) -> None:
    """The run protocol's failure marker, next to submitit's logs: ``jobs why`` then names the rank
    that failed first (rank 1's exception), not rank 0's later lost connection to it."""
    from submitit import JobEnvironment  # lazy: submitit stays out of `import slinkyml`

    try:
        env = JobEnvironment()
        folder, job_id = env.paths.folder, env.job_id
    except RuntimeError:  # not in a Slurm task
        return
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) or 0)
    protocol.record_failure(folder, job_id, os.environ.get("SLURM_RESTART_COUNT", "0") or 0, rank, exc)


def make_task(fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None, **options: Any) -> TaskCall:
    cls = CheckpointableTaskCall if isinstance(fn, checkpointable.Checkpointable) else TaskCall
    return cls(fn, args, kwargs, **options)
