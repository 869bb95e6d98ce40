"""The Slurm command layer: parsing, error classification, retries, version detection."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from slinkyml.errors import SlinkyError
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.validate import ClusterAnswers, judge
from slinkyml.slurm import (
    AccountingDisabled,
    AccountingUnavailable,
    InvalidRequest,
    JobNotFound,
    Slurm,
    SlurmCommandNotFound,
    SlurmControllerDown,
    SlurmError,
    SlurmTimeout,
    SlurmTransientError,
    SlurmVersion,
    parse_job_id,
    parse_scontrol_record,
)
from slinkyml.slurm.runner import Result


@pytest.mark.parametrize("text, expected", [
    ("slurm-wlm 22.05.8\n", (22, 5, 8)),
    ("slurm 24.11.5", (24, 11, 5)),
    ("slurm 25.11.0-rc1", (25, 11, 0)),
])
def test_version_parse(text, expected):
    version = SlurmVersion.parse(text)
    assert (version.major, version.minor, version.patch) == expected
    assert version.release == f"{expected[0]:02d}.{expected[1]:02d}"


def test_version_features_branch_in_one_place():
    old, new = SlurmVersion(22, 5, 8), SlurmVersion(24, 11, 1)
    assert old.restapi_versions[0] == "v0.0.38" and new.restapi_versions[0] == "v0.0.42"
    # what a real 24.11.5 slurmrestd serves (v0.0.43 answers 404) and 22.05.8 (v0.0.38 for ping/submit)
    assert new.restapi_versions == ("v0.0.42", "v0.0.41", "v0.0.40")
    assert old.restapi_versions == ("v0.0.38", "v0.0.37")
    with pytest.raises(SlinkyError, match="cannot parse"):
        SlurmVersion.parse("no digits here")


def test_parse_job_id():
    assert parse_job_id("1234\n") == 1234
    assert parse_job_id("77;slinkyml\n") == 77
    with pytest.raises(SlurmError):
        parse_job_id("sbatch: error: nope")


def test_parse_scontrol_record_keeps_values_with_spaces():
    line = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=DOWN+DRAIN "
            "Reason=Not responding [root@2026-11-30T01:00:00] Partitions=debug,short")
    record = parse_scontrol_record(line)
    assert record["NodeName"] == "n1"
    assert record["Reason"] == "Not responding [root@2026-11-30T01:00:00]"
    assert record["Partitions"] == "debug,short"


@pytest.mark.parametrize("command, stderr, kind", [
    ("sacct", "sacct: error: Problem talking to the database: Connection refused", AccountingUnavailable),
    ("sacct", "sacct: error: Slurm accounting storage is disabled", AccountingDisabled),
    ("sacctmgr", "sacctmgr: error: Slurm accounting storage is disabled", AccountingDisabled),
    ("squeue", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
     SlurmControllerDown),
    ("squeue", "slurm_load_jobs error: Socket timed out on send/recv operation", SlurmTransientError),
    ("scontrol", "slurm_load_jobs error: Invalid job id specified", JobNotFound),
    ("sbatch", "sbatch: error: Batch job submission failed: Invalid partition name specified",
     InvalidRequest),
])
def test_errors_are_typed_and_carry_stderr(command, stderr, kind):
    error = Slurm._classify(command, Result((command,), 1, "", stderr, 0.1, 4))
    assert isinstance(error, kind)
    assert error.stderr == stderr
    assert "\n" not in error.one_line()


def test_a_cluster_without_accounting_is_a_kind_of_accounting_unavailable():
    """Readers that catch AccountingUnavailable go on catching it; submission's association check
    tells it apart (no associations exist or are enforced there: jobs/validate.py)."""
    error = Slurm._classify("sacctmgr", Result(("sacctmgr",), 1, "", "sacctmgr: error: Slurm accounting storage "
                                               "is disabled", 0.1, 1))
    assert isinstance(error, AccountingDisabled) and isinstance(error, AccountingUnavailable)


def _fake_bin(tmp_path: Path, name: str, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text("#!/bin/bash\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _conf(tmp_path: Path) -> str:
    """A slurm.conf that exists (the fake commands never read it)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=fake\n")
    return str(conf)


