"""Submission records: what a job was (kind, log paths, submitit folder), kept on the client.

Slurm forgets jobs (``MinJobAge``) and sacct < 23.02 has no ``StdOut``, so each submission leaves a
JSON file under ``$SLINKYML_RECORDS_DIR``, per cluster (job ids restart per cluster).
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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


#: (records base, slurm.conf) -> that cluster's folder: realpath + SHA-1 once per process (a
#: submission's ~20 us of path walking otherwise)
_DIRS: dict[tuple[str, str | None], Path] = {}


def _sha1(data: bytes) -> Any:
    """SHA-1 from CPython's own ``_sha1`` module where it is built in: the same digest as ``hashlib.sha1``
    without loading OpenSSL (importing hashlib is ~3 ms of every submission; lazy for that reason)."""
    try:
        from _sha1 import sha1  # type: ignore[import-not-found]
    except ImportError:  # an interpreter without it
        from hashlib import sha1
    return sha1(data)


def records_dir(conf: str | None) -> Path:
    """The folder of one cluster's records (the cluster is told apart by its slurm.conf path)."""
    base = os.environ.get("SLINKYML_RECORDS_DIR")
    if not base:
        state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        base = os.path.join(state, "slinkyml", "jobs")
    found = _DIRS.get((base, conf))
    if found is None:
        cluster = _sha1(os.path.realpath(conf or "/etc/slurm/slurm.conf").encode()).hexdigest()[:10]
        found = _DIRS[(base, conf)] = Path(base) / cluster
    return found


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


#: the journal of ``sbatch`` submissions: one line per job, ``JOBID<TAB>record JSON``, appended by
#: one ``write`` to a file opened ``O_APPEND``, newline first (a line torn by a writer killed
#: mid-write then never swallows the next one: its JSON does not parse, and it alone is skipped) (a file per job cost a create, a write and a rename:
#: ~0.3 ms of a 6 ms submission). One file per host: appends from one host never interleave, and
#: hosts sharing a home over NFS (where ``O_APPEND`` is not atomic between clients) never share one.
JOURNAL_GLOB = "submissions-*.log"
_JOURNALS: dict[Path, tuple[str, int]] = {}  # records folder -> its journal's path, this process's descriptor


def journal_path(folder: Path) -> Path:
    return folder / f"submissions-{os.uname().nodename}.log"


def _journal_fd(folder: Path) -> int:
    entry = _JOURNALS.get(folder)
    if entry is not None:
        try:
            if os.fstat(entry[1]).st_nlink:  # not removed behind our back (a cleaned state dir)
                return entry[1]
        except OSError:
            pass
        _JOURNALS.pop(folder, None)
    path = str(journal_path(folder))
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    _JOURNALS[folder] = (path, fd)
    return fd


@functools.lru_cache(maxsize=256)
def _sbatch_line(name: str, cwd: str, log_dir: str, batch_log: str, num_tasks: int) -> tuple[bytes, bytes]:
    """An sbatch record's journal line (after its id) cut at its submission time: serialised once per
    job shape, as submissions of one spec differ only in time; ``json`` writes a float as its
    ``repr``, so head + repr(time) + tail is exactly what :meth:`SubmissionRecord.to_json` writes."""
    text = SubmissionRecord("", "sbatch", name, cwd, batch_log=batch_log, log_dir=log_dir, num_tasks=num_tasks,
                            submitted_at=0.5).to_json()
    head, _, tail = text.partition('"submitted_at": 0.5')  # a key: quotes inside values are escaped
    return ("\t" + head + '"submitted_at": ').encode(), tail.encode()


class PendingRecord:
    """An sbatch submission's record: its journal opened by :meth:`open` while sbatch waits for
    slurmctld, its line appended by :meth:`commit` once sbatch answers (one ``write``). The line
    holds no job id (the journal's id before it says it) and its ``batch_log`` holds ``%j``, which
    :func:`load` fills. Best effort, as :func:`save`."""

    def __init__(self, conf: str | None, *, name: str, cwd: str, log_dir: str, batch_log: str,
                 num_tasks: int = 1, submitted_at: float | None = None) -> None:
        self.conf = conf
        self.shape = (name, cwd, log_dir, batch_log, num_tasks)
        self.submitted_at = time.time() if submitted_at is None else submitted_at
        self.fd = -1

    def open(self) -> None:
        try:
            self.fd = _journal_fd(records_dir(self.conf))
        except OSError:
            self.fd = -1

    def commit(self, job_id: int | str) -> None:
        if self.fd < 0:  # not opened (a backend that does not wait), or it could not be then
            self.open()
        head, tail = _sbatch_line(*self.shape)
        line = b"".join((b"\n", str(job_id).encode(), head, repr(self.submitted_at).encode(), tail))
        try:
            if self.fd >= 0 and os.write(self.fd, line) == len(line):
                return
        except OSError:
            pass
        save(self.record(str(job_id)), self.conf)  # a short or failed append: a file of its own

    def record(self, job_id: str) -> SubmissionRecord:
        name, cwd, log_dir, batch_log, num_tasks = self.shape
        return SubmissionRecord(job_id, "sbatch", name, cwd, batch_log=batch_log.replace("%j", job_id),
                                log_dir=log_dir, num_tasks=num_tasks, submitted_at=self.submitted_at)


