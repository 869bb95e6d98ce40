"""``Executor``/``Job``: call Python functions on Slurm nodes through submitit, get results back.

Jobs wait on the shared batched :class:`~slinkyml.dispatch.tracking.Tracker` and read submitit's
result pickles; a job that ends without a result raises :class:`JobFailed` with Slurm's state.
"""

from __future__ import annotations

import html
import math
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Self

from slinkyml import rendezvous
from slinkyml.dispatch.arrays import (
    ArrayPlan,
    Chunk,
    ItemError,
    ItemOutcome,
    max_array_size,
    plan_array,
    total_cpus,
)
from slinkyml.dispatch.checkpointable import Checkpointable
from slinkyml.dispatch.progress import Progress
from slinkyml.dispatch.task import make_task
from slinkyml.dispatch.tracking import JobInfo, Tracker, default_tracker
from slinkyml.errors import SlinkyError
from slinkyml.jobs import records
from slinkyml.jobs.follow import release_requeued, unusable_nodes
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.slurm import Slurm, states
from slinkyml.slurm import records as slurm_records
from slinkyml.slurm.errors import SlurmError

#: seconds a terminal job may take to show its result files (shared filesystems lag)
RESULT_GRACE_S = 5.0
#: seconds a requeued job stays held before we release it: until slurmd has revoked the old run's
#: credential, or Slurm 24.11 refuses the new one and kills the job.
REQUEUE_SETTLE_S = 3.0
#: the batch script's MASTER_ADDR/MASTER_PORT (``distributed.head_env``'s rule, in bash: a Python
#: started for it cost every multi-task job 0.3-1 s before its first step on a loaded machine)
HEAD_ENV_LINES = [
    'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
    'slinkyml_job="${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}" slinkyml_restart="${SLURM_RESTART_COUNT:-0}"',
    *rendezvous.bash_lines(job_var="slinkyml_job", restart_var="slinkyml_restart", out_var="MASTER_PORT"),
    "export MASTER_ADDR MASTER_PORT",
]
#: a task Slurm itself holds ("launch failed requeued held", e.g. after a controller restart found
#: its job id still running on a node) is released once after this long...
HELD_RELEASE_S = 5.0
#: ...and fails the wait, naming every held task, if it is still held this long after that
HELD_FAIL_S = 60.0
_POLL_S = 0.2


class JobFailed(SlinkyError):
    """The job ended without a result (cancelled, OOM, node failure, time limit, crash)."""

    def __init__(self, info: JobInfo, detail: str = ""):
        self.info = info
        self.detail = detail
        super().__init__(f"{info.describe()} without a result" + (f": {detail}" if detail else ""))


class JobError(SlinkyError):
    """The submitted function raised on some rank; ``traceback`` holds the remote traceback."""

    def __init__(self, job_id: str, rank: int, traceback_text: str):
        self.job_id = job_id
        self.rank = rank
        self.traceback = traceback_text
        lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
        super().__init__(f"job {job_id} rank {rank} raised {lines[-1] if lines else 'an error'}")


class HeldWatch:
    """Tasks that sit held will never run by themselves: release Slurm's own holds once (a launch
    that failed after a controller restart), then fail naming whatever is still held, with the
    nodes that are drained, within :data:`HELD_FAIL_S` — never a silent wait to the timeout."""

    def __init__(self, slurm: Slurm, *, release_after: float | None = None, fail_after: float | None = None):
        self.slurm = slurm
        self.release_after = HELD_RELEASE_S if release_after is None else release_after
        self.fail_after = HELD_FAIL_S if fail_after is None else fail_after
        self._since: dict[str, float] = {}
        self._released: set[str] = set()
        self.releases = 0  # scontrol release calls made

    def check(self, infos: Sequence[JobInfo]) -> None:
        now = time.monotonic()
        held = [info for info in infos if info.state == states.State.PENDING and states.is_held(info.reason)]
        held_ids = {info.job_id for info in held}
        for job_id in list(self._since):
            if job_id not in held_ids:
                del self._since[job_id]
        for info in held:
            self._since.setdefault(info.job_id, now)
        due = [info.job_id for info in held if info.job_id not in self._released
               and not info.reason.startswith("JobHeld") and now - self._since[info.job_id] >= self.release_after]
        if due:
            self.slurm.run("scontrol", ["release", ",".join(due)], check=False, retries=0, timeout=30)
            self._released.update(due)
            self.releases += 1
            for job_id in due:
                self._since[job_id] = now
        stuck = [info for info in held if now - self._since[info.job_id] >= self.fail_after
                 and (info.job_id in self._released or info.reason.startswith("JobHeld"))]
        if stuck:
            raise JobFailed(stuck[0], f"{describe_held(held)}{unusable_nodes(self.slurm)}")


