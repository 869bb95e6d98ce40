"""Why a job ended: the first failing rank, its host, exit code and exception — not the SIGTERM
that ``srun --kill-on-bad-exit`` then sent the other ranks.

Read from the script's own record, sacct's states, srun/slurmstepd log lines, torchrun's root cause
and the tracebacks; each finding keeps its file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slinkyml import DATA_DIR
from slinkyml.jobs.follow import JobState, find_logs, job_state
from slinkyml.jobs.logs import JobLogs, RankLog, read_tail
from slinkyml.slurm import causes, protocol, records, states
from slinkyml.slurm.runner import Slurm

#: kinds of ending, most specific first
KINDS = ("running", "completed", "oom", "node_fail", "timeout", "preempted", "launch", "exception",
         "cancelled", "failed")
#: exit codes and signals that mean "was killed because another rank failed" (SIGTERM, SIGKILL)
_KILLED_CODES = {"143", "137", "-15", "-9", "15", "9"}
_SRUN_TASK = re.compile(r"srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+)$")
_STEPD_CANCEL = re.compile(r"\*\*\* (?:JOB|STEP) (?P<id>\S+) ON (?P<host>\S+) CANCELLED AT \S+"
                           r"(?: DUE TO (?P<why>[A-Z ]+?))? \*\*\*")
_OOM = re.compile(r"oom[-_]kill|Out Of Memory|OOM Killed|out of memory|exceeded (?:job )?memory limit", re.I)
_SUBMITIT_HOST = re.compile(r"JobEnvironment\(.*\bhostname=([^,\s)]+)")
_MARKER = re.compile(r"^(?P<kind>\w+) rank (?P<rank>\d+) on (?P<host>\S+): (?P<what>.*)$")
_EVENT = re.compile(r"^r\d+ (?P<action>\w+) (?P<cause>\w+): ")
_STEPD_HOST = re.compile(r"^slurmstepd-(\S+?):")
_LAUNCH = re.compile(r"execve\(\)|Unable to create step|Task launch for .* failed|Application launch "
                     r"failed|can't open file|No such file or directory|command not found|pyxis: |"
                     r"error: .*launch failed|couldn't chdir|Permission denied")
#: the interpreter's own one-line refusals before any user code runs (no traceback): `python -m` of a module
#: that is not installed for it (torch under a python without it), e.g. "/usr/bin/python3: Error while finding
#: module specification for 'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')"
_PYTHON_REFUSAL = re.compile(r"^\S*python[\w.]*: (?:No module named \S|Error while finding module specification for )")
_STEPD_MEMORY_LIMIT = re.compile(r"Exceeded (?:job|step) memory limit|exceeded memory limit", re.I)
#: the run's own causes (its events file, slurm/causes.py) as kinds of ending
_CAUSE_KINDS = {causes.TIME_LIMIT: "timeout", causes.PREEMPTION: "preempted", causes.NODE_FAILURE: "node_fail",
                causes.OOM: "oom", causes.USER_ERROR: "exception", causes.CANCELLED: "cancelled"}
_ROOT_CAUSE = "Root Cause (first observed failure)"
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")
#: tracebacks of the launcher itself (torchrun being stopped or reporting its child), not the user's
_LAUNCHER_EXCEPTIONS = ("SignalException", "ChildFailedError", "torch.distributed.elastic")


@dataclass(frozen=True)
class Evidence:
    """Lines of one file around a finding (``line`` is 1-based, ``first`` the line of ``context[0]``)."""

    path: Path
    line: int
    first: int
    context: tuple[str, ...]


@dataclass(frozen=True)
class Diagnosis:
    job_id: str
    state: str
    kind: str
    exit_code: str = ""
    rank: int | None = None
    host: str = ""
    exception: str = ""
    detail: str = ""
    evidence: tuple[Evidence, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """The diagnosis as JSON-ready fields, evidence as file, line and lines (``jobs status --json``)."""
        fields = {name: getattr(self, name) for name in ("job_id", "state", "kind", "exit_code", "rank", "host",
                                                           "exception", "detail")}
        return {**fields, "summary": self.summary,
                "evidence": [{"path": str(e.path), "line": e.line, "first": e.first, "lines": list(e.context)}
                             for e in self.evidence]}

    @property
    def summary(self) -> str:
        """One line: ``job 12 FAILED (exception): rank 1 on dl2 exited 1: RuntimeError: boom``."""
        head = f"job {self.job_id} {self.state}"
        if self.kind in ("running", "completed"):
            return head + (f" exit={self.exit_code}" if self.exit_code else "")
        where = []
        if self.kind in _NO_CULPRIT:  # Slurm ended every rank alike: no rank or exit status to name
            return f"{head} ({_KIND_WORDS[self.kind]}): " + ": ".join(x for x in (self.exception, self.detail) if x)
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.host:
            where.append(f"on {self.host}")
        parts = [" ".join(where)] if where else []
        if self.exit_code and self.exit_code != "0":  # a time limit or node failure ends with 0:0
            parts[-1:] = [((parts[-1] + " ") if parts else "") + f"exited {self.exit_code}"]
        text = f"{head} ({_KIND_WORDS[self.kind]})"
        if parts:
            text += ": " + parts[0]
        for extra in (self.exception, self.detail):
            if extra:
                text += f": {extra}"
        return text


#: endings where Slurm stopped every rank: a rank's exit status is the stop's, not a cause
_NO_CULPRIT = ("timeout", "preempted", "cancelled")
_KIND_WORDS = {"oom": "out of memory", "node_fail": "node failure", "timeout": "time limit",
               "preempted": "preempted", "launch": "launch failure", "exception": "exception",
               "cancelled": "cancelled", "failed": "failed", "running": "running", "completed": "completed"}


@dataclass
class _Finding:
    path: Path
    index: int  # 0-based line index
    lines: list[str]
    before: int = 3
    after: int = 3

    def evidence(self) -> Evidence:
        first = max(0, self.index - self.before)
        return Evidence(self.path, self.index + 1, first + 1,
                        tuple(self.lines[first:self.index + self.after + 1]))


def _steps(slurm: Slurm, job_id: str) -> list[dict[str, str]]:
    try:
        return records.sacct(slurm, ("JobID", "State", "ExitCode", "NodeList"), ["-j", job_id], retries=1)
    except Exception:  # noqa: BLE001 - accounting down: diagnose from the logs alone
        return []


def _read(path: Path | None) -> list[str]:
    return read_tail(path, 0) if path is not None else []


def _strip_rank(line: str) -> tuple[int | None, str]:
    match = _RANK_PREFIX.match(line)
    return (int(match.group(1)), line[match.end():]) if match else (None, line)


def last_exception(lines: list[str]) -> tuple[int, int | None, str] | None:
    """(line index, rank prefix or None, ``Type: message``) of the last user traceback in ``lines``."""
    found = None
    for i, raw in enumerate(lines):
        rank, line = _strip_rank(raw)
        if not line.startswith("Traceback (most recent call last)"):
            continue
        for j in range(i + 1, len(lines)):
            rank_j, body = _strip_rank(lines[j])
            if rank_j != rank:
                continue
            if body and not body[0].isspace() and not body.startswith(("Traceback", "During handling",
                                                                        "The above exception")):
                if not any(name in body for name in _LAUNCHER_EXCEPTIONS):
                    found = (j, rank, body.strip())
                break
    return found


def _root_causes(lines: list[str]) -> list[tuple[int, dict[str, str]]]:
    """torchrun's "Root Cause" (and "Failures") entries: index and fields (host, rank, exitcode, time)."""
    out = []
    for i, line in enumerate(lines):
        if _ROOT_CAUSE not in line:
            continue
        fields: dict[str, str] = {}
        for body in lines[i + 1:i + 10]:
            key, sep, value = body.partition(":")
            if sep and key.strip() in ("time", "host", "rank", "exitcode"):
                fields[key.strip()] = value.strip()
        out.append((i, fields))
    return out


