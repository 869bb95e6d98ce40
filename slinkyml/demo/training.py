"""The demo's training run: a 2-node torchrun job of a tiny GPT, rendered, submitted, awaited."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from slinkyml.errors import SlinkyError
from slinkyml.jobs.follow import wait
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit
from slinkyml.slurm.runner import Slurm
from slinkyml.slurm.states import State
from slinkyml.train import FINAL_FILE


def demo_spec(workdir: str | os.PathLike[str], *, steps: int = 8, nodes: int = 2,
              python: str | None = None) -> JobSpec:
    work = Path(workdir)
    return JobSpec.from_dict({
        "name": "slinkyml-demo-train", "nodes": nodes, "mem_per_node": "1G", "time_limit": "00:10:00",
        "launcher": "torchrun", "python": python or sys.executable,
        "entry": {"module": "slinkyml.train",
                  "args": ["--model", "tiny", "--steps", str(steps), "--checkpoint-every", "4"]},
        "checkpoint_dir": str(work / "checkpoints"), "log_dir": str(work / "logs"),
        "requeue": {"signal": "USR2", "grace_seconds": 30, "max_restarts": 1},
    })


def run_demo_training(slurm: Slurm, workdir: str | os.PathLike[str], *, steps: int = 8,
                      timeout: float = 300.0) -> str:
    """Render + submit the 2-node job, wait, and return a short summary (steps, loss, all-reduce)."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    spec = demo_spec(work, steps=steps)
    result = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=work)
    state = wait(slurm, result.job_id, timeout=timeout, poll=1.0)
    final_path = Path(spec.checkpoint_dir or ".") / FINAL_FILE
    if state.state != State.COMPLETED or not final_path.exists():
        raise SlinkyError(f"demo training job {result.job_id} ended {state.state} "
                          f"(exit {state.exit_code}); see {result.script_path.parent}")
    final = json.loads(final_path.read_text())
    check = final["allreduce"]
    return (f"job {result.job_id}: {final['world_size']} ranks on {state.nodes}, {final['steps']} steps, "
            f"loss {final['first_loss']:.3f} -> {final['final_loss']:.3f}, all-reduce sum "
            f"{check['sum']:g} (expected {check['expected']:g}) {'ok' if check['ok'] else 'FAILED'}")
