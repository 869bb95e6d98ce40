"""``slinkyml jobs status|logs|cancel``: look after submitted jobs (stdlib imports only here)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("jobs", help="status, logs and cancellation of submitted jobs")
    sub = p.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    status = sub.add_parser("status", help="state, reason, run time and restarts of jobs")
    status.add_argument("job_ids", nargs="+", type=_job_id, metavar="JOBID")
    status.set_defaults(handler=_status)
    logs = sub.add_parser("logs", help="the batch log and the newest step logs by rank")
    logs.add_argument("job_id", type=_job_id, metavar="JOBID")
    logs.add_argument("-n", "--lines", type=int, default=20, help="lines per step log (20)")
    logs.add_argument("--follow", action="store_true", help="keep showing new lines until the job ends")
    logs.set_defaults(handler=_logs)
    cancel = sub.add_parser("cancel", help="cancel jobs (scancel)")
    cancel.add_argument("job_ids", nargs="+", type=_job_id, metavar="JOBID")
    cancel.add_argument("--signal", help="send this signal instead of cancelling (e.g. USR2)")
    cancel.set_defaults(handler=_cancel)


def _job_id(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}")
    return int(text)


def _status(args: argparse.Namespace) -> int:
    from slinkyml.jobs.follow import job_state
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    print(f"{'JOBID':>8} {'STATE':<12} {'TIME':>10} {'RESTARTS':>8}  REASON/NODES")
    for job_id in args.job_ids:
        s = job_state(slurm, job_id)
        print(f"{s.job_id:>8} {s.state:<12} {s.run_time:>10} {s.restarts:>8}  "
              f"{s.reason if s.state.startswith('PENDING') else s.nodes}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from slinkyml.jobs.follow import follow, job_state, newest_lines
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    if args.follow:
        state = follow(slurm, args.job_id, lines=args.lines)
        return 0 if state.state == "COMPLETED" else 1
    state = job_state(slurm, args.job_id)
    if state.stdout and Path(state.stdout).exists():
        print(f"==> {state.stdout} <==")
        sys.stdout.write(Path(state.stdout).read_text(errors="replace"))
    for line in newest_lines(state.stdout, args.job_id, args.lines):
        print(line)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    extra = [f"--signal={args.signal}", "--batch"] if args.signal else []
    slurm.run("scancel", [*extra, *map(str, args.job_ids)], retries=1)
    print(("signalled " if args.signal else "cancelled ") + " ".join(map(str, args.job_ids)))
    return 0
