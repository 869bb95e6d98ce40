"""``slinkyml run [sbatch-like flags] SCRIPT|-m MODULE [ARGS...]``: a one-command job.

The flags build a :class:`~slinkyml.jobs.spec.JobSpec` (so errors name its fields), submitted as
``sbatch submit`` does. The job flags are the ``x-cli`` entries of the published job schema (declared
with each parameter in ``jobs/spec.py``); read as JSON, so ``run --help`` imports no spec machinery.
Stdlib imports only at module level.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.errors import SlinkyError

#: the published job schema: each parameter's ``x-cli`` says which flag of ``run`` sets it
JOB_SCHEMA = DATA_DIR / "schemas" / "job.schema.json"


def job_flags() -> list[tuple[tuple[str, ...], dict[str, Any], list[str]]]:
    """(parameter path, its schema property, the keys its parent requires) of every parameter ``run`` has a
    flag for, in the schema's order; a nested one (``container.image``) where its parent stands."""
    schema = json.loads(JOB_SCHEMA.read_text())
    found: list[tuple[tuple[str, ...], dict[str, Any], list[str]]] = []

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        for name, prop in node["properties"].items():
            if "$ref" in prop:
                walk(schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]], (*path, name))
            elif "x-cli" in prop:
                found.append(((*path, name), prop, node.get("required", [])))

    walk(schema, ())
    return found


def _add_job_flag(p: argparse.ArgumentParser, path: tuple[str, ...], prop: dict[str, Any]) -> None:
    cli = prop["x-cli"]
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    options: dict[str, Any] = {"dest": ".".join(path)}
    options |= {key: cli[key] for key in ("metavar", "help") if key in cli}
    if types[0] == "boolean":
        options["action"] = "store_true"
    elif cli.get("each") in ("append", "key=value"):
        options |= {"action": "append", "default": []}
    else:
        options |= {"type": int} if types[0] == "integer" else {}
        options |= {"default": prop["default"]} if cli.get("default") else {}
    p.add_argument(*cli["options"], **options)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run", description="Build a job spec from sbatch-like flags and submit it: "
        "`slinkyml run -N 2 --gpus-per-node 8 -t 2:00:00 train.py --lr 3e-4` or "
        "`slinkyml run -N 2 -m pkg.train --epochs 3`. Everything after the script (or after -m MODULE) "
        "is passed to it. Exit status: the job's own with --wait/--follow (as sbatch --wait).")
    for path, prop, _required in job_flags():
        _add_job_flag(p, path, prop)
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
    data: dict[str, Any] = {"name": None, "entry": entry}
    flags = {path: (prop, required) for path, prop, required in job_flags()}
    for path, (prop, _required) in flags.items():
        value = getattr(args, ".".join(path))
        if value is None or value is False or value == []:
            continue
        each = prop["x-cli"].get("each")
        value = _pairs(prop, value) if each == "key=value" else value.split(",") if each == "comma-list" else value
        _parent(data, path)[path[-1]] = list(value) if each == "append" else value
    for path, (prop, required) in flags.items():
        if len(path) > 1 and path[-1] in _parent(data, path, create=False):
            _require(_parent(data, path, create=False), path, prop, required, flags)
    data["name"] = data["name"] or default_name or "job"
    return data


def _parent(data: dict[str, Any], path: tuple[str, ...], *, create: bool = True) -> dict[str, Any]:
    """The mapping that holds the parameter at ``path`` (made on the way where ``create``)."""
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {}) if create else node.get(key, {})
    return node


def _require(parent: dict[str, Any], path: tuple[str, ...], prop: dict[str, Any], required: list[str],
             flags: dict[tuple[str, ...], tuple[dict[str, Any], list[str]]]) -> None:
    """A nested parameter given without one its parent needs: one line naming both flags."""
    for key in required:
        if key in parent:
            continue
        if (*path[:-1], key) not in flags:
            raise SlinkyError(f"{_option(prop)} needs {'.'.join((*path[:-1], key))}, which a spec file sets "
                              "(slinkyml sbatch submit)")
        needed = flags[(*path[:-1], key)][0]
        raise SlinkyError(f"{_option(prop)} needs {_option(needed)} {needed['x-cli'].get('metavar', '')}".rstrip())


def _option(prop: dict[str, Any]) -> str:
    return prop["x-cli"]["options"][-1]


def _pairs(prop: dict[str, Any], items: list[str]) -> dict[str, str]:
    """``--env K=V`` words as a mapping; one line naming the flag for a word that is not one."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SlinkyError(f"{_option(prop)} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


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
