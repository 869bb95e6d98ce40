"""The one spec loader (slinkyml.specload) as users meet it: every problem at once as
``FILE:LINE: field.path: message``, duplicate keys refused, types before patterns, files that are
missing or not UTF-8 worded the same by every command, missing extras named with the pip command,
and the exit codes of the README."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slinkyml import specload
from slinkyml.cluster import load_spec, loads_spec
from slinkyml.errors import SlinkyError, SpecError
from slinkyml.jobs.spec import Container, Entry, JobSpec, RequeuePolicy
from slinkyml.slurm import errors as slurm_errors

REPO = Path(__file__).resolve().parents[1]
CPU_SMALL = REPO / "manifests" / "cpu-small" / "cluster.yaml"


def _lines(err: str) -> list[str]:
    lines = err.splitlines()
    assert lines and all(line.startswith("slinkyml: error: ") for line in lines), err
    return [line.removeprefix("slinkyml: error: ") for line in lines]


@pytest.mark.parametrize("path", sorted((REPO / "slinkyml" / "data").rglob("*.yaml")), ids=lambda p: p.name)
def test_data_files_read_by_libyaml_are_the_documents_pyyaml_reads(path):
    text = path.read_text()
    assert specload.load_data(text) == yaml.safe_load(text)


def _fresh(code: str, cache: Path) -> str:
    """``code``'s stdout in a fresh interpreter whose cache folder is ``cache``."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout


