"""Following a job: its state (``scontrol show job``, then ``sacct`` once purged), logs by rank, waiting.

A requeued job goes RUNNING → PENDING → RUNNING again under the same id; "done" means a state
from :data:`FINISHED` with no requeue pending.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from slinkyml.slurm.errors import JobNotFound

FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED")


@dataclass(frozen=True)
class JobState:
    job_id: int
    state: str
    reason: str = ""
    run_time: str = ""
    restarts: int = 0
    exit_code: str = ""
    nodes: str = ""
    stdout: str = ""
    name: str = ""

    @property
    def finished(self) -> bool:
        return self.state.split()[0] in FINISHED


def job_state(slurm: Any, job_id: int) -> JobState:
    try:
        records = slurm.show("job", str(job_id))
    except JobNotFound:
        records = []
    if records:
        r = records[0]
        return JobState(job_id, r.get("JobState", "UNKNOWN"), r.get("Reason", ""), r.get("RunTime", ""),
                        int(r.get("Restarts", "0") or 0), r.get("ExitCode", ""), r.get("NodeList", ""),
                        r.get("StdOut", ""), r.get("JobName", ""))
    out = slurm.run("sacct", ["-X", "-n", "-P", "-j", str(job_id),
                              "-o", "State,ExitCode,Elapsed,NodeList,JobName"]).stdout.strip().splitlines()
    if not out:
        raise JobNotFound(f"job {job_id} is unknown to slurmctld and to accounting")
    state, code, elapsed, nodes, name = (out[-1].split("|") + [""] * 5)[:5]
    return JobState(job_id, state.split()[0], "", elapsed, 0, code, nodes, "", name)


def log_files(stdout: str, job_id: int) -> list[Path]:
    """Step logs next to the batch log: ``<name>-<job>-r<restart>-node<k>.log``, oldest restart first."""
    if not stdout:
        return []
    folder = Path(stdout).parent
    files = list(folder.glob(f"*-{job_id}-r*-*.log"))

    def key(p: Path) -> tuple[int, int]:
        m = re.search(rf"-{job_id}-r(\d+)-\D*(\d+)\.log$", p.name)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    return sorted(files, key=key)


def newest_lines(stdout: str, job_id: int, lines: int = 5) -> list[str]:
    """The last lines of the newest restart's step logs, each labelled with its node/task."""
    files = log_files(stdout, job_id)
    if not files:
        return []
    restart = re.search(r"-r(\d+)-", files[-1].name).group(1)  # type: ignore[union-attr]
    out = []
    for path in files:
        if f"-r{restart}-" not in path.name:
            continue
        label = re.search(r"-r\d+-(\D*\d+)\.log$", path.name)
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        out += [f"[{label.group(1) if label else path.name} r{restart}] {line}" for line in tail]
    return out


def wait(slurm: Any, job_id: int, *, timeout: float | None = None, poll: float = 1.0,
         on_update: Callable[[JobState], None] | None = None,
         until: Callable[[JobState], bool] | None = None) -> JobState:
    """Poll until the job finishes (or ``until`` says so); returns the last state."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = until or (lambda s: s.finished)
    while True:
        state = job_state(slurm, job_id)
        if on_update:
            on_update(state)
        if done(state):
            return state
        if deadline is not None and time.monotonic() > deadline:
            from slinkyml.errors import SlinkyError

            raise SlinkyError(f"job {job_id} still {state.state} after {timeout:g} s")
        time.sleep(poll)


def follow(slurm: Any, job_id: int, *, stream: TextIO = sys.stdout, lines: int = 4,
           poll: float = 2.0, timeout: float | None = None) -> JobState:
    """Print state changes and new log lines until the job ends."""
    shown: set[str] = set()
    last: list[str] = [""]

    def update(state: JobState) -> None:
        head = f"job {job_id} {state.state}"
        if state.state.startswith("PENDING"):
            head += f" (reason: {state.reason})"
        else:
            head += f" {state.run_time} restarts={state.restarts} nodes={state.nodes}"
        if head != last[0]:
            print(head, file=stream, flush=True)
            last[0] = head
        for line in newest_lines(state.stdout, job_id, lines):
            if line not in shown:
                shown.add(line)
                print("  " + line, file=stream, flush=True)

    return wait(slurm, job_id, timeout=timeout, poll=poll, on_update=update)
