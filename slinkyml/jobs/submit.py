"""Submission: render → (validate) → hand the script to a backend (``sbatch`` or slurmrestd).

The backend is chosen by, in order: the ``backend`` argument (``--backend``), ``$SLINKYML_BACKEND``,
``backend:`` in the config file (:mod:`slinkyml.config`), else ``sbatch``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slinkyml import config
from slinkyml.errors import SlinkyError
from slinkyml.jobs import records
from slinkyml.jobs.render import render_sbatch, safe_name
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.jobs.spec import JobSpec, interpreter
from slinkyml.jobs.validate import check_job
from slinkyml.slurm.runner import Slurm

BACKENDS = config.SUBMIT_BACKENDS


#: the script, or a function that renders it (called by the backend when it needs the text)
Script = str | Callable[[], str]


class Backend(Protocol):
    name: str

    def submit(self, request: SlurmJobRequest, script: Script, *, cwd: str | os.PathLike[str],
               while_waiting: Callable[[], object] | None = None) -> int: ...


@dataclass
class SbatchBackend:
    """Plain ``sbatch`` through :class:`slinkyml.slurm.Slurm` (script on stdin, ``#SBATCH`` lines honoured)."""

    slurm: Slurm
    as_user: str | None = None
    name: str = "sbatch"
    extra_args: tuple[str, ...] = ()  # sbatch options given on top of the script's (e.g. --hold)

    def submit(self, request: SlurmJobRequest, script: Script, *, cwd: str | os.PathLike[str],
               while_waiting: Callable[[], object] | None = None) -> int:
        """``request`` is in the script's ``#SBATCH`` lines already."""
        return self.slurm.sbatch(script, self.extra_args, as_user=self.as_user, cwd=cwd, while_waiting=while_waiting)


def backend_name(explicit: str | None = None) -> str:
    return config.submit_backend_name(explicit)


def make_backend(name: str | None = None, *, slurm: Slurm | None = None, as_user: str | None = None,
                 restapi_url: str | None = None, token: str | None = None) -> Backend:
    name = backend_name(name)
    slurm = slurm or Slurm()
    if name == "restapi":
        from slinkyml.jobs.restapi import RestApiBackend  # lazy: http.client is not needed by sbatch

        return RestApiBackend.from_config(slurm=slurm, url=restapi_url, token=token, user=as_user)
    return SbatchBackend(slurm, as_user=as_user)


@dataclass(frozen=True)
class Submitted:
    job_id: int
    log_dir: str
    log_name: str  # the spec's name as its files are named
    backend: str

    @property
    def script_path(self) -> Path:
        """Where the job keeps a copy of its script (written by the job when it starts)."""
        return Path(self.log_dir, f"{self.log_name}-{self.job_id}.sbatch")


def submit(spec: JobSpec, *, backend: Backend, cwd: str | os.PathLike[str] | None = None,
           slurm: Slurm | None = None, validate: bool = True, user: str | None = None,
           request: SlurmJobRequest | None = None, check_cache: bool = False) -> Submitted:
    """Render, check against the live cluster, submit: nothing else, so submission costs what
    ``sbatch`` costs (the job copies its own script next to its logs, ``cp "$0"``). sbatch starts
    first: the script is rendered while it loads, the records' journal opened while it waits for
    slurmctld, and the submission's line appended under the job id once it answers (one ``write``).
    ``request``: the spec's :class:`SlurmJobRequest` if the caller has it; else built here, once.
    ``check_cache``: the check may pass on the cluster's answers kept by an earlier one (the command line:
    see :func:`slinkyml.jobs.validate.problems`)."""
    cwd = os.fspath(cwd) if cwd else os.getcwd()
    spec, _ = interpreter(spec)  # the spec's interpreter, else this one (its venv has what the job imports)
    if validate and slurm is not None:
        check_job(spec, slurm, user=user, cache=check_cache)
    log_dir = os.path.join(cwd, spec.log_dir)
    try:  # sbatch cannot open --output in a missing dir (isdir first: a stat, not a failing mkdir)
        if not os.path.isdir(log_dir):
            os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise SlinkyError(f"cannot create the log directory {log_dir}: {exc.strerror}") from None
    # where its logs are, for `slinkyml jobs logs` after Slurm has forgotten the job
    name = safe_name(spec.name)
    record = records.PendingRecord(getattr(getattr(backend, "slurm", None), "conf", None), name=spec.name, cwd=cwd,
                                   log_dir=log_dir, batch_log=os.path.join(log_dir, f"{name}-%j.out"),
                                   num_tasks=spec.nodes)
    request = request or SlurmJobRequest.from_spec(spec)
    job_id = backend.submit(request, lambda: render_sbatch(spec, request), cwd=cwd, while_waiting=record.open)
    record.commit(job_id)
    return Submitted(job_id, log_dir, name, backend.name)
