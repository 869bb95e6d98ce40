"""The slurm-operator releases a spec can install: every chart version and Slinky image tag the
render prints is one the release declares (``data/cluster_addons.yaml`` slurm_operator.releases),
and those figures are the operator module's own (its ``helm/`` charts, read from the Go module
cache when it holds the module)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slinkyml import specload
from slinkyml.cluster import EXAMPLES_DIR, load_spec, loads_spec
from slinkyml.cluster.addons import addons, chart_name, operator_release
from slinkyml.cluster.helm import check_key_paths
from slinkyml.cluster.render import render
from slinkyml.cluster.spec import SLURM_IMAGE_TAGS, from_dict, supported_slurm_versions, to_dict
from slinkyml.errors import SpecError

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
RELEASES = sorted(addons()["slurm_operator"]["releases"])
MODULE = "github.com/SlinkyProject/slurm-operator"


def _images(node: Any) -> list[str]:
    """Every ``image`` string and chart ``{repository, tag}`` under ``node``."""
    out: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("repository"), str) and isinstance(node.get("tag"), str):
            out.append(f"{node['repository']}:{node['tag']}")
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                out.append(value)
            else:
                out += _images(value)
    elif isinstance(node, list):
        for value in node:
            out += _images(value)
    return out


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("example", EXAMPLES)
def test_printed_versions_and_tags_are_the_releases(example: str, release: str) -> None:
    spec = from_dict({**to_dict(load_spec(EXAMPLES_DIR / example / "cluster.yaml")), "slurm_operator": release})
    rel = operator_release(release)
    out = render(spec)
    install = out.files["INSTALL.md"]
    printed = set(re.findall(r"--version (\S+)", install))
    slinky_charts = set(re.findall(r"charts/(slurm-operator(?:-crds)?) --version (\S+)", install))
    assert {(chart, rel["charts"][chart]) for chart in ("slurm-operator-crds", "slurm-operator")} == slinky_charts \
        if rel["published"] else not slinky_charts
    assert f"slurm-operator {chart_name(rel)}" in install
    assert "1.3.0-rc1" not in printed and ("1.3.0-rc1" in install) == (not rel["published"])
    images = [i for i in _images([o for o in out.objects]) + _images(out.helm_values)
              if i.startswith("ghcr.io/slinkyproject/")]
    assert images, "the examples use Slinky images"
    for image in images:
        assert image.rsplit(":", 1)[1] == SLURM_IMAGE_TAGS[spec.slurm_version] == rel["chart_image_tag"], image


def test_default_is_the_newest_release_and_25_11_needs_it() -> None:
    assert operator_release()["name"] == "1.2.1" and operator_release()["published"]
    assert supported_slurm_versions("1.2.1") == ["25.11", "26.05"]
    assert supported_slurm_versions("f2ed3fc") == ["26.05"]
    raw = to_dict(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml"))
    old = from_dict({**raw, "slurm_version": "25.11", "images": None})  # Slinky's own images throughout
    assert old.slurm_operator == "1.2.1"
    tag = SLURM_IMAGE_TAGS["25.11"]
    slurm, flavor = tag.split("-", 1)
    assert slurm in addons()["slinky_images"]["slurm_versions"] and flavor in addons()["slinky_images"]["flavors"]
    assert {i for i in _images(render(old).objects) if "slinkyproject" in i} == {
        f"ghcr.io/slinkyproject/{c}:{tag}" for c in ("slurmctld", "slurmd", "slurmrestd", "login")}
    # the example's training images (images.registry) take the Slurm version as their tag
    trained = render(from_dict({**raw, "slurm_version": "25.11"})).objects
    assert {i for i in _images(trained) if "/slinkyml/" in i} == {
        f"123456789012.dkr.ecr.us-east-1.amazonaws.com/slinkyml/{name}:25.11" for name in ("worker", "login")}


def test_unsupported_combination_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    text = (EXAMPLES_DIR / "cpu-small" / "cluster.yaml").read_text()
    text = re.sub(r"(?m)^slurm_version:.*$", 'slurm_version: "25.11"\nslurm_operator: f2ed3fc', text) \
        if re.search(r"(?m)^slurm_version:", text) else 'slurm_version: "25.11"\nslurm_operator: f2ed3fc\n' + text
    line = 1 + text.splitlines().index('slurm_version: "25.11"')
    with pytest.raises(SpecError) as info:
        loads_spec(text, source="c.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"c.yaml:{line}: slurm_version: unsupported '25.11'"), message
    assert "minimum-slurm-version 26.05" in message
    bad = copy.deepcopy(specload.load_data(text))
    bad["slurm_operator"] = "1.3.0-rc1"
    with pytest.raises(SpecError) as info:
        from_dict(bad)
    assert str(info.value).startswith("slurm_operator: ") and "1.2.1" in str(info.value)


# ---------------------------------------------------------------- against the operator module


@pytest.mark.parametrize("release", RELEASES)
def test_release_figures_are_the_operator_modules(release: str, go_module: Callable[[str], Path]) -> None:
    rel = operator_release(release)
    folder = go_module(f"{MODULE}@{rel['module']}")
    charts = {name: specload.load_data((folder / "helm" / name / "Chart.yaml").read_text())
              for name in rel["charts"]}
    assert {name: str(c["version"]) for name, c in charts.items()} == rel["charts"]
    annotations = charts["slurm-operator"]["annotations"]
    assert str(annotations["slinky.slurm.net/minimum-slurm-version"]) == rel["minimum_slurm_version"]
    values = specload.load_data((folder / "helm" / "slurm" / "values.yaml").read_text())
    tags = {i.rsplit(":", 1)[1] for i in _images(values) if i.startswith("ghcr.io/slinkyproject/")}
    assert tags == {rel["chart_image_tag"]}
    operator_values = specload.load_data((folder / "helm" / "slurm-operator" / "values.yaml").read_text())
    for key, value in addons()["slurm_operator"]["chart_values"].items():
        section, name = key.split(".")
        assert operator_values[section][name] == value, key
    for example in EXAMPLES:  # every key of our slurm-chart values is one the release's chart has
        spec = from_dict({**to_dict(load_spec(EXAMPLES_DIR / example / "cluster.yaml")), "slurm_operator": release})
        assert check_key_paths(render(spec).helm_values, values) == [], example
