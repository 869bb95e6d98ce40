"""``slinkyml sbatch check``: the templates against a throw-away real slurmctld for their cluster.

Each call starts its own slurmctld (no slurmd, no accounting, nodes State=CLOUD) on free ports in
a temporary directory; the local dev cluster is not touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slinkyml.cluster import load_spec
from slinkyml.jobs.shapecheck import (
    ThrowawayController,
    check_scripts,
    parse_test_only,
    render_slurm_conf,
    slurm_for,
)
from slinkyml.process import is_alive
from slinkyml.slurm import roots, throwaway

REPO = Path(__file__).resolve().parent.parent
H100 = REPO / "manifests" / "h100-efa" / "cluster.yaml"
TRN1 = REPO / "manifests" / "trn1" / "cluster.yaml"
TEMPLATES = sorted((REPO / "sbatch").glob("*.sbatch"))
JOB_SPECS = sorted((REPO / "sbatch").glob("*.yaml"))

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not (shutil.which("slurmctld") and shutil.which("sbatch")),
                       reason="slurmctld/sbatch not installed"),
]


def _target(path: Path) -> Path:
    """The cluster a template is written for: Trainium ones → trn1, the GPU ones → h100-efa."""
    return TRN1 if "neuron" in path.read_text() else H100


@pytest.fixture
def spy(monkeypatch):
    """Every ThrowawayController started in the test, with its directory and slurmctld PID."""
    seen: list[tuple[Path, int | None, list[int]]] = []
    original = ThrowawayController.start

    def start(self):
        original(self)
        ctld = next(d for d in self._daemons if d.name == "slurmctld")
        seen.append((self.dir, ctld.pid, [d.pid for d in self._daemons] + throwaway._children(ctld.pid)))

    monkeypatch.setattr(ThrowawayController, "start", start)
    return seen


def _assert_gone(seen) -> None:
    assert seen, "no controller was started"
    for directory, pid, pids in seen:
        assert not directory.exists(), f"{directory} left behind"
        assert pid and not is_alive(pid), f"slurmctld {pid} still running"
        assert not any(is_alive(p) for p in pids), f"leftover process among {pids}"


def _script(tmp: Path, name: str, *directives: str) -> Path:
    path = tmp / f"{name}.sbatch"
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), "srun hostname", ""]
    path.write_text("\n".join(lines))
    return path


@pytest.mark.slurm2605
@pytest.mark.timeout(120)
def test_every_template_is_accepted_by_the_cluster_it_targets(spy):
    assert len(TEMPLATES) >= 4
    for cluster in (H100, TRN1):
        scripts = [t for t in TEMPLATES if _target(t) == cluster]
        specs = [s for s in JOB_SPECS if _target(s.with_suffix(".sbatch")) == cluster]
        results = check_scripts([*scripts, *specs], cluster)  # one slurmctld for all of them
        assert len(results) == len(scripts) + len(specs)
        for result in results:
            assert result.accepted, result.line()
            assert "\n" not in result.line()
    by_name = {Path(r.script).name: r for r in check_scripts(TEMPLATES, H100) if r.accepted}
    assert by_name["nccl-allreduce.sbatch"].nodes == "llm-h100-[0-1]"
    assert by_name["nccl-allreduce.sbatch"].partition == "gpu"
    assert by_name["deepspeed-zero3.sbatch"].nodes == "llm-h100-[0-3]"
    assert by_name["torchrun-ddp.sbatch"].partition == "gpu"
    trn = check_scripts([REPO / "sbatch" / "trainium-optimum-neuron.sbatch"], TRN1)[0]
    assert (trn.partition, trn.nodes) == ("trainium", "trn1-trn1-[0-1]")
    _assert_gone(spy)


@pytest.mark.timeout(120)
def test_wrong_shapes_are_rejected_with_slurms_reason(spy, tmp_path):
    nine = _script(tmp_path, "nine-gpus", "--nodes=1", "--gres=gpu:9", "--time=01:00:00")
    five = _script(tmp_path, "five-nodes", "--nodes=5", "--gres=gpu:8", "--exclusive", "--time=01:00:00")
    long = _script(tmp_path, "too-long", "--nodes=1", "--gres=gpu:8", "--time=8-00:00:00")
    fits = _script(tmp_path, "fits", "--nodes=4", "--gres=gpu:8", "--time=7-00:00:00")
    results = {Path(r.script).stem: r for r in check_scripts([nine, five, long, fits], H100)}
    assert results["fits"].accepted, results["fits"].line()
    assert not results["nine-gpus"].accepted
    assert results["nine-gpus"].reason == "Requested node configuration is not available"
    assert not results["five-nodes"].accepted
    assert results["five-nodes"].reason == "Node count specification invalid"
    assert not results["too-long"].accepted
    assert "time limit" in results["too-long"].reason
    for r in results.values():
        assert r.line().startswith(str(tmp_path)) and "\n" not in r.line()

    nccl = check_scripts([REPO / "sbatch" / "nccl-allreduce.sbatch"], TRN1)[0]
    assert not nccl.accepted
    assert nccl.reason == "Invalid generic resource (gres) specification"
    assert nccl.line().endswith(f"rejected by cluster trn1 (Slurm {nccl.slurm}): Invalid generic resource (gres) "
                                "specification")
    _assert_gone(spy)


@pytest.mark.timeout(120)
def test_cli_lines_exit_codes_and_one_line_errors(cli, spy, tmp_path):
    code, out, err = cli("sbatch", "check", str(REPO / "sbatch" / "nccl-allreduce.sbatch"),
                         str(REPO / "sbatch" / "nccl-allreduce.yaml"), "--cluster", str(H100))
    assert code == 0, err
    lines = out.splitlines()
    judge = f"Slurm {slurm_for('26.05').version()}"  # the manifests' slurm_version where it is here
    assert len(lines) == 2 and all(f"accepted by cluster llm ({judge}): partition gpu, nodes llm-h100-[0-1]" in x
                                   for x in lines)

    code, out, err = cli("sbatch", "check", str(REPO / "sbatch" / "nccl-allreduce.sbatch"), "--cluster", str(TRN1))
    assert code == 1 and f"rejected by cluster trn1 ({judge}): Invalid generic resource (gres) specification" in out

    code, out, err = cli("sbatch", "check", str(REPO / "sbatch" / "torchrun-ddp.sbatch"), "--cluster", str(H100),
                         "--partition", "cpu")
    assert code == 1 and "rejected" in out

    started = len(spy)
    missing = tmp_path / "nope.yaml"
    code, out, err = cli("sbatch", "check", str(REPO / "sbatch" / "nccl-allreduce.sbatch"), "--cluster", str(missing))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("slinkyml: error: --cluster: ")
    assert "cannot read" in err and "Traceback" not in err

    bad_job = tmp_path / "bad.yaml"
    bad_job.write_text("name: x\nnodes: 0\nentry: {script: /bin/true}\n")
    for argv, needle in (([str(tmp_path / "missing.sbatch"), "--cluster", str(H100)], "missing.sbatch"),
                         ([str(bad_job), "--cluster", str(H100)], "nodes"),
                         ([str(REPO / "sbatch" / "nccl-allreduce.sbatch"), "--cluster", str(H100),
                           "--partition", "nope"], "--partition")):
        code, out, err = cli("sbatch", "check", *argv)
        assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert len(spy) == started, "a bad argument must not start a slurmctld"
    _assert_gone(spy)


@pytest.mark.timeout(60)
def test_own_munged_when_none_answers(spy, tmp_path):
    results = check_scripts([REPO / "sbatch" / "torchrun-ddp.sbatch"], H100,
                            munge_socket=tmp_path / "no-munged-here.socket")
    assert results[0].accepted, results[0].line()
    _assert_gone(spy)
    directory, _pid, pids = spy[0]
    assert len(pids) >= 2  # munged and slurmctld (+ slurmscriptd), all gone


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_the_controller_and_removes_its_directory(sig):
    # Ctrl-C's disposition in a terminal: a test run started from a background job inherits SIGINT
    # ignored (POSIX), and Python then installs no KeyboardInterrupt handler, so [SIGINT] never arrived
    code = textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from slinkyml.cluster import load_spec
        from slinkyml.jobs.shapecheck import ThrowawayController
        with ThrowawayController(load_spec({str(H100)!r})) as ctl:
            ctld = next(d for d in ctl._daemons if d.name == "slurmctld")
            print(ctl.dir, ctld.pid, flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)
    first = proc.stdout.readline().split()
    assert len(first) == 2, proc.stderr.read()
    directory, pid = Path(first[0]), int(first[1])
    assert directory.is_dir() and is_alive(pid)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    deadline = time.monotonic() + 5
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_alive(pid)
    assert not directory.exists()


def test_conf_declares_the_rendered_node_sets(tmp_path):
    from slinkyml.cluster.workers import slurmd_resources
    from slinkyml.instances import get_instance_type

    spec = load_spec(H100)
    conf = render_slurm_conf(spec, state_dir=tmp_path, port=40001, slurmd_port=40002,
                             munge_socket=Path("/run/munge/munge.socket.2"), user="root", host="ctl")
    lines = conf.splitlines()
    gpu = next(x for x in lines if x.startswith("NodeName=llm-h100-[0-3] "))
    p5 = get_instance_type("p5.48xlarge")
    # CPUs and memory: the rendered container's limits (the operator's POD_CPUS/POD_MEMORY)
    limits = slurmd_resources(spec.node_sets[0])["limits"]
    limit_mib = int(limits["memory"].removesuffix("Mi"))
    assert f"CPUs={limits['cpu']} " in gpu and f"RealMemory={limit_mib} " in gpu
    assert int(limits["cpu"]) < p5.vcpus
    assert limit_mib < p5.memory_gib * 1024
    assert "Gres=gpu:h100:8" in gpu and "Features=h100,nvlink,p5_48xlarge,efa" in gpu
    assert gpu.endswith("State=CLOUD")
    assert "NodeSet=llm-h100 Nodes=llm-h100-[0-3]" in lines
    assert "PartitionName=gpu Nodes=llm-h100 Default=YES MaxTime=7-00:00:00 OverSubscribe=EXCLUSIVE" in lines
    assert "GresTypes=gpu" in lines and "AccountingStorageType=accounting_storage/none" in lines
    assert "SlurmctldPort=40001" in lines and f"StateSaveLocation={tmp_path / 'state'}" in lines
    assert "Nodes=trn1" not in conf


def test_parse_test_only_answers():
    ok = parse_test_only("a.sbatch", "llm", 0, "sbatch: Job 7 to start at 2026-01-01T00:00:00 using 384 "
                         "processors on nodes llm-h100-[0-1] in partition gpu\n")
    assert (ok.accepted, ok.nodes, ok.partition, ok.cpus) == (True, "llm-h100-[0-1]", "gpu", 384)
    # a real 26.05.5 sbatch --test-only, word for word ("a using" is Slurm's)
    new = parse_test_only("a.sbatch", "llm", 0, "sbatch: Job 1 to start at 2026-11-30T19:12:36 a using 384 "
                          "processors on nodes llm-h100-[0-1] in partition gpu\n")
    assert (new.accepted, new.nodes, new.partition, new.cpus) == (True, "llm-h100-[0-1]", "gpu", 384)
    bad = parse_test_only("a.sbatch", "llm", 1, "\nallocation failure: Requested node configuration is not "
                          "available\n")
    assert (bad.accepted, bad.reason) == (False, "Requested node configuration is not available")
    gres = parse_test_only("a.sbatch", "trn1", 1, "sbatch: error: Invalid generic resource (gres) specification")
    assert gres.reason == "Invalid generic resource (gres) specification"
    assert os.linesep not in gres.line()
    judged = replace(gres, slurm="26.05.5").line()
    assert judged == "a.sbatch: rejected by cluster trn1 (Slurm 26.05.5): Invalid generic resource (gres) specification"


def test_the_specs_release_judges_when_it_is_here():
    """A spec's slurm_version with no root here falls back to the machine's Slurm; a release we do not
    build at all (25.11) too."""
    assert slurm_for("25.11").is_system
    assert slurm_for("26.05").is_system == (not roots.root_ok("26.05", roots.ROOTS_DIR / "sid-26.05"))
