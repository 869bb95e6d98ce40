"""Training jobs: spec → sbatch script → submission (sbatch or slurmrestd) → follow."""

from slinkyml import lazy_names
from slinkyml.jobs.spec import Container, Entry, JobSpec, RequeuePolicy

__all__ = ["Container", "Entry", "JobSpec", "RequeuePolicy", "import_manifest"]

# lazy: the importer loads PyYAML, which `sbatch submit --no-check` never needs
__getattr__ = lazy_names("slinkyml.jobs", {"import_manifest": "slinkyml.jobs.importer"})
