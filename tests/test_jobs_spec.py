"""JobSpec: defaults, YAML loading, errors naming the field path."""

from __future__ import annotations

import pytest

from slinkyml.errors import SpecError
from slinkyml.jobs.spec import JobSpec, time_limit_seconds

BASE = {"name": "t", "entry": {"module": "slinkyml.train"}}


def test_defaults_and_launcher_derived_counts():
    spec = JobSpec.from_dict({**BASE, "nodes": 2, "gpus_per_node": 8})
    assert spec.effective_tasks_per_node == 1 and spec.effective_procs_per_node == 8
    assert spec.world_size == 16 and spec.requeue.max_restarts == 3 and spec.python is None
    srun = JobSpec.from_dict({**BASE, "launcher": "srun", "gpus_per_node": 4})
    assert srun.effective_tasks_per_node == 4
    neuron = JobSpec.from_dict({**BASE, "launcher": "neuron", "neuron_devices_per_node": 16})
    assert neuron.effective_procs_per_node == 32


def test_yaml_round_trip():
    text = """
name: run
nodes: 2
entry: {script: train.py, args: [--lr, 0.1]}
env: {A: "1"}
requeue: {signal: SIGUSR1, grace_seconds: 5}
dependencies: afterok:12
"""
    spec = JobSpec.from_yaml(text)
    assert spec.entry.args == ("--lr", "0.1") and spec.requeue.signal == "USR1"
    assert spec.dependencies == ("afterok:12",)
    assert JobSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("data, path", [
    ({**BASE, "requeue": {"max_restarts": -1}}, "requeue.max_restarts"),
    ({**BASE, "nodes": 0}, "nodes"),
    ({**BASE, "launcher": "mpirun"}, "launcher"),
    ({**BASE, "network": "roce"}, "network"),
    ({**BASE, "time_limit": "forever"}, "time_limit"),
    ({**BASE, "mem_per_node": "lots"}, "mem_per_node"),
    ({**BASE, "env": {"1BAD": "x"}}, "env.1BAD"),
    ({**BASE, "gpus": 2}, "gpus"),
    ({**BASE, "requeue": {"sig": "USR2"}}, "requeue.sig"),
    ({"name": "t", "entry": {"module": "a", "script": "b.py"}}, "entry"),
    ({"name": "t", "entry": {"script": "run.sh"}}, "entry.script"),
    ({**BASE, "dependencies": ["after:1;rm -rf /"]}, "dependencies[0]"),
    ({**BASE, "partition": "a b"}, "partition"),
    ({"entry": {"module": "a"}}, "name"),
    ({**BASE, "container": {"image": "img:1", "mounts": ["/a:/a", "/b:/b,/c:/c"]}}, "container.mounts[1]"),
    ({**BASE, "container": {"image": "img:1", "mounts": ["data:/data"]}}, "container.mounts[0]"),
    ({**BASE, "container": {"image": "img:1", "mounts": ["/data:data"]}}, "container.mounts[0]"),
    ({**BASE, "container": {"image": "img:1", "mounts": ["/data:"]}}, "container.mounts[0]"),
    ({**BASE, "container": {"image": "img:1", "mounts": ["tmpfs"]}}, "container.mounts[0]"),
])
def test_errors_name_the_field(data, path):
    with pytest.raises(SpecError) as err:
        JobSpec.from_dict(data)
    assert err.value.path == path and str(err.value).startswith(path)


def test_container_mounts_pyxis_accepts():
    """pyxis's --container-mounts entries: SRC[:DST[:FLAGS]], SRC a path (absolute or ./relative),
    tmpfs or umount, DST a path; FLAGS joined with '+' (the ',' separates entries)."""
    mounts = ["/fsx", "/data:/data:ro+nosuid", "./ckpt:/ckpt", "tmpfs:/scratch", "umount:/proc/driver"]
    spec = JobSpec.from_dict({**BASE, "container": {"image": "/images/pytorch.sqsh", "mounts": mounts}})
    assert spec.container.mounts == tuple(mounts)


