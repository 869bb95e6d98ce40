"""``slinkyml sbatch render|submit JOB.yaml``: preview, check and submit a training job.

Only the standard library is imported here; the renderer, validation and backends load inside
the handlers (torch, pandas and rich are never imported by this command).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sbatch", help="render and submit training jobs from a YAML job spec",
                              description="Render a job spec (YAML) to an sbatch script, check it "
                              "against the live cluster and submit it with sbatch or slurmrestd.")
    sub = p.add_subparsers(dest="sbatch_command", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="print the sbatch script for JOB.yaml")
    render.add_argument("job", metavar="JOB.yaml")
    render.add_argument("-o", "--output", help="write the script here instead of stdout")
    render.set_defaults(handler=_render)
    submit = sub.add_parser("submit", help="check JOB.yaml against the cluster and submit it")
    submit.add_argument("job", metavar="JOB.yaml")
    submit.add_argument("--dry-run", action="store_true", help="render and check, submit nothing")
    submit.add_argument("--wait", action="store_true", help="wait for the job; exit with its status")
    submit.add_argument("--follow", action="store_true", help="show state and log lines until it ends")
    submit.add_argument("--backend", choices=("sbatch", "restapi"),
                        help="default: $SLINKYML_BACKEND, the config file, else sbatch")
    submit.add_argument("--restapi-url", help="http://host:6820 (JWT from $SLURM_JWT) or unix:/path")
    submit.add_argument("--no-check", action="store_true", help="skip the live-cluster checks")
    submit.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
    submit.set_defaults(handler=_submit)


def _load(path: str) -> Any:
    from slinkyml.jobs.spec import JobSpec

    return JobSpec.from_yaml(__import__("pathlib").Path(path))


def _render(args: argparse.Namespace) -> int:
    from slinkyml.jobs.render import render_sbatch

    script = render_sbatch(_load(args.job))
    if args.output:
        from slinkyml.errors import SlinkyError

        try:
            with open(args.output, "w") as fh:
                fh.write(script)
        except OSError as exc:
            raise SlinkyError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(script)
    return 0


def _submit(args: argparse.Namespace) -> int:
    from slinkyml.jobs import submit as sub
    from slinkyml.slurm import Slurm

    spec = _load(args.job)
    slurm = Slurm()
    if args.dry_run:
        from slinkyml.jobs.render import render_sbatch
        from slinkyml.jobs.validate import check_job

        script = render_sbatch(spec)
        if not args.no_check:
            check_job(spec, slurm)
        sys.stdout.write(script)
        print(f"# dry run: {spec.name!r} passes the cluster checks; nothing submitted", file=sys.stderr)
        return 0
    backend = sub.make_backend(args.backend, slurm=slurm, restapi_url=args.restapi_url)
    result = sub.submit(spec, backend=backend, slurm=None if args.no_check else slurm)
    print(f"Submitted batch job {result.job_id} ({result.backend}; script kept at {result.script_path})",
          flush=True)
    if not (args.wait or args.follow):
        return 0
    from slinkyml.jobs.follow import follow, wait

    if args.follow:
        state = follow(slurm, result.job_id, timeout=args.timeout)
    else:
        state = wait(slurm, result.job_id, timeout=args.timeout, poll=2.0)
    print(f"job {result.job_id} {state.state} exit={state.exit_code}")
    return 0 if state.state == "COMPLETED" else 1
