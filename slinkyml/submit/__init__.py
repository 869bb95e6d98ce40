"""Notebook dispatch: run Python functions on N nodes of the cluster through submitit.

>>> job = slinkyml.submit(train, nodes=2, tasks_per_node=2, mem="2G")   # doctest: +SKIP
>>> job.results()                                                         # doctest: +SKIP

``slinkyml.submit`` is both this package and the function: the module is callable, so
``slinkyml.submit(fn, ...)`` works however it was first reached (``slinkyml/__init__.py`` maps
the attribute lazily, and importing the package then rebinds ``slinkyml.submit`` to it).
Keyword arguments named like :class:`Executor` options configure the job; the others go to
``fn`` (``fn_kwargs=`` passes any name to ``fn`` unambiguously).
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

from slinkyml.submit.checkpointable import Checkpointable, Preempted
from slinkyml.submit.executor import ArrayJob, Executor, Job, JobError, JobFailed
from slinkyml.submit.launch import TrainingJob, launch
from slinkyml.submit.tracking import JobInfo, Tracker

_EXECUTOR_OPTIONS = frozenset(inspect.signature(Executor.__init__).parameters) - {"self"}
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


def demo_allreduce(**kwargs: Any) -> str:
    """The 2-node × 2-task all-reduce, submitted from Python; a one-line summary (``make demo``)."""
    from slinkyml.submit.demo import demo_allreduce as run

    return run(**kwargs)


class _CallableModule(types.ModuleType):
    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Job:
        return submit(fn, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["ArrayJob", "Checkpointable", "Executor", "Job", "JobError", "JobFailed", "JobInfo", "Preempted",
           "Tracker", "TrainingJob", "demo_allreduce", "launch", "map_array", "submit"]

# ``slinkyml.submit`` reached through slinkyml's lazy map is this *function* until the package
# is bound: give it the package's public names so ``slinkyml.submit.demo_allreduce`` always works.
for _name in __all__:
    if _name != "submit":
        setattr(submit, _name, globals()[_name])
del _name
