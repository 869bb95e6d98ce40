"""``slinkyml jobs list``: one's runs, from slurmctld (live), accounting (ended) and slinkyml's own
submission records (what a job was, and jobs Slurm no longer knows), merged by job id.

:func:`parse_squeue`/:func:`parse_sacct` turn squeue/sacct records (:mod:`slinkyml.slurm.records`:
``\\x1f``-delimited, so a name holding ``|`` or a newline survives) into :class:`ListedJob` rows.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from slinkyml.jobs import records
from slinkyml.slurm import records as slurm_records
from slinkyml.slurm import states
from slinkyml.slurm.errors import AccountingUnavailable
from slinkyml.slurm.runner import Slurm

SEP = slurm_records.SEP
#: squeue ``-o`` codes: id, state, user, partition, submit, start, time used, limit, nodes,
#: reason-or-nodelist, workdir, name (last: it may hold anything)
_SQUEUE = ("job_id", "state", "user", "partition", "submitted", "started", "elapsed", "time_limit",
           "nodes", "where", "workdir", "name")
_SQUEUE_FORMAT = SEP.join(("%i", "%T", "%u", "%P", "%V", "%S", "%M", "%l", "%D", "%R", "%Z", "%j"))
_SACCT = ("JobID", "State", "User", "Partition", "Submit", "Start", "End", "Elapsed", "Timelimit",
          "NNodes", "NodeList", "ExitCode", "WorkDir", "JobName")
#: every state a job can be listed in (Slurm's, and UNKNOWN for a record Slurm does not know)
KNOWN_STATES = frozenset(states.TERMINAL | states.PENDING | states.ACTIVE | {states.State.UNKNOWN})


@dataclass(frozen=True)
class ListedJob:
    """One job (an array task is one row: ``7_3``). Times are Slurm's UTC ``YYYY-MM-DDTHH:MM:SS``;
    ``kind`` and ``log_dir`` come from slinkyml's submission record (empty for other jobs)."""

    job_id: str
    state: str
    name: str = ""
    user: str = ""
    partition: str = ""
    submitted: str = ""
    started: str = ""
    ended: str = ""
    elapsed: str = ""
    time_limit: str = ""
    nodes: int = 0
    node_list: str = ""
    reason: str = ""
    exit_code: str = ""
    restarts: int = 0
    workdir: str = ""
    kind: str = ""
    log_dir: str = ""
    source: str = ""  # squeue, sacct or record

    @property
    def base_id(self) -> str:
        return self.job_id.split("_")[0]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _time(value: str) -> str:
    return "" if value in ("", "Unknown", "None", "N/A") else value


def parse_squeue(text: str) -> list[ListedJob]:
    """``squeue -h -o`` :data:`_SQUEUE_FORMAT` output (a pending job's ``%R`` is its reason)."""
    jobs = []
    for v in slurm_records.split_records(text, _SQUEUE):
        pending = v["state"] in states.PENDING
        jobs.append(ListedJob(
            v["job_id"], v["state"], v["name"], v["user"], v["partition"], _time(v["submitted"]),
            "" if pending else _time(v["started"]), "", v["elapsed"], v["time_limit"],
            int(v["nodes"]) if v["nodes"].isdigit() else 0, "" if pending else v["where"],
            v["where"].strip("()") if pending else "", "", 0, v["workdir"], source="squeue"))
    return jobs


def parse_sacct(text: str) -> list[ListedJob]:
    """``sacct -X -D -P`` :data:`_SACCT` output: one row per run, oldest first, folded to one job
    each (its last run) with ``restarts`` = the runs before it, and one more when that last run
    ended REQUEUED (the next run is pending, and not yet a row of its own)."""
    jobs: dict[str, ListedJob] = {}
    runs: dict[str, int] = {}
    for v in slurm_records.split_records(text, _SACCT):
        runs[v["JobID"]] = runs.get(v["JobID"], 0) + 1
        state = states.normalise(v["State"])
        jobs[v["JobID"]] = ListedJob(
            v["JobID"], state, v["JobName"], v["User"], v["Partition"],
            _time(v["Submit"]), _time(v["Start"]), _time(v["End"]), v["Elapsed"], v["Timelimit"],
            int(v["NNodes"]) if v["NNodes"].isdigit() else 0,
            "" if v["NodeList"] == "None assigned" else v["NodeList"], "", v["ExitCode"],
            runs[v["JobID"]] - (state not in states.REQUEUEING), v["WorkDir"], source="sacct")
    return list(jobs.values())


