"""slurmrestd backend: submit the rendered script over HTTP, no ``sbatch`` on PATH needed.

Transport, auth and the OpenAPI version choice are :mod:`slinkyml.slurm.rest`'s. slurmrestd
does not read ``#SBATCH`` lines, so the job's options travel as the JSON ``job`` object, built from
the same spec. The request shape differs by OpenAPI version; :func:`submit_request` is the one
place that branches on it.
"""

from __future__ import annotations

import json
import math
import os
import signal as signals
from dataclasses import dataclass
from typing import Any

from slinkyml.jobs.render import safe_name, sbatch_directives
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.validate import mem_mb
from slinkyml.slurm.rest import RestApiError, RestClient, api_version
from slinkyml.slurm.runner import Slurm

#: Variables of the submitting shell handed to the job (sbatch's --export=ALL does this implicitly).
EXPORTED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "SLURM_CONF", "PYTHONPATH", "VIRTUAL_ENV", "USER")


def submit_request(spec: JobSpec, script: str, *, version: str, cwd: str,
                   environment: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) for ``POST /slurm/<version>/job/submit`` — the one version branch."""
    minutes = max(1, math.ceil(spec.time_limit_seconds / 60))
    log_dir = spec.log_dir if os.path.isabs(spec.log_dir) else os.path.join(cwd, spec.log_dir)
    stdout = os.path.join(log_dir.replace("%", "%%"), f"{safe_name(spec.name)}-%j.out")
    gres = dict(sbatch_directives(spec)).get("--gres")
    # v0.0.38 rejects the "B:" (batch shell only) prefix: the signal then reaches the job steps, the
    # trainer checkpoints and leaves a preemption marker, and the batch script requeues from that.
    signal = f"{signals.Signals['SIG' + spec.requeue.signal].value}@{spec.requeue.grace_seconds}"
    job: dict[str, Any] = {"name": spec.name, "current_working_directory": cwd,
                           "tasks_per_node": spec.effective_tasks_per_node,
                           "cpus_per_task": spec.cpus_per_task, "standard_output": stdout,
                           "requeue": True}
    for key in ("partition", "account", "qos"):
        if getattr(spec, key):
            job[key] = getattr(spec, key)
    if spec.dependencies:
        job["dependency"] = ",".join(spec.dependencies)
    if version == "v0.0.38":
        if spec.nodelist:
            raise RestApiError("nodelist is not supported by slurmrestd v0.0.38 (Slurm 22.05); "
                               "use the sbatch backend")
        # "nodes" goes through sbatch's option parser as text: the [min, max] list the schema shows is
        # accepted and ignored by a real 22.05.8 (the job gets 1 node)
        job.update({"nodes": str(spec.nodes), "time_limit": minutes, "environment": environment,
                    "signal": signal, "open_mode": "append"})
        if spec.mem_per_node:
            job["memory_per_node"] = mem_mb(spec.mem_per_node)
        if spec.exclusive:
            job["exclusive"] = "true"
        if gres:
            job["gres"] = gres
        return f"/slurm/{version}/job/submit", {"script": script, "job": job}
    # v0.0.40–v0.0.42 (Slurm 23.11 … 24.11): numbers are {set, infinite, number}; env is a list of
    # "K=V"; the script goes inside "job"; no "signal" string: kill_warning_* with BATCH_JOB (= "B:").
    def number(n: int) -> dict[str, Any]:
        return {"set": True, "infinite": False, "number": n}

    job.update({"nodes": str(spec.nodes), "time_limit": number(minutes),
                "environment": [f"{k}={v}" for k, v in environment.items()],
                "kill_warning_signal": spec.requeue.signal,
                "kill_warning_delay": number(spec.requeue.grace_seconds),
                "kill_warning_flags": ["BATCH_JOB"], "open_mode": ["APPEND"], "script": script})
    if spec.mem_per_node:
        job["memory_per_node"] = number(mem_mb(spec.mem_per_node))
    if spec.exclusive:
        job["shared"] = ["none"]
    if spec.nodelist:
        job["required_nodes"] = [spec.nodelist]
    if gres:
        job["tres_per_node"] = "gres/" + gres
    return f"/slurm/{version}/job/submit", {"job": job}


@dataclass
class RestApiBackend:
    """Submits to slurmrestd through :class:`RestClient`, in the OpenAPI version of this Slurm."""

    client: RestClient
    version: str
    name: str = "restapi"

    @classmethod
    def from_config(cls, *, slurm: Slurm, url: str | None = None, token: str | None = None,
                    user: str | None = None) -> RestApiBackend:
        return cls(RestClient.from_config(url, token, user), api_version(slurm.version))

    def submit(self, spec: JobSpec, script: str, *, cwd: str | os.PathLike[str]) -> int:
        env = {k: os.environ[k] for k in EXPORTED_ENV if os.environ.get(k)}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        path, body = submit_request(spec, script, version=self.version, cwd=str(cwd), environment=env)
        data = self.client.request("POST", path, body)
        job_id = data.get("job_id")
        if not isinstance(job_id, int):
            raise RestApiError(f"slurmrestd returned no job id: {json.dumps(data)[:200]}")
        return job_id