def test_a_spec_seen_before_is_read_from_its_kept_parse_without_pyyaml(tmp_path):
    """The parse of a spec file is kept with its exact text: the same text again needs no YAML parser
    (nor PyYAML's import), and gives the same data and lines; another text is parsed again."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: kept\nlauncher: srun\nentry:\n  script: /bin/true\n  args: [a, 2, true]\n")
    probe = (f"import json, sys; from slinkyml import specload; d = specload.load({str(spec)!r}); "
             "print(json.dumps([d.data, d.lines, 'yaml' in sys.modules]))")
    first = json.loads(_fresh(probe, tmp_path / "cache"))
    assert first[2] is True  # parsed: PyYAML was needed
    again = json.loads(_fresh(probe, tmp_path / "cache"))
    assert again == [first[0], first[1], False] and first[0] == yaml.safe_load(spec.read_text())
    spec.write_text(spec.read_text().replace("kept", "changed"))
    changed = json.loads(_fresh(probe, tmp_path / "cache"))
    assert changed[0]["name"] == "changed" and changed[2] is True
    spec.write_text("name: a\nname: b\nlauncher: srun\n")  # a file with problems is never kept: refused again
    for _ in range(2):
        with pytest.raises(SpecError, match="duplicate key"):
            JobSpec.from_yaml(spec)


@pytest.mark.parametrize("name", ["network_presets.yaml", "runtime_presets.yaml", "instance_types.yaml"])
def test_packaged_data_files_are_read_from_a_kept_parse(tmp_path, name):
    path = REPO / "slinkyml" / "data" / name
    probe = (f"import json, sys; from slinkyml import specload; d = specload.load_data_file({str(path)!r}); "
             "print(json.dumps([d, 'yaml' in sys.modules]))")
    first, again = (json.loads(_fresh(probe, tmp_path)) for _ in range(2))
    assert first == [yaml.safe_load(path.read_text()), True]
    assert again == [first[0], False]


def test_duplicate_key_is_refused_not_last_one_wins(cli, tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: dup\nnode_sets:\n  - name: cpu\n    instance_type: m7i.8xlarge\n"
                    "    count: 2\n    count: 0\n")
    code, out, err = cli("cluster", "render", str(spec))
    assert (code, out) == (2, "")
    assert _lines(err) == [f"{spec}:6: node_sets[0].count: duplicate key (also on line 5); "
                           "YAML would keep only the last one"]
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nentry: {module: m}\nname: b\n")
    code, out, err = cli("sbatch", "render", str(job))
    assert (code, out) == (2, "") and _lines(err) == [
        f"{job}:3: name: duplicate key (also on line 1); YAML would keep only the last one"]


def test_every_problem_at_once_with_file_and_line(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("# a job\nname: t\nentry:\n  module: 0\nnodes: many\nrequeue:\n  max_restarts: -2\n"
                   "  sig: USR1\nenv: {A: [1], 2B: x}\nlauncher: mpirun\nnode: 1\n")
    code, out, err = cli("sbatch", "render", str(job))
    assert (code, out) == (2, "")
    assert _lines(err) == [
        f"{job}:4: entry.module: expected string, got integer 0",
        f"{job}:5: nodes: expected integer, got string 'many'",
        f"{job}:7: requeue.max_restarts: must be between 0 and 1000, got -2",
        f"{job}:8: requeue.sig: unknown field — did you mean 'signal'?",
        f"{job}:9: env.A: expected string, number or boolean, got list [1]",
        f"{job}:9: env.2B: not a valid environment variable name",
        f"{job}:10: launcher: unknown 'mpirun' — did you mean 'srun'?",
        f"{job}:11: node: unknown field — did you mean 'nodes'?",
    ]


def test_missing_field_points_at_its_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("# cluster\nname: c\nnode_sets:\n  - name: a\n    count: 1\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.lines() == [f"{path}:4: node_sets[0].instance_type: required field missing"]


def test_resource_form_keeps_lines():
    with pytest.raises(SpecError) as info:
        loads_spec("kind: SlurmCluster\nspec:\n  name: c\n  node_sets:\n    - {name: a, instance_type: m7i.8xlarg}\n",
                   source="r.yaml")
    assert [line.split("; any other EC2 type")[0] for line in info.value.lines()] == [
        "r.yaml:5: node_sets[0].instance_type: unknown 'm7i.8xlarg' — did you mean 'm7i.8xlarge'?"]


@pytest.mark.parametrize("make, path", [
    (lambda: Entry(module=0), "entry.module"),  # a regex would raise TypeError here
    (lambda: Entry(script=["a.py"]), "entry.script"),
    (lambda: Entry(module="m", args=[{"a": 1}]), "entry.args[0]"),
    (lambda: Container(image=["img"]), "container.image"),
    (lambda: Container(image="img", mounts="/a:/a,/b:/b"), "container.mounts"),
    (lambda: RequeuePolicy(signal=10), "requeue.signal"),
    (lambda: JobSpec(name=["x"], entry=Entry(module="m")), "name"),
    (lambda: JobSpec(name="x", entry=Entry(module="m"), partition=["gpu"]), "partition"),
    (lambda: JobSpec(name="x", entry=Entry(module="m"), nodelist=7), "nodelist"),
    (lambda: JobSpec(name="x", entry=Entry(module="m"), time_limit=[1]), "time_limit"),
    (lambda: JobSpec(name="x", entry=Entry(module="m"), dependencies=[12]), "dependencies[0]"),
    (lambda: JobSpec(name="x", entry=Entry(module="m"), env={"A": None}), "env.A"),
    (lambda: JobSpec.from_dict({"name": "x", "entry": {"module": "m"}, "mem_per_node": ["8G"]}), "mem_per_node"),
])
def test_wrong_types_are_spec_errors_in_the_python_api(make, path):
    with pytest.raises(SpecError) as info:
        make()
    assert info.value.path == path and "expected" in info.value.reason


def test_python_api_collects_problems_too():
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"name": "", "entry": {"module": "a-b"}, "nodes": 0})
    assert [p.path for p in info.value.problems] == ["name", "entry.module", "nodes"]
    assert str(info.value) == ("name: must not be empty\nentry.module: not a Python module name: 'a-b'\n"
                               "nodes: must be between 1 and 100000, got 0")


def test_job_spec_python_objects_still_load():
    spec = JobSpec.from_dict({"name": "x", "entry": Entry(module="m", args=("--lr", 0.1)),
                              "requeue": RequeuePolicy(signal="SIGUSR1"), "dependencies": "afterok:3",
                              "env": {"DEBUG": True, "N": 2}})
    assert spec.entry.args == ("--lr", "0.1") and spec.requeue.signal == "USR1"
    assert spec.dependencies == ("afterok:3",) and dict(spec.env) == {"DEBUG": "1", "N": "2"}


def test_not_utf8_is_one_line_everywhere(cli, tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    want = [f"{bad}:1: not UTF-8 text (byte 0xe9); save the file as UTF-8"]
    for argv in (("sbatch", "render", str(bad)), ("cluster", "render", str(bad)),
                 ("cluster", "validate", str(bad)), ("cluster", "diff", str(bad), "--against", str(CPU_SMALL.parent))):
        code, out, err = cli(*argv)
        assert (code, out) == (2, ""), argv
        assert _lines(err) == want, argv


def test_missing_file_is_worded_once(cli, tmp_path):
    missing = tmp_path / "nope.yaml"
    reason = f"{missing}: cannot read: No such file or directory"
    for argv, prefix in [(("sbatch", "render", str(missing)), ""), (("sbatch", "submit", str(missing)), ""),
                         (("cluster", "render", str(missing)), ""), (("cluster", "validate", str(missing)), ""),
                         (("cluster", "diff", str(missing)), ""), (("cluster", "status", str(missing)), ""),
                         (("cluster", "diff", str(CPU_SMALL), "--against", str(missing)), "--against "),
                         (("sbatch", "check", str(REPO / "sbatch" / "torchrun-ddp.sbatch"), "--cluster", str(missing)),
                          "--cluster: "), (("sbatch", "check", str(missing), "--cluster", str(CPU_SMALL)), "")]:
        code, out, err = cli(*argv)
        assert (code, out) == (2, ""), argv
        assert _lines(err) == [prefix + reason], argv


def test_yaml_bombs_and_deep_nesting_are_one_line(cli, tmp_path):
    laughs = ["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(6)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(laughs) + "\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: " + "[" * 20000 + "]" * 20000 + "\n")
    for path, reason in ((bomb, "not a spec: expands to more than 100000 values (aliases?)"),
                         (deep, "not a spec: nested too deeply")):
        for command in ("sbatch", "cluster"):
            code, out, err = cli(command, "render", str(path))
            assert (code, out) == (2, "") and _lines(err) == [f"{path}: {reason}"]


def test_yaml_syntax_and_bad_characters_name_the_line(cli, tmp_path):
    path = tmp_path / "j.yaml"
    path.write_text("name: x\nentry: {module: m\nnodes: 1\n")
    code, _, err = cli("sbatch", "render", str(path))
    assert code == 2 and len(_lines(err)) == 1 and _lines(err)[0].startswith(f"{path}:3: not valid YAML: ")
    path.write_text("name: x\nentry: {module: m}\npartition: a\x07b\n")
    code, _, err = cli("sbatch", "render", str(path))
    assert code == 2 and _lines(err) == [f"{path}:3: not valid YAML: character #x0007 is not allowed"]


@pytest.mark.parametrize(("module", "argv", "extra"), [
    ("kubernetes_validate", ("cluster", "validate", str(CPU_SMALL), "--kubernetes-version", "1.32"), "k8s"),
    ("cel", ("cluster", "validate", str(CPU_SMALL)), "k8s"),
    ("kubernetes", ("cluster", "status", str(CPU_SMALL)), "k8s"),
    ("kubernetes", ("cluster", "diff", str(CPU_SMALL)), "k8s"),
    ("kubernetes", ("cluster", "apply", str(CPU_SMALL), "--dry-run"), "k8s"),
])
def test_missing_extra_is_one_line_with_the_fix(module, argv, extra):
    """An extra that is not installed, in a fresh interpreter (None in sys.modules makes its import
    fail as if absent; test_packaging.py checks the same in a venv without the extras)."""
    code = f"import sys; sys.modules[{module!r}] = None; from slinkyml.cli import main; sys.exit(main({list(argv)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _lines(proc.stderr) == [f"this command needs {module} (the {extra} extra): pip install 'slinkyml[{extra}]'"]


@pytest.mark.slurm
def test_missing_plots_extra_for_png(cli, local_cluster, monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = cli("efficiency", "--since", "2020-01-01", "--png", str(tmp_path / "e.png"))
    assert code == 2 and _lines(err) == [
        "this command needs matplotlib (the plots extra): pip install 'slinkyml[plots]'"]
    assert not (tmp_path / "e.png").exists()


def test_exit_code_for_each_error_type():
    assert SpecError("x", "bad").exit_code == 2
    assert SlinkyError("cannot write out.txt").exit_code == 2
    assert slurm_errors.SlurmError("sbatch failed").exit_code == 1
    assert slurm_errors.InvalidRequest("no such partition").exit_code == 1
    assert slurm_errors.JobNotFound("gone").exit_code == 1
    for unreachable in (slurm_errors.SlurmControllerDown, slurm_errors.AccountingUnavailable,
                        slurm_errors.SlurmTimeout, slurm_errors.SlurmTransientError,
                        slurm_errors.SlurmCommandNotFound):
        assert unreachable("down").exit_code == 3
    from slinkyml.jobs.validate import JobCheckError

    assert JobCheckError("no such partition").exit_code == 1


@pytest.mark.slurm
def test_slurmctld_unreachable_exits_3(cli, local_cluster, tmp_path, monkeypatch):
    """A controller that does not answer (this cluster's slurm.conf with a port nothing listens on):
    exit 3, not the 2 of a usage error."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("".join("SlurmctldPort=9\n" if line.startswith("SlurmctldPort=") else line
                            for line in Path(local_cluster.spec.slurm_conf).read_text().splitlines(True)))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    job = tmp_path / "job.yaml"
    job.write_text("name: unreachable\nlauncher: srun\nentry: {script: /bin/true}\n")
    code, out, err = cli("sbatch", "submit", "--no-check", str(job))
    assert code == 3 and out == ""
    assert len(_lines(err)) == 1 and "slurmctld is not reachable" in err


