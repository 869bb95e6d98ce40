"""The slurmrestd submit backend's version choice and request bodies (no cluster needed; the live
submissions are in test_jobs_cluster.py)."""

from __future__ import annotations

import pytest

from slinkyml.config import restapi_target as default_target
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.jobs.restapi import RestApiBackend
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm.rest import BUILT_VERSIONS, api_version
from slinkyml.slurm.version import SlurmVersion


@pytest.mark.parametrize("release,expected", [
    ((22, 5, 8), "v0.0.38"),
    ((23, 2, 7), "v0.0.38"),
    ((23, 11, 10), "v0.0.40"),
    ((24, 5, 4), "v0.0.41"),
    ((24, 11, 5), "v0.0.42"),  # what a real 24.11.5 slurmrestd serves newest (v0.0.40..42)
    ((25, 5, 0), "v0.0.43"),   # v0.0.43's job fields are v0.0.42's (checked on a real 26.05.5)
    ((26, 5, 5), "v0.0.45"),   # what a real 26.05.5 slurmrestd serves newest (v0.0.42..45)
])
def test_api_version_is_the_newest_served_that_we_build(release, expected):
    version = SlurmVersion(*release)
    assert api_version(version) == expected
    if version.at_least(23, 11):
        assert expected in version.restapi_versions  # never a version the daemon does not serve


def _spec(**extra) -> JobSpec:
    data = {"name": "rest", "launcher": "srun", "nodes": 2, "tasks_per_node": 1, "mem_per_node": "256M",
            "time_limit": "00:02:30", "entry": {"script": "/bin/true"}, "log_dir": "logs",
            "requeue": {"signal": "USR2", "grace_seconds": 60, "max_restarts": 1}}
    data.update(extra)
    return JobSpec.from_dict(data)


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"])
def test_v0_0_4x_body(version):
    """The fields the /openapi/v3 of real 24.11.5 (v0.0.40–42) and 26.05.5 (v0.0.42–45) slurmrestds
    declare for job_desc_msg, the same in all."""
    path, body = SlurmJobRequest.from_spec(_spec(nodelist="t[1-2]", exclusive=True)).restapi_body(
        "#!/bin/bash\n", version=version, cwd="/w", environment={"PATH": "/bin", "LANG": "C.UTF-8"})
    assert path == f"/slurm/{version}/job/submit" and set(body) == {"job"}
    job = body["job"]
    assert job["script"] == "#!/bin/bash\n" and job["current_working_directory"] == "/w"
    assert job["nodes"] == "2" and job["tasks_per_node"] == 1 and job["requeue"] is True
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 3}  # minutes, rounded up
    assert job["memory_per_node"] == {"set": True, "infinite": False, "number": 256}
    assert job["environment"] == ["PATH=/bin", "LANG=C.UTF-8"]
    assert (job["kill_warning_signal"], job["kill_warning_flags"]) == ("USR2", ["BATCH_JOB"])
    assert job["kill_warning_delay"] == {"set": True, "infinite": False, "number": 60}
    assert job["open_mode"] == ["APPEND"] and job["shared"] == ["none"] and job["required_nodes"] == ["t[1-2]"]
    assert job["standard_output"] == "/w/logs/rest-%j.out"


def test_v0_0_38_body_sends_nodes_as_text():
    """22.05.8 accepts the schema's [min, max] list for "nodes" and ignores it (1 node); "2" works."""
    _, body = SlurmJobRequest.from_spec(_spec()).restapi_body("#!/bin/bash\n", version="v0.0.38", cwd="/w", environment={"PATH": "/bin"})
    job = body["job"]
    assert body["script"] == "#!/bin/bash\n" and job["nodes"] == "2" and job["time_limit"] == 3
    assert job["signal"] == "12@60" and job["environment"] == {"PATH": "/bin"}  # no "B:" on v0.0.38


def test_default_target_follows_the_dev_cluster_env(tmp_path, monkeypatch):
    """Unconfigured, the backend finds the dev cluster that SLINKYML_STATE_DIR/SLINKYML_DEV_* name."""
    for var in ("SLINKYML_RESTAPI_URL", "SLURMRESTD_URL", "SLINKYML_SLURMRESTD_SOCKET", "SLURM_CONF"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLINKYML_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/slinkyml/config.yaml
    monkeypatch.setenv("SLINKYML_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("SLINKYML_DEV_PORT_BASE", "7817")
    assert default_target() == "http://127.0.0.1:7820"
    monkeypatch.delenv("SLINKYML_DEV_PORT_BASE")
    assert default_target() == "http://127.0.0.1:6820"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "slurmrestd.sock").touch()
    assert default_target() == f"unix:{tmp_path / 'run' / 'slurmrestd.sock'}"

    class _Slurm:
        version = SlurmVersion(24, 11, 5)
        conf = str(tmp_path / "etc" / "slurm.conf")

    backend = RestApiBackend.from_config(slurm=_Slurm())
    assert (backend.client.url, backend.version) == (f"unix:{tmp_path / 'run' / 'slurmrestd.sock'}", "v0.0.42")

    # the accounting client's older variable names still work, after the new one
    monkeypatch.setenv("SLINKYML_SLURMRESTD_SOCKET", "/old.sock")
    assert default_target() == "unix:/old.sock"
    monkeypatch.setenv("SLURMRESTD_URL", "http://old:1")
    assert default_target() == "http://old:1"
    monkeypatch.setenv("SLINKYML_RESTAPI_URL", "http://new:2")
    assert default_target() == "http://new:2" == default_target("http://new:2")
    assert default_target("unix:/flag") == "unix:/flag"


@pytest.mark.parametrize("release,expected", [
    ((22, 5, 8), "v0.0.38"), ((23, 2, 7), "v0.0.39"), ((24, 11, 5), "v0.0.42"), ((25, 5, 0), "v0.0.43"),
    ((26, 5, 5), "v0.0.45")])
def test_accounting_reads_the_newest_served_slurmdb_version(release, expected):
    version = SlurmVersion(*release)
    assert api_version(version, "slurmdb") == expected == version.restapi_versions[0]
    assert set(BUILT_VERSIONS["slurm"]) <= set(BUILT_VERSIONS["slurmdb"])
