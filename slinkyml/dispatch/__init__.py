"""Notebook dispatch: run Python functions on N nodes of the cluster through submitit.

Named ``dispatch`` so importing it never shadows ``slinkyml.submit``. Keywords named like
:class:`Executor` options configure the job, the others go to ``fn`` (or ``fn_kwargs=``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slinkyml.dispatch.checkpointable import Checkpointable, Preempted
    from slinkyml.dispatch.executor import ArrayJob, Executor, Job, JobError, JobFailed
    from slinkyml.dispatch.launch import TrainingJob
    from slinkyml.dispatch.tracking import JobInfo, Tracker

#: names loaded on first use: a task unpickling its call imports ``slinkyml.dispatch.task``, hence
#: this package, on every rank before its first step; the executor side (specs, YAML, the job
#: layers: ~0.2 s per rank here) is the notebook's, not the task's
_LAZY = {"Checkpointable": "checkpointable", "Preempted": "checkpointable", "ArrayJob": "executor",
         "Executor": "executor", "Job": "executor", "JobError": "executor", "JobFailed": "executor",
         "RESOURCE_KEYWORDS": "executor", "TrainingJob": "launch", "launch": "launch", "JobInfo": "tracking",
         "Tracker": "tracking"}
_SUBMIT_OPTIONS = frozenset({"afterok", "afterany", "singleton", "dependency", "name"})


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
    if module.__name__ == f"{__name__}.launch":  # importing it made the package's `launch` that module
        globals()["launch"] = module.launch
    return getattr(module, name)


def _executor_options() -> frozenset[str]:
    from slinkyml.dispatch.executor import RESOURCE_KEYWORDS, Executor  # lazy: see _LAZY

    return frozenset(inspect.signature(Executor.__init__).parameters) - {"self", "resources"} | set(RESOURCE_KEYWORDS)


def _split(kwargs: dict[str, Any]) -> tuple[dict, dict, dict]:
    fn_kwargs = dict(kwargs.pop("fn_kwargs", None) or {})
    options = _executor_options()
    exec_opts = {k: kwargs.pop(k) for k in list(kwargs) if k in options}
    submit_opts = {k: kwargs.pop(k) for k in list(kwargs) if k in _SUBMIT_OPTIONS}
    fn_kwargs.update(kwargs)
    return exec_opts, submit_opts, fn_kwargs


def submit(fn: Any, *args: Any, **kwargs: Any) -> Job:
    """Run ``fn(*args)`` on ``nodes`` × ``tasks_per_node`` tasks with torch.distributed set up.

    Options: every :class:`Executor` argument (``nodes``, ``tasks_per_node``, ``gpus_per_node``,
    ``mem``, ``time``, ``partition``, ``folder``...) and ``afterok``/``afterany``/``singleton``.
    """
    from slinkyml.dispatch.executor import Executor  # lazy: see _LAZY

    exec_opts, submit_opts, fn_kwargs = _split(dict(kwargs))
    return Executor(**exec_opts).submit(fn, *args, **submit_opts, **fn_kwargs)


def map_array(fn: Any, *iterables: Any, **kwargs: Any) -> ArrayJob:
    """``fn(*item)`` for every item, chunked into array tasks (see :meth:`Executor.map_array`)."""
    array_opts = {k: kwargs.pop(k) for k in ("chunk_size", "max_parallel", "target_tasks", "afterok",
                                              "afterany", "singleton", "name") if k in kwargs}
    from slinkyml.dispatch.executor import Executor  # lazy: see _LAZY

    return Executor(**kwargs).map_array(fn, *iterables, **array_opts)


__all__ = ["ArrayJob", "Checkpointable", "Executor", "Job", "JobError", "JobFailed", "JobInfo", "Preempted",
           "Tracker", "TrainingJob", "launch", "map_array", "submit"]

