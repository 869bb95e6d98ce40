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
