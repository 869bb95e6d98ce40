"""The Slurm command layer: every Slurm CLI call in slinkyml goes through :class:`Slurm`."""

from slinkyml.slurm.errors import (
    AccountingUnavailable,
    InvalidRequest,
    JobNotFound,
    SlurmCommandNotFound,
    SlurmControllerDown,
    SlurmError,
    SlurmTimeout,
    SlurmTransientError,
)
from slinkyml.slurm.runner import Result, Slurm, parse_job_id, parse_scontrol_record
from slinkyml.slurm.version import SlurmVersion

__all__ = [
    "AccountingUnavailable", "InvalidRequest", "JobNotFound", "Result", "Slurm",
    "SlurmCommandNotFound", "SlurmControllerDown", "SlurmError", "SlurmTimeout",
    "SlurmTransientError", "SlurmVersion", "parse_job_id", "parse_scontrol_record",
]
