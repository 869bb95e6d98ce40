"""Slurm job states, one set of each for every reader (names as ``job_state_string`` prints them).

A requeued job keeps its id and goes back to PENDING, so no requeue state is terminal.
"""

from __future__ import annotations


class State:
    """The one spelling of each state name a reader compares with (``state == State.COMPLETED``)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    #: Slurm knows nothing of the job (purged, or lost by a controller restart), or has not said yet
    UNKNOWN = "UNKNOWN"
    #: slinkyml's own: submitted, not yet seen by squeue or sacct
    SUBMITTED = "SUBMITTED"


#: the job ended for good and will not run again
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                      "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})
#: terminal states that mean "the job did not finish its work"
FAILED = TERMINAL - {"COMPLETED"}
#: the job ended because of the machine, not the program (it may be requeued by Slurm)
INFRASTRUCTURE_FAILURE = frozenset({"NODE_FAIL", "BOOT_FAIL"})
#: states of a job that is on its way back to the queue
REQUEUEING = frozenset({"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING"})
#: waiting to run (a held job is PENDING with a hold reason)
PENDING = frozenset({"PENDING", "CONFIGURING", *REQUEUEING})
ACTIVE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "STOPPED"})
#: not ended yet: waiting, on its way back to the queue, or running
UNFINISHED = PENDING | ACTIVE
#: end states of a run (one ``--duplicates`` segment) whose allocation is counted as lost: the work did
#: not finish (failed, killed, out of time or memory, or preempted/requeued since its last checkpoint).
#: A tuple: reports list the lost hours in this order.
LOST_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "CANCELLED", "OUT_OF_MEMORY", "REQUEUED")

#: job state flags in the order Slurm's ``job_state_string`` tests them: the first one set names the
#: state (what sacct prints; slurmrestd 23.11+ lists base state and flags), else the base state does
STATE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
               "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
               "STAGE_IN")

#: squeue reasons of a job that will never start by itself (someone must release it)
HELD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser", "launch failed requeued held",
                          "job requeued in held state"})
#: a requeued job waits for its BeginTime (slurmctld sets now + the credential lifetime)
REQUEUE_WAIT_REASON = "BeginTime"


def normalise(state: str) -> str:
    """``CANCELLED by 0`` → ``CANCELLED``; ``COMPLETED+`` → ``COMPLETED``; empty → ``UNKNOWN``."""
    return ((state or "UNKNOWN").split() or ["UNKNOWN"])[0].rstrip("+").upper()


def is_terminal(state: str) -> bool:
    return normalise(state) in TERMINAL


def is_held(reason: str) -> bool:
    """Whether a pending job's reason says it waits for a release (``launch failed requeued held``;
    ``scontrol show job`` writes it with underscores)."""
    reason = (reason or "").strip().replace("_", " ")
    return reason in HELD_REASONS or reason.startswith("JobHeld") or "requeued held" in reason


def is_held_by_slurm(reason: str) -> bool:
    """Held by slurmctld itself after a launch failed (not by a user or an admin); squeue's words
    or scontrol's (``launch_failed_requeued_held``)."""
    return "launch failed requeued held" in (reason or "").replace("_", " ")


def is_unfinished(state: str) -> bool:
    return normalise(state) in UNFINISHED


__all__ = ["ACTIVE", "State", "FAILED", "HELD_REASONS", "INFRASTRUCTURE_FAILURE", "LOST_STATES", "PENDING", "REQUEUEING",
           "REQUEUE_WAIT_REASON", "STATE_FLAGS", "TERMINAL", "UNFINISHED", "is_held", "is_held_by_slurm", "is_terminal", "is_unfinished",
           "normalise"]
