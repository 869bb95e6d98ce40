"""slurmrestd backend: submit the rendered script over HTTP, no ``sbatch`` on PATH needed.

Transport is :mod:`slinkyml.slurm.rest`'s; the body is :meth:`SlurmJobRequest.restapi_body`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from slinkyml import config
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.slurm.rest import RestApiError, RestClient, api_version
from slinkyml.slurm.runner import Slurm

#: Variables of the submitting shell handed to the job (sbatch's --export=ALL does this implicitly).
EXPORTED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "SLURM_CONF", "PYTHONPATH", "VIRTUAL_ENV", "USER")


@dataclass
class RestApiBackend:
    """Submits to slurmrestd through :class:`RestClient`, in the OpenAPI version of this Slurm."""

    client: RestClient
    version: str
    name: str = "restapi"
    slurm_conf: str | None = None  # the cluster's slurm.conf, handed to the job as $SLURM_CONF

    @classmethod
    def from_config(cls, *, slurm: Slurm, url: str | None = None, token: str | None = None,
                    user: str | None = None) -> RestApiBackend:
        client = RestClient.from_config(url, token, user, slurm_conf=slurm.conf)
        # the job's $SLURM_CONF: that of the cluster the URL is (a dev cluster's), else the caller's
        conf = config.cluster_target(restapi_url=url).slurm_conf if url else None
        return cls(client, api_version(slurm.version), slurm_conf=conf or slurm.conf)

    def submit(self, request: SlurmJobRequest, script: str | Callable[[], str], *, cwd: str | os.PathLike[str],
               while_waiting: Callable[[], object] | None = None) -> int:
        script = script() if callable(script) else script
        env = {k: os.environ[k] for k in EXPORTED_ENV if os.environ.get(k)}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        path, body = request.restapi_body(script, version=self.version, cwd=str(cwd), environment=env)
        data = self.client.request("POST", path, body)
        job_id = data.get("job_id")
        if not isinstance(job_id, int):
            raise RestApiError(f"slurmrestd returned no job id: {json.dumps(data)[:200]}")
        return job_id