def merge_live(live: Sequence[ListedJob], ended: Sequence[ListedJob]) -> list[ListedJob]:
    """slurmctld's view of a job it still holds (state, reason), with accounting's count of its
    restarts; accounting's alone for the others."""
    done = {job.job_id: job for job in ended}
    jobs = [replace(job, restarts=done[job.job_id].restarts) if job.job_id in done else job for job in live]
    held = {job.job_id for job in live}
    return jobs + [job for job in ended if job.job_id not in held]


def read_slurm_jobs(slurm: Slurm, *, since: datetime, user: str | None) -> tuple[list[ListedJob], str]:
    """Jobs of ``user`` (None: everyone) that slurmctld holds now or accounting saw since ``since``;
    and a warning when accounting could not be asked (the list is then slurmctld's alone)."""
    live = parse_squeue(slurm.run("squeue", ["-h", *([] if user is None else ["-u", user]),
                                             "-o", _SQUEUE_FORMAT]).stdout)
    start = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        out = slurm.run("sacct", slurm_records.sacct_args(_SACCT, ["-X", "-D", *(["-a"] if user is None else ["-u", user]),
                                                                    "-S", start, "-E", "now"]), timeout=120).stdout
    except AccountingUnavailable as exc:
        return live, f"accounting not asked ({exc}); listing what slurmctld holds now"
    return merge_live(live, parse_sacct(out)), ""


def with_records(jobs: Sequence[ListedJob], saved: Iterable[records.SubmissionRecord], *,
                 since: datetime) -> list[ListedJob]:
    """``jobs`` with what slinkyml's records add (kind, log dir), plus the recorded jobs since
    ``since`` that Slurm knows nothing of (state UNKNOWN: purged, or lost by a controller restart)."""
    by_id = {record.job_id: record for record in saved}
    merged = []
    for job in jobs:
        record = by_id.get(job.base_id)
        merged.append(job if record is None or not _same_job(record, job) else
                      replace(job, kind=record.kind, log_dir=record.log_dir or record.folder))
    seen = {job.base_id for job in jobs}
    for record in by_id.values():
        if record.job_id in seen or record.submitted_at < since.timestamp():
            continue
        submitted = datetime.fromtimestamp(record.submitted_at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        merged.append(ListedJob(record.job_id, states.State.UNKNOWN, record.name, submitted=submitted,
                                workdir=record.cwd, kind=record.kind, log_dir=record.log_dir or record.folder,
                                source="record"))
    return merged


#: a record and Slurm's job of its id are one job only when submitted this close together (seconds)
SAME_SUBMIT_S = 600


def _same_job(record: records.SubmissionRecord, job: ListedJob) -> bool:
    """Not another job under a reused id (a reset cluster hands ids out again): same name, and
    submitted at about the same time."""
    if job.name and not slurm_records.same_job_name(record.name, job.name):
        return False
    if job.submitted and record.submitted_at:
        submitted = datetime.fromisoformat(job.submitted).replace(tzinfo=UTC).timestamp()
        return abs(submitted - record.submitted_at) <= SAME_SUBMIT_S
    return True


def saved_records(conf: str | None) -> list[records.SubmissionRecord]:
    """Every submission record of this cluster (the journal's and the files')."""
    return records.all_records(conf)


def list_jobs(slurm: Slurm, *, since: datetime, user: str | None = "", states_wanted: Iterable[str] = ()
              ) -> tuple[list[ListedJob], str]:
    """The jobs to list, oldest submission first, and a warning (or ""). ``user``: "" for the
    caller (the default: mine), None for everyone; the records (the caller's own) join unless
    another user is asked for."""
    me = pwd.getpwuid(os.getuid()).pw_name
    who = me if user == "" else user
    jobs, warning = read_slurm_jobs(slurm, since=since, user=who)
    if who in (None, me):
        jobs = with_records(jobs, saved_records(slurm.conf), since=since)
    wanted = {states.normalise(s) for s in states_wanted}
    if wanted:
        jobs = [job for job in jobs if states.normalise(job.state) in wanted]
    jobs.sort(key=lambda job: (job.submitted or "~", _id_key(job.job_id)))
    return jobs, warning


def _id_key(job_id: str) -> tuple[int, str]:
    base, _, task = job_id.partition("_")
    return (int(base) if base.isdigit() else 0, task)


__all__ = ["KNOWN_STATES", "ListedJob", "list_jobs", "merge_live", "parse_sacct", "parse_squeue", "read_slurm_jobs",
           "saved_records", "with_records"]
