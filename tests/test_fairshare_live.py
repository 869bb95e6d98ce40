"""Fair-share recomputed on a deep, uneven association tree of the live cluster, compared column by
column with ``sshare -a -l -P``: ``fairshare=parent`` accounts (nested) and users, users with 0
shares, users without usage, shares 1/3/7/100, and real usage from real jobs run as four users.
Fair Tree first, then classic against a slurmctld restarted with ``PriorityFlags=NO_FAIR_TREE``.

The tree is added with sacctmgr under ``root`` (accounts ``fs*``) and removed afterwards."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from waiting import wait_until

from slinkyml.accounting import fairshare
from slinkyml.accounting.backends.cli import CliBackend

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

#: (account, parent, shares) — "parent" = fairshare=parent
ACCOUNTS = [
    ("fsa", "root", "3"),
    ("fsp", "fsa", "parent"),
    ("fsq", "fsp", "parent"),
    ("fsb", "fsa", "7"),
    ("fsc", "root", "1"),
    ("fsd", "fsc", "100"),
    ("fse", "fsd", "1"),
]
#: (user, account, shares)
USERS = [
    ("alice", "fsa", "1"),
    ("bob", "fsp", "7"),
    ("carol", "fsp", "100"),
    ("dave", "fsq", "3"),  # no usage, under two nested parent accounts
    ("alice", "fsb", "100"),
    ("bob", "fsb", "0"),  # no shares, with usage
    ("carol", "fsb", "parent"),  # a parent user
    ("dave", "fsb", "1"),  # no usage
    ("dave", "fse", "1"),
    ("alice", "fse", "3"),  # no usage
]
#: (user, account, tasks, seconds): usage = tasks × seconds CPU-seconds (billing = CPUs)
JOBS = [
    ("alice", "fsa", 1, 4), ("bob", "fsp", 2, 6), ("carol", "fsp", 1, 3),
    ("alice", "fsb", 3, 5), ("bob", "fsb", 1, 2), ("carol", "fsb", 2, 4), ("dave", "fse", 1, 7),
]
OURS = {f"{a}/{u}" for u, a, _ in USERS} | {a for a, _, _ in ACCOUNTS}


def _release(slurm) -> str:
    return f"{slurm.version.major}{slurm.version.minor:02d}"


def _sacctmgr(slurm, *args: str) -> None:
    slurm.run("sacctmgr", ["-i", *args], retries=2)


def _remove_tree(slurm) -> None:
    for user, account, _ in USERS:
        slurm.run("sacctmgr", ["-i", "delete", "user", user, f"account={account}"], check=False)
    for account, _, _ in reversed(ACCOUNTS):
        slurm.run("sacctmgr", ["-i", "delete", "account", account], check=False)


def _wait_for_jobs(slurm, ids: list[int]) -> None:
    wait_until(f"jobs {ids} to leave the queue", lambda: not slurm.run(
        "squeue", ["-h", "-j", ",".join(map(str, ids)), "-o", "%i"], check=False).stdout.split(), timeout=180, every=1)


@pytest.fixture(scope="module")
def tree(local_cluster):
    slurm = local_cluster.slurm
    _remove_tree(slurm)
    for account, parent, shares in ACCOUNTS:
        _sacctmgr(slurm, "add", "account", account, f"parent={parent}", f"fairshare={shares}")
    for user, account, shares in USERS:
        _sacctmgr(slurm, "add", "user", user, f"account={account}", f"fairshare={shares}")
    work = Path(tempfile.mkdtemp(prefix="slinkyml-fs-", dir="/tmp"))
    os.chmod(work, 0o777)
    # slurmctld learns new associations from slurmdbd asynchronously: retry the first submission
    ids = []
    for user, account, tasks, seconds in JOBS:
        for _attempt in range(30):
            try:
                ids.append(slurm.sbatch(f"#!/bin/bash\nsleep {seconds}\n",
                                        ["-A", account, "-n", str(tasks), "-J", "fs-live",
                                         "--output", str(work / "%j.out")], as_user=user))
                break
            except Exception:  # noqa: BLE001 - "Invalid account" until the association arrives
                time.sleep(1)
        else:
            pytest.fail(f"could not submit as {user} in {account}")
    _wait_for_jobs(slurm, ids)
    yield dict(slurm=slurm, ids=ids)
    shutil.rmtree(work, ignore_errors=True)
    _remove_tree(slurm)


def _record(slurm, name: str, assocs) -> None:
    """With SLINKYML_RECORD_FIXTURES=DIR, save the agreeing snapshot's sshare and assoc_mgr text
    (the fixtures of tests/test_accounting_parse.py were made this way)."""
    folder = os.environ.get("SLINKYML_RECORD_FIXTURES")
    if not folder:
        return
    sshare = slurm.run("sshare", fairshare.sshare_args()).stdout
    mgr = slurm.run("scontrol", ["show", "assoc_mgr", "flags=assoc"]).stdout
    if fairshare.parse_sshare(sshare).equals(assocs):  # nothing moved since the snapshot
        Path(folder, f"sshare_{name}.txt").write_text(sshare)
        Path(folder, f"assoc_mgr_{name}.txt").write_text(mgr)


def _snapshot_until_equal(backend, check, limit: float = 180):
    """sshare's LevelFS/FairShare come from the last priority calculation (every minute) while
    its raw usage moves as jobs end: retry until a snapshot agrees or ``limit`` passes."""
    deadline = time.monotonic() + limit
    while True:
        assocs, raw = backend.shares_snapshot()
        bad = check(assocs, raw)
        if not bad or time.monotonic() > deadline:
            return assocs, raw, bad
        time.sleep(5)


def test_fair_tree_equals_sshare_on_deep_uneven_tree(tree):
    backend = CliBackend(tree["slurm"])

    def check(assocs, raw):
        mine = assocs[assocs["key"].isin(OURS)]
        if len(mine) < len(OURS) or not (mine[mine["key"] == "fsb/alice"]["raw_usage"] > 0).all():
            return [("tree", "not all associations and usage visible yet", len(mine), None)]
        return fairshare.fair_tree_mismatches(assocs, raw)

    assocs, raw, bad = _snapshot_until_equal(backend, check)
    assert not bad, (bad, assocs.to_string())
    _record(tree["slurm"], f"deep_fairtree_{_release(tree['slurm'])}", assocs)
    ours = fairshare.fair_tree(fairshare.build_tree(assocs, raw)).set_index("key")
    # "parent" accounts are transparent: fsp's and fsq's users are fsa's children
    assert ours.at["fsp/bob", "fs_parent"] == "fsa" and ours.at["fsq/dave", "fs_parent"] == "fsa"
    assert ours.at["fsp/carol", "norm_shares"] == pytest.approx(100 / (1 + 7 + 100 + 3 + 7))
    assert ours.at["fsb/bob", "level_fs"] == 0  # no shares
    assert math.isinf(ours.at["fsb/dave", "level_fs"])  # no usage
    assert math.isnan(ours.at["fsb/carol", "level_fs"])  # a parent user: sshare prints none
    users = ours[ours["is_user"]]
    assert users["rank"].notna().all() and users["fairshare"].between(0, 1).all()


def test_cli_shows_recomputed_beside_sshare(tree, cli):
    import json

    code, out, err = cli("fairshare", "--json")
    assert code == 0, err
    rows = {r["key"]: r for r in json.loads(out)}
    row = rows["fsp/carol"]
    for column in ("norm_shares", "effectv_usage", "level_fs", "fairshare"):
        assert {column, f"{column}_sshare", f"{column}_diff"} <= set(row), row
    assert abs(row["norm_shares_diff"]) <= 1e-6
    code, out, err = cli("fairshare", "--algorithm", "classic", "--json")
    assert code == 0, err
    rows = {r["key"]: r for r in json.loads(out)}
    carol = rows["fsp/carol"]
    # classic's own formula on classic's own NormShares, whatever slurmctld runs: sshare's columns
    # stay Fair Tree's (100/118 at carol's level), ours are classic's (the product down the tree)
    assert carol["fairshare"] == pytest.approx(
        2 ** (-carol["effectv_usage"] / carol["norm_shares"]), rel=1e-9)
    assert carol["norm_shares_sshare"] == pytest.approx(100 / 118, abs=1e-6)
    assert carol["norm_shares"] < carol["norm_shares_sshare"] / 10
    code, out, err = cli("fairshare")
    assert code == 0 and "max |slinkyml - sshare| over" in " ".join(out.split()), out
    assert "NormShares" in out and "sshare" in out and "diff" in out


@pytest.mark.netns_only("restarts the daemons with an extra slurm.conf line (LocalCluster(extra_slurm_conf=...))")
def test_classic_equals_sshare_of_a_classic_slurmctld(tree, local_cluster):
    """Restart slurmctld with PriorityFlags=NO_FAIR_TREE (``up`` with the extra line rewrites
    slurm.conf), compare after the first classic calculation, restore in ``finally``."""
    from slinkyml.dev import LocalCluster

    spec = local_cluster.spec
    classic_cluster = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True,
                                   extra_slurm_conf="PriorityFlags=NO_FAIR_TREE")
    try:
        classic_cluster.up()
        assert "NO_FAIR_TREE" in classic_cluster.slurm.show_config().get("PriorityFlags", "")
        backend = CliBackend(classic_cluster.slurm)

        def check(assocs, raw):
            carol = assocs[assocs["key"] == "fsp/carol"]
            if carol.empty:
                return [("fsp/carol", "missing", None, None)]
            # Fair Tree's per-level NormShares until the first classic calculation
            if abs(carol["norm_shares"].iloc[0] - 100 / 118) < 1e-3:
                return [("fsp/carol", "NormShares still Fair Tree's", None, None)]
            return fairshare.classic_mismatches(assocs, raw)

        assocs, raw, bad = _snapshot_until_equal(backend, check)
        assert not bad, (bad, assocs.to_string())
        _record(classic_cluster.slurm, f"deep_classic_{_release(tree['slurm'])}", assocs)
        cl = fairshare.classic(fairshare.build_tree(assocs, raw)).set_index("key")
        # NormShares: the product down the tree, "parent" links skipped
        root_level = assocs[(assocs["depth"] == 1)]["raw_shares"]
        s_fsa = 3 / root_level[root_level != fairshare.PARENT].sum()
        assert cl.at["fsp/carol", "norm_shares"] == pytest.approx(s_fsa * 100 / 118, rel=1e-9)
        assert cl.at["fsb/carol", "norm_shares"] == cl.at["fsb", "norm_shares"]  # parent user
    finally:
        restored = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True).up()
    assert "NO_FAIR_TREE" not in restored.slurm.show_config().get("PriorityFlags", "")
