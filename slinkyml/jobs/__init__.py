"""Training jobs: spec → sbatch script → submission (sbatch or slurmrestd) → follow."""

from typing import Any

from slinkyml.jobs.spec import Container, Entry, JobSpec, RequeuePolicy

__all__ = ["Container", "Entry", "JobSpec", "RequeuePolicy", "import_manifest"]


def __getattr__(name: str) -> Any:
    # lazy: the importer loads PyYAML, which `sbatch submit --no-check` never needs
    if name == "import_manifest":
        from slinkyml.jobs.importer import import_manifest

        return import_manifest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