def _protocol_dir(logs: JobLogs) -> Path | None:
    """Where the run protocol's files are: next to the batch log, or to submitit's task logs."""
    if logs.kind == "sbatch" and logs.batch_log is not None:
        return logs.batch_log.parent
    if logs.kind == "submitit" and logs.ranks:
        return logs.ranks[0].path.parent
    return None


#: the ending rules (data/diagnose_rules.json): first match wins
RULES_FILE = DATA_DIR / "diagnose_rules.json"
_FACT_TYPES = {"state": str, "step_state": str, "event": str, "cancel_why": str, "oom_line": bool, "launch_line": bool,
               "exception": bool}
_STATE_NAMES = {value for name, value in vars(states.State).items() if not name.startswith("_")}


def load_rules(path: Path = RULES_FILE) -> list[tuple[str, list[dict[str, str | bool]]]]:
    """(kind, clauses) in order; a kind, fact or state name the code does not know is refused here."""
    rules = []
    for rule in json.loads(path.read_text())["rules"]:
        if rule["kind"] not in KINDS:
            raise ValueError(f"{path}: unknown kind {rule['kind']!r}")
        for clause in rule["any"]:
            for fact, value in clause.items():
                if not isinstance(value, _FACT_TYPES.get(fact, type(None))):
                    raise ValueError(f"{path}: {rule['kind']}: unknown fact or type {fact}={value!r}")
                if fact in ("state", "step_state") and value not in _STATE_NAMES:
                    raise ValueError(f"{path}: {rule['kind']}: {value!r} is not a name of slurm/states.py")
        rules.append((rule["kind"], rule["any"]))
    return rules


