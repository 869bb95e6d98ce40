"""Notebook dispatch: run Python functions on N nodes of the cluster through submitit.

Named ``dispatch`` so importing it never shadows ``slinkyml.submit``. Keywords named like
:class:`Executor` options configure the job, the others go to ``fn`` (or ``fn_kwargs=``).
"""

from __future__ import annotations

import inspect
from typing import Any

from slinkyml.dispatch.checkpointable import Checkpointable, Preempted
from slinkyml.dispatch.executor import RESOURCE_KEYWORDS, ArrayJob, Executor, Job, JobError, JobFailed
from slinkyml.dispatch.launch import TrainingJob, launch
from slinkyml.dispatch.tracking import JobInfo, Tracker

_EXECUTOR_OPTIONS = frozenset(inspect.signature(Executor.__init__).parameters) - {"self", "resources"} | set(RESOURCE_KEYWORDS)
_SUBMIT_OPTIONS = frozenset({"afterok", "afterany", "singleton", "dependency", "name"})


def _split(kwargs: dict[str, Any]) -> tuple[dict, dict, dict]:
    fn_kwargs = dict(kwargs.pop("fn_kwargs", None) or {})
    exec_opts = {k: kwargs.pop(k) for k in list(kwargs) if k in _EXECUTOR_OPTIONS}
    submit_opts = {k: kwargs.pop(k) for k in list(kwargs) if k in _SUBMIT_OPTIONS}
    fn_kwargs.update(kwargs)
    return exec_opts, submit_opts, fn_kwargs


def submit(fn: Any, *args: Any, **kwargs: Any) -> Job:
    """Run ``fn(*args)`` on ``nodes`` × ``tasks_per_node`` tasks with torch.distributed set up.

    Options: every :class:`Executor` argument (``nodes``, ``tasks_per_node``, ``gpus_per_node``,
    ``mem``, ``time``, ``partition``, ``folder``...) and ``afterok``/``afterany``/``singleton``.
    """
    exec_opts, submit_opts, fn_kwargs = _split(dict(kwargs))
    return Executor(**exec_opts).submit(fn, *args, **submit_opts, **fn_kwargs)


def map_array(fn: Any, *iterables: Any, **kwargs: Any) -> ArrayJob:
    """``fn(*item)`` for every item, chunked into array tasks (see :meth:`Executor.map_array`)."""
    array_opts = {k: kwargs.pop(k) for k in ("chunk_size", "max_parallel", "target_tasks", "afterok",
                                              "afterany", "singleton", "name") if k in kwargs}
    return Executor(**kwargs).map_array(fn, *iterables, **array_opts)


__all__ = ["ArrayJob", "Checkpointable", "Executor", "Job", "JobError", "JobFailed", "JobInfo", "Preempted",
           "Tracker", "TrainingJob", "launch", "map_array", "submit"]

