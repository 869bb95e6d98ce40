"""User-facing errors.

Every error a user can cause derives from :class:`SlinkyError`; the CLI prints it as one
line (``slinkyml: error: <message>``) and exits with status 2, never a traceback.
"""

from __future__ import annotations


class SlinkyError(Exception):
    """An error whose message is meant for the user, on one line."""

    exit_code = 2

    def one_line(self) -> str:
        return " ".join(str(self).split()) or type(self).__name__


class SpecError(SlinkyError):
    """Bad input in a spec; ``path`` names the field (``node_sets[1].instance_type``)."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)