_RULES = load_rules()


def _clause_matches(clause: dict[str, str | bool], facts: dict[str, object]) -> bool:
    return all(value in facts["step_states"] if fact == "step_state"  # type: ignore[operator]
               else facts[fact] == value for fact, value in clause.items())


def ending_kind(facts: dict[str, object]) -> str:
    """The kind of ending the first matching rule names (the table ends with a rule that always matches)."""
    return next(kind for kind, clauses in _RULES if any(_clause_matches(c, facts) for c in clauses))


@dataclass
class _Case:
    """What one diagnosis has found so far; each reader below adds to it."""

    job: str
    state: JobState
    logs: JobLogs
    steps: list[dict[str, str]]
    batch: list[str]
    rank_files: list[tuple[RankLog, list[str]]]
    exit_code: str
    found: list[_Finding] = field(default_factory=list)
    rank: int | None = None
    host: str = ""
    exception: str = ""
    detail: str = ""
    marker_lines: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    event_cause: str = ""
    killed_task: tuple[int, str] | None = None
    cancel_why: str = ""
    oom: tuple[Path | None, int, list[str], int | None] | None = None
    launch: tuple[Path | None, int, list[str]] | None = None


def _read_protocol(case: _Case) -> None:
    """The run protocol's files: the first rank that raised, as the rank wrote it; the batch script's cause."""
    logs, job = case.logs, case.job
    log_dir, restart = _protocol_dir(logs), logs.newest_restart
    if logs.kind == "submitit" and log_dir is not None:  # submitit's logs do not say the restart; the marker does
        restart = max((int(p.name.rpartition("-r")[2]) for p in log_dir.glob(f".failed-{job}-r*")
                       if p.name.rpartition("-r")[2].isdigit()), default=restart)
    marker = protocol.failure_marker(log_dir, job, restart) if log_dir else None
    case.marker_lines = marker_lines = _read(marker)
    # the first rank that raised (lines are in time order); a lost connection names a victim, not the cause
    first = next((i for i, line in enumerate(marker_lines) if line.startswith(f"{protocol.USER} ")), None)
    match = _MARKER.match(marker_lines[first]) if first is not None else None
    if match and marker is not None and first is not None:
        case.rank, case.host, case.exception = int(match.group("rank")), match.group("host"), match.group("what")
        case.found.append(_Finding(marker, first, marker_lines, before=0, after=0))
    case.events = events = protocol.read_events(log_dir, job) if log_dir else []
    if events:
        match = _EVENT.match(events[-1])
        case.event_cause = match.group("cause") if match else ""
        case.found.append(_Finding(protocol.events_file(log_dir, job), len(events) - 1, events,  # type: ignore[arg-type]
                                   before=len(events) - 1, after=0))


def _read_srun_tasks(case: _Case) -> None:
    """srun's per-task lines in the batch log: the first task that failed on its own."""
    for i, line in enumerate(case.batch):
        match = _SRUN_TASK.search(line)
        if not match:
            continue
        what = match.group("what")
        code = re.search(r"exit code (\d+)", what)
        task = int(re.split(r"[,\-]", match.group("tasks"))[0])
        if (code and code.group(1) not in _KILLED_CODES) or _OOM.search(what):
            if case.rank is None or (case.rank == task and not case.host):
                case.rank, case.host = task, match.group("host")
            if code and case.exit_code in ("", "0", case.state.exit_code.partition(":")[0]):
                case.exit_code = code.group(1)
            case.found.append(_Finding(case.logs.batch_log, i, case.batch))  # type: ignore[arg-type]
            break
        elif case.killed_task is None:
            case.killed_task = (task, match.group("host"))


def _read_torchrun(case: _Case) -> None:
    """torchrun's own account: the global rank and host of the first failure that was not a kill."""
    for entry, lines in case.rank_files if not case.marker_lines else []:
        for i, fields in _root_causes(lines):
            root_code = fields.get("exitcode", "").split()[0] if fields.get("exitcode") else ""
            if root_code in _KILLED_CODES or "Signals." in fields.get("exitcode", ""):
                continue
            rank_text = fields.get("rank", "").split()[0] if fields.get("rank") else ""
            case.rank = int(rank_text) if rank_text.isdigit() else case.rank
            case.host = fields.get("host", case.host)
            case.exit_code = root_code or case.exit_code
            case.found.append(_Finding(entry.path, i, lines, before=0, after=7))
            break


