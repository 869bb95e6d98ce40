"""Optional pyslurm backend. PyPI's pyslurm builds only against Slurm 25.11 (it refuses any
other version), so it is used only where a pyslurm matching the installed Slurm imports."""

from __future__ import annotations

from slinkyml.errors import SlinkyError
from slinkyml.slurm.runner import Slurm


def available(slurm: Slurm | None = None) -> str | None:
    """None when usable, else the reason it is not."""
    try:
        import pyslurm  # noqa: F401
    except ImportError:
        return "pyslurm is not installed (PyPI has it only for Slurm 25.11)"
    version = getattr(pyslurm, "__version__", "")
    installed = (slurm or Slurm()).version
    if not str(version).startswith(installed.release.replace(".0", ".")) and \
            not str(version).startswith(installed.release):
        return f"pyslurm {version} does not match Slurm {installed}"
    return None


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, slurm: Slurm | None = None):
        self.slurm = slurm or Slurm()
        reason = available(self.slurm)
        if reason:
            raise SlinkyError(f"--backend pyslurm: {reason}")

    def jobs(self, start, end, *, users=None, accounts=None, job_ids=None):
        """pyslurm.db.Jobs → the same sacct text layout, parsed by the one parser."""
        import pyslurm

        from slinkyml.accounting.backends.restapi import records_to_table

        flt = pyslurm.db.JobFilter(start_time=start, end_time=end, users=users,
                                   accounts=accounts, ids=job_ids, with_duplicates=True)
        records = [job.to_dict() for job in pyslurm.db.Jobs.load(flt).values()]
        return records_to_table(records)

    def shares(self):
        from slinkyml.accounting.backends.cli import CliBackend

        return CliBackend(self.slurm).shares()
