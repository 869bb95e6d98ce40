"""Training jobs: spec → sbatch script → submission (sbatch or slurmrestd) → follow."""

from typing import TYPE_CHECKING

from slinkyml import lazy_names

if TYPE_CHECKING:
    from slinkyml.jobs.importer import import_manifest
    from slinkyml.jobs.spec import Container, Entry, JobSpec, RequeuePolicy

__all__ = ["Container", "Entry", "JobSpec", "RequeuePolicy", "import_manifest"]

# lazy: `jobs list`/`jobs status` (records, listing) need no spec, schema or PyYAML; the importer loads
# PyYAML, which `sbatch submit --no-check` never needs
__getattr__ = lazy_names("slinkyml.jobs", {**dict.fromkeys(("Container", "Entry", "JobSpec", "RequeuePolicy"),
                                                             "slinkyml.jobs.spec"),
                                           "import_manifest": "slinkyml.jobs.importer"})
