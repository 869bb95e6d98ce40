"""``slinkyml jobs list|status|logs|why|cancel``: look after submitted jobs (stdlib imports only here)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from slinkyml.errors import SlinkyError
from slinkyml.slurm.jobid import job_id_argument, job_or_task_argument


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("jobs", )
    sub = p.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="your jobs: running, pending, and ended since --since (slurmctld, "
                             "accounting and slinkyml's submission records)",
                             description="One row per job (an array task per row), oldest first. Jobs slinkyml "
                             "submitted show their kind (sbatch, submitit, array) and log dir; a recorded job Slurm "
                             "knows nothing of is listed UNKNOWN.")
    listing.add_argument("--all", action="store_true", help="every user's jobs (default: yours)")
    listing.add_argument("-u", "--user", help="this user's jobs")
    listing.add_argument("--since", default="1d", help="ended jobs since: 2026-01-31[T12:00], 7d, 12h, 30m "
                         "ago (1d); running and pending jobs are always listed")
    listing.add_argument("--state", action="append", default=[], type=_states, metavar="STATE[,STATE]",
                         help="only jobs in these states (e.g. RUNNING,PENDING or FAILED; repeatable)")
    listing.add_argument("--json", action="store_true", help="a JSON list of objects instead of the table")
    listing.set_defaults(handler=_list)
    status = sub.add_parser("status", help="state, reason, run time and restarts of jobs; for a failed "
                            "job the first failing rank, its host, exit code and exception")
    status.add_argument("job_ids", nargs="+", type=job_or_task_argument, metavar="JOBID",
                        help="JOBID or an array task JOBID_TASK (an array's JOBID names its first task to fail)")
    status.add_argument("--json", action="store_true", help="a JSON list of objects instead of the table")
    status.set_defaults(handler=_status)
    logs = sub.add_parser("logs", help="the batch log and every rank's log, also after Slurm forgot the job",
                          description="Log paths come from the submission record, slurmctld, or sacct's "
                          "WorkDir. Exit 1 when the job's log files are gone.")
    logs.add_argument("job_id", type=job_or_task_argument, metavar="JOBID", help="JOBID or JOBID_TASK")
    logs.add_argument("-n", "--lines", type=int, default=20,
                      help="last lines per rank log (20; 0: whole files)")
    logs.add_argument("--rank", type=int, metavar="N", help="only this rank's (node's, task's) log, whole")
    logs.add_argument("--restart", type=int, metavar="R", help="logs of this run of a requeued job "
                      "(default: the newest)")
    logs.add_argument("--follow", action="store_true",
                      help="print every new line of every log until the job ends")
    logs.set_defaults(handler=_logs)
    why = sub.add_parser("why", help="why a job failed: the first failing rank and the log lines around it",
                         description="Recognises a rank's exception, OOM kills, node failures, time limits, "
                         "preemption and launch failures. Exit 0 for a completed job, 1 otherwise.")
    why.add_argument("job_id", type=job_or_task_argument, metavar="JOBID",
                     help="JOBID or an array task JOBID_TASK (an array's JOBID: its first task to fail)")
    why.set_defaults(handler=_why)
    cancel = sub.add_parser("cancel", help="cancel jobs (scancel)")
    cancel.add_argument("job_ids", nargs="+", type=job_id_argument, metavar="JOBID",
                        help="JOBID, JOBID_TASK, JOBID_[1-5,7] or JOBID+OFFSET (as scancel)")
    cancel.add_argument("--signal", help="send this signal instead of cancelling (e.g. USR2)")
    cancel.set_defaults(handler=_cancel)


def _states(text: str) -> list[str]:
    from slinkyml.jobs.listing import KNOWN_STATES

    names = [part.strip().upper() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in KNOWN_STATES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown job state {', '.join(unknown) or repr(text)} "
                                         f"(one of {', '.join(sorted(KNOWN_STATES))})")
    return names


def _list(args: argparse.Namespace) -> int:
    from slinkyml.accounting.timeparse import parse_when
    from slinkyml.jobs.listing import list_jobs
    from slinkyml.slurm import Slurm

    if args.all and args.user:
        raise SlinkyError("--all and --user: give one")
    since = parse_when(args.since, "--since")
    jobs, warning = list_jobs(Slurm(), since=since, user=None if args.all else (args.user or ""),
                              states_wanted=[name for names in args.state for name in names])
    if warning:
        print(f"slinkyml: warning: {warning}", file=sys.stderr)
    if args.json:
        json.dump([job.to_dict() for job in jobs], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{'JOBID':>10} {'STATE':<13} {'NAME':<24} {'USER':<8} {'KIND':<9} {'SUBMITTED':<19} "
          f"{'ELAPSED':>10} {'RESTARTS':>8}  REASON/NODES")
    for job in jobs:
        name = job.name.replace("\n", " ").replace("\t", " ")
        print(f"{job.job_id:>10} {job.state:<13} {name[:24]:<24} {job.user[:8]:<8} {job.kind or '-':<9} "
              f"{job.submitted or '-':<19} {job.elapsed or '-':>10} {job.restarts:>8}  "
              f"{job.reason or job.node_list or '-'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from slinkyml.jobs.diagnose import diagnose, failed_tasks
    from slinkyml.jobs.follow import find_logs, job_state
    from slinkyml.slurm import Slurm, protocol
    from slinkyml.slurm.states import State

    slurm = Slurm()
    if not args.json:
        print(f"{'JOBID':>8} {'STATE':<12} {'TIME':>10} {'RESTARTS':>8}  REASON/NODES")
    worst = 0
    found = []
    for job_id in args.job_ids:
        s = job_state(slurm, job_id)
        batch_log = find_logs(slurm, s).batch_log
        # each restart's cause, and a failure's (the run protocol's events file)
        events = protocol.read_events(batch_log.parent, job_id) if batch_log else []
        failed = s.finished and bool(s.exit_status)
        # an array: slurmctld shows one task for its id; the first task to fail is what to name
        tasks, n_tasks = failed_tasks(slurm, job_id)
        why = diagnose(slurm, tasks[0]) if tasks else diagnose(slurm, job_id, state=s) if failed else None
        failed = failed or bool(tasks)
        worst = max(worst, int(failed))
        first = f"{len(tasks)} of {n_tasks} array tasks failed; the first to fail: " if tasks else ""
        if args.json:
            found.append({**s.to_dict(), "events": events, "diagnosis": why.to_dict() if why else None,
                          **({"failed_tasks": tasks} if n_tasks else {})})
            continue
        print(f"{s.job_id:>8} {s.state:<12} {s.run_time:>10} {s.restarts:>8}  "
              f"{s.reason if s.state.startswith(State.PENDING) else s.nodes}")
        for event in events:
            print(f"{'':>8} {event}")
        if why is not None:
            print(f"{'':>8} {first}{why.summary}")
    if args.json:
        json.dump(found, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return worst


def _logs(args: argparse.Namespace) -> int:
    from slinkyml.jobs.follow import find_logs, follow, job_state
    from slinkyml.jobs.logs import read_tail
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    if args.follow:
        state = follow(slurm, args.job_id, rank=args.rank)
        return state.exit_status
    state = job_state(slurm, args.job_id)
    logs = find_logs(slurm, state)
    if not logs.exists:
        where = ", ".join(logs.tried) or "no log path known (no submission record, no WorkDir)"
        raise _NoLogs(f"job {args.job_id} ({state.state}): its log files are gone or were never written "
                      f"here; looked for {where}")
    chosen = logs.rank_logs(args.rank, restart=args.restart)
    if args.rank is None and logs.batch_log is not None and logs.batch_log.exists():
        print(f"==> {logs.batch_log} <==")
        sys.stdout.writelines(line + "\n" for line in read_tail(logs.batch_log, 0))
    if args.rank is not None and not chosen:
        raise SlinkyError(f"job {args.job_id} has no log for rank {args.rank} "
                          f"(there are: {', '.join(sorted({r.name for r in logs.ranks})) or 'none'})")
    lines = 0 if args.rank is not None else args.lines
    for entry in chosen:
        print(f"==> {entry.path} <==" + (f" (last {lines} lines)" if lines else ""))
        sys.stdout.writelines(line + "\n" for line in read_tail(entry.path, lines))
    if state.finished and state.exit_status and args.rank is None:
        from slinkyml.jobs.diagnose import diagnose

        print(f"==> {diagnose(slurm, args.job_id, state=state, logs=logs).summary}")
    return 0


def _why(args: argparse.Namespace) -> int:
    from slinkyml.jobs.diagnose import diagnose, failed_tasks
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    tasks, n_tasks = failed_tasks(slurm, args.job_id)
    found = diagnose(slurm, tasks[0] if tasks else args.job_id)
    print((f"{len(tasks)} of {n_tasks} array tasks failed; the first to fail: " if tasks else "") + found.summary)
    for evidence in found.evidence:
        print(f"\n==> {evidence.path}:{evidence.line} <==")
        for offset, line in enumerate(evidence.context):
            number = evidence.first + offset
            print(f"{'>' if number == evidence.line else ' '}{number:6d}  {line}")
    return 0 if found.kind in ("completed", "running") else 1


class _NoLogs(SlinkyError):
    """The job exists but its files do not: a failure (1), not a usage error (2)."""

    exit_code = 1


#: scancel's line for a job it could not cancel or signal, e.g. "scancel: error: Kill job error on job
#: id 999: Invalid job id specified" (22.05 exits 0 after it unless signalling: the line is the answer)
_SCANCEL_REFUSED = re.compile(r"error on job id (\S+): (.+)$", re.M)


class _NotCancelled(SlinkyError):
    """Slurm refused some of the jobs: a failure (1), one line per job with Slurm's reason."""

    exit_code = 1

    def __init__(self, refused: list[tuple[str, str]]):
        super().__init__("; ".join(f"job {job}: {reason}" for job, reason in refused))
        self.refused = refused

    def lines(self) -> list[str]:
        return [f"job {job}: {reason}" for job, reason in self.refused]


def _cancel(args: argparse.Namespace) -> int:
    from slinkyml.slurm import Slurm, SlurmCommandNotFound, SlurmControllerDown, SlurmError, SlurmTimeout

    slurm = Slurm()
    extra = [f"--signal={args.signal}", "--batch"] if args.signal else []
    ids = [str(job_id) for job_id in args.job_ids]
    try:  # -v: every refusal gets its line (else scancel keeps quiet about an unknown job)
        stderr = slurm.run("scancel", ["-v", *extra, *ids], retries=1).stderr
    except (SlurmControllerDown, SlurmTimeout, SlurmCommandNotFound):
        raise  # Slurm unreachable: exit 3, not "refused"
    except SlurmError as exc:  # an unknown job, permission denied...: Slurm's reason per job, exit 1
        if not _SCANCEL_REFUSED.search(exc.stderr):
            raise
        stderr = exc.stderr
    refused = [(job, reason.strip()) for job, reason in _SCANCEL_REFUSED.findall(stderr)]
    done = [job for job in ids if job not in {job for job, _ in refused}]
    if done:
        print(("signalled " if args.signal else "cancelled ") + " ".join(done))
    if refused:
        raise _NotCancelled(refused)
    return 0
