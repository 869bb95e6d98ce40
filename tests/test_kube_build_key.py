"""kube/build.sh's cache keys: what is built decides them, comments do not (a comment that named a moved
file once could not be mended without rebuilding Kubernetes and the operator on every machine)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _key(kube: Path) -> str:
    return subprocess.run(["bash", str(kube / "build.sh"), "--key"], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


@pytest.fixture
def kube_copy(tmp_path: Path) -> Path:
    if shutil.which("go") is None:
        pytest.skip("kube/build.sh --key asks `go env GOVERSION`: Go is not installed (`make setup`)")
    return Path(shutil.copytree(REPO / "kube", tmp_path / "kube"))


def test_a_comment_never_changes_the_key(kube_copy: Path) -> None:
    before = _key(kube_copy)
    for name, comment in (("pause/go.mod", "// a comment\n"), ("etcd/main.go", "  // indented\n"),
                          ("build.sh", "# a comment\n")):
        path = kube_copy / name
        path.write_text(comment + path.read_text())
    assert _key(kube_copy) == before


def test_a_change_to_what_is_built_does(kube_copy: Path) -> None:
    before = _key(kube_copy)
    main = kube_copy / "pause" / "main.go"
    main.write_text(main.read_text() + "\nvar _ = 1\n")
    assert _key(kube_copy) != before
