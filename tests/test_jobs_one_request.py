"""One request end to end: a submission builds its SlurmJobRequest once, and the script, the backend and
`--dry-run` all get that one (issue 41, item 3)."""

from __future__ import annotations

import pytest

from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit

SPEC = {"name": "one-request", "launcher": "srun", "mem_per_node": "64M", "time_limit": "1",
        "entry": {"script": "/bin/true"}, "log_dir": "logs"}


@pytest.fixture
def built(monkeypatch) -> list[SlurmJobRequest]:
    """Every request SlurmJobRequest.from_spec builds (the real method, counted)."""
    made: list[SlurmJobRequest] = []
    real = SlurmJobRequest.from_spec.__func__  # type: ignore[attr-defined]

    def counted(cls, spec):
        made.append(real(cls, spec))
        return made[-1]

    monkeypatch.setattr(SlurmJobRequest, "from_spec", classmethod(counted))
    return made


def test_a_dry_run_builds_the_request_once(cli, built, tmp_path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: one-request\nentry: {module: m}\n")
    code, out, err = cli("sbatch", "submit", str(job), "--dry-run", "--no-check")
    assert code == 0 and out.startswith("#!/bin/bash") and f"# request: {built[0]}" in err
    assert len(built) == 1


@pytest.mark.slurm
def test_a_submission_builds_the_request_once(slurm, own, built, tmp_path) -> None:
    result = submit(JobSpec.from_dict(SPEC), backend=SbatchBackend(slurm, extra_args=("--hold",)), cwd=tmp_path)
    own.append(str(result.job_id))
    assert len(built) == 1
    held = slurm.run("squeue", ["-h", "-j", str(result.job_id), "-o", "%j %D"], check=False).stdout.split()
    assert held == ["one-request", str(built[0].nodes)]
