"""Packaging: every imported third-party module is declared, the light commands import no extra, and
``pip install .`` into a fresh virtual environment, without extras, gives a working CLI."""

from __future__ import annotations

import ast
import configparser
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml"}
#: imported only when present, never installed by slinkyml (the notebook's own IPython)
UNDECLARED_OK = {"IPython"}
EXTRAS_MODULES = ("torch", "deepspeed", "kubernetes", "kubernetes_validate", "matplotlib", "pyslurm")


def _requirements() -> tuple[set[str], dict[str, set[str]]]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")

    def names(text: str) -> set[str]:
        return {re.split(r"[<>=!~\[ ;]", line.strip(), maxsplit=1)[0].lower()
                for line in text.splitlines() if line.strip() and not line.strip().startswith("#")}

    extras = {name: names(text) for name, text in cfg["options.extras_require"].items()}
    return names(cfg["options"]["install_requires"]), extras


def _third_party_imports() -> set[str]:
    stdlib = set(sys.stdlib_module_names)
    found = set()
    for path in (REPO / "slinkyml").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    text = "\n".join(p.read_text() for p in (REPO / "slinkyml").rglob("*.py"))
    found |= set(re.findall(r"importlib\.resources\.files\(\"(\w+)\"\)", text))
    return {m for m in found if m not in stdlib and m not in ("slinkyml", "__future__")}


def test_every_imported_module_is_declared():
    base, extras = _requirements()
    declared = base | set().union(*extras.values())
    missing = {m for m in _third_party_imports() - UNDECLARED_OK
               if DISTRIBUTIONS.get(m, m).lower().replace("_", "-") not in {d.replace("_", "-") for d in declared}}
    assert missing == set()
    assert {"numpy", "cloudpickle", "pandas", "pyyaml", "jsonschema"} <= base
    assert not {"torch", "kubernetes", "matplotlib", "deepspeed"} & base  # extras stay extras


def test_versions_match_the_code():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["options"]["python_requires"].strip() == ">=3.11"  # datetime.UTC, Popen(process_group=)
    train = cfg["options.extras_require"]["train"]
    assert re.search(r"^\s*torch>=\d", train, re.M) and "==" not in train  # a range for GPU clusters
    assert re.search(r"^\s*submitit>=1\.5,<1\.6\s*$", cfg["options"]["install_requires"], re.M)
    # our machines keep the exact CPU wheel: constraints.txt, used by the Makefile
    assert "torch==2.13.0" in (REPO / "constraints.txt").read_text().splitlines()
    assert (REPO / "Makefile").read_text().count("-c constraints.txt") == 3


@pytest.mark.parametrize("argv", [
    ["--help"], ["plan", "--params", "7e9", "--gpus", "8", "--gpu", "a100-80gb"],
    ["sbatch", "render", str(REPO / "sbatch" / "deepspeed-zero3.yaml")],
    ["cluster", "render", str(REPO / "manifests" / "cpu-small" / "cluster.yaml")], ["schema", "job"],
])
def test_light_commands_import_no_extra(imported_by, argv):
    code = ("import contextlib, io\nfrom slinkyml.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass")
    assert imported_by(code, EXTRAS_MODULES) == []


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pyyaml/", timeout=10):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_fresh_venv_without_extras(tmp_path):
    """A user's `pip install slinkyml` (here: from the checkout, not editable) with no extras: the
    declared base dependencies come from the package index; --help, plan, sbatch render, cluster
    render and schema work; commands that need an extra say which, in one line."""
    source = tmp_path / "src"  # a copy: pip builds in the source tree (build/, *.egg-info)
    shutil.copytree(REPO / "slinkyml", source / "slinkyml", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # --isolated: no local pip configuration or mirror; the base dependencies come from PyPI itself
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--isolated", str(source)], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=900)
    if install.returncode != 0 and not _pypi_reachable():
        pytest.skip(f"no network to PyPI, cannot install the base dependencies: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=freeze"], env=env, capture_output=True,
                            text=True, check=True).stdout.lower()
    for extra in ("torch", "deepspeed", "kubernetes", "matplotlib"):
        assert f"\n{extra}==" not in f"\n{listed}", f"{extra} installed without its extra"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "slinkyml"), *argv], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)

    helped = run("--help")
    assert helped.returncode == 0 and "sbatch" in helped.stdout and "plan" in helped.stdout
    planned = run("plan", "--params", "7e9", "--gpus", "8", "--gpu", "a100-80gb", "--json")
    assert planned.returncode == 0, planned.stderr
    for name in ("torchrun-ddp", "deepspeed-zero3"):
        rendered = run("sbatch", "render", str(REPO / "sbatch" / f"{name}.yaml"))
        assert rendered.returncode == 0, rendered.stderr
        assert rendered.stdout == (REPO / "sbatch" / f"{name}.sbatch").read_text()
    cluster = REPO / "manifests" / "cpu-small" / "cluster.yaml"
    assert run("cluster", "render", str(cluster)).returncode == 0
    assert run("schema", "cluster").stdout == (REPO / "slinkyml" / "data" / "schemas" / "cluster.schema.json").read_text()
    validated = run("cluster", "validate", str(cluster))
    assert validated.returncode == 2 and validated.stderr == (
        "slinkyml: error: this command needs cel (the k8s extra): pip install 'slinkyml[k8s]'\n")
    status = run("cluster", "status", str(cluster))
    assert status.returncode == 2 and "pip install 'slinkyml[k8s]'" in status.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nentry: {module: 0}\n")
    refused = run("sbatch", "render", str(bad))
    assert refused.returncode == 2 and refused.stderr == (
        f"slinkyml: error: {bad}:2: entry.module: expected string, got integer 0\n")
