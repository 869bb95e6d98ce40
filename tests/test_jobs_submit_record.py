"""submit() keeps a copy of the script next to the logs, written while sbatch runs (real sbatch)."""

from __future__ import annotations

import pytest

from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit
from slinkyml.slurm import InvalidRequest


def _spec(tmp, **extra) -> JobSpec:
    data = {"name": "record me", "launcher": "srun", "mem_per_node": "128M", "time_limit": "1",
            "entry": {"script": "/bin/true"}, "log_dir": str(tmp / "logs")}
    data.update(extra)
    return JobSpec.from_dict(data)


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_record_is_named_by_job_id_and_no_temporary_is_left(slurm, shared_tmp):
    backend = SbatchBackend(slurm, extra_args=("--hold",))
    done = submit(_spec(shared_tmp), backend=backend, cwd=shared_tmp)
    try:
        assert done.script_path.name == f"record_me-{done.job_id}.sbatch"
        assert done.script_path.read_text().startswith("#!/bin/bash\n")
        job = slurm.show("job", str(done.job_id))[0]
        assert job["JobState"] == "PENDING" and "JobHeldUser" in job["Reason"]  # extra_args reached sbatch
        assert not list((shared_tmp / "logs").glob(".*.tmp"))
    finally:
        slurm.run("scancel", [str(done.job_id)], check=False)


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_refused_submission_leaves_no_record(slurm, shared_tmp):
    logs = shared_tmp / "refused"
    with pytest.raises(InvalidRequest, match="partition"):
        submit(_spec(shared_tmp, partition="no_such_partition", log_dir=str(logs)),
               backend=SbatchBackend(slurm), cwd=shared_tmp, validate=False)
    assert list(logs.iterdir()) == []
