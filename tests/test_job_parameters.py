"""A job's parameters: the spec class, the published schema (tests/test_spec_schema.py checks those two
agree) and the flags of `slinkyml run` must name the same parameters. Until they come from one definition
(issue 41, item 2), this fails when a parameter is added to one and not the others."""

from __future__ import annotations

import argparse
import dataclasses

from slinkyml import specload
from slinkyml.cli import run as run_cli
from slinkyml.jobs.spec import JobSpec

#: spec parameters `slinkyml run` has no flag for: a spec file sets them (`run --save-spec` writes one to edit)
SPEC_FILE_ONLY = {"neuron_devices_per_node", "deepspeed_via", "deepspeed_config", "rdzv_port", "neuron_precompile",
                  "neuron_compile_steps", "neuron_compile_dir", "instance_type", "library_versions", "srun_args"}
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


def test_every_spec_parameter_is_a_run_flag_or_named_as_spec_file_only() -> None:
    parser = _run_parser()
    data = run_cli.spec_data(parser.parse_args(EVERY_FLAG))
    fields = {f.name for f in dataclasses.fields(JobSpec)}
    assert set(specload.schema("job")["properties"]) == fields
    assert set(data) <= fields
    assert fields - set(data) == SPEC_FILE_ONLY, "a new spec parameter: give `run` a flag, or list it above"
    assert JobSpec.from_dict(data).name == "every-flag"  # what the flags build is a valid spec


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
        if action.dest == "container":  # its mounts need it
            argv = _without(argv, ["--container-mounts"], 1)
        if run_cli.spec_data(parser.parse_args(argv)) == everything:
            same.append(action.dest)
    assert not same, f"`run` flags that set no spec parameter: {same}"
