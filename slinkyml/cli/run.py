"""``slinkyml run [sbatch-like flags] SCRIPT|-m MODULE [ARGS...]``: a one-command job.

The flags build a :class:`~slinkyml.jobs.spec.JobSpec` (so errors name its fields), submitted as
``sbatch submit`` does. Stdlib imports only at module level.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from slinkyml.errors import SlinkyError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run", description="Build a job spec from sbatch-like flags and submit it: "
        "`slinkyml run -N 2 --gpus-per-node 8 -t 2:00:00 train.py --lr 3e-4` or "
        "`slinkyml run -N 2 -m pkg.train --epochs 3`. Everything after the script (or after -m MODULE) "
        "is passed to it. Exit status: the job's own with --wait/--follow (as sbatch --wait).")
    p.add_argument("-N", "--nodes", type=int, default=1, help="nodes (1)")
    p.add_argument("--gpus-per-node", type=int, default=0, metavar="G", help="GPUs per node (0)")
    p.add_argument("--nproc-per-node", type=int, dest="procs_per_node", metavar="P",
                   help="processes per node (default: one per GPU, else 1)")
    p.add_argument("--ntasks-per-node", type=int, dest="tasks_per_node", metavar="T",
                   help="Slurm tasks per node (default: what the launcher needs)")
    p.add_argument("-c", "--cpus-per-task", type=int, default=1, metavar="C")
    p.add_argument("--mem", dest="mem_per_node", metavar="SIZE", help="memory per node (e.g. 16G)")
    p.add_argument("-t", "--time", dest="time_limit", default="01:00:00", metavar="TIME",
                   help="time limit, [D-]HH:MM:SS or minutes (1:00:00)")
    p.add_argument("-p", "--partition")
    p.add_argument("-A", "--account")
    p.add_argument("-q", "--qos")
    p.add_argument("-w", "--nodelist")
    p.add_argument("--exclusive", action="store_true")
    p.add_argument("-d", "--dependency", dest="dependencies", action="append", default=[], metavar="DEP",
                   help="e.g. afterok:1234 (repeatable)")
    p.add_argument("-J", "--job-name", dest="name", help="default: the script's or module's name")
    p.add_argument("--launcher", default="torchrun", help="torchrun (default), deepspeed, neuron or srun")
    p.add_argument("--container", metavar="IMAGE", help="pyxis/enroot image for the tasks")
    p.add_argument("--container-mounts", metavar="SRC:DST[,...]", help="pyxis mounts, comma-separated")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="environment (repeatable)")
    p.add_argument("--python", help="the job's interpreter (default: the one running slinkyml, sys.executable)")
    p.add_argument("--log-dir", default="logs", help="where the job writes its logs (./logs)")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--max-restarts", type=int, metavar="R", help="requeues after preemption (3)")
    p.add_argument("--network", help="tcp (default), efa or ib")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")
    p.add_argument("--save-spec", metavar="FILE", help="also write the job spec as YAML")
    p.add_argument("--wait", action="store_true", help="wait for the job and exit with its exit code")
    p.add_argument("--follow", action="store_true", help="print state changes and every log line until it ends")
    p.add_argument("--no-check", action="store_true", help="skip the live-cluster checks")
    p.add_argument("--backend", choices=("sbatch", "restapi"),
                   help="default: $SLINKYML_BACKEND, the config file, else sbatch")
    p.add_argument("--restapi-url", help="http://host:6820 (JWT from $SLURM_JWT) or unix:/path")
    p.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                   help="run a Python module; the words after it are its arguments")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]")
    p.set_defaults(handler=_run)


def spec_data(args: argparse.Namespace) -> dict[str, Any]:
    """The job spec (as YAML would give it) that the flags describe; only what was set."""
    if args.module:
        entry: dict[str, Any] = {"module": args.module[0], "args": list(args.module[1:])}
        default_name = args.module[0].rsplit(".", 1)[-1]
    elif args.command:
        entry = {"script": args.command[0], "args": list(args.command[1:])}
        default_name = os.path.splitext(os.path.basename(args.command[0]))[0]
    else:
        raise SlinkyError("give a script (slinkyml run train.py ...) or a module (slinkyml run -m pkg.train ...)")
    data: dict[str, Any] = {"name": args.name or default_name or "job", "entry": entry}
    for key in ("nodes", "gpus_per_node", "procs_per_node", "tasks_per_node", "cpus_per_task",
                "mem_per_node", "time_limit", "partition", "account", "qos", "nodelist", "launcher",
                "python", "log_dir", "checkpoint_dir", "network"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    if args.exclusive:
        data["exclusive"] = True
    if args.dependencies:
        data["dependencies"] = list(args.dependencies)
    if args.container:
        data["container"] = {"image": args.container}
        if args.container_mounts:
            data["container"]["mounts"] = args.container_mounts.split(",")
    elif args.container_mounts:
        raise SlinkyError("--container-mounts needs --container IMAGE")
    env: dict[str, str] = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SlinkyError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    if env:
        data["env"] = env
    if args.max_restarts is not None:
        data["requeue"] = {"max_restarts": args.max_restarts}
    return data


def _run(args: argparse.Namespace) -> int:
    from slinkyml.cli.sbatch import submit_and_report
    from slinkyml.jobs.spec import JobSpec

    data = spec_data(args)
    spec = JobSpec.from_dict(data)
    if args.save_spec:
        import yaml

        try:
            with open(args.save_spec, "w") as fh:
                yaml.safe_dump(data, fh, sort_keys=False)
        except OSError as exc:
            raise SlinkyError(f"cannot write {args.save_spec}: {exc.strerror}") from None
        print(f"# job spec written to {args.save_spec} (slinkyml sbatch submit {args.save_spec})",
              file=sys.stderr)
    return submit_and_report(spec, args)
