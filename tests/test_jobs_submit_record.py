"""The job keeps a copy of its script next to its logs; submit() hands sbatch the caller's environment
as plain ``sbatch`` would (real sbatch)."""

from __future__ import annotations

import pytest

from slinkyml.jobs import records
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
def test_submission_writes_nothing_but_sbatch_gets_the_options(slurm, shared_tmp):
    backend = SbatchBackend(slurm, extra_args=("--hold",))
    done = submit(_spec(shared_tmp, log_dir=str(shared_tmp / "held")), backend=backend, cwd=shared_tmp)
    try:
        assert done.script_path == shared_tmp / "held" / f"record_me-{done.job_id}.sbatch"
        job = slurm.show("job", str(done.job_id))[0]
        assert job["JobState"] == "PENDING" and "JobHeldUser" in job["Reason"]  # extra_args reached sbatch
        assert list((shared_tmp / "held").iterdir()) == []  # the copy is the job's to write, when it starts
    finally:
        slurm.run("scancel", [str(done.job_id)], check=False)


@pytest.mark.slurm
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["submit", "plain sbatch"])
def test_job_keeps_a_byte_exact_copy_of_its_script(slurm, shared_tmp, how):
    """The rendered script copies itself next to its logs when it runs, however it was submitted."""
    from slinkyml.jobs.follow import wait
    from slinkyml.jobs.render import render_sbatch

    logs = shared_tmp / f"copy-{how.replace(' ', '-')}"
    spec = _spec(shared_tmp, name=f"copy {how}", log_dir=str(logs))
    script = render_sbatch(spec)
    if how == "submit":
        job_id = submit(spec, backend=SbatchBackend(slurm), cwd=shared_tmp).job_id
    else:
        logs.mkdir()
        (shared_tmp / "plain.sbatch").write_text(script)
        job_id = slurm.sbatch(shared_tmp / "plain.sbatch", cwd=shared_tmp)
    state = wait(slurm, job_id, timeout=100, poll=0.5)
    assert state.state == "COMPLETED"
    copy = logs / f"copy_{how.replace(' ', '_')}-{job_id}.sbatch"
    assert copy.read_text() == script


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_refused_submission_leaves_no_record(slurm, shared_tmp):
    logs = shared_tmp / "refused"
    with pytest.raises(InvalidRequest, match="partition"):
        submit(_spec(shared_tmp, partition="no_such_partition", log_dir=str(logs)),
               backend=SbatchBackend(slurm), cwd=shared_tmp, validate=False)
    assert list(logs.iterdir()) == []


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_failed_render_submits_nothing(slurm, shared_tmp, monkeypatch):
    import uuid

    import slinkyml.jobs.submit as submit_module

    name = f"never-{uuid.uuid4().hex[:8]}"

    def broken_render(spec, request=None):
        raise RuntimeError("render failed")

    monkeypatch.setattr(submit_module, "render_sbatch", broken_render)
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(shared_tmp / "records"))
    with pytest.raises(RuntimeError, match="render failed"):  # rendered while sbatch loads: it is stopped
        submit(_spec(shared_tmp, name=name, log_dir=str(shared_tmp / "never")), backend=SbatchBackend(slurm),
               cwd=shared_tmp)
    assert slurm.run("squeue", ["-h", "-t", "all", "-n", name, "-o", "%i"]).stdout.strip() == ""
    assert list((shared_tmp / "records").rglob("*")) in ([], [records.records_dir(slurm.conf)])  # no record


def test_submission_inherits_the_environment_without_copying_it(monkeypatch):
    """Nothing to add (the slurm.conf is the inherited one): sbatch gets the caller's environment
    as is, with no per-call copy; the parsing commands still get TZ=UTC."""
    from slinkyml.slurm import Slurm

    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("TZ", "Europe/Paris")
    slurm = Slurm()
    assert slurm._command_env("sbatch", None) is None and slurm._command_env("srun", None) is None
    assert slurm._command_env("sacct", None)["TZ"] == "UTC"
    assert Slurm(conf="/elsewhere/slurm.conf")._command_env("sbatch", None)["SLURM_CONF"] == "/elsewhere/slurm.conf"
    assert Slurm(env={"A": "1"})._command_env("sbatch", None)["A"] == "1"


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_job_runs_in_the_submitters_time_zone(slurm, shared_tmp, monkeypatch):
    """Like plain sbatch, the job gets the submitter's TZ (slinkyml pins UTC only for the commands
    whose output it parses), so its own timestamps read as the user's clock."""
    from slinkyml.jobs.follow import wait

    monkeypatch.setenv("TZ", "Europe/Paris")
    logs = shared_tmp / "tz"
    spec = _spec(shared_tmp, name="tz probe", log_dir=str(logs), entry={"script": "/usr/bin/printenv",
                                                                          "args": ["TZ"]})
    done = submit(spec, backend=SbatchBackend(slurm), cwd=shared_tmp)
    wait(slurm, done.job_id, timeout=100, poll=0.5)
    task_logs = list(logs.glob(f"*-{done.job_id}-r0-task*.log"))
    assert task_logs and task_logs[0].read_text().strip() == "Europe/Paris"