def _keywords(node: object, inside_names: bool = False) -> set[str]:
    """Every schema keyword used in ``node`` (not the field names under properties/$defs)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if not inside_names:
                found.add(key)
            if not inside_names and key in specload.ANNOTATIONS:
                continue  # an annotation's value is not a schema (a default, x-cli's flag)
            names = not inside_names and key in ("properties", "$defs", "patternProperties")
            found |= _keywords(value, names)
    elif isinstance(node, list):
        for value in node:
            found |= _keywords(value)
    return found


@pytest.mark.parametrize("kind", sorted(specload.SCHEMAS))
def test_every_schema_keyword_is_one_the_loader_honours(kind):
    """A keyword outside what jsonschema validates and the loader words (or a plain annotation) would be
    ignored silently: the published schema and the loader would disagree."""
    used = _keywords(specload.schema(kind))
    assert used - specload.WORDED - specload.ANNOTATIONS == set()
    assert _keywords({"type": "string", "minLenght": 2}) - specload.WORDED - specload.ANNOTATIONS == {"minLenght"}


def test_keywords_the_old_checker_ignored_are_enforced(tmp_path, monkeypatch):
    """const, oneOf, uniqueItems and maxProperties: the home-made checker skipped them."""
    probe = {"type": "object", "additionalProperties": False, "maxProperties": 3,
             "properties": {"mode": {"const": "fast"}, "tags": {"type": "array", "uniqueItems": True},
                            "size": {"oneOf": [{"type": "integer", "minimum": 10}, {"type": "string"}]},
                            "x": {"type": "integer"}}}
    (tmp_path / "probe.schema.json").write_text(json.dumps(probe))
    monkeypatch.setattr(specload, "SCHEMA_DIR", tmp_path)
    monkeypatch.setitem(specload.SCHEMAS, "probe", "probe.schema.json")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    specload.schema.cache_clear()
    specload._schema_bytes.cache_clear()
    assert specload.check({"mode": "fast", "tags": ["a", "b"], "size": 12}, "probe") == []
    found = {p.path: p.message for p in specload.check({"mode": "slow", "tags": ["a", "a"], "size": 3, "x": 1},
                                                      "probe")}
    assert set(found) == {"", "mode", "tags", "size"}, found
    assert found == {"mode": "must be 'fast', got 'slow'", "tags": "items must be unique, got 'a' twice",
                     "": "at most 3 fields, got 4", "size": "must match exactly one of its 2 forms, matched 0"}
    specload.schema.cache_clear()
    specload._schema_bytes.cache_clear()


def test_the_generated_validator_is_cached_and_agrees(tmp_path, monkeypatch):
    """fastjsonschema's code is generated once per schema and kept (later processes load it); an
    integral float is no spec integer on either path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    specload._fast.cache_clear()
    job = {"name": "x", "nodes": 2, "entry": {"script": "train.py"}}
    assert specload.check(job, "job") == []
    assert [p.name for p in (tmp_path / "slinkyml").iterdir()][0].startswith("schema-job-")
    [problem] = specload.check({**job, "nodes": 2.0}, "job")
    assert (problem.path, problem.message) == ("nodes", "expected integer, got number 2.0")
    specload._fast.cache_clear()


def test_checking_never_writes_defaults_into_the_data():
    """fastjsonschema fills ``default`` values in by default: the loader's check must leave a spec as written."""
    job = {"name": "x", "entry": {"script": "train.py"}, "requeue": {"on": ["preemption"]}}
    before = json.loads(json.dumps(job))
    assert specload.check(job, "job") == [] and job == before