def test_a_missing_slurm_conf_is_one_line_at_once(tmp_path):
    """Slurm's clients wait a minute for a slurm.conf that is not there; the layer says so without running
    them, as an unreachable cluster (exit 3), naming the path. A conf given for one command counts instead."""
    ran = tmp_path / "ran"
    bin_dir = _fake_bin(tmp_path, "squeue", f"echo x >> {ran}\n")
    missing = tmp_path / "gone" / "slurm.conf"
    with pytest.raises(SlurmControllerDown, match=f"^squeue: no slurm.conf at {missing} ") as info:
        Slurm(missing, bin_dir=str(bin_dir)).run("squeue", [])
    assert info.value.exit_code == 3 and "\n" not in str(info.value) and not ran.exists()
    Slurm(missing, bin_dir=str(bin_dir)).run("squeue", [], env={"SLURM_CONF": _conf(tmp_path)})
    assert ran.read_text() == "x\n"


def test_transient_errors_are_retried(tmp_path):
    """A command that times out twice, then works: the layer retries and succeeds."""
    counter = tmp_path / "count"
    bin_dir = _fake_bin(tmp_path, "squeue", f"""
n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}
if [ $n -lt 3 ]; then echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1; fi
echo "TZ=$TZ"
""")
    slurm = Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=3, backoff=0.01)
    result = slurm.run("squeue", [])
    assert result.attempts == 3 and result.stdout.strip() == "TZ=UTC"


def test_transient_errors_give_up_after_retries(tmp_path):
    bin_dir = _fake_bin(tmp_path, "squeue", 'echo "slurm_load_jobs error: Socket timed out" >&2; exit 1\n')
    slurm = Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=2, backoff=0.01)
    with pytest.raises(SlurmTransientError, match="after 3 attempts"):
        slurm.run("squeue", [])


def test_permanent_errors_are_not_retried(tmp_path):
    counter = tmp_path / "count"
    bin_dir = _fake_bin(tmp_path, "sbatch", f'echo x >> {counter}; '
                        'echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 1\n')
    slurm = Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=3, backoff=0.01)
    with pytest.raises(InvalidRequest):
        slurm.run("sbatch", ["x.sh"])
    assert counter.read_text().count("x") == 1


def test_missing_command_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmCommandNotFound, match="not found on PATH"):
        Slurm("/x.conf").run("sinfo", [])


def test_only_slurm_commands_are_run():
    with pytest.raises(ValueError):
        Slurm("/x.conf").executable("rm")


@pytest.mark.slurm
def test_version_detected_from_the_installation(slurm):
    assert slurm.version.at_least(22, 5)
    # also without any slurm.conf (22.05 clients refuse even --version then)
    assert Slurm("/nonexistent/slurm.conf").version == slurm.version


@pytest.mark.slurm
def test_show_config_and_nodes(local_cluster, slurm):
    config = slurm.show_config()
    assert config["ClusterName"] == "slinkyml"
    assert config["SelectType"] == "select/cons_tres"
    nodes = slurm.show("node")
    assert {n["NodeName"] for n in nodes} == set(local_cluster.spec.node_names)  # n1.. unless SLINKYML_DEV_NODE_PREFIX
    assert slurm.environ()["TZ"] == "UTC"  # whatever the caller's TZ


@pytest.mark.slurm
def test_real_errors_are_typed(slurm):
    with pytest.raises(JobNotFound):
        slurm.run("scontrol", ["show", "job", "999999999"])
    with pytest.raises(InvalidRequest, match="partition"):
        slurm.run("sbatch", ["-p", "no_such_partition", "--wrap", "true"], retries=0)


