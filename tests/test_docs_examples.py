"""Every `sh` and `python` block of README.md, docs/*.md and benchmarks/README.md is run (docs/testing.md):
the `<!-- example: ... -->` line above a block says where — offline, on the local Slurm cluster, or
not at all with its reason — so a documented example that stops working fails the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"sh", "bash", "python"}
MARKER = re.compile(r"<!-- example: (offline|local_cluster|not run \((?P<reason>[^)].*)\)) -->")
FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    lang: str
    where: str  # offline | local_cluster | not run | '' (unmarked)
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        lines = page.read_text().split("\n")
        i = 0
        while i < len(lines):
            fence = FENCE.match(lines[i])
            if not fence:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence.group(1) in RUNNABLE:
                marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
                where = "" if marker is None else ("not run" if marker.group("reason") else marker.group(1))
                found.append(Example(str(page.relative_to(REPO)), i + 1, fence.group(1), where,
                                     "\n".join(lines[i + 1:end]) + "\n"))
            i = end + 1
    return found


EXAMPLES = examples()


def _run(example: Example, cwd: Path, env: dict[str, str]) -> None:
    for folder in ("sbatch", "manifests"):
        (cwd / folder).symlink_to(REPO / folder)
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
           "PYTHONPATH": str(REPO)}
    argv = ([sys.executable, "-"] if example.lang == "python" else ["bash", "-euo", "pipefail", "-s"])
    done = subprocess.run(argv, input=example.code, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (f"{example.id}: the example exited {done.returncode}\n--- stdout\n{done.stdout}"
                                  f"\n--- stderr\n{done.stderr}")


def test_every_example_says_where_it_runs() -> None:
    unmarked = [e.id for e in EXAMPLES if not e.where]
    assert not unmarked, ("put `<!-- example: offline -->`, `<!-- example: local_cluster -->` or "
                          f"`<!-- example: not run (REASON) -->` on the line above: {unmarked}")
    assert {e.where for e in EXAMPLES} >= {"offline", "local_cluster", "not run"}


def test_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.where == "offline"], ids=lambda e: e.id)
def test_offline_example(example: Example, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "SLINKYML_RESTAPI_URL")}
    _run(example, tmp_path, env)


@pytest.mark.slurm
@pytest.mark.timeout(600)
@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.where == "local_cluster"], ids=lambda e: e.id)
def test_cluster_example(example: Example, tmp_path: Path, local_cluster) -> None:
    if os.environ.get("SLINKYML_TEST_CLUSTER") == "docker" and "slinkyml dev " in example.code \
            and "--docker" not in example.code:
        # `slinkyml dev up` without --docker is the netns cluster of the default state dir: on a Docker session it
        # acted on the machine's netns cluster (its `up` read the Docker cluster's nodes and stopped it)
        pytest.skip("netns cluster only (the example drives the netns cluster's `slinkyml dev`): "
                    "SLINKYML_TEST_CLUSTER=docker")
    env = {**os.environ, "SLURM_CONF": str(local_cluster.spec.slurm_conf)}
    install = getattr(local_cluster, "install", None)  # none on the Docker cluster: its commands are bin/'s
    if install is None or not install.is_system:
        env["PATH"] = f"{local_cluster.spec.bin_dir}{os.pathsep}{env['PATH']}"
    _run(example, tmp_path, env)
