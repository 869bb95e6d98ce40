"""Submission records: what a job was (kind, log paths, submitit folder), kept on the client.

Slurm forgets jobs (``MinJobAge``) and sacct < 23.02 has no ``StdOut``, so each submission leaves a
JSON file under ``$SLINKYML_RECORDS_DIR``, per cluster (job ids restart per cluster).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

KINDS = ("sbatch", "submitit", "array")


@dataclass(frozen=True)
class SubmissionRecord:
    """One submitted job. ``log_dir``/``folder`` are absolute; ``rank_logs`` is a glob under ``log_dir``
    (sbatch jobs) and ``folder`` the submitit folder (submitit jobs)."""

    job_id: str
    kind: str
    name: str
    cwd: str
    batch_log: str = ""
    log_dir: str = ""
    folder: str = ""
    num_tasks: int = 1
    task_ids: tuple[str, ...] = ()  # array tasks (map_array), in chunk order
    extra: dict[str, object] = field(default_factory=dict)  # e.g. the ArrayJob's item plan
    submitted_at: float = 0.0

    def to_json(self) -> str:
        # the fields as they are (asdict's deep copy of ``extra`` was a third of a record's CPU time)
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["task_ids"] = list(self.task_ids)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SubmissionRecord:
        data = json.loads(text)
        known = set(cls.__dataclass_fields__)
        data = {k: v for k, v in data.items() if k in known}
        data["task_ids"] = tuple(data.get("task_ids") or ())
        return cls(**data)


def records_dir(conf: str | None) -> Path:
    """The folder of one cluster's records (the cluster is told apart by its slurm.conf path)."""
    base = os.environ.get("SLINKYML_RECORDS_DIR")
    if not base:
        state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        base = os.path.join(state, "slinkyml", "jobs")
    import hashlib  # lazy: OpenSSL's hashlib costs `sbatch submit --dry-run` ~2.5 ms; only records need it

    cluster = hashlib.sha1(os.path.realpath(conf or "/etc/slurm/slurm.conf").encode()).hexdigest()[:10]
    return Path(base) / cluster


def save(record: SubmissionRecord, conf: str | None) -> None:
    """Best effort: a job must not fail to submit because the client's state dir is read-only."""
    folder = records_dir(conf)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{record.job_id}.{os.getpid()}.tmp"
        tmp.write_text(record.to_json())
        os.replace(tmp, folder / f"{record.job_id}.json")
    except OSError:
        pass


class PendingRecord:
    """A record written around a submission: :meth:`open` writes it, all but its job id, while
    sbatch waits for slurmctld (creating and writing a file is most of a record's cost, ~0.2 ms
    here); :meth:`commit` names it after the job id (a rename). Its ``job_id`` is empty and its
    ``batch_log`` holds ``%j``: :func:`load` fills both from the file's name. Best effort, as :func:`save`."""

    def __init__(self, conf: str | None, record: SubmissionRecord) -> None:
        self.conf = conf
        self.record = record
        self.tmp: Path | None = None

    def open(self) -> None:
        try:
            folder = records_dir(self.conf)
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".pending.{os.getpid()}.{id(self)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, self.record.to_json().encode())
            finally:
                os.close(fd)
            self.tmp = tmp
        except OSError:
            self.tmp = None

    def commit(self, job_id: int | str) -> None:
        if self.tmp is None:  # not opened (another backend), or it could not be written then
            save(_with_id(self.record, str(job_id)), self.conf)
            return
        try:
            os.replace(self.tmp, self.tmp.with_name(f"{job_id}.json"))
        except OSError:
            self.discard()

    def discard(self) -> None:
        """Nothing was submitted: remove the file."""
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)
            self.tmp = None


def _with_id(record: SubmissionRecord, job_id: str) -> SubmissionRecord:
    """A :class:`PendingRecord`'s record with its job id (``%j`` in the batch log's name)."""
    return replace(record, job_id=job_id, batch_log=record.batch_log.replace("%j", job_id))


def load(job_id: str | int, conf: str | None) -> SubmissionRecord | None:
    base = str(job_id).split("_")[0]
    path = records_dir(conf) / f"{base}.json"
    try:
        record = SubmissionRecord.from_json(path.read_text())
    except (OSError, ValueError, TypeError):
        return None
    return record if record.job_id else _with_id(record, base)  # written before its id was known


def sbatch_record(job_id: int | str, *, name: str, cwd: str, log_dir: str, batch_log: str,
                  num_tasks: int = 1) -> SubmissionRecord:
    return SubmissionRecord(str(job_id), "sbatch", name, cwd, batch_log=batch_log, log_dir=log_dir,
                            num_tasks=num_tasks, submitted_at=time.time())


def record_sbatch(job_id: int, *, name: str, cwd: str, log_dir: str, batch_log: str, conf: str | None,
                  num_tasks: int = 1) -> None:
    save(sbatch_record(job_id, name=name, cwd=cwd, log_dir=log_dir, batch_log=batch_log, num_tasks=num_tasks),
         conf)


__all__ = ["KINDS", "PendingRecord", "SubmissionRecord", "load", "record_sbatch", "records_dir", "save",
           "sbatch_record"]
