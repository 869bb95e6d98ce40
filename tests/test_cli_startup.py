"""The console script starts light: sub-command parsers without heavy or metadata imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slinkyml import __version__

SPEC = Path(__file__).resolve().parent.parent / "sbatch" / "torchrun-ddp.yaml"
#: what rendering a job never needs: the command layer and OS plumbing (subprocess, ctypes, hashlib), HTTP,
#: package metadata, importlib.resources (data files are paths), error-path helpers (difflib), extras
NOT_FOR_RENDER = ("subprocess", "ctypes", "hashlib", "http.client", "importlib.metadata", "importlib.resources",
                  "difflib", "signal", "jsonschema", "pandas", "pyarrow", "numpy", "torch", "submitit", "rich",
                  "kubernetes", "slinkyml.slurm.runner", "slinkyml.jobs.submit", "slinkyml.jobs.validate",
                  "slinkyml.plan")


def test_version_flag_prints_the_installed_version() -> None:
    out = subprocess.run([sys.executable, "-m", "slinkyml", "--version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == f"slinkyml {__version__}"


def test_building_the_parser_imports_nothing_heavy(imported_by) -> None:
    heavy = ("importlib.metadata", "yaml", "pandas", "pyarrow", "rich", "torch", "jsonschema", "kubernetes",
             "submitit", "numpy")
    assert imported_by("from slinkyml.cli import build_parser; build_parser()", heavy) == []


def test_help_imports_no_sub_command_module_and_no_dataclasses(imported_by) -> None:
    code = ("import contextlib, io; from slinkyml.cli import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['--help'])")
    assert imported_by(code, ("dataclasses", "slinkyml.cli.sbatch", "slinkyml.cli.cluster", "yaml")) == []


@pytest.mark.parametrize("argv", [["sbatch", "render", str(SPEC)],
                                  ["sbatch", "submit", "--dry-run", "--no-check", str(SPEC)]],
                         ids=["render", "dry-run"])
def test_rendering_imports_nothing_it_does_not_use(imported_by, argv) -> None:
    code = ("import contextlib, io; from slinkyml.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    assert main({argv!r}) == 0")
    heavy = NOT_FOR_RENDER if argv[1] == "render" else tuple(m for m in NOT_FOR_RENDER if m not in (
        "subprocess", "signal", "slinkyml.slurm.runner", "slinkyml.jobs.validate"))  # Slurm() and check_job load
    assert imported_by(code, heavy) == []


def test_a_submission_seen_before_imports_no_yaml_hashlib_or_shutil(imported_by, tmp_path) -> None:
    """``run`` builds its spec from flags (no YAML), and ``sbatch submit`` of a spec seen before reads its
    kept parse: neither loads PyYAML; the records' folder name needs no OpenSSL, argparse no shutil."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: probe\nlauncher: srun\nentry: {script: /bin/true}\n")
    cache = f"import os; os.environ['XDG_CACHE_HOME'] = {str(tmp_path / 'cache')!r}\n"
    heavy = ("yaml", "hashlib", "shutil", "slinkyml.instances")
    for argv in (["run", "--launcher", "srun", "--dry-run", "--no-check", "/bin/true"],
                 ["sbatch", "submit", "--dry-run", "--no-check", str(spec)]):
        code = (cache + "import contextlib, io; from slinkyml.cli import main\n"
                "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
                f"    assert main({argv!r}) == 0")
        imported_by(code, heavy)  # the first time: the spec and the packaged presets are parsed and kept
        assert imported_by(code, heavy) == []


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
    assert len(bad.stderr.strip().splitlines()) == 1  # one error line (not the usage), no traceback
    sub = subprocess.run([sys.executable, "-m", "slinkyml", "usage", "--help"], capture_output=True, text=True)
    assert sub.returncode == 0 and "--since" in sub.stdout


#: what a report over a small cluster's records or a job listing never needs to import
NOT_FOR_LISTING = ("pandas", "numpy", "pyarrow", "duckdb", "yaml", "jsonschema", "rich", "slinkyml.jobs.spec",
                   "slinkyml.accounting.reports")


def test_jobs_list_imports_no_accounting_library_and_no_spec(imported_by, tmp_path) -> None:
    """`jobs list` reads squeue/sacct records: importing ``slinkyml.accounting.timeparse`` or
    ``slinkyml.jobs.listing`` runs their packages' ``__init__``, which must not load the reports (pandas,
    DuckDB) or the job spec (schema, PyYAML). No Slurm on PATH: the handler's imports all happen, then it
    fails on the first command."""
    code = ("import contextlib, io, os; from slinkyml.cli import main; from slinkyml.errors import SlinkyError\n"
            f"os.environ['PATH'] = {str(tmp_path)!r}\n"
            "with contextlib.suppress(SlinkyError, SystemExit), contextlib.redirect_stdout(io.StringIO()), "
            "contextlib.redirect_stderr(io.StringIO()):\n"
            "    main(['jobs', 'list', '--json'])\n"
            "assert 'slinkyml.jobs.listing' in sys.modules")
    assert imported_by("import sys\n" + code, NOT_FOR_LISTING) == []


def test_the_accounting_package_exports_its_reports_on_first_use(imported_by) -> None:
    assert imported_by("from slinkyml.accounting import parse_when", ("pandas", "duckdb")) == []
    assert imported_by("from slinkyml.accounting import usage_report, load_jobs", ("pandas",)) == ["pandas"]


def test_dry_run_says_which_interpreter_the_job_runs(tmp_path) -> None:
    """``--dry-run`` renders what ``submit`` would send: the interpreter running slinkyml, said on stderr;
    the one a spec names, said as named."""
    import os

    spec = tmp_path / "job.yaml"
    spec.write_text("name: probe\nlauncher: srun\nentry: {module: slinkyml.train}\n")
    env = {**os.environ, "PATH": str(tmp_path)}  # no Slurm: --no-check renders without asking it
    out = subprocess.run([sys.executable, "-m", "slinkyml", "sbatch", "submit", "--dry-run", "--no-check", str(spec)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert f"  {sys.executable}\n  -m slinkyml.train" in out.stdout  # the launch line, one word a line
    assert f"# interpreter: {sys.executable} (the interpreter running slinkyml" in out.stderr
    spec.write_text("name: probe\nlauncher: srun\npython: /opt/py/bin/python3\nentry: {module: slinkyml.train}\n")
    out = subprocess.run([sys.executable, "-m", "slinkyml", "sbatch", "submit", "--dry-run", "--no-check", str(spec)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "  /opt/py/bin/python3\n  -m slinkyml.train" in out.stdout
    assert "# interpreter: /opt/py/bin/python3 (named by the job spec)" in out.stderr


def test_fairshare_imports_no_table_library(imported_by, tmp_path) -> None:
    """`fairshare` recomputes a few dozen associations in plain Python (accounting/sharetree.py): pandas,
    numpy, pyarrow and DuckDB would be most of its run time. No Slurm on PATH: the handler's imports
    happen, then it fails on sshare."""
    code = ("import contextlib, io, os, sys; from slinkyml.cli import main; from slinkyml.errors import SlinkyError\n"
            f"os.environ['PATH'] = {str(tmp_path)!r}\n"
            "with contextlib.suppress(SlinkyError, SystemExit), contextlib.redirect_stdout(io.StringIO()), "
            "contextlib.redirect_stderr(io.StringIO()):\n"
            "    main(['fairshare', '--json'])\n"
            "assert 'slinkyml.accounting.sharetree' in sys.modules")
    assert imported_by(code, ("pandas", "numpy", "pyarrow", "duckdb")) == []
