"""Slurm version detection: the one place that branches on the installed Slurm release."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slinkyml.errors import SlinkyError

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """Parse ``sinfo --version`` output (``slurm 22.05.8`` / ``slurm-wlm 24.11.5``)."""
        match = _VERSION_RE.search(text or "")
        if not match:
            raise SlinkyError(f"cannot parse a Slurm version from {text.strip()!r}")
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))

    @property
    def release(self) -> str:
        """``"22.05"`` — the release series, as in Slinky image tags."""
        return f"{self.major:02d}.{self.minor:02d}"

    def __str__(self) -> str:
        return f"{self.major:02d}.{self.minor:02d}.{self.patch}"

    def at_least(self, major: int, minor: int = 0) -> bool:
        return (self.major, self.minor) >= (major, minor)

    @property
    def sacct_knows_stdout(self) -> bool:
        """sacct has the ``StdOut`` field (the job's log path) from 23.02 on."""
        return self.at_least(23, 2)

    @property
    def cgroup_plugin_can_be_disabled(self) -> bool:
        """``CgroupPlugin=disabled`` exists from 24.05; before, a cgroup.conf must name a real plugin."""
        return self.at_least(24, 5)

    def matches_pyslurm(self, pyslurm_version: str) -> bool:
        """Whether a pyslurm release (``25.11.0``, or ``25.5.x`` before it zero-padded) was built for
        this Slurm release series."""
        text = str(pyslurm_version)
        return text.startswith(self.release) or text.startswith(self.release.replace(".0", "."))

    @property
    def restd_refuses_root(self) -> bool:
        """slurmrestd exits at start as root even with ``SLURMRESTD_SECURITY=disable_user_check``
        (26.05.5: "should only be used for development"; its ``become_user`` mode refuses to run as
        SlurmUser); 24.11.5 runs. The local cluster then runs only the JWT one, unprivileged."""
        return self.at_least(26, 5)

    @property
    def restapi_versions(self) -> tuple[str, ...]:
        """slurmrestd OpenAPI plugin versions shipped with this release (newest first)."""
        if self.at_least(26, 5):  # a real 26.05.5 slurmrestd's /openapi/v3
            return ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42")
        if self.at_least(25, 5):
            return ("v0.0.43", "v0.0.42", "v0.0.41")
        if self.at_least(24, 11):
            return ("v0.0.42", "v0.0.41", "v0.0.40")
        if self.at_least(24, 5):
            return ("v0.0.41", "v0.0.40", "v0.0.39")
        if self.at_least(23, 11):
            return ("v0.0.40", "v0.0.39")
        if self.at_least(23, 2):
            return ("v0.0.39", "v0.0.38")
        return ("v0.0.38", "v0.0.37")


#: the OpenAPI version whose job body is flat text (Slurm 22.05's slurmrestd); later ones nest numbers
LEGACY_JOB_BODY_API = "v0.0.38"


def flat_job_body(openapi_version: str) -> bool:
    """Whether ``POST /slurm/<version>/job/submit`` takes 22.05's flat body (numbers and env as
    plain values, the script beside ``job``, a ``signal`` string, no nodelist)."""
    return openapi_version == LEGACY_JOB_BODY_API