def test_error_message_for_max_restarts():
    with pytest.raises(SpecError, match=r"^requeue.max_restarts: must be between 0 and 1000, got -1$"):
        JobSpec.from_yaml("name: t\nentry: {module: a}\nrequeue: {max_restarts: -1}\n")


def test_bad_yaml_is_one_spec_error(tmp_path):
    with pytest.raises(SpecError, match="not valid YAML"):
        JobSpec.from_yaml("name: [unclosed\n")
    with pytest.raises(SpecError, match="cannot read"):
        JobSpec.from_yaml(tmp_path / "missing.yaml")


@pytest.mark.parametrize("text, secs", [("30", 1800), ("1:30", 90), ("01:00:00", 3600),
                                        ("2-00", 172800), ("1-02:03:04", 93784), ("0", None)])
def test_time_limit_formats(text, secs):
    assert time_limit_seconds(text) == secs


def test_instance_type_is_checked_against_the_instance_data():
    base = {"name": "t", "entry": {"module": "m"}}
    with pytest.raises(SpecError, match=r"instance_type: unknown 'p5.48xlarg' — did you mean 'p5.48xlarge'"):
        JobSpec.from_dict({**base, "instance_type": "p5.48xlarg"})
    with pytest.raises(SpecError, match=r"gpus_per_node: 16 is more than p5.48xlarge has \(8\)"):
        JobSpec.from_dict({**base, "instance_type": "p5.48xlarge", "gpus_per_node": 16})
    with pytest.raises(SpecError, match=r"neuron_compile_steps: must be between 1 and 1000, got 0"):
        JobSpec.from_dict({**base, "neuron_compile_steps": 0})
    trn2 = JobSpec.from_dict({**base, "launcher": "neuron", "neuron_devices_per_node": 16,
                              "instance_type": "trn2.48xlarge"})
    assert trn2.effective_procs_per_node == 64
    assert JobSpec.from_dict({**base, "launcher": "neuron", "neuron_devices_per_node": 16}).effective_procs_per_node == 32


def test_neuron_compile_run_caps_steps_and_moves_the_output_dir():
    from slinkyml.jobs.render import neuron_compile_argv

    head = ["python3", "-m", "torch.distributed.run", "--rdzv-endpoint", "h:1"]
    spec = JobSpec.from_dict({"name": "t", "entry": {"script": "train.py"}, "launcher": "neuron",
                              "neuron_devices_per_node": 1, "log_dir": "/logs"})
    assert neuron_compile_argv(spec, [*head, "train.py", "--output_dir=/o", "--max_steps", "-1"]) == \
        [*head, "train.py", "--output_dir=/o-neuron-compile", "--max_steps", "5"]
    assert neuron_compile_argv(spec, [*head, "train.py", "--bf16"]) == \
        [*head, "train.py", "--bf16", "--max_steps", "5", "--output_dir", "/logs/neuron-compile"]
    mod = spec.replace(entry=spec.entry.__class__(module="pkg.train"), neuron_compile_dir="/c",
                       neuron_compile_steps=7)
    assert neuron_compile_argv(mod, [*head, "-m", "pkg.train", "--output_dir", "/o"]) == \
        [*head, "-m", "pkg.train", "--output_dir", "/c", "--max_steps", "7"]


def test_the_job_runs_the_submitting_interpreter_unless_the_spec_names_one():
    """submitit's rule: the ranks run the interpreter that submitted (its venv has torch); a script
    rendered alone (``sbatch render``, checked in) keeps the nodes' python3."""
    import sys

    from slinkyml.jobs.render import entry_argv, launch_argv
    from slinkyml.jobs.spec import interpreter

    unnamed = JobSpec.from_dict(BASE)
    assert entry_argv(unnamed)[0] == "python3" and launch_argv(unnamed, "h")[0] == "python3"
    submitted, source = interpreter(unnamed)
    assert submitted.python == sys.executable and "running slinkyml" in source
    assert launch_argv(submitted, "h")[0] == sys.executable
    assert submitted.replace(python=None) == unnamed  # nothing else changed
    named = JobSpec.from_dict({**BASE, "python": "/opt/py/bin/python3"})
    assert interpreter(named) == (named, "named by the job spec")