def _with_id(record: SubmissionRecord, job_id: str) -> SubmissionRecord:
    """A journal record with its job id (``%j`` in the batch log's name)."""
    return replace(record, job_id=job_id, batch_log=record.batch_log.replace("%j", job_id))


def _journal_entries(folder: Path) -> list[bytes]:
    """The journals' bytes, one per host (oldest first within each)."""
    found = []
    try:
        paths = sorted(folder.glob(JOURNAL_GLOB))
    except OSError:
        return []
    for path in paths:
        try:
            found.append(path.read_bytes())
        except OSError:
            pass
    return found


def _parse_line(job_id: str, payload: bytes) -> SubmissionRecord | None:
    try:
        record = SubmissionRecord.from_json(payload.decode())
    except (ValueError, TypeError):  # a torn line (a writer killed mid-write)
        return None
    return record if record.job_id else _with_id(record, job_id)


def _last_in_journal(data: bytes, job_id: str) -> SubmissionRecord | None:
    """The last whole line of ``job_id`` in one journal (a reset cluster hands ids out again:
    the newest submission wins)."""
    key = job_id.encode() + b"\t"
    end = len(data)
    while end > 0:
        at = data.rfind(b"\n" + key, 0, end)
        start = at + 1 if at >= 0 else (0 if data.startswith(key) else -1)
        if start < 0:
            return None
        stop = data.find(b"\n", start)
        record = _parse_line(job_id, data[start + len(key):stop if stop >= 0 else len(data)])
        if record is not None:
            return record
        end = max(at, 0)
    return None


def _newest(found: list[SubmissionRecord]) -> SubmissionRecord | None:
    return max(found, key=lambda r: r.submitted_at) if found else None


def load(job_id: str | int, conf: str | None) -> SubmissionRecord | None:
    """The newest record of ``job_id``: its own file (submitit jobs and arrays) or a journal line."""
    base = str(job_id).split("_")[0]
    folder = records_dir(conf)
    found: list[SubmissionRecord] = []
    try:
        record = SubmissionRecord.from_json((folder / f"{base}.json").read_text())
        found.append(record if record.job_id else _with_id(record, base))
    except (OSError, ValueError, TypeError):
        pass
    for data in _journal_entries(folder):
        line = _last_in_journal(data, base)
        if line is not None:
            found.append(line)
    return _newest(found)


def all_records(conf: str | None) -> list[SubmissionRecord]:
    """Every record of this cluster, the newest per job id, in job id order."""
    folder = records_dir(conf)
    newest: dict[str, SubmissionRecord] = {}

    def keep(record: SubmissionRecord) -> None:
        old = newest.get(record.job_id)
        if old is None or record.submitted_at >= old.submitted_at:
            newest[record.job_id] = record

    for data in _journal_entries(folder):
        for line in data.split(b"\n"):
            job_id, tab, payload = line.partition(b"\t")
            if tab and job_id.isdigit():
                record = _parse_line(job_id.decode(), payload)
                if record is not None:
                    keep(record)
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        paths = []
    for path in paths:
        try:
            record = SubmissionRecord.from_json(path.read_text())
        except (OSError, ValueError, TypeError):
            continue
        keep(record if record.job_id else _with_id(record, path.stem))
    return [newest[k] for k in sorted(newest, key=lambda k: (len(k), k))]


def sbatch_record(job_id: int | str, *, name: str, cwd: str, log_dir: str, batch_log: str,
                  num_tasks: int = 1) -> SubmissionRecord:
    return SubmissionRecord(str(job_id), "sbatch", name, cwd, batch_log=batch_log, log_dir=log_dir,
                            num_tasks=num_tasks, submitted_at=time.time())


def record_sbatch(job_id: int, *, name: str, cwd: str, log_dir: str, batch_log: str, conf: str | None,
                  num_tasks: int = 1) -> None:
    PendingRecord(conf, name=name, cwd=cwd, log_dir=log_dir, batch_log=batch_log, num_tasks=num_tasks).commit(job_id)


__all__ = ["KINDS", "PendingRecord", "SubmissionRecord", "all_records", "journal_path", "load", "record_sbatch", "records_dir", "save",
           "sbatch_record"]
