"""One job's Slurm request, built once from a :class:`JobSpec` and written out by each backend.

:class:`SlurmJobRequest` is the one JobSpec → Slurm mapping; it serialises to ``#SBATCH``
directives, the slurmrestd job body per OpenAPI version and submitit's parameters.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from slinkyml.errors import SpecError
from slinkyml.jobs.spec import JobSpec, mem_mb, time_limit_seconds
from slinkyml.slurm.errors import RestApiError

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+").sub


def safe_name(name: str) -> str:
    """The job name made safe for file names and Slurm filename patterns."""
    return _UNSAFE_NAME_CHARS("_", name).strip("._")[:64] or "job"


#: slurmctld checks time limits every PERIODIC_TIMEOUT (30 s) and sends ``--signal`` at the first
#: check within its lead of the end (src/slurmctld/job_mgr.c, send_job_warn_signal)
WARNING_CHECK_PERIOD_S = 30


def stop_signal_warning(limit_s: int, grace_s: int, signal: str, limit_text: str = "") -> str:
    """One line when the time limit leaves no room to checkpoint before the stop signal (``""`` when it
    does): the signal comes ``grace_s`` (and up to 30 s more) before the end, and a checkpoint takes up
    to that grace, so a limit not above twice the grace plus 30 s stops a run that never checkpointed,
    which a time limit does not requeue (data/run_causes.json)."""
    needed = 2 * grace_s + WARNING_CHECK_PERIOD_S
    if not grace_s or limit_s > needed:
        return ""
    return (f"time limit {limit_text or limit_s} ({limit_s} s) is not above the stop signal's grace plus a "
            f"checkpoint ({needed} s: SIG{signal.removeprefix('SIG')} {grace_s} s before the end, up to "
            f"{WARNING_CHECK_PERIOD_S} s early, then up to {grace_s} s to write the checkpoint): the run stops "
            "before it can checkpoint, and a time limit requeues only a run that checkpointed; raise the time "
            "limit or shorten the signal's lead (requeue.grace_seconds, sbatch --signal=SIG@SECONDS)")


@dataclass(frozen=True)
class SlurmJobRequest:
    """What Slurm is asked for. ``time_limit`` is Slurm's text (minutes or ``[D-]HH:MM:SS``);
    ``gres`` e.g. ``("gpu:8",)``; ``output`` is the batch log pattern (``%`` of the folder escaped)."""

    name: str
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    time_limit: str = "01:00:00"
    mem_per_node: str | None = None
    gres: tuple[str, ...] = ()
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodelist: str | None = None
    exclusive: bool = False
    dependency: str | None = None
    output: str | None = None
    signal: str = "USR2"
    signal_grace_s: int = 60
    requeue: bool = True

    def __post_init__(self) -> None:
        for field in ("nodes", "tasks_per_node", "cpus_per_task"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(field, f"must be an integer ≥ 1, got {value!r}")
        if time_limit_seconds(self.time_limit) is None:
            raise SpecError("time", f"expected minutes or [D-]HH:MM:SS, got {self.time_limit!r}")

    @classmethod
    def from_spec(cls, spec: JobSpec) -> SlurmJobRequest:
        gres = ((f"gpu:{spec.gpus_per_node}",) if spec.gpus_per_node else ()) + \
            ((f"neuron:{spec.neuron_devices_per_node}",) if spec.neuron_devices_per_node else ())
        log_dir = spec.log_dir.replace("%", "%%").rstrip("/") or "/"
        return cls(name=spec.name, nodes=spec.nodes, tasks_per_node=spec.effective_tasks_per_node,
                   cpus_per_task=spec.cpus_per_task, time_limit=spec.time_limit,
                   mem_per_node=spec.mem_per_node, gres=gres, partition=spec.partition,
                   account=spec.account, qos=spec.qos, nodelist=spec.nodelist, exclusive=spec.exclusive,
                   dependency=",".join(spec.dependencies) or None,
                   output=f"{log_dir}/{safe_name(spec.name)}-%j.out",
                   signal=spec.requeue.signal, signal_grace_s=spec.requeue.grace_seconds)

    def warnings(self) -> list[str]:
        """What will go wrong before it does (``--dry-run``, ``sbatch check``, submission)."""
        warning = stop_signal_warning(time_limit_seconds(self.time_limit) or 0, self.signal_grace_s, self.signal,
                                      self.time_limit)
        return [warning] if warning else []

    @property
    def time_minutes(self) -> int:
        """The time limit in whole minutes, rounded up (slurmrestd and submitit take minutes)."""
        return max(1, math.ceil((time_limit_seconds(self.time_limit) or 60) / 60))

    def __str__(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v not in (None, (), False)})

    # -- sbatch ----------------------------------------------------------------------------------
    def sbatch_directives(self) -> list[tuple[str, str | None]]:
        """``#SBATCH`` options in a fixed order: (option, value or None for a flag)."""
        out: list[tuple[str, str | None]] = [
            ("--job-name", self.name), ("--nodes", str(self.nodes)),
            ("--ntasks-per-node", str(self.tasks_per_node)), ("--cpus-per-task", str(self.cpus_per_task)),
        ]
        if self.mem_per_node:
            out.append(("--mem", self.mem_per_node))
        out += [("--gres", gres) for gres in self.gres]
        out.append(("--time", self.time_limit))
        for key in ("partition", "account", "qos", "nodelist"):
            if getattr(self, key):
                out.append((f"--{key}", getattr(self, key)))
        if self.exclusive:
            out.append(("--exclusive", None))
        if self.dependency:
            out.append(("--dependency", self.dependency))
        if self.output:
            out.append(("--output", self.output))
        out.append(("--open-mode", "append"))  # a requeued run appends to the same batch log
        if self.requeue:
            out.append(("--requeue", None))
        out.append(("--signal", f"B:{self.signal}@{self.signal_grace_s}"))
        return out

    # -- slurmrestd ------------------------------------------------------------------------------
    def restapi_body(self, script: str, *, version: str, cwd: str,
                     environment: dict[str, str]) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) for ``POST /slurm/<version>/job/submit`` — the one version branch.
        slurmrestd does not read ``#SBATCH`` lines: the options travel as the ``job`` object."""
        job: dict[str, Any] = {"name": self.name, "current_working_directory": cwd,
                               "tasks_per_node": self.tasks_per_node, "cpus_per_task": self.cpus_per_task,
                               "requeue": self.requeue, "nodes": str(self.nodes)}
        if self.output:
            job["standard_output"] = os.path.join(cwd.replace("%", "%%"), self.output)
        for key in ("partition", "account", "qos"):
            if getattr(self, key):
                job[key] = getattr(self, key)
        if self.dependency:
            job["dependency"] = self.dependency
        # lazy: only slurmrestd's body needs the releases' table (a submission by sbatch never loads it)
        from slinkyml.slurm.version import flat_job_body

        gres = self.gres[-1] if self.gres else None
        if flat_job_body(version):
            if self.nodelist:
                raise RestApiError("nodelist is not supported by slurmrestd v0.0.38 (Slurm 22.05); "
                                   "use the sbatch backend")
            # "nodes" as text: a [min, max] list is ignored by 22.05 (1 node). v0.0.38 rejects "B:",
            # so the signal reaches the steps and the trainer's preemption marker drives the requeue.
            import signal  # lazy: its enums cost every render ~0.7 ms; only v0.0.38 wants numbers

            job.update({"time_limit": self.time_minutes, "environment": environment, "open_mode": "append",
                        "signal": f"{signal.Signals['SIG' + self.signal].value}@{self.signal_grace_s}"})
            if self.mem_per_node:
                job["memory_per_node"] = mem_mb(self.mem_per_node)
            if self.exclusive:
                job["exclusive"] = "true"
            if gres:
                job["gres"] = gres
            return f"/slurm/{version}/job/submit", {"script": script, "job": job}
        # v0.0.40+ (Slurm 23.11 on): numbers are {set, infinite, number}; env is a list of "K=V";
        # the script goes inside "job"; no "signal" string: kill_warning_* with BATCH_JOB (= "B:").
        def number(n: int) -> dict[str, Any]:
            return {"set": True, "infinite": False, "number": n}

        job.update({"time_limit": number(self.time_minutes),
                    "environment": [f"{k}={v}" for k, v in environment.items()],
                    "kill_warning_signal": self.signal, "kill_warning_delay": number(self.signal_grace_s),
                    "kill_warning_flags": ["BATCH_JOB"], "open_mode": ["APPEND"], "script": script})
        if self.mem_per_node:
            job["memory_per_node"] = number(mem_mb(self.mem_per_node))
        if self.exclusive:
            job["shared"] = ["none"]
        if self.nodelist:
            job["required_nodes"] = [self.nodelist]
        if gres:
            job["tres_per_node"] = "gres/" + gres
        return f"/slurm/{version}/job/submit", {"job": job}

    # -- submitit --------------------------------------------------------------------------------
    @property
    def gpus_per_node(self) -> int:
        return sum(int(g.split(":")[-1]) for g in self.gres if g.startswith("gpu:"))

    def submitit_parameters(self) -> dict[str, Any]:
        """submitit SlurmExecutor parameters for these resources (submitit adds its own
        ``--signal=USR2@signal_delay_s``, output and requeue handling)."""
        params: dict[str, Any] = {"job_name": self.name, "time": self.time_minutes,
                                  "cpus_per_task": self.cpus_per_task, "nodes": self.nodes,
                                  "ntasks_per_node": self.tasks_per_node, "signal_delay_s": self.signal_grace_s}
        if self.gpus_per_node:
            params["gpus_per_node"] = self.gpus_per_node
        for key in ("partition", "account", "qos", "dependency"):
            if getattr(self, key):
                params[key] = getattr(self, key)
        if self.exclusive:
            params["exclusive"] = True
        params["additional_parameters"] = {"export": "ALL", **({"mem": self.mem_per_node} if self.mem_per_node else {})}
        return params
