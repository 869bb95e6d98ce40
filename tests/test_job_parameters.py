"""A job's parameters are declared once, as the param(...) fields of slinkyml/jobs/spec.py: the published
schema is generated from them (`make schema`) and `slinkyml run`'s job flags are read from the schema's
x-cli entries. These fail when the schema file, the spec classes and the flags drift apart."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from slinkyml import specload
from slinkyml.cli import run as run_cli
from slinkyml.jobs import params
from slinkyml.jobs.params import flag, param
from slinkyml.jobs.spec import JobSpec, job_schema

#: flags of `slinkyml run` that say how to submit, not what the job is
SUBMISSION_FLAGS = {"help", "dry_run", "save_spec", "wait", "follow", "no_check", "backend", "restapi_url", "timeout"}
EVERY_FLAG = ["-N", "2", "--gpus-per-node", "1", "--nproc-per-node", "1", "--ntasks-per-node", "1", "-c", "2",
              "--mem", "1G", "-t", "5", "-p", "debug", "-A", "ml", "-q", "normal", "-w", "n1", "--exclusive",
              "-d", "afterok:1", "-J", "every-flag", "--launcher", "deepspeed", "--container", "img:1",
              "--container-mounts", "/a:/a", "--env", "K=V", "--python", "python3", "--log-dir", "job-logs",
              "--checkpoint-dir", "ck", "--max-restarts", "2", "--network", "tcp", "train.py", "--lr", "1"]


def _run_parser() -> argparse.ArgumentParser:
    subparsers = argparse.ArgumentParser().add_subparsers()
    run_cli.register(subparsers)
    return subparsers.choices["run"]


def _flags_of(node: dict, schema: dict, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], list[str]]:
    """Every x-cli's options in a schema, by parameter path."""
    out = {}
    for name, prop in node["properties"].items():
        if "$ref" in prop:
            out |= _flags_of(schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]], schema, (*path, name))
        elif "x-cli" in prop:
            out[(*path, name)] = prop["x-cli"]["options"]
    return out


def test_the_schema_file_is_what_the_spec_classes_declare() -> None:
    path = specload.SCHEMA_DIR / specload.SCHEMAS["job"]
    assert path.read_text() == params.text(job_schema()), f"{path} is stale: run `make schema`"
    assert params.main(["--check"]) == 0


def test_runs_job_flags_are_the_schemas() -> None:
    parser = _run_parser()
    declared = _flags_of(job_schema(), job_schema())
    job_actions = [a for a in parser._actions if a.dest not in SUBMISSION_FLAGS | {"command", "module"}]
    assert {tuple(a.dest.split(".")): a.option_strings for a in job_actions} == declared
    assert len(declared) >= 20 and ("container", "image") in declared and ("requeue", "max_restarts") in declared
    given = {word for word in EVERY_FLAG if word.startswith("-") and word != "--lr"}
    assert given == {options[0] for options in declared.values()}, "EVERY_FLAG gives each job flag once"


def test_what_the_flags_build_is_a_valid_spec_of_the_declared_parameters() -> None:
    data = run_cli.spec_data(_run_parser().parse_args(EVERY_FLAG))
    fields = {f.name for f in dataclasses.fields(JobSpec)}
    assert set(data) <= fields and set(specload.schema("job")["properties"]) == fields
    spec = JobSpec.from_dict(data)
    assert (spec.name, spec.container and spec.container.mounts, spec.requeue.max_restarts) == \
        ("every-flag", ("/a:/a",), 2)


def _without(argv: list[str], options: list[str], nargs: int) -> list[str]:
    i = next(i for i, word in enumerate(argv) if word in options)
    return argv[:i] + argv[i + 1 + nargs:]


def test_every_run_flag_sets_a_spec_parameter() -> None:
    """Leaving any one job flag out of EVERY_FLAG changes the spec the flags build."""
    parser = _run_parser()
    everything = run_cli.spec_data(parser.parse_args(EVERY_FLAG))
    same = []
    for action in parser._actions:
        if action.dest in SUBMISSION_FLAGS | {"command", "module"}:
            continue
        argv = _without(EVERY_FLAG, action.option_strings, 0 if action.nargs == 0 else 1)
        if action.dest == "container.image":  # its mounts need it
            argv = _without(argv, ["--container-mounts"], 1)
        if run_cli.spec_data(parser.parse_args(argv)) == everything:
            same.append(action.dest)
    assert not same, f"`run` flags that set no spec parameter: {same}"


def test_a_nested_flag_without_the_one_its_parent_needs_is_one_line() -> None:
    with pytest.raises(Exception, match=r"^--container-mounts needs --container IMAGE$"):
        run_cli.spec_data(_run_parser().parse_args(["--container-mounts", "/a:/a", "x.py"]))


@dataclasses.dataclass(frozen=True)
class _Inner:
    label: str = param(description="required: no default")
    size: int = param(2, minimum=1, cli=flag("--size", metavar="S"))


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str = param(pattern="^x", error="starts with x", cli=flag("-n", "--name", default=True))
    inner: _Inner | None = param(None, "an inner object")
    maybe: int | None = param(None)
    tags: tuple[str, ...] = param((), accepts=["array"], items={"type": "string"})


def test_param_fields_make_the_schema() -> None:
    """A new param(...) field is in the schema at once: its JSON type from the type hint (or ``accepts``),
    a plain default, the keywords, its flag; a spec class field becomes a $defs entry."""
    made = params.schema(_Outer, title="t", description="d")
    assert made["required"] == ["name"] and made["$defs"]["inner"]["required"] == ["label"]
    assert made["properties"] == {
        "name": {"type": "string", "pattern": "^x", "x-error": "starts with x",
                 "x-cli": {"options": ["-n", "--name"], "default": True}},
        "inner": {"$ref": "#/$defs/inner"},
        "maybe": {"type": ["integer", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}}}
    assert made["$defs"]["inner"] == {
        "type": ["object", "null"], "additionalProperties": False, "required": ["label"],
        "description": "an inner object",
        "properties": {"label": {"type": "string", "description": "required: no default"},
                       "size": {"type": "integer", "minimum": 1, "default": 2,
                                "x-cli": {"options": ["--size"], "metavar": "S"}}}}
    json.dumps(made)  # plain JSON


def test_a_field_without_param_or_json_types_is_refused() -> None:
    @dataclasses.dataclass
    class Plain:
        x: int = 1

    @dataclasses.dataclass
    class Untyped:
        env: dict[str, str] = param(factory=dict)

    with pytest.raises(TypeError, match="declared with param"):
        params.schema(Plain, title="t", description="d")
    with pytest.raises(TypeError, match=r"param\(accepts=...\)"):
        params.schema(Untyped, title="t", description="d")