def describe_held(held: Sequence[JobInfo]) -> str:
    """``held by Slurm: 12_3, 12_7 (launch failed requeued held)`` (grouped by reason)."""
    by_reason: dict[str, list[str]] = {}
    for info in held:
        by_reason.setdefault(info.reason, []).append(info.job_id)
    return "held by Slurm: " + "; ".join(f"{', '.join(ids)} ({reason})" for reason, ids in by_reason.items())


def default_folder() -> Path:
    """Where submitit's pickles and logs go: under the working directory, which the nodes share."""
    return Path.cwd() / ".slinkyml" / "submitit"


#: Executor keywords that are :class:`SlurmJobRequest` fields under other names (or units).
RESOURCE_KEYWORDS = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem", "time", "partition",
                     "account", "qos", "name", "exclusive", "signal_grace_s")
_DEFAULT_REQUEST = SlurmJobRequest(name="slinkyml", time_limit="10", requeue=False)


def _request(request: SlurmJobRequest | None, resources: dict[str, Any]) -> SlurmJobRequest:
    """``request`` (default: one task for 10 minutes) with the Executor's resource keywords on top."""
    fields = {k: v for k, v in resources.items() if k not in ("mem", "time", "gpus_per_node")}
    if "mem" in resources:
        fields["mem_per_node"] = resources["mem"]
    if "time" in resources:
        time = resources["time"]
        numeric = isinstance(time, (int, float)) and not isinstance(time, bool)
        fields["time_limit"] = str(max(1, math.ceil(time))) if numeric else str(time)
    base = request or _DEFAULT_REQUEST
    gpus = resources.get("gpus_per_node", base.gpus_per_node)
    if not isinstance(gpus, int) or gpus < 0:
        raise SlinkyError(f"gpus_per_node: must be an integer ≥ 0, got {gpus!r}")
    if "gpus_per_node" in resources:
        fields["gres"] = tuple(g for g in base.gres if not g.startswith("gpu:")) + ((f"gpu:{gpus}",) if gpus else ())
    request = replace(base, **fields)
    if gpus and request.tasks_per_node not in (1, gpus):
        raise SlinkyError(f"tasks_per_node={request.tasks_per_node} with gpus_per_node={gpus}: "
                          "use one task per GPU (or one task per node)")
    return request


def _dependency_string(afterok: Any = (), afterany: Any = (), singleton: bool = False,
                       dependency: str | None = None) -> str | None:
    parts = []
    for kind, jobs in (("afterok", afterok), ("afterany", afterany)):
        ids = _job_ids(jobs)
        if ids:
            parts.append(kind + "".join(f":{i}" for i in ids))
    if singleton:
        parts.append("singleton")
    if dependency:
        parts.append(dependency)
    return ",".join(parts) or None


def _job_ids(jobs: Any) -> list[str]:
    if jobs is None:
        return []
    if isinstance(jobs, (Job, ArrayJob, str, int)):
        jobs = [jobs]
    ids: list[str] = []
    for job in jobs:
        if isinstance(job, ArrayJob):
            ids.extend(job.array_ids)
        elif isinstance(job, Job):
            ids.append(job.job_id)
        else:
            ids.append(str(job))
    return ids


def _pickle_by_value(fn: Any) -> None:
    """Functions from notebooks/test files/scripts next to them are not importable on the nodes
    under the same module name; ship their module by value (cloudpickle) instead."""
    import cloudpickle  # lazy, as submitit below: `import slinkyml` stays light for notebooks

    target = fn if callable(fn) and hasattr(fn, "__module__") else type(fn)
    module_name = getattr(target, "__module__", None) or type(fn).__module__
    module = sys.modules.get(module_name)
    if module is None or module_name == "__main__" or module_name.startswith(("slinkyml", "submitit")):
        return
    path = getattr(module, "__file__", None) or ""
    if not path or "site-packages" in path or path.startswith(sys.base_prefix):
        return
    try:
        cloudpickle.register_pickle_by_value(module)
    except ValueError:
        pass


