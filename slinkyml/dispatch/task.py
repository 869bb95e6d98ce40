"""What submitit pickles and runs in each task: the user's function plus the task's set-up
(torch.distributed variables, multi-rank-safe signal handlers for Checkpointable functions).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from slinkyml.dispatch import checkpointable, distributed


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
        return self.fn(*self.args, **self.kwargs)

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


def make_task(fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None, **options: Any) -> TaskCall:
    cls = CheckpointableTaskCall if isinstance(fn, checkpointable.Checkpointable) else TaskCall
    return cls(fn, args, kwargs, **options)
