"""The recorded real Slurm output under tests/data/slurm-*/ is complete and parseable.

Parser tests elsewhere rely on these files; this guards their shape (and the workload they hold).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
RELEASES = ("22.05", "24.11", "26.05")
DELIMITER = "~|~"


@pytest.mark.parametrize("release", RELEASES)
def test_every_command_was_recorded(release):
    folder = DATA / f"slurm-{release}"
    names = {p.name for p in folder.iterdir()}
    assert {"COMMANDS.md", "version.txt", "sacct.txt", "sacct.json", "squeue.json", "sshare.txt",
            "sreport.txt", "scontrol_show_config.txt", "sdiag.txt"} <= names
    assert f" {release}." in (folder / "version.txt").read_text()


@pytest.mark.parametrize("release", RELEASES)
def test_sacct_holds_the_workload(release):
    lines = (DATA / f"slurm-{release}" / "sacct.txt").read_text().splitlines()
    header = lines[0].split(DELIMITER)
    rows = [dict(zip(header, line.split(DELIMITER), strict=True)) for line in lines[1:]]
    jobs = [r for r in rows if "." not in r["JobID"]]  # allocations, not steps
    states = {r["JobName"]: set() for r in jobs}
    for r in jobs:
        states[r["JobName"]].add(r["State"].split()[0])
    assert states["rec-ok"] == {"COMPLETED"} and states["rec-fail"] == {"FAILED"}
    assert states["rec-timeout"] == {"TIMEOUT"} and states["rec-requeue"] == {"REQUEUED", "COMPLETED"}
    assert {r["User"] for r in jobs} == {"alice", "bob", "carol"}
    assert sum(r["JobName"] == "rec-array" for r in jobs) == 3


@pytest.mark.parametrize("release", RELEASES)
def test_json_outputs_load(release):
    folder = DATA / f"slurm-{release}"
    for name in ("sacct.json", "squeue.json"):
        data = json.loads((folder / name).read_text())
        assert data["jobs"], name


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_sshare_and_sreport_layouts_hold(release):
    """The columns slinkyml asks sshare for, in that order, and sreport's AccountUtilizationByUser header
    are the same on the releases that print LevelFS; parse_sshare rebuilds the account tree from them."""
    from slinkyml.accounting.fairshare import SSHARE_FIELDS, parse_sshare

    folder = DATA / f"slurm-{release}"
    text = (folder / "sshare.txt").read_text()
    assert text.splitlines()[0].split("|")[:len(SSHARE_FIELDS)] == list(SSHARE_FIELDS)
    tree = parse_sshare(text).set_index("key")
    assert tree.at["physics", "parent"] == "science" and tree.at["physics/alice", "parent"] == "physics"
    assert tree.at["ml/dave", "raw_shares"] == 1 and tree.at["science", "raw_shares"] == 60
    assert "Cluster|Account|Login|Proper Name|Used|Energy" in (folder / "sreport.txt").read_text().splitlines()