def _read_exception(case: _Case) -> None:
    """The exception: from the failing rank's log first, else from any rank's (a rank whose peer failed
    raises too, later: a lost connection is the victim's, not the cause); then the rank's host."""
    hits = [(entry, lines, hit) for entry, lines in case.rank_files if (hit := last_exception(lines)) is not None]
    hits.sort(key=lambda item: (item[0].index != case.rank,
                                bool(re.search(protocol.COMMUNICATION_ERRORS, item[2][2], re.I)),
                                item[0].stream != "err", item[0].index))
    for entry, lines, hit in hits:
        index, prefixed_rank, logged = hit
        case.exception = case.exception or logged
        if case.rank is None:
            case.rank = prefixed_rank if prefixed_rank is not None else entry.index
        case.found.insert(0, _Finding(entry.path, index, lines, before=6, after=1))
        break
    if not case.exception:  # a rank that died before training: the interpreter's own line, the failing rank's first
        refusals = [(entry, lines, i) for entry, lines in sorted(case.rank_files, key=lambda item: item[0].index != case.rank)
                    for i, line in enumerate(lines) if _PYTHON_REFUSAL.match(_strip_rank(line)[1])]
        if refusals:
            entry, lines, index = refusals[0]
            case.exception = _strip_rank(lines[index])[1].strip()
            case.rank = entry.index if case.rank is None else case.rank
            case.found.insert(0, _Finding(entry.path, index, lines, before=1, after=1))
    if not case.exception:
        hit = last_exception(case.batch)
        if hit is not None:
            case.exception = hit[2]
            case.found.insert(0, _Finding(case.logs.batch_log, hit[0], case.batch,  # type: ignore[arg-type]
                                          before=6, after=1))
    if case.rank is not None and not case.host:  # submit() ranks: submitit logs its JobEnvironment's hostname
        for entry, lines in case.rank_files:
            match = next((m for m in map(_SUBMITIT_HOST.search, lines) if m), None) if entry.index == case.rank else None
            if match:
                case.host = match.group(1)
                break


def _read_slurm_words(case: _Case) -> None:
    """What Slurm itself said: slurmstepd's cancel reason, an out-of-memory or launch failure line."""
    batch, batch_log = case.batch, case.logs.batch_log
    for i, line in enumerate(batch + [line for _, lines in case.rank_files for line in lines]):
        match = _STEPD_CANCEL.search(line)
        if match and match.group("why"):
            case.cancel_why = match.group("why")
            if i < len(batch):
                case.found.append(_Finding(batch_log, i, batch))  # type: ignore[arg-type]
            break
    case.oom = next(((path, i, lines, index) for path, lines, index in [(batch_log, batch, None)]
                     + [(entry.path, lines, entry.index) for entry, lines in case.rank_files]
                     for i, line in enumerate(lines) if _OOM.search(line)), None)
    case.launch = next(((path, i, lines) for path, lines in [(batch_log, batch)]
                        + [(entry.path, lines) for entry, lines in case.rank_files]
                        for i, line in enumerate(lines) if _LAUNCH.search(line)), None)


def _finish_oom(case: _Case) -> None:
    if case.oom is not None:
        path, index, lines, oom_rank = case.oom
        case.found.insert(0, _Finding(path, index, lines))  # type: ignore[arg-type]
        stepd = _STEPD_HOST.match(lines[index])
        if case.rank is None and oom_rank is not None:
            case.rank = oom_rank
        if case.rank is None and case.killed_task is not None:
            case.rank, case.host = case.killed_task
        case.host = case.host or (stepd.group(1) if stepd else "")
    oom_step = next((s for s in case.steps if s.get("State", "").startswith(states.State.OUT_OF_MEMORY)), None)
    if oom_step and not case.host:
        case.host = oom_step.get("NodeList", "")
    stepd_limit = case.oom is not None and _STEPD_MEMORY_LIMIT.search(case.oom[2][case.oom[1]])
    case.detail = ("slurmstepd killed it over its memory limit (JobAcctGatherParams=OverMemoryKill), not the "
                   "kernel's OOM killer" if stepd_limit else
                   "the kernel's OOM killer, in the job's memory cgroup (over its --mem)")


