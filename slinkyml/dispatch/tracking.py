"""Batched job tracking: one query per refresh for every tracked job, whatever their number.

One ``squeue`` per refresh for the due jobs, ``sacct`` for purged ones, terminal states cached;
while slurmctld is down the last states are kept and retried with backoff.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

from slinkyml.slurm import Slurm, records, states
from slinkyml.slurm.errors import SlurmError

#: a job squeue and sacct have not shown yet (or no longer show)
_NOT_SEEN = (states.State.SUBMITTED, states.State.UNKNOWN)


@dataclass(frozen=True)
class JobInfo:
    """What Slurm last said about one job (or array task)."""

    job_id: str
    state: str = states.State.UNKNOWN
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    nodes: str = ""
    source: str = ""  # "squeue" or "sacct"
    seen_at: float = 0.0

    @property
    def terminal(self) -> bool:
        return self.state in states.TERMINAL

    @property
    def failed(self) -> bool:
        return self.state in states.FAILED

    def describe(self) -> str:
        """One line for an error message: state, exit code/signal, reason."""
        parts = [f"job {self.job_id} {self.state}"]
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}" + (f" (signal {self.signal})" if self.signal else ""))
        if self.reason and self.reason not in ("None", "(null)"):
            parts.append(f"reason {self.reason}")
        if self.nodes and self.nodes not in ("None assigned", "(null)"):
            parts.append(f"on {self.nodes}")
        return ", ".join(parts)


@dataclass
class _Entry:
    info: JobInfo
    next_check: float = 0.0
    interval: float = 0.0
    missing_since: float | None = None


def _array_ids(job_id: str, task: str) -> list[str]:
    """sacct prints pending array tasks as ``12_[3-7%2]``: expand to every id."""
    if "[" not in task:
        return [f"{job_id}_{task}"]
    body = task.strip("[]").split("%")[0]
    ids: list[str] = []
    for part in body.split(","):
        low, _, high = part.partition("-")
        ids.extend(f"{job_id}_{i}" for i in range(int(low), int(high or low) + 1))
    return ids


class Tracker:
    """Tracks many jobs with one rate-limited, batched Slurm query per refresh.

    ``min_interval`` bounds the query rate; each job backs off from ``initial_interval`` to
    ``max_interval``; ``outage_tolerance`` is how long an unreachable slurmctld is waited out.
    """

    def __init__(self, slurm: Slurm | None = None, *, min_interval: float = 1.0,
                 initial_interval: float = 0.5, max_interval: float = 5.0,
                 outage_tolerance: float = 600.0, vanish_grace: float = 30.0):
        self.slurm = slurm or Slurm()
        self.min_interval = min_interval
        self.initial_interval = initial_interval
        self.max_interval = max_interval
        self.outage_tolerance = outage_tolerance
        self.vanish_grace = vanish_grace
        self._jobs: dict[str, _Entry] = {}
        self._lock = threading.RLock()
        self._last_refresh = float("-inf")
        self._outage_since: float | None = None
        self._outage_backoff = 1.0
        self.queries = 0  # Slurm commands this tracker ran (squeue + sacct)
        self.outages = 0  # times slurmctld stopped answering while we tracked
        self.last_error: str = ""

    # -- registration ----------------------------------------------------------------------------
    def track(self, *job_ids: str | int) -> None:
        now = time.monotonic()
        with self._lock:
            for job_id in map(str, job_ids):
                if job_id not in self._jobs:
                    self._jobs[job_id] = _Entry(JobInfo(job_id, states.State.SUBMITTED, seen_at=now), next_check=now,
                                                interval=self.initial_interval)

    def info(self, job_id: str | int, *, refresh: bool = True) -> JobInfo:
        """The latest known info (refreshing first if the tracker is due)."""
        job_id = str(job_id)
        self.track(job_id)
        if refresh:
            self.refresh()
        with self._lock:
            return self._jobs[job_id].info

    def hurry(self, *job_ids: str | int) -> None:
        """Make these jobs due at the next refresh (e.g. after cancel or a state-changing event)."""
        now = time.monotonic()
        with self._lock:
            for job_id in map(str, job_ids):
                entry = self._jobs.get(job_id)
                if entry and not entry.info.terminal:
                    entry.next_check, entry.interval = now, self.initial_interval

    @property
    def controller_down_for(self) -> float:
        """Seconds slurmctld has been unreachable (0 when it answers)."""
        return 0.0 if self._outage_since is None else time.monotonic() - self._outage_since

    # -- the one query ------------------------------------------------------------------------------
    def refresh(self, *, force: bool = False) -> bool:
        """Query Slurm once for every due job; returns whether a query ran."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last_refresh < self._effective_interval():
                return False
            due = [jid for jid, e in self._jobs.items() if not e.info.terminal and (force or e.next_check <= now)]
            if not due:
                return False
            self._last_refresh = now
            try:
                seen = self._squeue(due)
                missing = [jid for jid in due if jid not in seen]
                if missing:
                    seen.update(self._sacct(missing))
            except SlurmError as exc:
                self._note_outage(exc)
                return True
            self._outage_since, self._outage_backoff = None, 1.0
            self._apply(due, seen, now)
            return True

    def _effective_interval(self) -> float:
        return max(self.min_interval, self._outage_backoff if self._outage_since is not None else 0.0)

    def _note_outage(self, exc: SlurmError) -> None:
        now = time.monotonic()
        self.last_error = str(exc)
        if self._outage_since is None:
            self._outage_since = now
            self.outages += 1
        self._outage_backoff = min(self._outage_backoff * 2, 15.0)
        if now - self._outage_since > self.outage_tolerance:
            raise SlurmError(f"Slurm unreachable for {now - self._outage_since:.0f} s while tracking jobs: "
                             f"{exc}") from None

    def _apply(self, due: list[str], seen: dict[str, JobInfo], now: float) -> None:
        for jid in due:
            entry = self._jobs[jid]
            info = seen.get(jid)
            if info is None:
                # neither squeue nor sacct knows it (yet: accounting lags just after submission)
                entry.missing_since = entry.missing_since or now
                if now - entry.missing_since > self.vanish_grace and entry.info.state in _NOT_SEEN:
                    entry.info = replace(entry.info, state=states.State.FAILED, seen_at=now,
                                         reason=f"vanished: unknown to squeue and sacct for {self.vanish_grace:g} s")
                entry.next_check = now + entry.interval
                continue
            entry.missing_since = None
            changed = info.state != entry.info.state
            entry.info = info
            entry.interval = self.initial_interval if changed else min(entry.interval * 2, self.max_interval)
            entry.next_check = now + entry.interval

    def _squeue(self, ids: list[str]) -> dict[str, JobInfo]:
        parents = sorted({jid.split("_")[0] for jid in ids}, key=int)
        self.queries += 1
        fields = ("JobID", "ArrayJobID", "ArrayTaskID", "State", "Reason", "exit_code", "NodeList")
        result = self.slurm.run("squeue", records.squeue_args(fields, ["-r", "-t", "all", "-j", ",".join(parents)]),
                                check=False, retries=0, timeout=30)  # the next refresh retries
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return {}  # every id purged from slurmctld: sacct knows them
            raise Slurm._classify("squeue", result)
        now = time.monotonic()
        out: dict[str, JobInfo] = {}
        for job in records.split_records(result.stdout, fields, trailing=True):
            task = job["ArrayTaskID"]
            key = job["JobID"] if task in ("N/A", "") else f"{job['ArrayJobID']}_{task}"
            code, sig = records.exit_status(job["exit_code"])
            out[key] = JobInfo(key, states.normalise(job["State"]), code, sig, job["Reason"], job["NodeList"],
                               "squeue", now)
        return out

    def _sacct(self, ids: list[str]) -> dict[str, JobInfo]:
        parents = sorted({jid.split("_")[0] for jid in ids}, key=int)
        self.queries += 1
        fields = ("JobID", "State", "ExitCode", "Reason", "NodeList")
        result = self.slurm.run("sacct", records.sacct_args(fields, ["-X", "-D", "-j", ",".join(parents)]),
                                check=False, retries=1, timeout=30)
        if result.returncode != 0:
            return {}  # accounting is a fallback: never fail tracking because slurmdbd is away
        now = time.monotonic()
        out: dict[str, JobInfo] = {}
        for job in records.split_records(result.stdout, fields):
            code, sig = records.exit_status(job["ExitCode"])
            job_id, _, task = job["JobID"].partition("_")
            keys = _array_ids(job_id, task) if task else [job_id]
            for key in keys:  # -D lists every attempt of a requeued job: the last one wins
                out[key] = JobInfo(key, states.normalise(job["State"]), code, sig, job["Reason"], job["NodeList"],
                                   "sacct", now)
        return out


_DEFAULT: dict[str, Tracker] = {}
_DEFAULT_LOCK = threading.Lock()


def default_tracker(slurm: Slurm | None = None) -> Tracker:
    """One tracker per cluster (slurm.conf), shared by every job of this process."""
    slurm = slurm or Slurm()
    key = str(slurm.conf)
    with _DEFAULT_LOCK:
        if key not in _DEFAULT:
            _DEFAULT[key] = Tracker(slurm)
        return _DEFAULT[key]
