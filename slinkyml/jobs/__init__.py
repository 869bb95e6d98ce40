"""Training jobs: spec → sbatch script → submission (sbatch or slurmrestd) → follow."""

from slinkyml.jobs.spec import Container, Entry, JobSpec, RequeuePolicy

__all__ = ["Container", "Entry", "JobSpec", "RequeuePolicy"]
