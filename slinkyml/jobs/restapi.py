"""slurmrestd backend: submit the rendered script over HTTP, no ``sbatch`` on PATH needed.

Transport: the unix socket (``rest_auth/local``: slurmrestd trusts the socket peer's uid) or TCP
with a JWT (``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN``; token from ``$SLURM_JWT``). slurmrestd
does not read ``#SBATCH`` lines, so the job's options travel as the JSON ``job`` object, built from
the same spec. The request shape differs by OpenAPI version; :func:`submit_request` is the one
place that branches on it. Only the stdlib is used.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from slinkyml.errors import SlinkyError
from slinkyml.jobs.render import safe_name, sbatch_directives
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.validate import mem_mb

DEFAULT_SOCKET = "/var/lib/slinkyml/dev/run/slurmrestd.sock"  # root's dev cluster, default state dir
DEFAULT_URL = "http://127.0.0.1:6820"
#: OpenAPI versions whose ``job/submit`` body :func:`submit_request` builds, newest first. v0.0.40,
#: v0.0.41 and v0.0.42 (Slurm 23.11 … 24.11; 25.05 still serves v0.0.42) take the same job fields;
#: v0.0.38 is 22.05's. Checked against a real 24.11.5 slurmrestd's /openapi/v3.
SUBMIT_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")
#: Variables of the submitting shell handed to the job (sbatch's --export=ALL does this implicitly).
EXPORTED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "SLURM_CONF", "PYTHONPATH", "VIRTUAL_ENV", "USER")


class RestApiError(SlinkyError):
    """slurmrestd refused the request or could not be reached."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 30.0):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def api_version(slurm_version: Any) -> str:
    """The OpenAPI plugin version used for job submission on this Slurm release: the newest one
    the release's slurmrestd serves (:attr:`SlurmVersion.restapi_versions`) whose body we build.

    22.05 → v0.0.38; 23.11 → v0.0.40; 24.05 → v0.0.41; 24.11 → v0.0.42; 25.05+ → v0.0.42 while it
    is served (v0.0.40 is gone from 25.05 on, so pinning it would break there).
    """
    if not slurm_version.at_least(23, 11):
        return "v0.0.38"
    for version in slurm_version.restapi_versions:
        if version in SUBMIT_VERSIONS:
            return version
    return slurm_version.restapi_versions[-1]  # a release we do not know yet: its oldest


def default_target() -> str:
    """Where slurmrestd is when nothing is configured: the dev cluster's unix socket if it exists
    (``$SLINKYML_STATE_DIR`` picks the cluster), else its JWT port (``$SLINKYML_DEV_PORT_BASE``)."""
    from slinkyml.dev.config import options_from_env
    from slinkyml.dev.paths import default_state_dir

    sock = default_state_dir() / "run" / "slurmrestd.sock"
    if sock.exists():
        return f"unix:{sock}"
    port = options_from_env().get("slurmrestd_port")
    return f"http://127.0.0.1:{port}" if port else DEFAULT_URL


def submit_request(spec: JobSpec, script: str, *, version: str, cwd: str,
                   environment: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) for ``POST /slurm/<version>/job/submit`` — the one version branch."""
    minutes = max(1, math.ceil(spec.time_limit_seconds / 60))
    log_dir = spec.log_dir if os.path.isabs(spec.log_dir) else os.path.join(cwd, spec.log_dir)
    stdout = os.path.join(log_dir.replace("%", "%%"), f"{safe_name(spec.name)}-%j.out")
    gres = dict(sbatch_directives(spec)).get("--gres")
    import signal as _signal

    # v0.0.38 rejects the "B:" (batch shell only) prefix: the signal then reaches the job steps, the
    # trainer checkpoints and leaves a preemption marker, and the batch script requeues from that.
    signal = f"{_signal.Signals['SIG' + spec.requeue.signal].value}@{spec.requeue.grace_seconds}"
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
    """Submits to slurmrestd; ``url`` is ``http://host:port`` (JWT) or ``unix:/path`` (local auth)."""

    url: str
    version: str
    token: str | None = None
    user: str | None = None
    name: str = "restapi"
    timeout: float = 30.0

    @classmethod
    def from_config(cls, *, slurm: Any, url: str | None = None, token: str | None = None,
                    user: str | None = None) -> RestApiBackend:
        from slinkyml.jobs.submit import config_value

        url = url or os.environ.get("SLINKYML_RESTAPI_URL") or config_value("restapi_url")
        if not url:
            url = default_target()
        token = token or os.environ.get("SLURM_JWT")
        return cls(url=url, version=api_version(slurm.version), token=token, user=user)

    def _connection(self) -> http.client.HTTPConnection:
        if self.url.startswith("unix:"):
            return _UnixConnection(self.url[len("unix:"):], timeout=self.timeout)
        parsed = urlparse(self.url)
        if parsed.scheme == "https":
            return http.client.HTTPSConnection(parsed.hostname or "localhost", parsed.port or 443,
                                               timeout=self.timeout)
        return http.client.HTTPConnection(parsed.hostname or "localhost", parsed.port or 80,
                                          timeout=self.timeout)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if not self.url.startswith("unix:"):
            if not self.token:
                raise RestApiError("slurmrestd over TCP needs a JWT: set SLURM_JWT "
                                   "(eval $(scontrol token)) or use the unix socket")
            headers["X-SLURM-USER-TOKEN"] = self.token
            headers["X-SLURM-USER-NAME"] = self.user or os.environ.get("USER") or "root"
        conn = self._connection()
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode(errors="replace")
        except OSError as exc:
            raise RestApiError(f"cannot reach slurmrestd at {self.url}: {exc}") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            data = {}
        errors = [e for e in data.get("errors", []) if isinstance(e, dict)
                  and (e.get("error_number") or e.get("error_code") or e.get("error"))]
        if resp.status >= 400 or errors:
            detail = "; ".join(str(e.get("description") or e.get("error") or e) for e in errors)
            raise RestApiError(f"slurmrestd {method} {path} failed (HTTP {resp.status}): "
                               f"{detail or ' '.join(raw.split())[:200]}")
        return data

    def submit(self, spec: JobSpec, script: str, *, cwd: str | os.PathLike[str]) -> int:
        env = {k: os.environ[k] for k in EXPORTED_ENV if os.environ.get(k)}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        path, body = submit_request(spec, script, version=self.version, cwd=str(cwd), environment=env)
        data = self.request("POST", path, body)
        job_id = data.get("job_id")
        if not isinstance(job_id, int):
            raise RestApiError(f"slurmrestd returned no job id: {json.dumps(data)[:200]}")
        return job_id
