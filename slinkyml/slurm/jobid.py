"""Job ids as Slurm reads them: the one parser for every command that takes a job id.

Forms (those ``scancel``/``squeue`` take): ``JOBID``, ``JOBID_TASK``, ``JOBID_[TASKS]`` (``1-5``,
``1-9:2``, lists of these), ``JOBID+OFFSET`` (a heterogeneous job's component). Limits are Slurm's own
(``slurm/slurm.h``, ``slurm.conf(5)``): a job id is 1 to 0xFFFFFFFD — bits 0-25 number the job up to
``MAX_JOB_ID`` 0x03FFFFFF and a federation puts its cluster id (up to ``MAX_FED_CLUSTERS`` 63) in bits
26-31, while 0xFFFFFFFE (``NO_VAL``) and 0xFFFFFFFF (``INFINITE``) are sentinels, and 0 is no job; an
array task index is below ``MaxArraySize``, which may not exceed 4000001; a het offset is below
``MAX_HET_JOB_COMPONENTS`` (128). Anything else is refused here instead of being wrapped by Slurm's
32-bit fields into another job's id (``scancel 4294967752`` cancelled job 456).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from slinkyml.errors import SlinkyError

#: the largest job id a 32-bit field holds that is not one of Slurm's sentinels (NO_VAL, INFINITE)
MAX_JOB_ID = 0xFFFFFFFD
#: the largest job id of one cluster (slurm.h MAX_JOB_ID, bits 0-25); above it only federated ids
MAX_LOCAL_JOB_ID = 0x03FFFFFF
#: the largest array task index (slurm.conf: MaxArraySize may not exceed 4000001)
MAX_ARRAY_TASK = 4_000_000
#: the largest het component offset (slurm.h: MAX_HET_JOB_COMPONENTS 128)
MAX_HET_OFFSET = 127
#: longest text read as one job id (a task list included): longer is not a job id
MAX_TEXT = 1024

_FORM = re.compile(r"([0-9]+)(?:_([0-9]+|\[[0-9,:\-]+\]))?(?:\+([0-9]+))?", re.ASCII)
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?", re.ASCII)
_FORMS = "JOBID, JOBID_TASK, JOBID_[1-5,7] or JOBID+OFFSET"


class JobIdError(SlinkyError):
    """Not a job id Slurm could mean: a usage error (exit 2), named with the text given."""


@dataclass(frozen=True)
class JobId:
    """A job, an array task or tasks, or a het component: ``str()`` is Slurm's spelling."""

    job: int
    tasks: str | None = None  # "5" or "[1-5,7]" as given (ranges checked)
    het_offset: int | None = None

    @property
    def plain(self) -> bool:
        """A job's own id (no task, no component)."""
        return self.tasks is None and self.het_offset is None

    def __str__(self) -> str:
        text = str(self.job)
        if self.tasks is not None:
            text += f"_{self.tasks}"
        if self.het_offset is not None:
            text += f"+{self.het_offset}"
        return text

    @classmethod
    def parse(cls, text: str, *, plain: bool = False) -> JobId:
        """``text`` as Slurm reads a job id, or :class:`JobIdError` in one line; ``plain`` accepts
        only a job's own number (what ``jobs status|logs|why`` look up)."""
        shown = repr(text if len(text) <= 40 else text[:40] + "…")
        if len(text) > MAX_TEXT:
            raise JobIdError(f"{shown}: not a job id (longer than {MAX_TEXT} characters)")
        match = _FORM.fullmatch(text)
        if not match or (plain and (match.group(2) or match.group(3))):
            forms = "a job's number, e.g. 1234" if plain else _FORMS
            raise JobIdError(f"{shown}: not a job id (give {forms})")
        job = int(match.group(1))
        if not 1 <= job <= MAX_JOB_ID:
            raise JobIdError(f"{shown}: job ids are 1 to {MAX_JOB_ID} (Slurm's 32-bit ids below its "
                             "NO_VAL/INFINITE sentinels)")
        tasks = match.group(2)
        if tasks is not None:
            _check_tasks(tasks, shown)
        offset = int(match.group(3)) if match.group(3) is not None else None
        if offset is not None and offset > MAX_HET_OFFSET:
            raise JobIdError(f"{shown}: a het job component offset is 0 to {MAX_HET_OFFSET} "
                             "(Slurm's MAX_HET_JOB_COMPONENTS is 128)")
        if tasks is not None and offset is not None:
            raise JobIdError(f"{shown}: an array task and a het component cannot be combined")
        if tasks is not None and not tasks.startswith("["):
            tasks = str(int(tasks))  # 007 -> 7, as Slurm reads it
        return cls(job, tasks, offset)


def _check_tasks(tasks: str, shown: str) -> None:
    """``5`` or ``[1-5,7,10-20:2]``: every index within Slurm's limit, every range ascending."""
    items = tasks[1:-1].split(",") if tasks.startswith("[") else [tasks]
    for item in items:
        match = _RANGE.fullmatch(item)
        if not match:
            raise JobIdError(f"{shown}: array tasks are N, N-M or N-M:STEP separated by commas, got {item!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last > MAX_ARRAY_TASK or first > MAX_ARRAY_TASK:
            raise JobIdError(f"{shown}: array task indexes are 0 to {MAX_ARRAY_TASK} (slurm.conf's "
                             "MaxArraySize may not exceed 4000001)")
        if last < first or step < 1:
            raise JobIdError(f"{shown}: array task range {item!r} must ascend with a step of 1 or more")


def job_id_argument(text: str) -> JobId:
    """argparse ``type=`` for any job id form (``jobs cancel``): a bad one is a usage error."""
    try:
        return JobId.parse(text)
    except JobIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def job_or_task_argument(text: str) -> str:
    """argparse ``type=`` for a job's own number or one array task, ``JOBID_TASK`` (``jobs
    status|logs|why``): what one job's logs and diagnosis are of."""
    try:
        job = JobId.parse(text)
    except JobIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if job.het_offset is not None or (job.tasks is not None and job.tasks.startswith("[")):
        raise argparse.ArgumentTypeError(f"{text!r}: give a job's number or one array task "
                                         "(e.g. 1234 or 1234_5)")
    return str(job)


def plain_job_id_argument(text: str) -> int:
    """argparse ``type=`` for a job's own number (``jobs status|logs|why``, ``efficiency --job``)."""
    try:
        return JobId.parse(text, plain=True).job
    except JobIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
