"""Following a job: its state (``scontrol show job``, then ``sacct`` once purged), logs by rank, waiting.

A requeued job goes RUNNING → PENDING → RUNNING again under the same id; "done" means a state
from :data:`slinkyml.slurm.states.TERMINAL` with no requeue pending.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TextIO

from slinkyml.errors import SlinkyError
from slinkyml.jobs.logs import JobLogs, LogTail, locate
from slinkyml.slurm import records, states
from slinkyml.slurm.errors import JobNotFound
from slinkyml.slurm.runner import Slurm

#: a job Slurm holds after a failed launch never starts by itself: :func:`wait` says so after this long
HELD_FAIL_S = 60.0


class JobHeldBySlurm(SlinkyError):
    """The job is held by Slurm after a failed launch ("launch failed requeued held"): it waits
    for someone to release it, so waiting longer is pointless."""


def unusable_nodes(slurm: Slurm) -> str:
    """``; nodes not usable: n1 drained: Duplicate jobid, ...`` (empty when all are usable)."""
    nodes = records.sinfo(slurm, ("NodeList", "StateLong", "Reason"), ["-N", "-t", "drain,drained,draining,down,fail"],
                          check=False, retries=0, timeout=15)
    rows = sorted({f"{n['NodeList']} {n['StateLong']}: {n['Reason']}" for n in nodes})
    return ("; nodes not usable: " + ", ".join(rows)) if rows else ""


def release_requeued(slurm: Slurm, job_id: int | str) -> bool:
    """Start a job that Slurm holds after its requeue (BeginTime) now, unless slurmctld still has
    messages for slurmd on their way or waiting for a retry (sdiag's agents): the previous run's kill,
    delivered after the next run of the same job id started on that node, ends it (a lost node's kill
    is retried 60 s later, once it answers; Slurm's own 120 s hold outlasts that for this reason).
    Returns whether the job was released; a caller that gets False asks again later."""
    backlog = records.agent_backlog(slurm.run("sdiag", [], check=False, retries=0, timeout=15).stdout)
    if backlog != 0:
        return False
    slurm.run("scontrol", ["update", f"JobId={job_id}", "StartTime=now"], check=False, retries=0, timeout=15)
    return True


@dataclass(frozen=True)
class JobState:
    job_id: int | str  # a job's number, or an array task's JOBID_TASK
    state: str
    reason: str = ""
    run_time: str = ""
    restarts: int = 0
    exit_code: str = ""
    nodes: str = ""
    stdout: str = ""
    name: str = ""
    workdir: str = ""

    @property
    def finished(self) -> bool:
        return states.is_terminal(self.state)

    def to_dict(self) -> dict[str, object]:
        """The fields, and whether and how it ended (``jobs status --json``)."""
        return {**asdict(self), "finished": self.finished, "exit_status": self.exit_status}

    @property
    def exit_status(self) -> int:
        """The status to exit with, as ``sbatch --wait`` does: the job's exit code, 128+signal when a
        signal ended it, 1 for any other unsuccessful end, 0 for COMPLETED."""
        code, _, signal = self.exit_code.partition(":")
        if code.isdigit() and int(code):
            return int(code)
        if signal.isdigit() and int(signal):
            return 128 + int(signal)
        return 0 if self.state.split()[0] == states.State.COMPLETED else 1


def job_state(slurm: Slurm, job_id: int | str, name: str | None = None) -> JobState:
    """The job's state. ``name``: the name it was submitted under; a job of that id with another
    name is not it (a controller restarted from older state hands the lost job's id out again)."""
    try:
        shown = slurm.show("job", str(job_id))
    except JobNotFound:
        shown = []
    if shown:
        r = shown[0]
        state = JobState(job_id, r.get("JobState", states.State.UNKNOWN), r.get("Reason", ""), r.get("RunTime", ""),
                         int(r.get("Restarts", "0") or 0), r.get("ExitCode", ""), r.get("NodeList", ""),
                         r.get("StdOut", ""), r.get("JobName", ""), r.get("WorkDir", ""))
    else:
        state = accounting_state(slurm, job_id)
        if not state.finished:  # slurmctld forgets only ended jobs: this one it lost (restarted from older state)
            raise JobNotFound(f"job {job_id} is unknown to slurmctld while accounting still has it {state.state}: "
                              "slurmctld lost it (a controller restart from older saved state)")
    if name is not None and state.name and not records.same_job_name(name, state.name):
        raise JobNotFound(f"job {job_id} is unknown to slurmctld: its id now belongs to another job "
                          f"({state.name!r}, not {name!r}): slurmctld lost it (a controller restart from older "
                          "saved state) and handed the id out again")
    return state


def accounting_state(slurm: Slurm, job_id: int | str) -> JobState:
    """The job as sacct remembers it (slurmctld forgets it ``MinJobAge`` seconds after it ends)."""
    fields = ["State", "ExitCode", "Elapsed", "NodeList", "JobName", "WorkDir", "Reason"]
    if slurm.version.sacct_knows_stdout:
        fields.append("StdOut")
    rows = records.sacct(slurm, fields, ["-X", "-D", "-j", str(job_id)])
    if not rows:
        raise JobNotFound(f"job {job_id} is unknown to slurmctld and to accounting")
    values = rows[-1]  # -D lists every run of a requeued job: the last one is the job now
    return JobState(job_id, values["State"].split()[0] if values["State"] else states.State.UNKNOWN,
                    records.reason(values["Reason"]), values["Elapsed"],
                    max(0, len(rows) - 1), values["ExitCode"], values["NodeList"], values.get("StdOut", ""),
                    values["JobName"], values["WorkDir"])


def find_logs(slurm: Slurm, state: JobState) -> JobLogs:
    """The job's log files (record first, then what Slurm said about it)."""
    return locate(state.job_id, conf=getattr(slurm, "conf", None), stdout=state.stdout,
                  workdir=state.workdir, name=state.name)


def wait(slurm: Slurm, job_id: int, *, timeout: float | None = None, poll: float = 1.0,
         on_update: Callable[[JobState], None] | None = None,
         until: Callable[[JobState], bool] | None = None, held_fail_after: float = HELD_FAIL_S,
         name: str | None = None) -> JobState:
    """Poll until the job finishes (or ``until`` says so); returns the last state.

    Raises :class:`JobHeldBySlurm` once the job has been held by Slurm after a failed launch for
    ``held_fail_after`` seconds (e.g. a controller restarted from older state re-launched it where
    its first run still ran: "Duplicate jobid"), naming the hold and the nodes not usable.
    ``name``: see :func:`job_state`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = until or (lambda s: s.finished)
    held_since: float | None = None
    while True:
        state = job_state(slurm, job_id, name)
        if on_update:
            on_update(state)
        if done(state):
            return state
        if state.state == states.State.PENDING and states.is_held_by_slurm(state.reason):
            held_since = time.monotonic() if held_since is None else held_since
            if time.monotonic() - held_since >= held_fail_after:
                raise JobHeldBySlurm(f"job {job_id} is held by Slurm ({state.reason}) and will not start by itself"
                                     f"{unusable_nodes(slurm)}; `scontrol release {job_id}` once its nodes "
                                     "are back (the run resumes from its newest checkpoint)")
        else:
            held_since = None
        if deadline is not None and time.monotonic() > deadline:
            raise SlinkyError(f"job {job_id} still {state.state} after {timeout:g} s")
        time.sleep(poll)


def follow(slurm: Slurm, job_id: int, *, stream: TextIO | None = None, poll: float = 2.0,
           timeout: float | None = None, rank: int | None = None) -> JobState:
    """Print state changes and every new log line (batch log and every rank's, by byte offset:
    nothing dropped, nothing repeated) until the job ends."""
    stream = stream or sys.stdout  # looked up per call: redirect_stdout must reach it
    tail = LogTail()
    last: list[str] = [""]

    def show_new_lines(state: JobState, final: bool = False) -> None:
        logs = find_logs(slurm, state)
        files = [] if logs.batch_log is None or rank is not None else [("batch", logs.batch_log)]
        files += [(f"{r.name} r{r.restart}", r.path) for r in logs.ranks if rank is None or r.index == rank]
        for label, path in files:
            for line in tail.read(path, final=final):
                print(f"  [{label}] {line}", file=stream, flush=True)

    def update(state: JobState) -> None:
        head = f"job {job_id} {state.state}"
        if state.state.startswith(states.State.PENDING):
            head += f" (reason: {state.reason})"
        else:
            head += f" restarts={state.restarts} nodes={state.nodes}"
        if head != last[0]:  # a change of state, not of run time
            print(f"{head} {state.run_time}".rstrip(), file=stream, flush=True)
            last[0] = head
        show_new_lines(state)

    final = wait(slurm, job_id, timeout=timeout, poll=poll, on_update=update)
    show_new_lines(final, final=True)
    return final
