"""The console script starts light: sub-command parsers without heavy or metadata imports."""

from __future__ import annotations

import subprocess
import sys

from slinkyml import __version__


def test_version_flag_prints_the_installed_version() -> None:
    out = subprocess.run([sys.executable, "-m", "slinkyml", "--version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == f"slinkyml {__version__}"


def test_building_the_parser_imports_nothing_heavy() -> None:
    code = ("import sys; from slinkyml.cli import build_parser; build_parser(); "
            "heavy = ('importlib.metadata', 'yaml', 'pandas', 'pyarrow', 'rich', 'torch', 'jsonschema', "
            "'kubernetes', 'submitit', 'numpy'); print(','.join(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
