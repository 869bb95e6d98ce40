"""Typed exceptions for Slurm command failures; each carries the command and its stderr."""

from __future__ import annotations

from slinkyml.errors import SlinkyError


class SlurmError(SlinkyError):
    """A Slurm command failed."""

    def __init__(self, message: str, *, argv: list[str] | None = None, returncode: int | None = None,
                 stderr: str = "", stdout: str = ""):
        self.argv = list(argv or [])
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        super().__init__(message)


class SlurmCommandNotFound(SlurmError):
    """The Slurm client binary is not installed (or not on PATH)."""


class SlurmTimeout(SlurmError):
    """The command did not finish within its timeout (after retries)."""


class SlurmTransientError(SlurmError):
    """A transient controller error (socket timeout, controller busy) that survived the retries."""


class SlurmControllerDown(SlurmError):
    """slurmctld cannot be reached."""


class AccountingUnavailable(SlurmError):
    """Accounting storage is disabled or slurmdbd cannot be reached."""


class InvalidRequest(SlurmError):
    """slurmctld rejected a request (bad partition, account, node count...)."""


class JobNotFound(SlurmError):
    """The job id is not known to slurmctld (and possibly purged)."""
