"""Submission records: what a job was (kind, log paths, submitit folder), kept on the client.

Slurm forgets jobs (``MinJobAge``) and sacct < 23.02 has no ``StdOut``, so each submission leaves a
JSON file under ``$SLINKYML_RECORDS_DIR``, per cluster (job ids restart per cluster).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
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
        data = asdict(self)
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


def load(job_id: str | int, conf: str | None) -> SubmissionRecord | None:
    path = records_dir(conf) / f"{str(job_id).split('_')[0]}.json"
    try:
        return SubmissionRecord.from_json(path.read_text())
    except (OSError, ValueError, TypeError):
        return None


def record_sbatch(job_id: int, *, name: str, cwd: str, log_dir: str, batch_log: str, conf: str | None,
                  num_tasks: int = 1) -> None:
    save(SubmissionRecord(str(job_id), "sbatch", name, cwd, batch_log=batch_log, log_dir=log_dir,
                          num_tasks=num_tasks, submitted_at=time.time()), conf)


__all__ = ["KINDS", "SubmissionRecord", "load", "record_sbatch", "records_dir", "save"]
