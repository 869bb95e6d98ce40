"""The console script starts light: sub-command parsers without heavy or metadata imports."""

from __future__ import annotations

import subprocess
import sys

from slinkyml import __version__


def test_version_flag_prints_the_installed_version() -> None:
    out = subprocess.run([sys.executable, "-m", "slinkyml", "--version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == f"slinkyml {__version__}"


def test_building_the_parser_imports_nothing_heavy(imported_by) -> None:
    heavy = ("importlib.metadata", "yaml", "pandas", "pyarrow", "rich", "torch", "jsonschema", "kubernetes",
             "submitit", "numpy")
    assert imported_by("from slinkyml.cli import build_parser; build_parser()", heavy) == []


def test_a_sub_command_imports_only_its_own_module() -> None:
    code = ("import sys; from slinkyml.cli import build_parser; build_parser('sbatch'); "
            "print(sorted(m for m in sys.modules if m.startswith('slinkyml.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['slinkyml.cli.sbatch']"


def test_help_and_unknown_commands_still_see_every_command() -> None:
    helped = subprocess.run([sys.executable, "-m", "slinkyml", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0
    for name in ("dev", "cluster", "sbatch", "jobs", "usage", "fairshare", "efficiency", "report", "plan",
                 "demo"):
        assert name in helped.stdout
    bad = subprocess.run([sys.executable, "-m", "slinkyml", "sbach"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'sbach'" in bad.stderr and "sbatch" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 2  # usage + one error line, no traceback
    sub = subprocess.run([sys.executable, "-m", "slinkyml", "usage", "--help"], capture_output=True, text=True)
    assert sub.returncode == 0 and "--since" in sub.stdout
