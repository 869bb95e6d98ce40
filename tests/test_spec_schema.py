"""The published JSON Schemas (``slinkyml schema job|cluster``) are the loader's own definitions:
a standard validator (jsonschema, draft 2020-12) accepts every shipped example and rejects broken
specs at the same field paths as slinkyml's loader; their fields and defaults are the spec classes'."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from slinkyml import specload
from slinkyml.cluster import spec as cluster_spec
from slinkyml.jobs import spec as job_spec

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {"job": sorted(REPO.glob("sbatch/*.yaml")) + [REPO / "benchmarks" / "gpu-check.yaml"],
            "cluster": sorted(REPO.glob("manifests/*/cluster.yaml"))}
#: schema location -> the dataclass it describes
CLASSES = {"job": {None: job_spec.JobSpec, "entry": job_spec.Entry, "container": job_spec.Container,
                   "requeue": job_spec.RequeuePolicy},
           "cluster": {None: cluster_spec.SlurmCluster, "node_set": cluster_spec.SlurmNodeSet, "images": cluster_spec.Images,
                       "controller": cluster_spec.Controller, "login": cluster_spec.Login,
                       "rest_api": cluster_spec.RestApi, "accounting": cluster_spec.Accounting,
                       "storage": cluster_spec.Fsx, "secrets": cluster_spec.Secrets, "aws": cluster_spec.Aws}}


def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(specload.schema(kind))


@pytest.mark.parametrize("kind", ["job", "cluster"])
def test_cli_prints_a_valid_draft_2020_12_schema(cli, kind):
    code, out, err = cli("schema", kind)
    assert (code, err) == (0, "")
    published = json.loads(out)
    assert published == specload.schema(kind)
    jsonschema.Draft202012Validator.check_schema(published)


@pytest.mark.parametrize("path", EXAMPLES["job"] + EXAMPLES["cluster"], ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_example_is_valid(path):
    kind = "cluster" if path.name == "cluster.yaml" else "job"
    data = yaml.safe_load(path.read_text())
    assert list(_validator(kind).iter_errors(data)) == []
    assert specload.check(data, kind) == []


@pytest.mark.parametrize("kind", ["job", "cluster"])
def test_schema_fields_and_defaults_are_the_spec_classes(kind):
    root = specload.schema(kind)
    for definition, cls in CLASSES[kind].items():
        node = root["$defs"][definition] if definition else root
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert list(node["properties"]) == list(fields), (
            f"{cls.__name__}: its fields and slinkyml/data/schemas/{kind}.schema.json differ: a new field goes "
            "into both (the loader checks against the schema)")
        for name, prop in node["properties"].items():
            prop = root["$defs"][prop["$ref"].rsplit("/", 1)[-1]] if "$ref" in prop else prop
            if "default" in prop:
                assert prop["default"] == fields[name].default, f"{cls.__name__}.{name}"


def _jsonschema_paths(kind: str, data: Any) -> set[str]:
    """Field paths of a standard validator's errors, spelled as slinkyml spells them."""
    paths = set()
    for error in _validator(kind).iter_errors(data):
        path = ""
        for step in error.absolute_path:
            path = specload.join(path, step)
        if error.validator == "required":
            paths |= {specload.join(path, key) for key in error.validator_value if key not in error.instance}
        elif error.validator == "additionalProperties":
            paths |= {specload.join(path, key) for key in error.instance if key not in error.schema["properties"]}
        elif "propertyNames" in error.schema_path:  # a bad key: the error is about the key itself
            paths.add(specload.join(path, error.instance))
        else:
            paths.add(path)
    return paths


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    data = copy.deepcopy(data)
    target = data
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()
BROKEN = {
    "job": [(("entry", "module"), 0), (("entry", "module"), "a-b"), (("nodes",), "two"), (("nodes",), 0),
            (("nodes",), True), (("name",), ["x"]), (("name",), _DELETE), (("entry",), _DELETE),
            (("launcher",), "mpirun"), (("time_limit",), "soon"), (("env",), {"1X": "y", "A": [1]}),
            (("partition",), "a b"), (("requeue",), {"sig": "USR1"}), (("requeue",), {"max_restarts": -1}),
            (("dependencies",), ["after:1;rm"]), (("srun_args",), ["mpi"]), (("gpu",), 1),
            (("container",), {"mounts": ["/a:/a"]}), (("rdzv_port",), 70000)],
    "cluster": [(("name",), "Bad_Name"), (("node_sets",), []), (("node_sets",), "cpu"), (("node_sets", 0, "count"), "2"),
                (("node_sets", 0, "count"), -1), (("node_sets", 0, "instance_type"), _DELETE),
                (("node_sets", 0, "capacity_type"), "spott"), (("node_sets", 0, "features"), [1, "ok"]),
                (("node_sets", 0, "zone"), "mars"), (("controller",), {"cpus": 2}), (("login",), {"replicas": 101}),
                (("aws",), {"region": "Moon"}), (("secrets",), {"jwt_key": "Bad Ref"}), (("nodesets",), [])],
}


@pytest.mark.parametrize("kind", ["job", "cluster"])
def test_broken_specs_are_rejected_at_the_same_paths(kind):
    checked = 0
    for example in EXAMPLES[kind]:
        base = yaml.safe_load(example.read_text())
        for path, value in BROKEN[kind]:
            data = _set(base, path, value)
            ours = {problem.path for problem in specload.check(data, kind)}
            assert ours, (example.name, path, value)
            assert ours == _jsonschema_paths(kind, data), (example.name, path, value)
            checked += 1
    assert checked == len(EXAMPLES[kind]) * len(BROKEN[kind])


def test_node_set_count_limit_is_the_code_limit():
    count = specload.schema("cluster")["$defs"]["node_set"]["properties"]["count"]
    assert count["maximum"] == cluster_spec.MAX_NODES  # gres.conf host ranges are rendered for this many