def _finish_node_fail(case: _Case) -> None:
    failed = next((s for s in case.steps if s.get("State", "").startswith(states.State.NODE_FAIL)), None)
    case.host = case.host or (failed or {}).get("NodeList", "") or case.state.nodes
    case.detail = causes.message(causes.NODE_FAILURE)


def _finish_timeout(case: _Case) -> None:
    case.detail = causes.message(causes.TIME_LIMIT) + (f" ({case.state.run_time})" if case.state.run_time else "")
    if case.events and "no checkpoint since the run started" in case.events[-1]:
        case.detail += "; not requeued: no checkpoint since the run started"


def _finish_preempted(case: _Case) -> None:
    case.detail = causes.message(causes.PREEMPTION)


def _finish_cancelled(case: _Case) -> None:
    case.detail = case.state.state.partition(" ")[2]  # "by 0"


def _finish_launch(case: _Case) -> None:
    path, index, lines = case.launch  # type: ignore[misc]
    case.found.insert(0, _Finding(path, index, lines))  # type: ignore[arg-type]
    case.detail = lines[index].strip()


def _finish_failed(case: _Case) -> None:
    if case.rank is None and case.killed_task is not None:
        case.rank, case.host = case.killed_task


#: what each kind of ending adds once the table has named it (the exception kind: nothing more)
_FINISH: dict[str, Callable[[_Case], None]] = {
    "oom": _finish_oom, "node_fail": _finish_node_fail, "timeout": _finish_timeout,
    "preempted": _finish_preempted, "cancelled": _finish_cancelled, "launch": _finish_launch,
    "exception": lambda case: None, "failed": _finish_failed}


def diagnose(slurm: Slurm, job_id: int | str, *, state: JobState | None = None, logs: JobLogs | None = None,
             steps: list[dict[str, str]] | None = None) -> Diagnosis:
    """The diagnosis of one job (any state; a running job gets a one-line "running"). ``state``,
    ``logs`` and ``steps`` (sacct's job and step records) are read from the cluster when not given."""
    state = state or job_state(slurm, job_id)
    job = str(job_id)
    name = states.normalise(state.state)
    if name in states.UNFINISHED:
        return Diagnosis(job, state.state, "running", state.exit_code, detail=state.reason)
    if name == states.State.COMPLETED:
        return Diagnosis(job, state.state, "completed", state.exit_code)
    logs = logs or find_logs(slurm, state)
    steps = _steps(slurm, job) if steps is None else steps
    case = _Case(job, state, logs, steps, _read(logs.batch_log), [(r, _read(r.path)) for r in logs.rank_logs()],
                 state.exit_code.partition(":")[0] if state.exit_code else "")
    for reader in (_read_protocol, _read_srun_tasks, _read_torchrun, _read_exception, _read_slurm_words):
        reader(case)
    kind = ending_kind({"state": name, "step_states": {s.get("State", "").split()[0] for s in steps if s.get("State")},
                        "event": _CAUSE_KINDS.get(case.event_cause, ""), "cancel_why": case.cancel_why,
                        "oom_line": case.oom is not None, "launch_line": case.launch is not None,
                        "exception": bool(case.exception)})
    _FINISH[kind](case)
    detail = case.detail
    if not logs.exists:
        detail = (detail + "; " if detail else "") + "no log files left (" + ", ".join(logs.tried[:3]) + ")"
    evidence = tuple(dict.fromkeys(f.evidence() for f in case.found))
    return Diagnosis(job, state.state, kind, case.exit_code, case.rank, case.host, case.exception, detail, evidence)


def failed_tasks(slurm: Slurm, job_id: int | str) -> tuple[list[str], int]:
    """An array's tasks that failed, the first to fail first (by the time each ended, as sacct
    records it), and how many tasks it has; ``([], 0)`` for a job that is not an array (or a task)."""
    base = str(job_id)
    if "_" in base:
        return [], 0
    rows = records.sacct(slurm, ["JobID", "State", "End"], ["-X", "-j", base], check=False, retries=0)
    tasks = [r for r in rows if r["JobID"].partition("_")[0] == base and r["JobID"].partition("_")[2].isdigit()]
    failed = [r for r in tasks if states.normalise(r["State"].split()[0] if r["State"] else "") in states.FAILED]
    failed.sort(key=lambda r: (r["End"] in ("", "Unknown", "None"), r["End"], int(r["JobID"].partition("_")[2])))
    return [r["JobID"] for r in failed], len(tasks)


__all__ = ["Diagnosis", "Evidence", "KINDS", "RULES_FILE", "diagnose", "ending_kind", "failed_tasks",
           "last_exception", "load_rules"]
