"""Slurm's output → records keyed by field name: the one place that reads Slurm's text.

Every query names the fields it wants and gets one ``dict`` per record back. Where a command takes a
delimiter (``sacct --delimiter``, ``squeue``/``sinfo -O`` field suffixes) it is ASCII US (``\\x1f``),
which a job name cannot hold, so a name with ``|``, tabs, quotes or newlines comes back whole; a
record that spans lines (a newline inside a name) is joined back by counting delimiters. ``sshare``,
``sacctmgr`` and ``sreport`` print only ``|``: their fields are account, user and cluster names, and a
row with more fields than asked for is dropped (counted in :attr:`Records.malformed`), never guessed.

Text, not ``--json``: on the 22.05 this project runs, ``scontrol`` has no ``--json`` and ``sacct
--json`` of the same jobs is slower than the delimited text (``benchmarks/records.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # runner imports this module (Slurm.show); records only need its type
    from slinkyml.slurm.runner import Slurm

#: the field delimiter asked of every command that takes one (ASCII unit separator)
SEP = "\x1f"

Record = dict[str, str]


class Records(list[Record]):
    """Records of one query, and how many lines of its output could not be read as one."""

    malformed: int = 0

    def __init__(self) -> None:
        super().__init__()
        self.malformed_examples: list[str] = []


def split_records(text: str, fields: Sequence[str], *, sep: str = SEP, trailing: bool = False) -> Records:
    """Delimited text → one record per row, keyed by ``fields``.

    ``trailing``: every field ends with ``sep`` (``squeue -O Field:SEP``). A newline inside a value
    splits a row over lines; they are joined back by counting delimiters: a line continues the row
    before while that row lacks delimiters (and the sum does not overshoot), and a non-blank line
    without any continues a complete row's last field (the first field, a job id, never holds a
    newline). Rows of another width are dropped and counted (the first five kept as examples).
    """
    want = len(fields) - (0 if trailing else 1)
    out = Records()
    row: str | None = None
    count = 0

    def emit() -> None:
        if row is None:
            return
        if count == want:
            out.append(dict(zip(fields, row[:-len(sep)].split(sep) if trailing else row.split(sep), strict=True)))
        elif row.strip():
            out.malformed += 1
            if len(out.malformed_examples) < 5:
                out.malformed_examples.append(row)

    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    for line in lines:
        found = line.count(sep)
        if row is not None:
            if (count < want and count + found <= want) or \
                    (count == want and found == 0 and not trailing and want > 0 and line.strip()):
                row, count = row + "\n" + line, count + found
                continue
            emit()
        row, count = line, found
    emit()
    return out


def split_pipes(text: str, fields: Sequence[str], *, header: str | None = None) -> Records:
    """``--parsable2`` text of commands without ``--delimiter`` (sshare, sacctmgr, sreport): one
    record per line; a header line starting with ``header`` and rows of another width are skipped."""
    out = Records()
    for line in text.splitlines():
        if not line.strip() or (header is not None and line.startswith(header)):
            continue
        values = line.split("|")
        if len(values) != len(fields):
            out.malformed += 1
            continue
        out.append(dict(zip(fields, values, strict=True)))
    return out


# -- the commands ---------------------------------------------------------------------------------

def sacct(slurm: Slurm, fields: Sequence[str], args: Iterable[str] = (), **run: Any) -> Records:
    """``sacct --parsable2 --noheader --delimiter=US -o FIELDS ARGS`` as records (``run``: options of
    :meth:`Slurm.run`, e.g. ``check``, ``retries``, ``timeout``)."""
    return split_records(slurm.run("sacct", sacct_args(fields, args), **run).stdout, fields)


def sacct_args(fields: Sequence[str], args: Iterable[str] = ()) -> list[str]:
    return ["--parsable2", "--noheader", f"--delimiter={SEP}", "--format=" + ",".join(fields), *args]


def squeue(slurm: Slurm, fields: Sequence[str], args: Iterable[str] = (), **run: Any) -> Records:
    """``squeue -h -O Field:US,...`` as records keyed by the ``-O`` names (``JobID``, ``Name``,
    ``exit_code`` ...), values unpadded and whole."""
    return split_records(slurm.run("squeue", squeue_args(fields, args), **run).stdout, fields, trailing=True)


def squeue_args(fields: Sequence[str], args: Iterable[str] = ()) -> list[str]:
    return ["--noheader", "--Format=" + ",".join(f"{name}:{SEP}" for name in fields), *args]


def sinfo(slurm: Slurm, fields: Sequence[str], args: Iterable[str] = (), **run: Any) -> Records:
    """``sinfo -h -O Field:US,...`` as records keyed by the ``-O`` names (``NodeList``, ``StateLong``,
    ``Reason`` ...)."""
    argv = ["--noheader", "--Format=" + ",".join(f"{name}:{SEP}" for name in fields), *args]
    return split_records(slurm.run("sinfo", argv, **run).stdout, fields, trailing=True)


def sacctmgr(slurm: Slurm, fields: Sequence[str], args: Iterable[str], **run: Any) -> Records:
    """``sacctmgr -n -P ARGS format=FIELDS`` as records."""
    argv = ["--noheader", "--parsable2", *args, "format=" + ",".join(fields)]
    return split_pipes(slurm.run("sacctmgr", argv, **run).stdout, fields)


#: the sshare fields fair-share reads (``--format``), in order
SSHARE_FIELDS = ("Account", "User", "RawShares", "NormShares", "RawUsage", "NormUsage",
                 "EffectvUsage", "FairShare", "LevelFS")


def sshare_args() -> list[str]:
    return ["--all", "--long", "--parsable2", "--format=" + ",".join(SSHARE_FIELDS)]


def parse_sshare(text: str) -> Records:
    """``sshare -a -l -P`` text (our field order, header optional; ``Account`` keeps its leading
    spaces, one per tree level). Versions that add columns after ours are read by position."""
    out = Records()
    for line in text.splitlines():
        if not line.strip() or line.startswith("Account|") or line.startswith("-"):
            continue
        values = line.split("|")
        if len(values) < len(SSHARE_FIELDS):
            out.malformed += 1
            continue
        out.append(dict(zip(SSHARE_FIELDS, values, strict=False)))
    return out


def sshare(slurm: Slurm, **run: Any) -> Records:
    return parse_sshare(slurm.run("sshare", sshare_args(), **run).stdout)


SREPORT_ACCOUNT_USER = ("Cluster", "Account", "Login", "Proper Name", "Used", "Energy")


def sreport_account_user(text: str) -> Records:
    """``sreport -P -n cluster AccountUtilizationByUser`` rows (Energy is absent on some releases)."""
    out = Records()
    for line in text.splitlines():
        values = line.split("|")
        if len(values) < 5 or values[0] == "Cluster":
            continue
        out.append(dict(zip(SREPORT_ACCOUNT_USER, values, strict=False)))
    return out


# -- scontrol ---------------------------------------------------------------------------------------

_KV_RE = re.compile(r"(\S+?)=(.*?)(?=\s+\S+?=|$)", re.S)
#: scontrol prints these values unquoted although they may hold spaces and ``=``: each runs up to the key
#: that always follows it (``show job``)
_RUNS_TO = {"JobName": ("UserId",), "Command": ("WorkDir",), "WorkDir": ("Comment", "StdErr"),
            "Comment": ("StdErr",), "StdErr": ("StdIn",), "StdIn": ("StdOut",), "StdOut": ("Power",)}


def parse_scontrol_record(line: str) -> Record:
    """One ``scontrol -o show`` record of ``Key=Value`` pairs (values may hold spaces). A job's name
    runs to ``UserId=``, so a name holding ``=``, spaces or newlines stays whole."""
    text = line.strip()
    out: Record = {}
    start = 0
    while start < len(text):
        match = _KV_RE.match(text, start)
        if match is None:
            break
        key, value = match.group(1), match.group(2)
        end = match.end()
        followers = _RUNS_TO.get(key)
        if followers is not None:
            ends = [at for at in (text.find(f" {name}=", match.start(2)) for name in followers) if at >= 0]
            if ends:
                value, end = text[match.start(2):min(ends)], min(ends)
        out[key] = value if key == "JobName" else value.strip()
        start = end
        while start < len(text) and text[start].isspace():
            start += 1
    return out


_FIRST_KEY_RE = re.compile(r"^([A-Za-z][\w/:]*)=")


def split_scontrol(text: str) -> list[Record]:
    """``scontrol -o show ENTITY`` text → records. Lines without ``=`` are headers (``Association
    Records``); a line that does not start with the first key of the first record continues the one
    before (a newline inside a job name: the rest of the record follows it on that line)."""
    key = ""
    chunks: list[str] = []
    for line in text.split("\n"):
        if "=" not in line:
            continue
        if not key:
            match = _FIRST_KEY_RE.match(line)
            if match is None:
                continue
            key = match.group(1) + "="
        if line.startswith(key) or not chunks:
            chunks.append(line)
        else:
            chunks[-1] += "\n" + line
    return [parse_scontrol_record(chunk) for chunk in chunks]


_PROMPT_RE = re.compile(r"^(?:scontrol:[ \t]*)+")


def scontrol_many(slurm: Slurm, commands: Sequence[str], first_keys: Sequence[str], **run: Any
                  ) -> list[list[Record]] | None:
    """Several ``scontrol -o`` commands in one process (read from its stdin: one process start, one
    round trip to slurmctld each), the n-th list holding the records of ``first_keys[n]`` (see
    :func:`split_scontrol_many`). None when any command failed, so the caller asks them one at a time
    for their own errors."""
    result = slurm.run("scontrol", ["-o"], input="".join(f"{command}\n" for command in commands), check=False,
                       **run)
    return split_scontrol_many(result.stdout, first_keys) if result.returncode == 0 else None


def split_scontrol_many(text: str, first_keys: Sequence[str]) -> list[list[Record]]:
    """The output of several ``scontrol -o`` commands → their records, each command's told apart by its
    records' first key (``PartitionName``, ``NodeName``, ``ClusterName``). scontrol echoes its prompt
    (``scontrol: show node`` with readline; without it the prompt alone, before the answer): stripped."""
    groups: list[list[Record]] = [[] for _ in first_keys]
    starts = tuple(f"{key}=" for key in first_keys)
    for raw in text.split("\n"):
        line = _PROMPT_RE.sub("", raw)
        if line.startswith(starts):
            groups[starts.index(line[:line.index("=") + 1])].append(parse_scontrol_record(line))
    return groups


def hostnames(slurm: Slurm, nodelist: str) -> list[str]:
    """``scontrol show hostnames``: a host list as the controller expands it, one name per host."""
    return slurm.run("scontrol", ["show", "hostnames", nodelist]).stdout.split()


def scontrol_config(text: str) -> Record:
    """``scontrol show config`` → ``{key: value}`` (keys as Slurm prints them)."""
    config: Record = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


# -- sdiag --------------------------------------------------------------------------------------------

_RPC_RE = re.compile(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", re.M)


def sdiag_rpc_counts(text: str) -> dict[str, int]:
    """``sdiag``'s RPC counts by message type (``REQUEST_JOB_INFO`` → count)."""
    section = text.split("Remote Procedure Call statistics by message type", 1)[-1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    return {name: int(count) for name, count in _RPC_RE.findall(section)}


def dbd_agent_queue(text: str) -> int | None:
    """sdiag's ``DBD Agent queue size``: messages slurmctld holds for slurmdbd (None if not printed)."""
    found = re.search(r"DBD Agent queue size:\s*(\d+)", text)
    return int(found.group(1)) if found else None


def agent_backlog(text: str) -> int | None:
    """RPCs to slurmd that slurmctld has not delivered yet: sdiag's ``Agent queue size`` (those it could
    not deliver and retries, e.g. a kill for a node that was unreachable) plus ``Agent count`` (those
    on their way now); None unless both are printed."""
    queued = re.search(r"^Agent queue size:\s*(\d+)", text, re.M)
    sending = re.search(r"^Agent count:\s*(\d+)", text, re.M)
    return int(queued.group(1)) + int(sending.group(1)) if queued and sending else None


def sdiag(slurm: Slurm, **run: Any) -> dict[str, int]:
    return sdiag_rpc_counts(slurm.run("sdiag", [], **run).stdout)


# -- typed values -------------------------------------------------------------------------------------

def exit_status(text: str) -> tuple[int | None, int | None]:
    """(exit code, signal or None) of sacct's ``CODE:SIGNAL`` or squeue's raw wait status."""
    text = (text or "").strip()
    if text.isdigit():
        raw = int(text)
        return raw >> 8, (raw & 0x7F) or None
    code_text, _, sig_text = text.partition(":")
    code = int(code_text) if code_text.isdigit() else None
    sig = int(sig_text) if sig_text.isdigit() and int(sig_text) else None
    return code, sig


def stored_name(name: str) -> str:
    """A job name as slurmdbd stores it: ``"`` becomes `````` (as_mysql_job.c), so sacct prints it
    back that way; compare a name with sacct's through this."""
    return name.replace('"', "`")


def same_job_name(given: str, accounted: str) -> bool:
    """Whether sacct's ``JobName`` is the name a job was given (slurmdbd's quote rewrite allowed)."""
    return given == accounted or stored_name(given) == accounted


def reason(text: str) -> str:
    """Slurm's ``None`` reason → empty."""
    return "" if text in ("None", "(null)") else text


__all__ = ["SEP", "SREPORT_ACCOUNT_USER", "SSHARE_FIELDS", "Record", "Records", "exit_status", "hostnames",
           "parse_scontrol_record", "parse_sshare", "reason", "sacct", "sacct_args", "sacctmgr",
           "same_job_name", "scontrol_config", "sdiag", "agent_backlog", "sdiag_rpc_counts", "sinfo", "split_pipes",
           "split_records", "split_scontrol", "sreport_account_user", "squeue", "squeue_args",
           "sshare", "sshare_args", "stored_name"]
