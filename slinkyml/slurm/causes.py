"""Why a run ended, and whether it runs again: one decision for the batch script and the launcher.

The rules are data (``data/run_causes.json``: Slurm's facts → a cause, a cause → its requeue rule
and message) and the decision is one shell function (``data/shell/decide.sh``). Shell, because the
batch script must decide on a node that has neither slinkyml nor Python (``launcher: srun`` runs any
program; Slinky's slurmd images carry no slinkyml): the rendered script carries the function, and the
submitit launcher runs the same file with ``bash`` instead of keeping a Python copy that could
disagree (as srun's error lines and negative exit codes once did).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.slurm import states

TABLE_FILE = DATA_DIR / "run_causes.json"
DECIDE_SH = DATA_DIR / "shell" / "decide.sh"
#: where decide.sh's functions end and its run-as-a-program lines begin
_PROGRAM_PART = "\n# -- run as a program"

TIME_LIMIT = "time_limit"
PREEMPTION = "preemption"
NODE_FAILURE = "node_failure"
OOM = "oom"
USER_ERROR = "user_error"
CANCELLED = "cancelled"
ANY_FAILURE = "any_failure"

#: what a decision says to do
REQUEUE, SLURM_DECIDES, FAILED = "requeue", "slurm", "failed"


@cache
def table() -> dict[str, Any]:
    """The table, its ``slurm`` facts checked: an upper-case word there is a job state name of
    slurm/states.py (a misspelt state would never match, and the cause would silently never apply)."""
    loaded = json.loads(TABLE_FILE.read_text())
    names = states.TERMINAL | states.UNFINISHED
    for number, rule in enumerate(loaded["rules"], 1):
        for word in re.findall(r"[A-Z][A-Z_]{2,}", rule["when"].get("slurm", "")):
            if word not in names:
                raise ValueError(f"{TABLE_FILE}: rule {number} ({rule['cause']}): slurm: {word!r} is not a job "
                                 "state name of slurm/states.py")
    return loaded


def causes() -> tuple[str, ...]:
    return tuple(table()["causes"])


def requeue_causes() -> tuple[str, ...]:
    """What ``requeue.on`` may list: every cause that can requeue, and ``any_failure``."""
    return (*(c for c, rule in table()["causes"].items() if rule["requeue"] != "never"), ANY_FAILURE)


def default_requeue_on() -> tuple[str, ...]:
    return tuple(c for c, rule in table()["causes"].items() if rule["default_on"])


def message(cause: str) -> str:
    """The cause's one line (``""`` for an unknown one)."""
    return table()["causes"].get(cause, {}).get("message", "")


@cache
def cause_rules() -> str:
    """The rules as decide.sh reads them: ``CAUSE<TAB>FACT<TAB>ERE...`` per line, first match first."""
    return "\n".join("\t".join([rule["cause"], *(w for pair in rule["when"].items() for w in pair)])
                     for rule in table()["rules"])


@cache
def requeue_rules() -> str:
    """``CAUSE<TAB>HOW<TAB>yes|no<TAB>MESSAGE`` per cause (yes: ``any_failure`` covers it)."""
    return "\n".join(f"{c}\t{rule['requeue']}\t{'yes' if rule['any_failure'] else 'no'}\t{rule['message']}"
                     for c, rule in table()["causes"].items())


@cache
def infra_regex() -> str:
    """srun's and slurmstepd's lines that name a node that failed (the rules marked ``names_nodes``):
    the batch script excludes those nodes from the next run."""
    return "|".join(rule["when"]["step_errors"] for rule in table()["rules"] if rule.get("names_nodes"))


@cache  # rendered into every batch script: computed once, not per submission
def shell_function() -> str:
    """decide.sh's functions, for a batch script to carry (without its run-as-a-program lines)."""
    return DECIDE_SH.read_text().partition(_PROGRAM_PART)[0].rstrip("\n") + "\n"


@dataclass(frozen=True)
class Decision:
    """``cause`` (``""``: the run succeeded), ``action`` (requeue, slurm, failed) and one line."""

    cause: str
    action: str
    detail: str

    @property
    def message(self) -> str:
        return message(self.cause)


def decide(*, status: int, job_id: str, stop_signal: str = "", signal_at: float | None = None,
           warn_signal: str = "USR2", grace_s: int = 60, step_errors: str | Path = "",
           failure_marker: str | Path = "", preempted_marker: str | Path = "", job_output: str = "",
           job_output_from: int = 0, checkpoint_dir: str = "",
           run_started: float | None = None, requeue_on: tuple[str, ...] = (), restart: int = 0,
           max_restarts: int = 0, timeout: float = 60) -> Decision:
    """The decision of decide.sh for a launcher in Python. ``status`` as ``subprocess`` reports
    it (a negative signal number becomes bash's 128+N, so both read a killed launcher alike)."""
    import subprocess  # lazy: only a launcher decides, and every render imports this module
    import time

    env = {**os.environ,
           "cause_rules": cause_rules(), "requeue_rules": requeue_rules(),
           "warning_slack_s": str(table()["warning_slack_s"]),
           "status": str(128 - status if status < 0 else status), "SLURM_JOB_ID": str(job_id),
           "stop_signal": stop_signal, "signal_at": "" if signal_at is None else str(int(signal_at)),
           "warn_signal": warn_signal, "grace_s": str(grace_s), "step_errors": str(step_errors),
           "failure_marker": str(failure_marker), "preempted_marker": str(preempted_marker),
           "job_output": job_output, "job_output_from": str(job_output_from),
           "checkpoint_dir": checkpoint_dir, "run_started": str(int(run_started or time.time())),
           "requeue_on": " ".join(requeue_on), "restart_count": str(restart), "max_restarts": str(max_restarts)}
    out = subprocess.run(["bash", str(DECIDE_SH)], env=env, capture_output=True, text=True, timeout=timeout,
                         check=True).stdout.split("\n")
    cause, action, detail = (out + ["", "", ""])[:3]
    return Decision(cause, action if cause else "", detail)


__all__ = ["ANY_FAILURE", "CANCELLED", "DECIDE_SH", "Decision", "FAILED", "NODE_FAILURE", "OOM", "PREEMPTION",
           "REQUEUE", "SLURM_DECIDES", "TIME_LIMIT", "USER_ERROR", "causes", "cause_rules", "decide",
           "default_requeue_on", "infra_regex", "message", "requeue_causes", "requeue_rules", "shell_function", "table"]
