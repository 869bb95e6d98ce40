"""Property-based fuzzing through the CLI, in process: mutated job specs (``sbatch render``), mutated
cluster specs (``cluster render``) and ``plan`` argument lists. Whatever the input, the command ends
in exit 0, 1 or 2 with nothing but one-line ``slinkyml: error:`` messages — never a traceback (an
exception escaping ``main`` fails the example). Mutations start from the shipped examples: type
swaps, deletions, duplicated keys, unicode, huge numbers, deep nesting, bytes that are not UTF-8.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slinkyml.cli import main

REPO = Path(__file__).resolve().parents[1]
JOB_EXAMPLES = sorted(REPO.glob("sbatch/*.yaml")) + [REPO / "benchmarks" / "gpu-check.yaml"]
CLUSTER_EXAMPLES = sorted(REPO.glob("manifests/*/cluster.yaml"))
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

HUGE = st.sampled_from([10**30, -10**30, 2**63, -(2**63) - 1, 1e308, float("inf"), float("-inf"), float("nan"),
                        10**4000 // 10**3990])
UNICODE = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False, width=32),
                    UNICODE, HUGE, st.sampled_from(["", "0", "-1", "1G", "01:00:00", "torchrun", "a" * 300]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(UNICODE, inner, max_size=3)), max_leaves=6)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a parsed document (mapping keys and list indexes)."""
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, (*prefix, i))
    return out


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        data = data[step]
    return data


@st.composite
def mutated_document(draw: st.DrawFn, examples: list[Path]) -> bytes:
    """YAML bytes: a shipped example with one to three mutations."""
    source = draw(st.sampled_from(examples))
    text = source.read_text()
    data = copy.deepcopy(yaml.safe_load(text))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        how = draw(st.sampled_from(["swap", "delete", "add", "huge", "unicode", "nest", "root"]))
        if how == "root":
            data = draw(VALUES)
            continue
        if not isinstance(data, (dict, list)) or not paths:
            continue
        path = draw(st.sampled_from(paths))
        parent = _parent(data, path)
        if how == "swap":
            parent[path[-1]] = draw(VALUES)
        elif how == "delete":
            del parent[path[-1]]
        elif how == "huge":
            parent[path[-1]] = draw(HUGE)
        elif how == "unicode":
            if isinstance(parent, dict):
                parent[draw(UNICODE)] = parent.pop(path[-1])
            else:
                parent[path[-1]] = draw(UNICODE)
        elif how == "nest":
            value = parent[path[-1]]
            for _ in range(draw(st.integers(1, 40))):
                value = draw(st.sampled_from([[value], {"x": value}]))
            parent[path[-1]] = value
        elif isinstance(parent, dict):  # add a field, known name or not
            parent[draw(st.sampled_from([*map(str, parent), "x", "nodes", "count"]))] = draw(VALUES)
    body = yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode()
    lines = body.splitlines(keepends=True)
    text_how = draw(st.sampled_from(["none", "none", "duplicate-line", "bad-bytes", "truncate", "tab"]))
    if lines and text_how == "duplicate-line":  # a repeated key (or item) on the next line
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i + 1, lines[i])
    elif lines and text_how == "bad-bytes":
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = lines[i][:-1] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x00", b"\xe2\x82"])) + b"\n"
    elif lines and text_how == "truncate":
        return b"".join(lines)[: draw(st.integers(0, len(body)))]
    elif lines and text_how == "tab":
        lines[0] = b"\t" + lines[0]
    return b"".join(lines)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def _assert_clean(code: int, err: str) -> None:
    """Exit 0/1/2; errors are ``slinkyml: error:`` lines, or argparse's usage plus its one error line."""
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    if code == 0 or code == 1 and not lines:  # 1 without an error: the answer is "no" (nothing fits)
        return
    if lines and lines[0].startswith("usage: "):
        assert re.match(r"^slinkyml( [a-z]+)?: error: ", lines[-1]) and all(
            line.startswith(" ") for line in lines[1:-1]), err
    else:
        assert lines and all(line.startswith("slinkyml: error: ") for line in lines), err


@SETTINGS
@given(mutated_document(JOB_EXAMPLES))
def test_mutated_job_specs_never_traceback(tmp_path_factory, body: bytes) -> None:
    path = tmp_path_factory.mktemp("job") / "job.yaml"
    path.write_bytes(body)
    code, _, err = _run("sbatch", "render", str(path))
    _assert_clean(code, err)
    if code:
        assert all(line.startswith(f"slinkyml: error: {path}") for line in err.splitlines()), err


@SETTINGS
@given(mutated_document(CLUSTER_EXAMPLES))
def test_mutated_cluster_specs_never_traceback(tmp_path_factory, body: bytes) -> None:
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_bytes(body)
    code, _, err = _run("cluster", "render", str(path))
    _assert_clean(code, err)
    if code:
        assert all(line.startswith(f"slinkyml: error: {path}") for line in err.splitlines()), err


PLAN_FLAGS = ["--params", "--layers", "--hidden", "--heads", "--seq", "--vocab", "--gpus", "--gpu",
              "--instance-type", "--global-batch", "--micro-batch", "--zero", "--recompute", "--precision",
              "--efficiency", "--overhead-gib", "--gradient-clipping", "--check", "--top"]
PLAN_VALUES = st.one_of(
    st.sampled_from(["7e9", "200e9", "0", "-1", "1e400", "nan", "inf", "8", "64", "4096", "a100-80gb",
                     "h100-80gb", "trainium", "p5.48xlarge", "p5.48xlage", "1,3", "0,1,2,3", "9", "full",
                     "none,selective", "bf16", "fp8", "8,4,2", "1,1,1", "0,0,0", "1,2", "0.45", "2", ""]),
    st.integers(-10, 10**12).map(str), UNICODE)


@st.composite
def plan_argv(draw: st.DrawFn) -> list[str]:
    argv = ["plan"]
    if draw(st.booleans()):  # most runs are well-formed enough to reach the planner
        argv += ["--params", draw(st.sampled_from(["1e9", "7e9", "70e9"])), "--gpus",
                 draw(st.sampled_from(["1", "8", "64", "96"])), "--gpu", draw(st.sampled_from(["a100-80gb", "h100-80gb"]))]
    for _ in range(draw(st.integers(0, 4))):
        argv += [draw(st.sampled_from(PLAN_FLAGS)), draw(PLAN_VALUES)]
    if draw(st.booleans()):
        argv.append(draw(st.sampled_from(["--json", "--no-offload", "--bogus", "extra"])))
    return argv


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(plan_argv())
def test_plan_arguments_never_traceback(argv: list[str]) -> None:
    code, _, err = _run(*argv)
    _assert_clean(code, err)
