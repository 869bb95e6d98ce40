"""Typed exceptions for Slurm command failures; each carries the command and its stderr."""

from __future__ import annotations

from slinkyml.errors import EXIT_FAILED, EXIT_UNREACHABLE, SlinkyError


class SlurmError(SlinkyError):
    """A Slurm command failed."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, argv: list[str] | None = None, returncode: int | None = None,
                 stderr: str = "", stdout: str = ""):
        self.argv = list(argv or [])
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        super().__init__(message)


class SlurmCommandNotFound(SlurmError):
    """The Slurm client binary is not installed (or not on PATH)."""

    exit_code = EXIT_UNREACHABLE


class SlurmTimeout(SlurmError):
    """The command did not finish within its timeout (after retries)."""

    exit_code = EXIT_UNREACHABLE


class SlurmTransientError(SlurmError):
    """A transient controller error (socket timeout, controller busy) that survived the retries."""

    exit_code = EXIT_UNREACHABLE


class SlurmControllerDown(SlurmError):
    """slurmctld cannot be reached."""

    exit_code = EXIT_UNREACHABLE


class SlurmConfigMissing(SlurmControllerDown):
    """The slurm.conf the command would use does not exist (Slurm's clients wait 60 s for it, then fail)."""


class AccountingUnavailable(SlurmError):
    """Accounting storage is disabled or slurmdbd cannot be reached."""

    exit_code = EXIT_UNREACHABLE


class AccountingDisabled(AccountingUnavailable):
    """The cluster runs without accounting storage (no slurmdbd): no associations exist or are enforced."""


class InvalidRequest(SlurmError):
    """slurmctld rejected a request (bad partition, account, node count...)."""


class JobNotFound(SlurmError):
    """The job id is not known to slurmctld (and possibly purged)."""


class RestApiError(SlinkyError):
    """slurmrestd refused the request or could not be reached (:mod:`slinkyml.slurm.rest`)."""


class RestApiUnreachable(RestApiError):
    """slurmrestd did not answer (connection refused, no socket, timeout): Slurm unreachable, exit 3."""

    exit_code = EXIT_UNREACHABLE
