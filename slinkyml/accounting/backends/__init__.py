"""Where accounting data comes from: Slurm CLIs (default), slurmrestd, pyslurm (optional).

Every backend returns the same things — a :class:`~slinkyml.accounting.sacct.SacctTable` for
jobs (``jobs()``), ``sshare``-layout association rows (``shares()``; ``shares_snapshot()`` adds
slurmctld's finer raw usage) and slurmctld's settings (``config()``) — so reports never care which ran.
"""

from __future__ import annotations

from slinkyml.errors import SlinkyError
from slinkyml.slurm.runner import Slurm

BACKENDS = ("cli", "restapi", "pyslurm")
#: Older names still accepted: ``rest`` (the accounting CLI's name for slurmrestd before it was one).
ALIASES = {"rest": "restapi"}


def get_backend(name: str = "cli", slurm: Slurm | None = None, **options: str | None):
    """The backend called ``name`` (``cli``, ``restapi`` or ``pyslurm``)."""
    name = ALIASES.get(name, name)
    if name == "cli":
        from slinkyml.accounting.backends.cli import CliBackend  # lazy: each backend once chosen (pandas)

        return CliBackend(slurm)
    if name == "restapi":
        from slinkyml.accounting.backends.restapi import RestBackend  # lazy: as above

        return RestBackend(slurm, **options)
    if name == "pyslurm":
        from slinkyml.accounting.backends.pyslurm_backend import PyslurmBackend  # lazy: as above

        return PyslurmBackend(slurm)
    raise SlinkyError(f"--backend: unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