class Executor:
    """Resources for jobs; ``submit`` functions, ``map_array`` over items, ``launch`` a JobSpec.

    Resources: a :class:`SlurmJobRequest` overridden by :data:`RESOURCE_KEYWORDS`; ``folder`` must
    be shared by the nodes.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, request: SlurmJobRequest | None = None,
                 max_restarts: int = 3, setup: Sequence[str] = (), env: dict[str, str] | None = None,
                 python: str | None = None, slurm: Slurm | None = None, tracker: Tracker | None = None,
                 max_array_size: int | None = None, additional_parameters: dict[str, Any] | None = None,
                 **resources: Any):
        self.folder = Path(folder) if folder is not None else default_folder()
        self.request = _request(request, resources)
        self.max_restarts = max_restarts
        self.setup = list(setup)
        self.env = dict(env or {})
        self.python = python
        self.slurm = slurm or Slurm()
        self.tracker = tracker or default_tracker(self.slurm)
        self._max_array_size = max_array_size
        self.additional_parameters = dict(additional_parameters or {})

    @property
    def nodes(self) -> int:
        return self.request.nodes

    @property
    def tasks_per_node(self) -> int:
        return self.request.tasks_per_node

    @property
    def time_min(self) -> int:
        return self.request.time_minutes

    # -- facts about the cluster -------------------------------------------------------------
    @property
    def max_array_size(self) -> int:
        if self._max_array_size is None:
            self._max_array_size = max_array_size(self.slurm)
        return self._max_array_size

    @property
    def num_tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    # -- rendering to submitit ---------------------------------------------------------------------
    def parameters(self, *, tasks: bool = True, checkpointable: bool = False,
                   dependency: str | None = None, name: str | None = None) -> dict[str, Any]:
        """submitit SlurmExecutor parameters for these resources (``tasks=False``: one task)."""
        one_task: dict[str, Any] = {} if tasks else {"nodes": 1, "tasks_per_node": 1, "gres": ()}
        params = replace(self.request, name=name or self.request.name, dependency=dependency,
                         **one_task).submitit_parameters()
        extra = params["additional_parameters"]
        if checkpointable:
            extra["requeue"] = True
        multi = tasks and self.num_tasks > 1
        setup = [f"export {k}={shlex.quote(str(v))}" for k, v in self.env.items()] + self.setup
        if multi:
            setup += HEAD_ENV_LINES
        if setup:
            params["setup"] = setup
        # srun only where it is needed: several tasks, or a signal to deliver to the task
        params["use_srun"] = multi or checkpointable
        gpus = self.request.gpus_per_node
        if params["use_srun"] and gpus and self.tasks_per_node == gpus:
            params["srun_args"] = ["--gpus-per-task=1", "--gpu-bind=single:1"]
        extra.update(self.additional_parameters)
        params["additional_parameters"] = extra
        return params

    def _backend(self, **kwargs: Any):
        from slinkyml.dispatch._backend import Backend  # lazy: submitit costs `import slinkyml` ~0.2 s

        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(self.folder, 0o777)  # jobs of other users write their results here too
        except OSError:
            pass
        backend = Backend(self.folder, slurm=self.slurm, max_num_timeout=self.max_restarts, python=self.python)
        backend.update_parameters(**self.parameters(**kwargs))
        return backend

    # -- submitting ---------------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args: Any, afterok: Any = (), afterany: Any = (),
               singleton: bool = False, dependency: str | None = None, name: str | None = None,
               **kwargs: Any) -> Job:
        """Run ``fn(*args, **kwargs)`` on every task of a job; see :class:`Job` for results."""
        checkpointable = isinstance(fn, Checkpointable)
        _pickle_by_value(fn)
        backend = self._backend(checkpointable=checkpointable, name=name or _name_of(fn),
                                dependency=_dependency_string(afterok, afterany, singleton, dependency))
        task = make_task(fn, args, kwargs, distributed=self.num_tasks > 1 or self.request.gpus_per_node > 0,
                         timeout_min=self.time_min, max_restarts=self.max_restarts)
        with _translate_errors():
            sjob = backend.submit(task)
        job = Job(sjob, self, name=name or _name_of(fn), checkpointable=checkpointable)
        records.save(records.SubmissionRecord(
            job.job_id, "submitit", job.name, os.getcwd(), folder=str(self.folder.resolve()),
            num_tasks=job.num_tasks, extra={"nodes": self.nodes, "tasks_per_node": self.tasks_per_node,
                                            "checkpointable": checkpointable},
            submitted_at=time.time()), self.slurm.conf)
        return job

    def map_array(self, fn: Callable[..., Any], *iterables: Iterable[Any], chunk_size: int | None = None,
                  max_parallel: int | None = None, target_tasks: int | None = None, afterok: Any = (),
                  afterany: Any = (), singleton: bool = False, name: str | None = None) -> ArrayJob:
        """``fn(*items)`` for each zipped item, packed into array tasks (``chunk_size`` items each,
        default: about one task per CPU of the partition), split at MaxArraySize."""
        try:
            items = list(zip(*iterables, strict=True))
        except ValueError:
            raise SlinkyError("map_array: the iterables have different lengths") from None
        if target_tasks is None and chunk_size is None:
            target_tasks = total_cpus(self.slurm, self.request.partition)
        plan = plan_array(len(items), max_array_size=self.max_array_size, chunk_size=chunk_size,
                          target_tasks=target_tasks or 16, max_parallel=max_parallel)
        _pickle_by_value(fn)
        label = name or _name_of(fn)
        backend = self._backend(tasks=False, name=label,
                                dependency=_dependency_string(afterok, afterany, singleton))
        chunks = [Chunk(fn, items[start:start + count], start) for start, count in plan.chunks]
        jobs: list[Any] = []
        with _translate_errors():
            for first, count in plan.arrays:
                jobs.extend(backend.submit_array(chunks[first:first + count], plan.parallelism))
        array = ArrayJob(jobs, plan, len(items), self, name=label)
        for array_id in array.array_ids:  # attach() finds the whole map from any of its arrays
            records.save(records.SubmissionRecord(
                array_id, "array", label, os.getcwd(), folder=str(self.folder.resolve()),
                task_ids=tuple(array.task_ids), extra={"chunks": [list(c) for c in plan.chunks],
                                                       "arrays": [list(a) for a in plan.arrays],
                                                       "parallelism": plan.parallelism,
                                                       "max_array_size": plan.max_array_size,
                                                       "n_items": len(items)},
                submitted_at=time.time()), self.slurm.conf)
        return array


def _name_of(fn: Any) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60] or "slinkyml"


class _translate_errors:
    """submitit's own failures (bad parameters, pickling) → one-line SlinkyError."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, SlinkyError):
            return
        if isinstance(exc, ValueError) and "parameter" in str(exc):
            raise SlinkyError(" ".join(str(exc).split())[:300]) from None
        if exc_type.__name__ == "PicklingError" or "pickle" in str(exc).lower():
            raise SlinkyError(f"cannot pickle the function or its arguments: {exc}") from None


