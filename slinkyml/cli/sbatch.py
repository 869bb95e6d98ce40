"""``slinkyml sbatch render|submit|check``: preview, check and submit a training job.
Stdlib only here; renderer, validation and backends load in the handlers."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sbatch", description="Render a job spec (YAML) to an sbatch script, check it "
                              "against the live cluster and submit it with sbatch or slurmrestd.")
    sub = p.add_subparsers(dest="sbatch_command", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="print the sbatch script for JOB.yaml")
    render.add_argument("job", metavar="JOB.yaml")
    render.add_argument("-o", "--output", help="write the script here instead of stdout")
    render.set_defaults(handler=_render)
    submit = sub.add_parser("submit", help="check JOB.yaml against the cluster and submit it")
    submit.add_argument("job", metavar="JOB.yaml")
    submit.add_argument("--dry-run", action="store_true", help="render and check, submit nothing")
    submit.add_argument("--wait", action="store_true", help="wait for the job; exit with its exit code "
                        "(as sbatch --wait), the last line naming the first failing rank")
    submit.add_argument("--follow", action="store_true", help="show state and log lines until it ends")
    submit.add_argument("--backend", choices=("sbatch", "restapi"),
                        help="default: $SLINKYML_BACKEND, the config file, else sbatch")
    submit.add_argument("--restapi-url", help="http://host:6820 (JWT from $SLURM_JWT) or unix:/path")
    submit.add_argument("--no-check", action="store_true", help="skip the live-cluster checks")
    submit.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
    submit.set_defaults(handler=_submit)
    check = sub.add_parser("check", help="would a real slurmctld for CLUSTER.yaml accept these scripts? "
                           "(sbatch --test-only against a throw-away slurmctld)",
                           description="Start a throw-away slurmctld (no slurmd, no accounting) whose "
                           "slurm.conf declares the node sets of CLUSTER.yaml as the rendered Controller and "
                           "NodeSets would, run `sbatch --test-only` on each script (a JOB.yaml is rendered "
                           "first) and print one line per script. Exit 0: all accepted; 1: some rejected.")
    check.add_argument("scripts", nargs="+", metavar="SCRIPT.sbatch|JOB.yaml")
    check.add_argument("--cluster", required=True, metavar="CLUSTER.yaml", help="a SlurmCluster spec")
    check.add_argument("--partition", "-p", help="submit to this partition (default: the script's or the "
                       "cluster's default partition)")
    check.set_defaults(handler=_check)


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
    return submit_and_report(_load(args.job), args)


def submit_and_report(spec: Any, args: argparse.Namespace) -> int:
    """``--dry-run`` (render and check), or submit; then ``--wait``/``--follow`` (shared by ``run``)."""
    from slinkyml.jobs.request import SlurmJobRequest
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    request = SlurmJobRequest.from_spec(spec)  # the one request: the script, the backends, the dry run
    if args.dry_run:
        from slinkyml.jobs.spec import interpreter

        spec, source = interpreter(spec)  # as submit() will run it
        from slinkyml import config
        from slinkyml.jobs.render import render_sbatch
        from slinkyml.jobs.validate import check_job

        backend = config.submit_backend_name(getattr(args, "backend", None))
        target = config.cluster_target(restapi_url=getattr(args, "restapi_url", None))
        if backend == "restapi":
            target.require_restapi_url()
        script = render_sbatch(spec, request)
        if not args.no_check:
            check_job(spec, slurm, cache=True)
        sys.stdout.write(script)
        print(f"# cluster: {target.describe()}; backend {backend}", file=sys.stderr)
        print(f"# request: {request}", file=sys.stderr)
        print(f"# interpreter: {spec.python} ({source})", file=sys.stderr)
        for warning in request.warnings():
            print(f"# warning: {warning}", file=sys.stderr)
        print(f"# dry run: {spec.name!r} passes the cluster checks; nothing submitted", file=sys.stderr)
        return 0
    from slinkyml.jobs import submit as sub

    for warning in request.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    submitter = sub.make_backend(getattr(args, "backend", None), slurm=slurm,
                                 restapi_url=getattr(args, "restapi_url", None))
    # the check may pass on the cluster's answers kept for this slurm.conf (a refusal is asked again)
    result = sub.submit(spec, backend=submitter, slurm=None if args.no_check else slurm, request=request,
                        check_cache=True)
    print(f"Submitted batch job {result.job_id} ({result.backend}; the job copies its script to "
          f"{result.script_path})", flush=True)
    print(reopen_commands(result.job_id), file=sys.stderr, flush=True)
    if not (args.wait or args.follow):
        return 0
    return wait_and_report(slurm, result.job_id, follow_logs=args.follow, timeout=args.timeout)


def reopen_commands(job_id: int | str) -> str:
    """How to come back to a job later, from any shell (stderr: stdout stays sbatch's one line)."""
    return (f"# reopen: slinkyml jobs status {job_id} (state, restarts, failing rank) | slinkyml jobs logs "
            f"{job_id} --follow | slinkyml jobs cancel {job_id} | slinkyml jobs list")


def wait_and_report(slurm: Any, job_id: int, *, follow_logs: bool, timeout: float | None) -> int:
    """Wait (or follow) until the job ends; the last line says how it ended, and for a failure which
    rank failed where and why; exit with the job's exit code, as ``sbatch --wait`` does."""
    from slinkyml.jobs.diagnose import diagnose
    from slinkyml.jobs.follow import follow, wait

    if follow_logs:
        state = follow(slurm, job_id, timeout=timeout)
    else:
        state = wait(slurm, job_id, timeout=timeout, poll=1.0)
    if state.exit_status:
        print(diagnose(slurm, job_id, state=state).summary, flush=True)
    else:
        print(f"job {job_id} {state.state} exit={state.exit_code}", flush=True)
    return state.exit_status


def _check(args: argparse.Namespace) -> int:
    from slinkyml.jobs.shapecheck import check_scripts

    results = check_scripts(args.scripts, args.cluster, partition=args.partition)
    for result in results:
        print(result.line(), flush=True)
        for warning in result.warnings:
            print(f"{result.script}: warning: {warning}", flush=True)
    return 0 if all(r.accepted for r in results) else 1
