"""torchrun as slinkyml launches it (CPU, one node, 2 workers): the preemption signal sent to the agent
alone is forwarded to the workers, which checkpoint and leave the marker while the agent waits for
them; plain torchrun (no --signals-to-handle) dies of it, and its workers die with it."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_until

from slinkyml.jobs.render import launch_argv
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm import protocol
from slinkyml.train import METRICS_FILE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path: Path, *, plain: bool) -> tuple[subprocess.Popen, JobSpec]:
    spec = JobSpec.from_dict({
        "name": "sig", "nodes": 1, "procs_per_node": 2, "python": sys.executable,
        "entry": {"module": "slinkyml.train", "args": ["--steps", "400", "--step-sleep", "0.05",
                                                       "--checkpoint-every", "1000"]},
        "checkpoint_dir": str(tmp_path / "ckpt"), "log_dir": str(tmp_path),
        "requeue": {"signal": "USR2", "grace_seconds": 45}})
    argv = launch_argv(spec, "127.0.0.1", _port(), rdzv_id="sig")
    assert argv[argv.index("--signals-to-handle") + 1] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2"
    assert argv[argv.index("--shutdown-timeout") + 1] == "45"
    if plain:  # torchrun with its defaults, as the templates ran it before
        i = argv.index("--signals-to-handle")
        del argv[i:i + 4]
    env = {**os.environ, "SLURM_JOB_ID": "7", protocol.ENV_LOG_DIR: str(tmp_path),
           protocol.ENV_SIGNAL: "USR2", protocol.ENV_CHECKPOINT_DIR: spec.checkpoint_dir}
    env.pop("TORCHELASTIC_SIGNALS_TO_HANDLE", None)
    agent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    return agent, spec


def _workers(agent_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(agent_pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _wait_for_steps(spec: JobSpec, agent: subprocess.Popen, steps: int) -> None:
    metrics = Path(spec.checkpoint_dir) / METRICS_FILE

    def trained() -> bool:
        assert agent.poll() is None, agent.stdout.read()
        return metrics.exists() and len(metrics.read_text().splitlines()) >= steps

    wait_until(f"the workers to train {steps} steps", trained, timeout=120, every=0.2)


def _kill(agent: subprocess.Popen) -> None:
    """Test clean-up only: the agent and whatever it started, if the test failed half-way."""
    if agent.poll() is None:
        for pid in _workers(agent.pid):
            os.kill(pid, signal.SIGKILL)
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_agent_forwards_the_preemption_signal_and_waits_for_the_checkpoint(tmp_path):
    agent, spec = _start(tmp_path, plain=False)
    try:
        _wait_for_steps(spec, agent, 3)
        workers = _workers(agent.pid)
        assert len(workers) == 2
        os.kill(agent.pid, signal.SIGUSR2)  # the agent only, as `scancel --signal=USR2` or srun delivers it
        time.sleep(0.3)
        assert agent.poll() is None or not any(map(_alive, workers)), "the agent died before its workers"
        out, _ = agent.communicate(timeout=120)
    finally:
        _kill(agent)
    assert "preempted at step" in out, out[-3000:]
    marker = protocol.preempted_marker(tmp_path, "7", 0)
    assert marker.read_text().strip() == "USR2"
    stopped = json.loads((Path(spec.checkpoint_dir) / METRICS_FILE).read_text().splitlines()[-1])["step"]
    assert (Path(spec.checkpoint_dir) / f"ckpt-{stopped:08d}" / "state.pt").exists()
    assert "SignalException: Process" in out and "got signal: 12" in out  # the agent handled it
    assert "forcefully exiting via" not in out  # no worker needed SIGKILL
    assert not any(map(_alive, workers))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_plain_torchrun_dies_of_the_signal_and_takes_its_workers_along(tmp_path):
    agent, spec = _start(tmp_path, plain=True)
    try:
        _wait_for_steps(spec, agent, 2)
        workers = _workers(agent.pid)
        assert len(workers) == 2
        os.kill(agent.pid, signal.SIGUSR2)
        agent.wait(timeout=30)
        assert agent.returncode == -signal.SIGUSR2  # what the issue saw: exit 140 under srun
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_alive, workers)), "orphaned workers kept training after their agent died"
    finally:
        _kill(agent)
