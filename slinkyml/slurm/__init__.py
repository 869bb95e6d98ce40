"""The Slurm command layer: every Slurm CLI call in slinkyml goes through :class:`Slurm`.

Names load on first use (PEP 562) so the render path does not start the command layer.
"""

from __future__ import annotations

from slinkyml import lazy_names

_MODULE_OF = {
    **dict.fromkeys(("AccountingDisabled", "AccountingUnavailable", "InvalidRequest", "JobNotFound", "SlurmCommandNotFound",
                     "SlurmConfigMissing",
                     "SlurmControllerDown", "SlurmError", "SlurmTimeout", "SlurmTransientError"),
                    "slinkyml.slurm.errors"),
    **dict.fromkeys(("Result", "Slurm", "parse_job_id"), "slinkyml.slurm.runner"),
    "parse_scontrol_record": "slinkyml.slurm.records",
    "SlurmVersion": "slinkyml.slurm.version",
}


__getattr__ = lazy_names("slinkyml.slurm", _MODULE_OF)
__all__ = sorted(_MODULE_OF)
