"""The run protocol: what the batch script, the submitit launcher and the trainer agree on.

Signals (the job's --signal and Slurm's SIGTERM: checkpoint), the marker files the trainer leaves
per job and restart, and the events file, in one place so the three cannot drift; why a run ended
and whether it runs again is :mod:`slinkyml.slurm.causes`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from slinkyml.slurm import causes

# -- environment the launchers export and the trainer reads -----------------------------------------
ENV_SIGNAL = "SLINKYML_PREEMPT_SIGNAL"
ENV_RESTART = "SLINKYML_RESTART_COUNT"
ENV_LOG_DIR = "SLINKYML_LOG_DIR"
ENV_CHECKPOINT_DIR = "SLINKYML_CHECKPOINT_DIR"
ENV_DS_CONFIG = "SLINKYML_DEEPSPEED_CONFIG"

# -- signals ------------------------------------------------------------------------------------------
#: what torchrun handles by default; the preemption signal is added to it
TORCHELASTIC_DEFAULT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: Slurm's own "stop now" (scontrol requeue, GraceTime preemption, scancel): checkpoint only
SLURM_STOP_SIGNAL = "TERM"
#: torch's default agent shutdown timeout; never go below it
TORCHELASTIC_MIN_SHUTDOWN_S = 30


def torchrun_signals(preempt_signal: str) -> str:
    """``--signals-to-handle`` value: torch's defaults plus the job's preemption signal."""
    wanted = f"SIG{preempt_signal.upper().removeprefix('SIG')}"
    names = list(TORCHELASTIC_DEFAULT_SIGNALS)
    if wanted not in names:
        names.append(wanted)
    return ",".join(names)


def shutdown_timeout(grace_seconds: int) -> int:
    """torchrun's ``--shutdown-timeout``: at least the grace period the job asks Slurm for, so the
    agent never SIGKILLs a worker that is still writing its checkpoint."""
    return max(int(grace_seconds), TORCHELASTIC_MIN_SHUTDOWN_S)


def torchrun_signal_args(preempt_signal: str, grace_seconds: int) -> list[str]:
    return ["--signals-to-handle", torchrun_signals(preempt_signal),
            "--shutdown-timeout", str(shutdown_timeout(grace_seconds))]


# -- exit codes ---------------------------------------------------------------------------------------
#: the trainer stopped on a signal after checkpointing (its launcher may report a non-zero status)
EXIT_OK = 0
#: a requeue was wanted but no restarts are left; or a user error
EXIT_FAILED = 1

# -- requeue rule: the causes and their rules are data (slurm/causes.py, data/run_causes.json) -------
PREEMPTION = causes.PREEMPTION
NODE_FAILURE = causes.NODE_FAILURE
ANY_FAILURE = causes.ANY_FAILURE
USER_ERROR = causes.USER_ERROR
#: what ``requeue.on`` may list, and its default
REQUEUE_CAUSES = causes.requeue_causes()
DEFAULT_REQUEUE_ON = causes.default_requeue_on()

#: failure kinds a rank writes into its failure marker
USER = "user"
COMMUNICATION = "communication"

#: exception texts of collective/rendezvous failures: a peer went away, not a bug in the rank (a
#: pattern, compiled by ``re`` on first use: only a failing rank needs it, every render imports this)
COMMUNICATION_ERRORS = (
    r"Connection closed by peer|Connection reset by peer|Broken pipe|Socket Timeout|timed out|"
    r"DistNetworkError|DistStoreError|NCCL (?:error|communicator was aborted)|ProcessGroup.*abort|"
    r"Gloo connectFullMesh failed|ECONNREFUSED|Connection refused|No route to host|"
    r"RendezvousClosedError|RendezvousTimeoutError")


def failure_kind(exc: BaseException) -> str:
    """:data:`COMMUNICATION` for a lost peer/collective, :data:`USER` for anything else."""
    text = f"{type(exc).__name__}: {exc}"
    name = type(exc).__name__
    if name.startswith("Dist") or re.search(COMMUNICATION_ERRORS, text, re.I):
        return COMMUNICATION
    return USER


# -- files --------------------------------------------------------------------------------------------
def preempted_marker(log_dir: str | Path, job_id: str | int, restart: int | str) -> Path:
    return Path(log_dir) / f".preempted-{job_id}-r{restart}"


def failure_marker(log_dir: str | Path, job_id: str | int, restart: int | str) -> Path:
    return Path(log_dir) / f".failed-{job_id}-r{restart}"


def record_failure(log_dir: str | Path, job_id: str | int, restart: int | str, rank: int, exc: BaseException) -> None:
    """Append this rank's failure to the run's failure marker: ``KIND rank N on HOST: Type: message``.
    Every failing rank appends (O_APPEND: whole lines, in the order they failed), so the first line
    is the first failure; the decision and ``jobs why`` read it (the trainer and submit() write it)."""
    import socket  # lazy: only a failing rank needs it; every render imports this module

    message = (str(exc).strip().splitlines() or [""])[0][:300]
    line = f"{failure_kind(exc)} rank {rank} on {socket.gethostname()}: {type(exc).__name__}: {message}\n"
    try:
        fd = os.open(failure_marker(log_dir, job_id, restart), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode(errors="replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def events_file(log_dir: str | Path, job_id: str | int) -> Path:
    """One line per restart or failure decision: ``r<restart> <action> <cause>: <detail>``."""
    return Path(log_dir) / f"slinkyml-{job_id}.events"


#: the same names as bash words, for the rendered batch script (``$log_dir``/``$SLURM_JOB_ID``/``$restart_count``)
SH_PREEMPTED_MARKER = '"$log_dir/.preempted-$SLURM_JOB_ID-r$restart_count"'
SH_FAILURE_MARKER = '"$log_dir/.failed-$SLURM_JOB_ID-r$restart_count"'
SH_EVENTS_FILE = '"$log_dir/slinkyml-$SLURM_JOB_ID.events"'
SH_STEP_ERRORS = '"$log_dir/.srun-$SLURM_JOB_ID-r$restart_count.err"'
#: each run's batch node and start (``r<restart> NODE EPOCH``): a restarted run checks its predecessor's
SH_BATCH_NODES = '"$log_dir/.batch-nodes-$SLURM_JOB_ID"'


def read_events(log_dir: str | Path, job_id: str | int) -> list[str]:
    """The job's decision lines, oldest first (empty when it has none)."""
    try:
        return [line for line in events_file(log_dir, job_id).read_text(errors="replace").splitlines() if line]
    except OSError:
        return []


