"""The one slurmrestd client, for submission and accounting; stdlib only.

Unix socket (``rest_auth/local``) or TCP with a JWT (``$SLURM_JWT``); the OpenAPI version is the
newest of :data:`BUILT_VERSIONS` the release serves.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from dataclasses import dataclass
from typing import Any

from slinkyml import config
from slinkyml.slurm.errors import RestApiError, RestApiUnreachable
from slinkyml.slurm.version import SlurmVersion

#: The OpenAPI versions whose bodies slinkyml builds or reads, per slurmrestd plugin, newest first:
#: the table to extend for a new Slurm release (checked against real 24.11.5 and 26.05.5 slurmrestds).
BUILT_VERSIONS: dict[str, tuple[str, ...]] = {
    "slurm": ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38"),
    "slurmdb": ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38"),
}


def api_version(slurm_version: SlurmVersion, plugin: str = "slurm") -> str:
    """The newest OpenAPI version of ``plugin`` that this release's slurmrestd serves and we build
    (22.05 → v0.0.38 ... 26.05 → v0.0.45); a release we do not know yet: its oldest."""
    served = slurm_version.restapi_versions
    return next((v for v in BUILT_VERSIONS[plugin] if v in served), served[-1])


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


@dataclass
class RestClient:
    """slurmrestd at ``url``: ``http(s)://host:port`` (JWT) or ``unix:/path`` (local auth)."""

    url: str
    token: str | None = None
    user: str | None = None
    timeout: float = 30.0

    @classmethod
    def from_config(cls, url: str | None = None, token: str | None = None, user: str | None = None,
                    timeout: float = 30.0, *, slurm_conf: str | None = None) -> RestClient:
        """The slurmrestd of the selected cluster (:func:`slinkyml.config.cluster_target`), or of
        ``slurm_conf``'s cluster when the caller's :class:`Slurm` names another one."""
        return cls(config.restapi_target(url, slurm_conf=slurm_conf), token or os.environ.get("SLURM_JWT"),
                   user, timeout)

    def _connection(self) -> http.client.HTTPConnection:
        if self.url.startswith("unix:"):
            return _UnixConnection(self.url[len("unix:"):], timeout=self.timeout)
        parsed = urllib.parse.urlparse(self.url)
        if parsed.scheme == "https":
            return http.client.HTTPSConnection(parsed.hostname or "localhost", parsed.port or 443,
                                               timeout=self.timeout)
        return http.client.HTTPConnection(parsed.hostname or "localhost", parsed.port or 80,
                                          timeout=self.timeout)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                query: dict[str, str] | None = None) -> dict[str, Any]:
        """The JSON answer; :class:`RestApiError` for an HTTP error, an ``errors`` entry or no JSON."""
        if query:
            path += "?" + urllib.parse.urlencode(query, safe="-:")
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
            raise RestApiUnreachable(f"cannot reach slurmrestd at {self.url}: {exc}") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            raise RestApiError(f"slurmrestd {method} {path}: HTTP {resp.status} without JSON: "
                               f"{' '.join(raw.split())[:200]}") from None
        errors = [e for e in data.get("errors", []) if isinstance(e, dict)
                  and (e.get("error_number") or e.get("error_code") or e.get("error"))]
        if resp.status >= 400 or errors:
            detail = "; ".join(str(e.get("description") or e.get("error") or e) for e in errors)
            raise RestApiError(f"slurmrestd {method} {path} failed (HTTP {resp.status}): "
                               f"{detail or ' '.join(raw.split())[:200]}")
        return data
