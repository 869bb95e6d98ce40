"""The tiers come from the fixtures a test uses, and the lanes of make test cover every test once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import run_tiers
from tiers import TIERS, exclusive, needs, tier_of

REPO = Path(__file__).resolve().parent.parent


def test_the_most_demanding_fixture_decides() -> None:
    @needs("slurm")
    def session() -> None: ...

    @needs("kube")
    def plane() -> None: ...

    def plain() -> None: ...

    assert tier_of([plain], marked_slurm=False) == "offline"
    assert tier_of([plain], marked_slurm=True) == "slurm"
    assert tier_of([session, plane, plain], marked_slurm=False) == "kube"
    with pytest.raises(ValueError, match="unknown tier"):
        needs("gpu")


def test_each_expression_selects_its_tier_alone() -> None:
    """pytest's -m expressions are Python's and/or/not over mark names."""
    for tier in TIERS:
        marks = {tier} | ({"slurm"} if tier != "offline" else set())  # the legacy slurm mark rides along
        selected = [other for other in TIERS if eval(exclusive(other), {}, {m: m in marks for m in TIERS})]
        assert selected == [tier], tier


def test_split_balances_by_recorded_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"a.py": 100, "b.py": 60, "c.py": 50, "d.py": 5}))
    monkeypatch.setattr(run_tiers, "DURATIONS", record)
    groups = run_tiers.split(["d.py", "c.py", "b.py", "a.py", "new.py"], 2)
    assert sorted(sum(groups, [])) == ["a.py", "b.py", "c.py", "d.py", "new.py"]
    assert groups == [["a.py", "new.py"], ["d.py", "c.py", "b.py"]]  # 130 s and 115 s (new: 30 s), in the given order


def test_a_long_own_cluster_module_runs_in_two_halves_on_two_clusters(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"long.py": 1300, "long.py::t1": 500, "long.py::t2": 300, "long.py::t3": 250,
                                  "a.py": 200, "b.py": 100}))
    monkeypatch.setattr(run_tiers, "DURATIONS", record)
    monkeypatch.setattr(run_tiers, "test_ids", lambda module, marks: [f"{module}::t{i}" for i in range(1, 6)])
    monkeypatch.setenv("SLINKYML_TEST_PORT_SHIFT", "300")
    monkeypatch.setenv("SLINKYML_TEST_CLUSTER_TAG", "31")
    runs = run_tiers.own_cluster_runs(["a.py", "long.py", "b.py"])
    assert [(r.name, r.paths) for r in runs] == [
        ("own_cluster-1", ["long.py::t1", "long.py::t4", "long.py::t5"]),  # 500 + 20 + 20 s (unrecorded: 20 s)
        ("own_cluster-2", ["long.py::t2", "long.py::t3"]),  # 300 + 250 s
        ("own_cluster-3", ["a.py", "b.py"])]
    # the second half's cluster moves again from where this run's own shift and tag put the first
    assert runs[0].env == {} and runs[1].env == {"SLINKYML_TEST_PORT_SHIFT": "310", "SLINKYML_TEST_CLUSTER_TAG": "231"}


def test_every_collected_test_has_exactly_one_tier() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/test_tiers.py", "tests/test_faults_live.py", "tests/test_hostlist.py"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "SLINKYML_TIER_COUNTS": "1"})
    counts = dict(pair.rsplit(" ", 1) for pair in
                  done.stdout.split("tiers: ", 1)[1].split(" (")[0].split(", "))
    total = int(done.stdout.split("tiers: ", 1)[1].split(" (")[1].split(" ")[0])
    assert sum(int(n) for n in counts.values()) == total > 0
    assert int(counts["own_cluster"]) > 0 and int(counts["slurm"]) > 0 and int(counts["offline"]) > 0
