"""Property-based fuzzing of every command's options, in process: for each leaf command of the real
parser (``dev up`` ... ``schema``), hypothesis draws argument lists from its own options — every flag,
its choices, numbers at and past every limit, empty/blank/huge/unicode strings, paths that are missing,
folders, symlinks, unreadable, non-UTF-8 or the shipped examples — and runs ``slinkyml.cli.main``.
Whatever it is given, a command ends with a documented exit code (0, 1, 2, 3) and never a traceback
(an exception escaping ``main`` fails the example and hypothesis shrinks it).

The environment is a sandbox: cwd, HOME, state dir and every file the commands may write are under a
temporary folder; ``$SLURM_CONF`` is a real slurm.conf of a cluster that is not running (its ports
refuse at once), so Slurm-reading commands take the real "Slurm unreachable" path (exit 3) with
``$SLINKYML_SLURM_RETRIES=0``; there is no kubeconfig and no slurmrestd. Three actions are not run,
because they act on the machine rather than on their options: starting or stopping a local cluster
(``dev up|down|reset`` with or without ``--docker``, ``dev kube up|down|reset``, ``demo``), starting ``sbatch check``'s throw-away slurmctld, and serving
``report --serve`` for ever; each is replaced by a marker raised once the command has read and checked
all its options (the spec built), which ends the example as accepted. A command in neither list
(``RUN_WHOLE``, ``NOT_RUN``) — a new one, or ``dev node readdress`` — is parsed only: safe by default.
No path the fuzzer draws is writable outside the sandbox (``/proc/...`` stands for "cannot be created").
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slinkyml import cli
from slinkyml.cli import SUBCOMMAND_MODULES, build_parser, main

REPO = Path(__file__).resolve().parents[1]
EXIT_CODES = {0, 1, 2, 3}
#: words in an option's name or metavar that make it a path (drawn from the paths three times as often)
PATHY = ("file", "path", "dir", "output", "-o", "workdir", "html", "png", "kubeconfig", "spec", "job", "out",
         "yaml", "script", "config", "state", "against", "cluster", "save", "store")
#: CI: 100 fixed argument lists per command; SLINKYML_FUZZ_EXAMPLES=N and SLINKYML_FUZZ_RANDOM=1 to hunt
SETTINGS = settings(max_examples=int(os.environ.get("SLINKYML_FUZZ_EXAMPLES", "100")), deadline=None,
                    derandomize=not os.environ.get("SLINKYML_FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
#: commands whose action is not run (see the module docstring); everything before it is
NOT_RUN = ("dev up", "dev down", "dev reset", "dev kube up", "dev kube down", "dev kube reset", "demo",
           "sbatch check", "report")
#: commands run whole in the sandbox: they read, render, or ask a Slurm/Kubernetes that is not there
RUN_WHOLE = ("accounting status", "accounting sync", "cluster apply", "cluster diff", "cluster render", "cluster status", "cluster validate", "dev env",
             "dev status", "efficiency", "fairshare", "import", "jobs cancel", "jobs list", "jobs logs", "jobs status",
             "jobs why", "plan", "run", "sbatch render", "sbatch submit", "schema", "usage")
# Any other command (a new one, or one that acts on the machine such as `dev node readdress`) is only
# parsed: its handler is replaced by the marker, so the fuzzer never runs an unclassified action.

FUZZ_CONF = """ClusterName=fuzz
SlurmctldHost=localhost
SlurmctldPort=1
SlurmdPort=2
MessageTimeout=1
AuthType=auth/munge
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=3
NodeName=fz1 CPUs=1
PartitionName=debug Nodes=fz1 Default=YES
"""


class _Reached(Exception):
    """The command got past its options to an action this test does not run."""


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every runnable command: ``("jobs", "cancel")`` → its parser."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    out = {}
    for name, child in subs[0].choices.items():
        out.update(_leaves(child, (*path, name)))
    return out


def _all_leaves() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found = {}
    for commands in SUBCOMMAND_MODULES.values():
        for name in commands:
            root = build_parser(name)
            sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
            found.update(_leaves(sub.choices[name], (name,)))
    return found


LEAVES = _all_leaves()

NUMBERS = ["0", "1", "2", "-1", "7", "65535", "65536", "99999", "4294967293", "4294967296", str(2**63),
           str(10**30), "1e308", "nan", "inf", "-inf", "0.5", "1.5e3", "0x10", "١٢"]
STRINGS = ["", " ", "x", "a" * 300, "ü", "名前", "a\nb", "a b", "-", "--", "'\"$(id)`", "%s%n", "../../etc",
           "user,user", ",", "1:99:99", "1-24", "99999999999d", "now", "1d", "2026-01-31", "1969-12-31",
           "physics=-5", "physics=nan", "a=b", "KEY=", "12_[5-1]", "12+200", "USR2", "SIGKILL", "9",
           "http://[::1:6820", "http://127.0.0.1:99999", "http://127.0.0.1:1", "unix:/nonexistent.sock",
           "unix:rel", "ftp://x", "1.32", "abc", "v9.99", "10.213.0.0/24", "10.0.0.0/33", "bogus",
           "gpu:h100:8", "p5.48xlarge", "efa", "tcp", "h100", "fair_tree", "torchrun", "srun",
           "\udcff\udcfe", "x\udcff.yaml"]  # the last two: non-UTF-8 bytes in argv, as Python decodes them


def _paths(tmp: Path) -> list[str]:
    """Files and folders the commands may read or write; all under ``tmp`` except two that cannot be
    written (so an output option never lands anywhere real)."""
    return [str(tmp / name) for name in (
        "job.yaml", "gpu-job.yaml", "cluster.yaml", "kubeflow.yaml", "script.sbatch", "empty.yaml", "binary.yaml",
        "list.yaml", "deep.yaml", "dir", "link-to-job.yaml", "dangling", "unreadable.yaml", "missing.yaml",
        "out", "new.png", "new.html", "secrets.yaml", "state")] + ["/proc/x", "/proc/nonexistent/x"]


def _sandbox(tmp: Path) -> None:
    examples = {"job.yaml": REPO / "sbatch" / "torchrun-ddp.yaml",
                "gpu-job.yaml": REPO / "benchmarks" / "gpu-check.yaml",
                "cluster.yaml": REPO / "manifests" / "cpu-small" / "cluster.yaml",
                "script.sbatch": REPO / "sbatch" / "nccl-allreduce.sbatch"}
    for name, source in examples.items():
        shutil.copy(source, tmp / name)
    shutil.copy(REPO / "tests" / "data" / "import" / "pytorchjob-gpu.yaml", tmp / "kubeflow.yaml")
    (tmp / "empty.yaml").write_text("")
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00name: x\n")
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "deep.yaml").write_text("a: " + "[" * 600 + "]" * 600 + "\n")
    (tmp / "dir").mkdir()
    (tmp / "link-to-job.yaml").symlink_to(tmp / "job.yaml")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "unreadable.yaml").write_text("name: x\n")
    os.chmod(tmp / "unreadable.yaml", 0)
    (tmp / "slurm.conf").write_text(FUZZ_CONF)
    (tmp / "home").mkdir()


@st.composite
def _value(draw: st.DrawFn, action: argparse.Action, paths: list[str]) -> str:
    pools: list[list[str]] = [NUMBERS, STRINGS, paths]
    names = f"{action.dest} {action.metavar or ''} {' '.join(action.option_strings)}".lower()
    if any(word in names for word in PATHY):
        pools += [paths, paths, paths]
    if action.type in (int, float) or any(word in names for word in ("port", "nodes", "gpus", "count", "lines")):
        pools += [NUMBERS, NUMBERS]
    if action.choices:
        pools.append([str(c) for c in action.choices])
        pools.append([str(c) for c in action.choices])  # weigh the choices up
    text = draw(st.one_of(st.sampled_from(draw(st.sampled_from(pools))),
                          st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                  max_size=20),
                          st.integers(-(2**70), 2**70).map(str)))
    return text


@st.composite
def argv_for(draw: st.DrawFn, path: tuple[str, ...], parser: argparse.ArgumentParser, paths: list[str]) -> list[str]:
    """``path`` + a drawn subset of its options with drawn values + its positionals."""
    argv = list(path)
    optionals = [a for a in parser._actions if a.option_strings and not isinstance(
        a, (argparse._HelpAction, argparse._VersionAction))]
    positionals = [a for a in parser._actions if not a.option_strings]
    for action in draw(st.lists(st.sampled_from(optionals), max_size=5, unique_by=id)) if optionals else []:
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
            continue
        count = 1 if action.nargs in (None, "?") else draw(st.integers(1, 3))
        values = [draw(_value(action, paths)) for _ in range(count)]
        argv += [f"{flag}={values[0]}"] if count == 1 and draw(st.booleans()) else [flag, *values]
    if draw(st.integers(0, 9)) == 0:
        return argv  # positionals missing: argparse's one-line usage error
    if draw(st.integers(0, 4)) == 0:
        argv.append("--")  # values that start with "-" taken as positionals
    for action in positionals:
        count = 1 if action.nargs in (None, "?") else draw(st.integers(1 if action.nargs in ("+",) else 0, 3))
        if action.nargs == argparse.REMAINDER:
            count = draw(st.integers(0, 3))
        argv += [draw(_value(action, paths)) for _ in range(count)]
    return argv


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A temporary world for the commands (see the module docstring)."""
    _sandbox(tmp_path)
    monkeypatch.chdir(tmp_path)
    for var in ("SLURM_JWT", "SLINKYML_RESTAPI_URL", "SLURMRESTD_URL", "SLINKYML_SLURMRESTD_SOCKET",
                "SLINKYML_BACKEND", "SLINKYML_DEV_PORT_BASE", "SLINKYML_DEV_BRIDGE", "SLINKYML_DEV_NODE_PREFIX",
                "SLINKYML_DEV_SUBNET", "SLINKYML_DEV_MARIADB_PORT", "SLINKYML_DEV_SLURM_VERSION", "KUBERNETES_SERVICE_HOST",
                "SLINKYML_DOCKER_NAME", "SLINKYML_DOCKER_SUBNET", "SLINKYML_DOCKER_BRIDGE", "SLINKYML_DOCKER_RESTD_PORT",
                "SLINKYML_DOCKER_SHARES", "SLINKYML_TEST_CLUSTER"):
        monkeypatch.delenv(var, raising=False)
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf"), "SLINKYML_STATE_DIR": str(tmp_path / "state"),
           "SLINKYML_KUBE_STATE_DIR": str(tmp_path / "kube-state"),
           "SLINKYML_DOCKER_STATE_DIR": str(tmp_path / "docker-state"),
           "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "KUBECONFIG": str(tmp_path / "no-kubeconfig"), "SLINKYML_CONFIG": str(tmp_path / "no-config.yaml"),
           "SLINKYML_RECORDS_DIR": str(tmp_path / "records"), "SLINKYML_SLURM_RETRIES": "0"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    def reached(*args: Any, **kwargs: Any) -> None:
        raise _Reached

    from slinkyml.accounting import serve
    from slinkyml.demo import kubernetes as kube_demo
    from slinkyml.dev import LocalCluster
    from slinkyml.dev.docker.cluster import DockerCluster
    from slinkyml.dev.kubernetes.kube import KubeControlPlane
    from slinkyml.slurm.throwaway import ThrowawaySlurmctld

    for name in ("up", "down", "reset"):
        monkeypatch.setattr(LocalCluster, name, reached)
        monkeypatch.setattr(KubeControlPlane, name, reached)
        monkeypatch.setattr(DockerCluster, name, reached)  # `dev up --docker`, `demo --docker`
    monkeypatch.setattr(ThrowawaySlurmctld, "start", reached)
    monkeypatch.setattr(kube_demo, "build", reached)  # `demo --kubernetes` builds before it brings a plane up
    monkeypatch.setattr(serve.DashboardServer, "serve_forever", reached)
    monkeypatch.setattr(cli, "build_parser", _parse_only_unclassified(cli.build_parser, reached))
    return tmp_path