def last_reason(log_dir: str | Path, job_id: str | int) -> str:
    """The newest decision line, or ``""``."""
    events = read_events(log_dir, job_id)
    return events[-1] if events else ""


# -- no orphans ---------------------------------------------------------------------------------------
def die_with_parent() -> None:
    """SIGKILL this process when its launcher (torchrun's agent) dies: a worker re-parented to PID 1
    escapes proctrack/linuxproc and would train on outside Slurm."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    parent = os.getppid()
    import ctypes  # lazy: only the trainer calls this; ctypes (and signal) cost every render ~3 ms
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


__all__ = [
    "ANY_FAILURE", "COMMUNICATION", "USER_ERROR", "DEFAULT_REQUEUE_ON", "die_with_parent", "ENV_CHECKPOINT_DIR", "ENV_DS_CONFIG",
    "ENV_LOG_DIR", "ENV_RESTART", "ENV_SIGNAL", "EXIT_FAILED", "EXIT_OK", "NODE_FAILURE", "PREEMPTION", "REQUEUE_CAUSES", "SLURM_STOP_SIGNAL", "USER",
    "events_file", "failure_kind", "failure_marker", "record_failure", "last_reason", "preempted_marker", "read_events",
    "shutdown_timeout", "torchrun_signal_args", "torchrun_signals",
]
