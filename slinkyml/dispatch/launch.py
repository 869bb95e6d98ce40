"""A JobSpec dispatched from Python through submitit, as the sbatch script would run it.

One task per node runs :class:`NodeLauncher`: the per-node launcher argv with the script's
environment, the stop signals forwarded, the batch script's own decision (slurm/causes.py) on why
it ended, node 0 requeueing once per event and returning ``final.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from slinkyml.dispatch import checkpointable
from slinkyml.dispatch.executor import Executor, Job, _dependency_string, _translate_errors
from slinkyml.dispatch.task import TaskCall
from slinkyml.errors import SpecError
from slinkyml.jobs.presets import spec_preset_env
from slinkyml.jobs.render import deepspeed_config_for, launch_argv
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.jobs.spec import JobSpec, interpreter
from slinkyml.slurm import causes
from slinkyml.slurm.protocol import (
    ENV_CHECKPOINT_DIR,
    ENV_DS_CONFIG,
    ENV_LOG_DIR,
    ENV_RESTART,
    ENV_SIGNAL,
    die_with_parent,
    events_file,
    failure_marker,
    preempted_marker,
)
from slinkyml.train import FINAL_FILE, METRICS_FILE


def executor_for(spec: JobSpec, *, folder: str | os.PathLike[str] | None = None, **overrides: Any) -> Executor:
    """An Executor with the spec's request: one task per node (the launcher), its requeue policy."""
    request = replace(SlurmJobRequest.from_spec(spec), tasks_per_node=1, output=None)
    options: dict[str, Any] = dict(
        folder=folder, request=request, max_restarts=spec.requeue.max_restarts,
        additional_parameters={"signal": f"{request.signal}@{request.signal_grace_s}", "requeue": True})
    options.update(overrides)
    return Executor(**options)


def prepare(spec: JobSpec) -> tuple[JobSpec, dict[str, str]]:
    """The spec as the nodes will run it, and the environment the sbatch script would export."""
    if spec.launcher == "deepspeed" and spec.deepspeed_via == "deepspeed":
        raise SpecError("deepspeed_via", "DeepSpeed's own launcher (it calls srun from the batch node) cannot "
                                         "run inside a submitit task; use deepspeed_via: torchrun from Python")
    if spec.launcher in ("neuron",):
        raise SpecError("launcher", "the neuron launcher is only supported through sbatch (precompile step)")
    spec, _ = interpreter(spec)  # unnamed: the notebook's own interpreter
    log_dir = Path(spec.log_dir).absolute()
    log_dir.mkdir(parents=True, exist_ok=True)
    env = spec_preset_env(spec)
    env.update({ENV_SIGNAL: spec.requeue.signal, ENV_LOG_DIR: str(log_dir)})
    if spec.checkpoint_dir:
        env[ENV_CHECKPOINT_DIR] = str(Path(spec.checkpoint_dir).absolute())
    if spec.launcher == "deepspeed":
        config = deepspeed_config_for(spec)
        if isinstance(config, str):
            env[ENV_DS_CONFIG] = config
        else:
            path = log_dir / f"ds_config-{uuid.uuid4().hex[:8]}.json"
            path.write_text(json.dumps(config, indent=2, sort_keys=True))
            env[ENV_DS_CONFIG] = str(path)
    env.update(spec.env)
    return spec.replace(log_dir=str(log_dir)), env


