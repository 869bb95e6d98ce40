"""Where a job's logs are, for any job slurmctld or accounting knows, and reading them losslessly.

Paths come from the submission record, then slurmctld, then sacct's ``WorkDir`` with the layout
slinkyml renders (``LOG_DIR/NAME-JOBID.out``, per-rank logs beside it) or submitit's folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from slinkyml.jobs import records
from slinkyml.jobs.render import safe_name

#: where ``Executor`` puts submitit's files, relative to the submitting directory
SUBMITIT_FOLDER = os.path.join(".slinkyml", "submitit")
_RANK_LOG = re.compile(r"-(?P<job>\d+)-r(?P<restart>\d+)-(?P<label>[a-z]+)(?P<index>\d+)\.log$")
_SUBMITIT_LOG = re.compile(r"^(?P<job>[\d_]+?)_(?P<index>\d+)_log\.(?P<stream>out|err)$")


@dataclass(frozen=True, order=True)
class RankLog:
    """One rank's (or node's, or task's) log file of one run of the job."""

    restart: int
    index: int
    label: str  # node / rank / task (sbatch layout), rank (submitit)
    path: Path = field(compare=False)
    stream: str = "out"  # submitit keeps stderr apart: "err"

    @property
    def name(self) -> str:
        tag = f"{self.label}{self.index}"
        return f"{tag} {self.stream}" if self.stream != "out" else tag


@dataclass(frozen=True)
class JobLogs:
    """A job's log files as far as they can be found; ``tried`` lists what was looked at, for the
    message when nothing is there any more."""

    job_id: str
    kind: str  # sbatch | submitit | unknown
    batch_log: Path | None
    ranks: tuple[RankLog, ...]
    tried: tuple[str, ...] = ()

    @property
    def newest_restart(self) -> int:
        return max((r.restart for r in self.ranks), default=0)

    def rank_logs(self, rank: int | None = None, *, restart: int | None = None) -> list[RankLog]:
        """Logs of one run (default: the newest), of one rank/node/task index (default: all)."""
        restart = self.newest_restart if restart is None else restart
        return [r for r in self.ranks if r.restart == restart and (rank is None or r.index == rank)]

    @property
    def exists(self) -> bool:
        return bool(self.ranks) or (self.batch_log is not None and self.batch_log.exists())


def expand_pattern(pattern: str, job_id: str, name: str = "", user: str = "") -> str:
    """The few filename patterns sbatch's ``--output`` expands that matter for one job (``%j %x %u %A %a``)."""
    base, _, task = job_id.partition("_")
    table = {"j": job_id if not task else base, "x": name, "u": user, "A": base, "a": task or "4294967294",
             "%": "%"}
    return re.sub(r"%(\d*)([jxuAa%])", lambda m: table[m.group(2)].zfill(int(m.group(1) or 0)), pattern)


def rank_logs_next_to(batch_log: Path, job_id: str) -> list[RankLog]:
    """``NAME-JOBID-rRESTART-LABELk.log`` files in the batch log's folder, oldest run first."""
    out = []
    try:
        candidates = list(batch_log.parent.glob(f"*-{job_id}-r*-*.log"))
    except OSError:
        return []
    for path in candidates:
        match = _RANK_LOG.search(path.name)
        if match and match.group("job") == job_id:
            out.append(RankLog(int(match.group("restart")), int(match.group("index")), match.group("label"), path))
    return sorted(out)


def submitit_logs(folder: Path, job_id: str) -> list[RankLog]:
    """submitit's ``JOBID_RANK_log.out``/``.err`` in ``folder`` (array tasks: ``A_a_RANK_log.*``)."""
    out = []
    try:
        candidates = list(folder.glob(f"{job_id}_*_log.*"))
    except OSError:
        return []
    for path in candidates:
        match = _SUBMITIT_LOG.match(path.name)
        if match and match.group("job") == job_id:
            out.append(RankLog(0, int(match.group("index")), "rank", path, match.group("stream")))
    return sorted(out, key=lambda r: (r.index, r.stream != "out"))


def _same_job(record: records.SubmissionRecord, job_id: str, stdout: str, name: str) -> bool:
    """What Slurm says of the job (its name, its batch log) agrees with the client's record of that id."""
    if name and record.name != name:
        return False
    if stdout and record.batch_log:
        return os.path.realpath(expand_pattern(stdout, job_id, name)) == os.path.realpath(record.batch_log)
    return True


def locate(job_id: str | int, *, conf: str | None = None, stdout: str = "", workdir: str = "",
           name: str = "") -> JobLogs:
    """The job's logs from its record, else from what Slurm says (``stdout``, ``workdir``, ``name``)."""
    job_id = str(job_id)
    record = records.load(job_id, conf)
    if record is not None and not _same_job(record, job_id, stdout, name):
        record = None  # another job under the same id: a reset cluster hands ids out again
    tried: list[str] = []
    batch: list[Path] = []
    folders: list[Path] = []
    if record is not None:
        if record.batch_log:
            batch.append(Path(record.batch_log))
        if record.folder:
            folders.append(Path(record.folder))
    if stdout:
        batch.append(Path(expand_pattern(stdout, job_id, name)))
    if workdir:
        if name:
            batch.append(Path(workdir, "logs", f"{safe_name(name)}-{job_id}.out"))
        folders.append(Path(workdir, SUBMITIT_FOLDER))
    for folder in dict.fromkeys(folders):
        found = submitit_logs(folder, job_id)
        tried.append(f"{folder}/{job_id}_*_log.*")
        if found:
            return JobLogs(job_id, "submitit", None, tuple(found), tuple(tried))
    for path in dict.fromkeys(batch):
        tried.append(str(path))
        ranks = rank_logs_next_to(path, job_id)
        if path.exists() or ranks:
            return JobLogs(job_id, "sbatch", path, tuple(ranks), tuple(tried))
    first = batch[0] if batch else None
    return JobLogs(job_id, "unknown", first, (), tuple(tried))


class LogTail:
    """Follows files by byte offset: every complete line once, in order, none dropped or repeated
    (a line still being written is held back until its newline, or until :meth:`flush`)."""

    def __init__(self) -> None:
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def read(self, path: Path, *, final: bool = False) -> list[str]:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < offset:  # truncated or replaced: start again from its beginning
                    offset = 0
                    self._partial.pop(path, None)
                fh.seek(offset)
                data = fh.read()
        except OSError:
            return []
        self._offsets[path] = offset + len(data)
        data = self._partial.pop(path, b"") + data
        lines = data.split(b"\n")
        rest = lines.pop()
        if rest and not final:
            self._partial[path] = rest
        elif rest:
            lines.append(rest)
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]


def read_tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a file (all of it for ``lines`` ≤ 0); reads only the end of big files."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            chunk = size if lines <= 0 else min(size, max(65536, lines * 400))
            fh.seek(size - chunk)
            data = fh.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    if chunk < size:
        text = text[1:]  # the first line is cut
    return text if lines <= 0 else text[-lines:]


__all__ = ["JobLogs", "LogTail", "RankLog", "SUBMITIT_FOLDER", "expand_pattern", "locate", "rank_logs_next_to",
           "read_tail", "submitit_logs"]