def test_timeouts_kill_the_command_and_raise(tmp_path):
    bin_dir = _fake_bin(tmp_path, "sdiag", "echo partial; sleep 30\n")
    slurm = Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=1, backoff=0.01)
    with pytest.raises(SlurmTimeout, match="timed out after 0.3 s") as info:
        slurm.run("sdiag", [], timeout=0.3)
    assert info.value.stdout.strip() == "partial"
    assert slurm.calls == 2  # retried once, then gave up


def test_stdin_of_any_size_and_both_pipes_come_back_whole(tmp_path):
    """The script on stdin: a small one written at once, one larger than a pipe fed as the command
    drains it while its stdout and stderr are read (no deadlock either way); a function's text is
    made after the command started; a command that exits without reading gets its stderr heard."""
    bin_dir = _fake_bin(tmp_path, "sbatch", 'tee /dev/stderr | wc -c; echo "done" >&2\n')
    slurm = Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=0)
    for size in (10, 70_000, 1_000_000):
        text = "#!/bin/bash\n" + "x" * size
        result = slurm.run("sbatch", [], input=text)
        assert result.stdout.strip() == str(len(text)) and result.stderr == text + "done\n", size
    made = []
    assert slurm.run("sbatch", [], input=lambda: made.append(1) or "#!/bin/sh\n").stdout.strip() == "10"
    assert made == [1]
    bin_dir = _fake_bin(tmp_path, "sbatch", 'echo "sbatch: error: no thanks" >&2; exit 1\n')
    with pytest.raises(InvalidRequest, match="no thanks"):
        Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=0).run("sbatch", [], input="y" * 1_000_000)


def test_a_shorter_deadline_fires_while_a_longer_one_is_pending(tmp_path):
    """The shared watchdog re-arms for an earlier deadline and leaves finished commands alone."""
    import threading

    bin_dir = _fake_bin(tmp_path, "sdiag", 'sleep "$1"; echo "slept $1"\n')
    slurm = Slurm(_conf(tmp_path), bin_dir=str(bin_dir), retries=0)
    results: dict[str, str] = {}
    long_call = threading.Thread(target=lambda: results.update(
        long=slurm.run("sdiag", ["1.5"], timeout=20).stdout.strip()))
    long_call.start()
    started = time.monotonic()
    with pytest.raises(SlurmTimeout):
        slurm.run("sdiag", ["30"], timeout=0.3)
    assert time.monotonic() - started < 10  # killed at its own deadline, not the pending 20 s one
    long_call.join(30)
    assert results == {"long": "slept 1.5"}  # the longer call was neither killed nor cut short
    assert slurm.run("sdiag", ["0"], timeout=0.2).stdout.strip() == "slept 0"


def test_the_slurm_layer_imports_nothing_above_it() -> None:
    """slurm/ is the bottom layer: it finds the dev cluster through slinkyml.config, never dev/; the throw-away
    slurmctld of `sbatch check` (slurm/throwaway.py) runs its daemons through the base layer's slinkyml.process."""
    import pkgutil
    import subprocess
    import sys

    import slinkyml.slurm

    modules = [f"slinkyml.slurm.{m.name}" for m in pkgutil.iter_modules(slinkyml.slurm.__path__)]
    code = (f"import sys; import {', '.join(modules)}; "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('slinkyml.')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['config', 'errors', 'process', 'slurm']"


def test_submission_checks_no_association_on_a_cluster_without_accounting(tmp_path):
    """The association rows are None there (jobs/validate.py's user_associations); with rows, none
    matching is refused as before."""
    spec = JobSpec.from_dict({"name": "t", "nodes": 1, "entry": {"module": "x"}, "account": "ml"})
    partitions = [{"PartitionName": "debug", "Default": "YES", "Nodes": "n1", "MaxTime": "UNLIMITED"}]
    nodes = [{"NodeName": "n1", "State": "IDLE", "CPUTot": "4", "RealMemory": "4096"}]
    slurm = Slurm(str(tmp_path / "slurm.conf"))
    assert judge(spec, slurm, "alice", ClusterAnswers(partitions, nodes, None)) == []
    assert judge(spec, slurm, "alice", ClusterAnswers(partitions, nodes, [])) == [
        "user alice has no association with account 'ml'"]
