"""The ``slinkyml`` console script; each sub-command module exposes ``register(subparsers)``.

Sub-command modules import only the standard library at module level, so start-up stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, NoReturn

from slinkyml.errors import EXIT_USAGE, SlinkyError

#: module under slinkyml.cli -> the sub-commands it registers, with the line ``slinkyml --help`` shows
#: for each (listing them needs no module: registering all of them costs ~8 ms of argparse set-up).
SUBCOMMAND_MODULES = {
    "dev": {"dev": "run a real local multi-node Slurm cluster on this machine"},
    "cluster": {"cluster": "render, validate and apply Slinky cluster resources"},
    "sbatch": {"sbatch": "render and submit training jobs from a YAML job spec"},
    "run": {"run": "submit a training script or module in one command (sbatch-like flags)"},
    "jobs": {"jobs": "status, logs, failure diagnosis and cancellation of jobs"},
    "accounting": {"usage": "CPU/GPU-hours, billing and cost per user/account",
                   "fairshare": "fair-share tree, rank explanations, what-ifs",
                   "efficiency": "per-run CPU/memory/time/GPU efficiency and waste",
                   "report": "the accounting dashboard: one self-contained HTML page",
                   "accounting": "the incremental accounting store the reports read: sync, status"},
    "plan": {"plan": "plan TP/PP/DP, ZeRO and recompute for a model; write a DeepSpeed config"},
    "importer": {"import": "turn a Kubeflow PyTorchJob/MPIJob/TrainJob or Volcano Job into a job spec"},
    "schema": {"schema": "print the JSON Schema of job or cluster specs"},
    "demo": {"demo": "run the end-to-end demo on the local Slurm cluster"},
}

#: Optional modules -> the extra that installs them (a command needing one says how to get it).
EXTRAS = {"kubernetes": "k8s", "kubernetes_validate": "k8s", "cel": "k8s", "cryptography": "k8s", "matplotlib": "plots",
          "torch": "train", "deepspeed": "train", "pyslurm": "pyslurm", "docker": "docker",
          "testcontainers": "docker"}


class _VersionAction(argparse.Action):
    """``--version`` that reads the installed version only when asked (importlib.metadata costs
    ~20 ms, a sixth of every command's start-up)."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        print(f"slinkyml {_version()}")
        parser.exit()


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, its width found as ``shutil.get_terminal_size`` finds it without importing
    shutil: argparse makes one per ``add_argument`` (to check it), so every command paid shutil's import
    (bz2, lzma, fnmatch: ~2 ms) for help it never printed."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            try:
                columns = int(os.environ.get("COLUMNS", "0"))
            except ValueError:
                columns = 0
            if columns <= 0:
                try:
                    columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
                except (AttributeError, ValueError, OSError):
                    columns = 0
            width = (columns or 80) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error on one line, worded like every other error (argparse's own
    prints the whole usage first); sub-command parsers inherit the class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("slinkyml").strip()
        self.exit(EXIT_USAGE, f"slinkyml: error: {where + ': ' if where else ''}{message} "
                  f"(see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; given the sub-command about to run, only its module is imported and registered;
    ``--help`` and unknown words get every sub-command's name and line, none of their arguments."""
    parser = _Parser(
        prog="slinkyml",
        description="Batch training on Slurm-on-Kubernetes (Slinky): local dev cluster, cluster "
        "manifests, sbatch and notebook jobs, accounting reports and parallelism planning.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module, commands in SUBCOMMAND_MODULES.items():
        if command in commands:
            importlib.import_module(f"slinkyml.cli.{module}").register(subparsers)
            return parser
    for commands in SUBCOMMAND_MODULES.values():
        for name, line in commands.items():
            subparsers.add_parser(name, help=line)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slinkyml")
    except PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        result = handler(args)
    except SlinkyError as exc:
        for line in exc.lines():
            print(f"slinkyml: error: {line}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"slinkyml: error: this command needs {exc.name} (the {extra} extra): "
              f"pip install 'slinkyml[{extra}]'", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("slinkyml: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # e.g. `slinkyml usage | head`: not an error for the user.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