def _accounting_facts(slurm: Slurm, job_id: str) -> dict[str, str] | None:
    """sacct's JobName and WorkDir of a job (None when accounting does not know it)."""
    try:
        rows = slurm_records.sacct(slurm, ("JobName", "WorkDir"), ["-X", "-j", job_id], retries=1)
    except SlurmError:
        return None
    return rows[-1] if rows else None


def _load_outcome(path: Path) -> tuple[str, Any] | None:
    from submitit.core.utils import pickle_load  # lazy (see _backend); no public reader of result pickles

    try:
        return pickle_load(path)
    except (FileNotFoundError, EOFError):
        return None


class _Submitted:
    """What :class:`Job` and :class:`ArrayJob` share: result pickles, the wait loop, ``cancel``, the
    notebook table. Subclasses define ``_expected``, ``_result_pickle``, ``_check``, ``_progress``
    and ``_html_rows``.
    """

    _expected: int
    _total: int  # units of the progress bar (ranks, or items)

    def __init__(self, executor: Executor, name: str, tracked: Sequence[str], cancel_ids: Sequence[str]):
        self.executor = executor
        self.tracker = executor.tracker
        self.name = name
        self._tracked = list(tracked)
        self._cancel_ids = list(cancel_ids)
        self._outcomes: dict[int, tuple[str, Any]] = {}
        self.tracker.track(*self._tracked)
        self.held = HeldWatch(executor.slurm)
        self.leftovers_cancelled: list[str] = []  # tasks requeued after their result (see wait)
        self._leftovers_checked = False

    def _result_pickle(self, index: int) -> Path:
        raise NotImplementedError

    def _submitted_pickle(self, index: int) -> Path:
        raise NotImplementedError

    def _slurm_id(self, index: int) -> str:
        raise NotImplementedError

    def _check(self) -> bool:
        raise NotImplementedError

    def _progress(self) -> tuple[int, Counter[str]]:
        raise NotImplementedError

    def _html_rows(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _collect(self) -> None:
        """Read result pickles that appeared (filesystem only, no Slurm call)."""
        for index in range(self._expected):
            if index in self._outcomes:
                continue
            path = self._result_pickle(index)
            if path.exists():
                outcome = _load_outcome(path)
                if outcome is not None:
                    self._outcomes[index] = outcome

    def wait(self, timeout: float | None = None, *, progress: bool = False) -> Self:
        """Block until every result is in; raise JobError/JobFailed/TimeoutError."""
        bar = Progress(self._label(), self._total, enabled=progress)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._check():
                if progress:
                    bar.update(*self._progress())
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(self._still_running(timeout))  # type: ignore[arg-type]
                time.sleep(_POLL_S)
            bar.update(self._total, Counter({"DONE": self._expected}))
        finally:
            bar.close()
        self._cancel_leftovers()
        return self

    def _cancel_leftovers(self) -> None:
        """Every result is in, yet Slurm may have requeued a task after (or while) it wrote its
        result: submitit lets the function finish through the requeue's SIGTERM, and the task then
        sits PENDING — held ("job requeued in held state"), or waiting to run the function again.
        Cancel those (our own ids only, once): releasing one would run a finished function twice.
        A result older than the task's submission (a folder reused after the cluster handed its id
        out again) is another job's, and its task is left alone."""
        if self._leftovers_checked:
            return
        self._leftovers_checked = True
        self.tracker.refresh(force=True)
        leftover: dict[str, None] = {}
        for index in range(self._expected):
            task = self._slurm_id(index)
            if task in leftover or self.tracker.info(task, refresh=False).state not in states.PENDING:
                continue
            try:
                if self._result_pickle(index).stat().st_mtime < self._submitted_pickle(index).stat().st_mtime:
                    continue
            except OSError:
                continue
            leftover[task] = None
        if leftover:
            self.executor.slurm.run("scancel", list(leftover), check=False, retries=2)
            self.tracker.hurry(*leftover)
            self.leftovers_cancelled = list(leftover)

    def _label(self) -> str:
        return self.name

    def _still_running(self, timeout: float) -> str:
        return f"{self.name} not done after {timeout:g} s"

    def cancel(self) -> None:
        self.executor.slurm.run("scancel", self._cancel_ids, retries=2)
        self.tracker.hurry(*self._tracked)

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in self._html_rows())
        return f"<table>{body}</table>"