def _parse_only_unclassified(build: Any, reached: Any) -> Any:
    """``build_parser`` whose unclassified leaf commands run ``reached`` instead of their handler."""

    def wrapped(command: str | None = None) -> argparse.ArgumentParser:
        parser = build(command)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for path, leaf in _leaves(parser).items() if subs else []:
            if " ".join(path) not in RUN_WHOLE + NOT_RUN:
                leaf.set_defaults(handler=reached)
        return parser

    return wrapped


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors (2), --help (0)
            code = exc.code if isinstance(exc.code, int) else 2
        except _Reached:
            code = 0
    return code, err.getvalue()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", sorted(LEAVES), ids=[" ".join(p) for p in sorted(LEAVES)])
def test_every_option_of_every_command_ends_in_a_documented_exit(path, sandbox):
    paths = _paths(sandbox)

    @SETTINGS
    @given(argv=argv_for(path, LEAVES[path], paths))
    def run(argv: list[str]) -> None:
        code, err = _run(argv)
        assert code in EXIT_CODES and "Traceback" not in err, (argv, code, err)
        if code == 2:
            assert err.startswith("slinkyml: error: "), (argv, err)

    run()


def test_the_fuzzer_reaches_every_command():
    """A new command is fuzzed without editing this file, parsed only until it is classified here."""
    names = {" ".join(p) for p in LEAVES}
    assert set(RUN_WHOLE) | set(NOT_RUN) <= names

    def marker() -> None:
        pass

    wrapped = _parse_only_unclassified(build_parser, marker)
    for path in LEAVES:
        root = wrapped(path[0])
        leaf = _leaves(root)[path]
        assert (leaf.get_default("handler") is marker) == (" ".join(path) not in RUN_WHOLE + NOT_RUN), path