class NodeLauncher:
    """Runs on each node: the per-node launcher, signal forwarding, requeue, final metrics."""

    def __init__(self, spec: JobSpec, env: dict[str, str]):
        self.spec = spec
        self.env = env

    def __call__(self) -> dict[str, Any] | None:
        node = int(os.environ.get("SLURM_NODEID", "0"))
        restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        job_id = os.environ.get("SLURM_JOB_ID", "0")
        head, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        argv = launch_argv(self.spec, head, port, rdzv_id=f"{job_id}-{restart}", node_rank=node)
        env = {**os.environ, **self.env, ENV_RESTART: str(restart)}
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
            env.pop(key, None)  # torchrun sets its own per worker
        print(f"slinkyml: node {node} restart {restart}: {' '.join(argv)}", flush=True)
        # its own session (a signal to this task is forwarded once, below), but it dies with us
        child = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=die_with_parent)
        got: list[int] = []
        self.signalled_at: float | None = None

        def forward(signum: int, _frame: Any) -> None:
            got.append(signum)
            self.signalled_at = self.signalled_at or time.time()
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

        sig = getattr(signal, f"SIG{self.spec.requeue.signal}")
        for s in {sig, signal.SIGTERM}:
            signal.signal(s, forward)
        started = time.time()
        status = child.wait()
        marker = preempted_marker(self.spec.log_dir, job_id, restart)
        if got or marker.exists():
            time.sleep(0.5)  # let the marker land on a shared filesystem
        if status == 0 and not got and not marker.exists():
            return read_final(self.spec) if node == 0 else None
        stop = signal.Signals(got[0]).name if got else ""
        if not stop and marker.exists():  # what reached the ranks (an empty marker: the job's signal)
            stop = f"SIG{marker.read_text().strip() or self.spec.requeue.signal}"
        decision = causes.decide(
            status=status, job_id=job_id, stop_signal=stop, signal_at=self.signalled_at, warn_signal=sig.name,
            grace_s=self.spec.requeue.grace_seconds, failure_marker=failure_marker(self.spec.log_dir, job_id, restart),
            preempted_marker=marker, checkpoint_dir=self.env.get(ENV_CHECKPOINT_DIR, ""), run_started=started,
            requeue_on=self.spec.requeue.on, restart=restart, max_restarts=self.spec.requeue.max_restarts)
        what = f"{decision.cause}: {decision.detail}"
        # the first node to decide acts for the job (the others may be killed by then: srun ends a step
        # when one task fails); its one event line and one requeue per restart
        if decision.action == causes.SLURM_DECIDES:
            _record_event_once(self.spec.log_dir, job_id, restart, f"r{restart} slurm {what}")
            sys.exit(0)  # no result: Slurm requeues or ends the job
        if decision.action == causes.REQUEUE:
            if _record_event_once(self.spec.log_dir, job_id, restart, f"r{restart} requeue {what}"):
                checkpointable._requeue_once()
            sys.exit(0)
        _record_event_once(self.spec.log_dir, job_id, restart, f"r{restart} failed {what}")
        if decision.cause == causes.TIME_LIMIT:  # held to its end: Slurm records the job TIMEOUT
            while True:
                time.sleep(1)
        raise RuntimeError(f"{decision.message}: {decision.detail}")


def _record_event_once(log_dir: str, job_id: str, restart: int, line: str) -> bool:
    """Append the run's decision line unless another node already did; True if this one did."""
    try:
        os.close(os.open(Path(log_dir) / f".decided-{job_id}-r{restart}", os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                         0o644))
    except FileExistsError:
        return False
    except OSError:
        pass
    _record_event(log_dir, job_id, line)
    return True


def _record_event(log_dir: str, job_id: str, line: str) -> None:
    try:
        with open(events_file(log_dir, job_id), "a") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


def metrics_dir(spec: JobSpec) -> Path:
    """Where the training module writes metrics: the checkpoint dir, else the log dir."""
    return Path(spec.checkpoint_dir or spec.log_dir).absolute()


def read_final(spec: JobSpec) -> dict[str, Any] | None:
    path = metrics_dir(spec) / FINAL_FILE
    return json.loads(path.read_text()) if path.exists() else None


class TrainingJob(Job):
    """A JobSpec run: ``result()`` is the final metrics; ``metrics()`` every step so far."""

    spec: JobSpec

    def metrics(self) -> list[dict[str, Any]]:
        path = metrics_dir(self.spec) / METRICS_FILE
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def final(self, timeout: float | None = None) -> dict[str, Any]:
        return self.result(timeout)


def launch(spec: JobSpec, *, folder: str | os.PathLike[str] | None = None, **overrides: Any) -> TrainingJob:
    """Submit ``spec`` (a JobSpec) through submitit: the notebook twin of ``slinkyml sbatch submit``."""
    spec, env = prepare(spec)
    executor = executor_for(spec, folder=folder, **overrides)
    backend = executor._backend(checkpointable=False, name=spec.name,
                                dependency=_dependency_string(dependency=",".join(spec.dependencies) or None))
    backend.parameters["use_srun"] = True
    task = TaskCall(NodeLauncher(spec, env), distributed=True, timeout_min=executor.time_min,
                    max_restarts=spec.requeue.max_restarts)
    with _translate_errors():
        sjob = backend.submit(task)
    job = TrainingJob(sjob, executor, name=spec.name, checkpointable=True)
    job.spec = spec
    return job