class Job(_Submitted):
    """A submitted function: ``result()`` (rank 0), ``results()`` (every rank), ``state``, logs."""

    def __init__(self, sjob: Any, executor: Executor, *, name: str = "", checkpointable: bool = False):
        self._sjob = sjob
        self.checkpointable = checkpointable
        self._released_at = float("-inf")
        self._held_since: float | None = None
        self.job_id = str(sjob.job_id)
        self.num_tasks = self._expected = self._total = sjob.num_tasks
        self.submitted_at = time.time()
        super().__init__(executor, name, [self.job_id], [self.job_id])

    @classmethod
    def attach(cls, job_id: int | str, *, folder: str | os.PathLike[str] | None = None,
               slurm: Slurm | None = None, executor: Executor | None = None) -> Job:
        """The :class:`Job` of an earlier ``submit()`` (another process, a new notebook kernel): state,
        results once the pickles exist, logs, cancel. The folder and task count come from the
        submission record, else from sacct (``WorkDir``/.slinkyml/submitit, the step's tasks)."""
        from submitit.slurm.slurm import SlurmJob  # lazy: submitit stays out of `import slinkyml`

        slurm = slurm or (executor.slurm if executor else Slurm())
        job_id = str(job_id)
        record = records.load(job_id, slurm.conf)
        if record is not None and record.kind != "submitit":
            raise SlinkyError(f"job {job_id} was submitted as {record.kind!r}, not by submit(): "
                              + ("use ArrayJob.attach" if record.kind == "array" else "use slinkyml jobs logs"))
        facts = _accounting_facts(slurm, job_id)
        if record is None and facts is None:
            raise SlinkyError(f"job {job_id} is unknown to this client's records and to accounting")
        where = Path(folder) if folder else Path(record.folder) if record and record.folder else \
            Path(facts["WorkDir"], ".slinkyml", "submitit") if facts else default_folder()
        num_tasks = record.num_tasks if record else max(1, len(list(where.glob(f"{job_id}_*_log.out"))))
        if not (where / f"{job_id}_submitted.pkl").exists() and not list(where.glob(f"{job_id}_*_log.*")):
            raise SlinkyError(f"job {job_id}: no submitit files in {where} (pass folder=...)")
        extra: dict[str, Any] = record.extra if record else {}
        executor = executor or Executor(where, slurm=slurm, nodes=int(extra.get("nodes", 1)),
                                        tasks_per_node=int(extra.get("tasks_per_node", num_tasks)))
        sjob: SlurmJob[Any] = SlurmJob(folder=where, job_id=job_id, tasks=tuple(range(num_tasks)))
        job = cls(sjob, executor, name=record.name if record else (facts or {}).get("JobName", ""),
                  checkpointable=bool(extra.get("checkpointable", False)))
        if record is not None:
            job.submitted_at = record.submitted_at
        return job

    # -- state --------------------------------------------------------------------------------------
    def _task(self, rank: int) -> Any:
        return self._sjob.task(rank) if self.num_tasks > 1 else self._sjob

    def _result_pickle(self, index: int) -> Path:
        return self._task(index).paths.result_pickle

    def _submitted_pickle(self, index: int) -> Path:
        return self._task(index).paths.submitted_pickle

    def _slurm_id(self, index: int) -> str:
        return self.job_id

    @property
    def info(self) -> JobInfo:
        return self.tracker.info(self.job_id)

    @property
    def state(self) -> str:
        """Slurm's state (from the batched tracker; RESULT_READY once every rank has a result)."""
        self._collect()
        info = self.tracker.info(self.job_id)
        if len(self._outcomes) == self.num_tasks and not info.terminal:
            return states.State.COMPLETING
        return info.state

    def done(self) -> bool:
        self._collect()
        if len(self._outcomes) == self.num_tasks:
            return True
        info = self.tracker.info(self.job_id)
        self._release_if_requeued(info)
        return info.terminal

    def _check(self) -> bool:
        """True when every rank has a result; raises when a rank failed or the job ended without."""
        self._collect()
        for rank, (outcome, payload) in sorted(self._outcomes.items()):
            if outcome == "error":
                raise JobError(self.job_id, rank, str(payload))
        if len(self._outcomes) == self.num_tasks:
            return True
        info = self.tracker.info(self.job_id)
        self._release_if_requeued(info)
        self.held.check([info])
        if info.terminal:
            deadline = time.monotonic() + (RESULT_GRACE_S if info.state == states.State.COMPLETED else 1.0)
            while time.monotonic() < deadline:
                self._collect()
                if len(self._outcomes) == self.num_tasks:
                    return self._check()
                time.sleep(_POLL_S)
            raise JobFailed(info, self._failure_hint())
        return False

    def _release_if_requeued(self, info: JobInfo) -> None:
        """slurmctld holds a requeued job for 120 s (BeginTime); we set no begin time ourselves,
        so this hold comes from the requeue: start the resumed Checkpointable job as soon as it can
        safely run: :data:`REQUEUE_SETTLE_S` after we first saw it held, once slurmctld retries no message
        to slurmd (:func:`~slinkyml.jobs.follow.release_requeued`)."""
        if not (self.checkpointable and info.state == states.State.PENDING and info.reason == states.REQUEUE_WAIT_REASON):
            self._held_since = None
            return
        now = time.monotonic()
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since < REQUEUE_SETTLE_S or now - self._released_at < 5.0:
            return
        self._released_at = now
        if release_requeued(self.executor.slurm, self.job_id):
            self.tracker.hurry(self.job_id)

    def _failure_hint(self) -> str:
        text = (self.stderr() or "").strip().splitlines()
        interesting = [line for line in text if "error" in line.lower() or "Error" in line]
        return (interesting[-1] if interesting else (text[-1] if text else "")).strip()[:300]

    def _label(self) -> str:
        return f"job {self.job_id}"

    def _progress(self) -> tuple[int, Counter]:
        return len(self._outcomes), Counter({self.tracker.info(self.job_id, refresh=False).state: 1})

    def _still_running(self, timeout: float) -> str:
        return f"job {self.job_id} still {self.state} after {timeout:g} s"

    def results(self, timeout: float | None = None) -> list[Any]:
        """Every rank's return value, by rank."""
        self.wait(timeout)
        return [self._outcomes[rank][1] for rank in range(self.num_tasks)]

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value."""
        self.wait(timeout)
        return self._outcomes[0][1]

    def exception(self) -> BaseException | None:
        try:
            self.wait()
        except (JobError, JobFailed) as exc:
            return exc
        return None

    # -- logs and control ------------------------------------------------------------------------------
    def _log(self, kind: str, rank: int | None) -> str | None:
        ranks = range(self.num_tasks) if rank is None else [rank]
        chunks = []
        for r in ranks:
            path = getattr(self._task(r).paths, kind)
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if self.num_tasks > 1 and rank is None:
                text = "".join(f"[rank {r}] {line}\n" for line in text.splitlines())
            chunks.append(text)
        return "".join(chunks) if chunks else None

    def stdout(self, rank: int | None = None) -> str | None:
        """Standard output of one rank, or of every rank with each line labelled ``[rank N]``."""
        return self._log("stdout", rank)

    def stderr(self, rank: int | None = None) -> str | None:
        return self._log("stderr", rank)

    @property
    def paths(self) -> Any:
        return self._sjob.paths

    def __repr__(self) -> str:
        info = self.tracker.info(self.job_id, refresh=False)
        return f"Job<{self.job_id} {self.name} {info.state} tasks={self.num_tasks}>"

    def _html_rows(self) -> list[tuple[str, str]]:
        info = self.tracker.info(self.job_id, refresh=False)
        rows = [("job", self.job_id), ("name", self.name), ("state", info.state),
                ("tasks", f"{self.executor.nodes} node(s) × {self.executor.tasks_per_node}"),
                ("nodes", info.nodes or "—"), ("reason", info.reason or "—"),
                ("results", f"{len(self._outcomes)}/{self.num_tasks}"), ("folder", str(self._sjob.paths.folder))]
        if info.exit_code is not None:
            rows.append(("exit code", str(info.exit_code)))
        rows.append(("reopen", f"Job.attach({self.job_id!r}) · slinkyml jobs status {self.job_id} · "
                               f"slinkyml jobs logs {self.job_id}"))
        return rows


class ArrayJob(_Submitted):
    """A map_array: per-item results (``results()``) from chunked, possibly split, arrays."""

    def __init__(self, sjobs: list[Any], plan: ArrayPlan, n_items: int, executor: Executor, *,
                 name: str = ""):
        self._sjobs = sjobs
        self.plan = plan
        self.n_items = self._total = n_items
        self._expected = len(sjobs)
        self.task_ids = [str(j.job_id) for j in sjobs]
        self.array_ids = sorted({t.split("_")[0] for t in self.task_ids}, key=int)
        self._grace: dict[int, float] = {}
        super().__init__(executor, name, self.task_ids, self.array_ids)

    @classmethod
    def attach(cls, array_id: int | str, *, slurm: Slurm | None = None,
               executor: Executor | None = None) -> ArrayJob:
        """The :class:`ArrayJob` of an earlier ``map_array()`` from any of its array ids (a map split at
        MaxArraySize has several): per-item results, states, cancel. Needs the submission record,
        which holds the item → task plan."""
        from submitit.slurm.slurm import SlurmJob  # lazy: submitit stays out of `import slinkyml`

        slurm = slurm or (executor.slurm if executor else Slurm())
        record = records.load(str(array_id).split("_")[0], slurm.conf)
        if record is None or record.kind != "array":
            what = "no submission record here" if record is None else f"it was submitted as {record.kind!r}"
            raise SlinkyError(f"job {array_id} cannot be attached as a map_array: {what}")
        extra: dict[str, Any] = record.extra
        plan = ArrayPlan(tuple(tuple(c) for c in extra["chunks"]), tuple(tuple(a) for a in extra["arrays"]),
                         extra.get("parallelism"), int(extra["max_array_size"]))
        folder = Path(record.folder)
        executor = executor or Executor(folder, slurm=slurm)
        sjobs: list[SlurmJob[Any]] = [SlurmJob(folder=folder, job_id=task_id) for task_id in record.task_ids]
        return cls(sjobs, plan, int(extra["n_items"]), executor, name=record.name)

    def __len__(self) -> int:
        return self.n_items

    def _result_pickle(self, index: int) -> Path:
        return self._sjobs[index].paths.result_pickle

    def _submitted_pickle(self, index: int) -> Path:
        return self._sjobs[index].paths.submitted_pickle

    def _slurm_id(self, index: int) -> str:
        return self.task_ids[index]

    def states(self) -> Counter:
        """How many array tasks are in each state (result files count as done)."""
        self._collect()
        self.tracker.refresh()
        counts: Counter = Counter()
        for i, task_id in enumerate(self.task_ids):
            counts["DONE" if i in self._outcomes else self.tracker.info(task_id, refresh=False).state] += 1
        return counts

    @property
    def state(self) -> str:
        counts = self.states()
        return ", ".join(f"{k} {v}" for k, v in counts.most_common())

    def _items_done(self) -> int:
        return sum(self.plan.chunks[i][1] for i in self._outcomes)

    def _pending_failures(self) -> list[tuple[int, JobInfo]]:
        failed = []
        for i, task_id in enumerate(self.task_ids):
            if i not in self._outcomes:
                info = self.tracker.info(task_id, refresh=False)
                if info.terminal:
                    failed.append((i, info))
        return failed

    def done(self) -> bool:
        self._collect()
        self.tracker.refresh()
        return len(self._outcomes) == len(self._sjobs) or len(self._outcomes) + len(self._pending_failures()) == len(self._sjobs)

    def _check(self) -> bool:
        """True when every array task has a result; JobFailed for a task that ended without one."""
        self._collect()
        if len(self._outcomes) == len(self._sjobs):
            return True
        self.tracker.refresh()
        now = time.monotonic()
        for i, info in self._pending_failures():
            limit = RESULT_GRACE_S if info.state == states.State.COMPLETED else 1.0
            if now - self._grace.setdefault(i, now) > limit:
                self._collect()
                if i not in self._outcomes:
                    raise JobFailed(info, f"items {self.plan.chunks[i][0]}.."
                                          f"{sum(self.plan.chunks[i]) - 1} of {self.name}")
        self.held.check(self._waiting())
        return False

    def _waiting(self) -> list[JobInfo]:
        return [self.tracker.info(t, refresh=False) for i, t in enumerate(self.task_ids) if i not in self._outcomes]

    def _label(self) -> str:
        return f"{self.name} ({len(self.array_ids)} array(s), {len(self._sjobs)} tasks)"

    def _progress(self) -> tuple[int, Counter]:
        counts = Counter(self.tracker.info(t, refresh=False).state
                         for i, t in enumerate(self.task_ids) if i not in self._outcomes)
        counts["DONE"] = len(self._outcomes)
        return self._items_done(), counts

    def _still_running(self, timeout: float) -> str:
        counts = Counter(f"{info.state} ({info.reason})" if info.reason not in ("", "None") else info.state
                         for info in self._waiting())
        return (f"{self.name}: {self._items_done()}/{self.n_items} items after {timeout:g} s; not done: "
                + ", ".join(f"{n} {what}" for what, n in counts.most_common()))

    def outcomes(self, timeout: float | None = None) -> list[Any]:
        """Per item: an ItemOutcome (value or error), in item order."""
        self.wait(timeout)
        out: list[Any] = []
        for i in range(len(self._sjobs)):
            kind, payload = self._outcomes[i]
            if kind == "error":  # the chunk itself failed (unpickling, import): every item of it fails
                lines = str(payload).strip().splitlines()
                out.extend([ItemOutcome(False, error=lines[-1] if lines else "chunk failed",
                                        traceback=str(payload))] * self.plan.chunks[i][1])
            else:
                out.extend(payload)
        return out

    def results(self, timeout: float | None = None, *, errors: str = "raise") -> list[Any]:
        """Per-item return values in item order. ``errors="raise"``: the first failed item raises
        :class:`ItemError`; ``errors="return"``: failed items are ItemError objects in place."""
        values = []
        for index, outcome in enumerate(self.outcomes(timeout)):
            if outcome.ok:
                values.append(outcome.value)
                continue
            error = ItemError(index, outcome.error, outcome.traceback, self._task_of(index))
            if errors == "raise":
                raise error
            values.append(error)
        return values

    def _task_of(self, index: int) -> str:
        for i, (start, count) in enumerate(self.plan.chunks):
            if start <= index < start + count:
                return self.task_ids[i]
        return ""

    def __repr__(self) -> str:
        return f"ArrayJob<{','.join(self.array_ids)} {self.name} items={self.n_items} tasks={len(self._sjobs)}>"

    def _html_rows(self) -> list[tuple[str, str]]:
        self._collect()
        _, counts = self._progress()
        return [("arrays", ", ".join(self.array_ids)), ("name", self.name), ("items", str(self.n_items)),
                ("array tasks", str(len(self._sjobs))), ("items done", f"{self._items_done()}/{self.n_items}"),
                ("states", ", ".join(f"{k.lower()} {v}" for k, v in counts.most_common() if v)),
                ("reopen", f"ArrayJob.attach({self.array_ids[0]!r}) · slinkyml jobs list")]
