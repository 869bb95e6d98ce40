"""Accounting parsers and offline computations on recorded output (no cluster needed)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from slinkyml.accounting import efficiency, fairshare, render, rows, sharetree, usage
from slinkyml.accounting.cost import PartitionPrice, cost, load_prices
from slinkyml.accounting.sacct import FIELDS, SEP
from slinkyml.accounting.sacct_arrow import parse_sacct, rows_to_table
from slinkyml.accounting.timeparse import parse_when
from slinkyml.accounting.tres import alloc_tres, parse_duration, usage_tres
from slinkyml.errors import SlinkyError, SpecError
from slinkyml.slurm import records

DATA = Path(__file__).parent / "data" / "accounting"


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture(scope="module")
def recorded():
    return parse_sacct((DATA / "sacct_2205.txt").read_text())


@pytest.fixture(scope="module")
def crafted():
    return parse_sacct((DATA / "sacct_crafted_gpu_het.txt").read_text())


def test_tres_counts_gpus_once_and_keeps_type():
    assert alloc_tres("billing=192,cpu=192,gres/gpu:h100=16,gres/gpu=16,mem=4096G,node=2") == (
        192, 4096 * 1024**3, 2, 192, 16, "h100")
    assert alloc_tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=1,gres/gpu=3,mem=32G")[4:] == (
        3, "a100+h100")
    assert alloc_tres("cpu=8,gres/gpu:a100=2,mem=16G")[4:] == (2, "a100")  # typed only
    assert alloc_tres("billing=2,cpu=2,mem=1024M,node=2")[1] == 1024**3
    got = usage_tres("cpu=4-23:59:30,gres/gpuutil=87,gres/gpumem=64G,mem=1000")
    assert got == {"cpu": 4 * 86400 + 86370, "gres/gpuutil": 87, "gres/gpumem": 64 * 1024**3,
                   "mem": 1000}
    assert parse_duration("00:00.018") == pytest.approx(0.018)
    assert parse_duration("1-02:03:04") == 93784
    assert math.isnan(parse_duration("UNLIMITED"))


def test_recorded_22_05_output(recorded):
    jobs, steps = recorded.jobs, recorded.steps
    assert recorded.malformed == 0
    assert jobs["key"].is_unique and steps["key"].is_unique
    assert set(jobs["state"]) >= {"TIMEOUT", "COMPLETED", "FAILED", "REQUEUED"}
    requeued = jobs[jobs["state"] == "REQUEUED"]
    job_id = requeued["job_id"].iloc[0]
    both = jobs[jobs["job_id"] == job_id].sort_values("segment")
    assert list(both["segment"]) == [0, 1] and both["db_index"].is_unique
    arrays = jobs[jobs["array_job_id"].notna()]
    assert sorted(arrays["array_task_id"].astype(int)) == [0, 1, 2, 3]
    assert arrays["job_id_display"].str.match(r"^\d+_\d$").all()
    assert str(jobs["start"].dt.tz) == "UTC"
    assert steps["user"].notna().all() and (steps["step"].isin(["batch", "extern", "0"])).all()
    timeout = jobs[jobs["state"] == "TIMEOUT"].iloc[0]
    assert timeout["timelimit_s"] == 60 and timeout["elapsed_s"] >= 60


def _recorded_fields(release: str) -> str:
    """The recorded ``sacct --format=ALL`` of tests/data/slurm-<release>/ cut to our FIELDS, as the
    CLI backend asks for them (unit-separator delimited, no header)."""


    lines = (DATA.parent / f"slurm-{release}" / "sacct.txt").read_text().splitlines()
    header = lines[0].split("~|~")
    rows = [dict(zip(header, line.split("~|~"), strict=True)) for line in lines[1:]]
    return "\n".join(SEP.join(row[name] for name in FIELDS) for row in rows) + "\n"


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_recorded_requeue_keeps_both_segments_apart(release):
    """24.11's DBIndex is ~1.7e19 (past int64 and float64 precision): read exactly, the requeued
    job's two records stay two segments with their own keys on every release."""
    table = parse_sacct(_recorded_fields(release))
    jobs = table.jobs
    assert table.malformed == 0 and jobs["key"].is_unique and table.steps["key"].is_unique
    assert str(jobs["db_index"].dtype) == "UInt64" and jobs["db_index"].notna().all()
    both = jobs[jobs["name"] == "rec-requeue"].sort_values("segment")
    assert list(both["segment"]) == [0, 1] and list(both["state"]) == ["REQUEUED", "COMPLETED"]
    assert both["db_index"].is_unique
    if release == "24.11":  # the exact recorded values, not their float64 neighbours
        assert list(both["db_index"]) == [17340697674029051904, 17340697674033217536]
    steps = table.steps[table.steps["job_id"] == both["job_id"].iloc[0]]
    assert set(steps["parent_key"]) <= set(both["key"])


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_runs_do_not_depend_on_the_records_order(release):
    """efficiency.runs takes a job id's records in segment order, whatever order they come in: every
    record reversed (the requeued job's two runs too) gives the same runs to the last bit, and so does
    each record carrying its step statistics instead of its steps."""
    table = parse_sacct(_recorded_fields(release))
    jobs = table.jobs
    requeued = jobs.loc[jobs["name"] == "rec-requeue", "job_id"].iloc[0]
    reversed_jobs = jobs.iloc[::-1].reset_index(drop=True)
    expected = efficiency.runs(jobs, table.steps)
    assert expected.loc[expected["job_id"] == requeued, "segments"].tolist() == [2]
    assert expected.loc[expected["job_id"] == requeued, "state"].tolist() == ["COMPLETED"]  # the last run's
    pd.testing.assert_frame_equal(efficiency.runs(reversed_jobs, table.steps), expected, check_exact=True)
    with_stats = pd.concat([jobs, efficiency.step_stats(jobs, table.steps)], axis=1)
    pd.testing.assert_frame_equal(efficiency.runs(with_stats, table.steps.iloc[0:0]), expected, check_exact=True)


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_recorded_json_records_equal_recorded_sacct(release):
    """The REST backend's record conversion (slurmdbd's job records: ``sacct --json`` has the same
    shape) gives the CLI parser's rows, requeued record included: 24.11 lists it as
    ``["PENDING", "REQUEUED"]``, sacct prints REQUEUED."""
    import json

    from slinkyml.accounting.backends.restapi import records_to_table

    records = json.loads((DATA.parent / f"slurm-{release}" / "sacct.json").read_text())["jobs"]
    cols = ["job_id", "job_id_display", "array_task_id", "name", "user", "account", "partition", "state",
            "submit", "start", "end", "elapsed_s", "timelimit_s", "alloc_cpu", "alloc_mem_bytes",
            "alloc_node", "alloc_billing", "alloc_gpus", "segment"]
    if release != "22.05":
        cols.append("exit_code")  # 22.05's job records say 0 for a batch script's exit 3 (sacct: 3:0)
    key = ["job_id", "segment"]
    rest = records_to_table(records).jobs.sort_values(key)[cols].reset_index(drop=True)
    cli = parse_sacct(_recorded_fields(release)).jobs.sort_values(key)[cols].reset_index(drop=True)
    assert "REQUEUED" in set(rest["state"])
    pd.testing.assert_frame_equal(rest, cli, check_dtype=False)


def test_crafted_gpu_het_and_malformed(crafted):
    jobs, steps = crafted.jobs.set_index("job_id_display"), crafted.steps
    assert crafted.malformed == 1 and "broken" in crafted.malformed_examples[0]
    assert jobs.at["500", "alloc_gpus"] == 16 and jobs.at["500", "alloc_gpu_type"] == "h100"
    assert jobs.at["504", "alloc_gpus"] == 3 and jobs.at["504", "state"] == "CANCELLED"
    assert jobs.at["501+0", "het_job_id"] == 501 and jobs.at["501+1", "het_offset"] == 1
    assert jobs.at["501+1", "job_id"] == 502
    assert jobs.at["503_[4-9]", "array_job_id"] == 503
    assert pd.isna(jobs.at["503_[4-9]", "array_task_id"]) and pd.isna(jobs.at["503_[4-9]", "start"])
    assert jobs.at["500", "total_cpu_s"] == 10 * 86400
    step = steps[steps["key"] == "500#0.0"].iloc[0]
    assert step["gpu_util_pct"] == 87 and step["max_rss_bytes"] == 858993459200
    assert step["user"] == "dave"


def test_usage_prorates_and_windows_add_up(crafted):
    jobs = crafted.jobs
    whole = usage.usage(jobs, utc(2026, 11, 30, 0), utc(2026, 11, 30, 3), by="user")
    first = usage.usage(jobs, utc(2026, 11, 30, 0), utc(2026, 11, 30, 1), by="user")
    rest = usage.usage(jobs, utc(2026, 11, 30, 1), utc(2026, 11, 30, 3), by="user")
    dave = lambda t: t.set_index("user").at["dave", "gpu_hours"]  # noqa: E731
    # job 500: 16 GPUs from 00:10 to 02:10 → 50 min in the first hour, 70 after
    # dave: job 500 has 16 GPUs from 00:10 to 02:10 (50 min in the first hour, 70 after);
    # job 505 has 2 GPUs from 00:00 to 00:30
    assert dave(first) == pytest.approx(16 * 50 / 60 + 1)
    assert dave(rest) == pytest.approx(16 * 70 / 60)
    total = first.set_index("user")[["cpu_seconds", "gpu_seconds"]].add(
        rest.set_index("user")[["cpu_seconds", "gpu_seconds"]], fill_value=0)
    pd.testing.assert_frame_equal(total.sort_index(),
                                  whole.set_index("user")[["cpu_seconds", "gpu_seconds"]]
                                  .sort_index(), check_dtype=False)
    by_type = usage.usage(jobs, utc(2026, 11, 30, 0), utc(2026, 11, 30, 3), by="gpu_type")
    assert set(by_type["gpu_type"]) >= {"h100", "a100", "a100+h100"}


def test_sreport_reconciliation_arithmetic():
    ours = pd.DataFrame({"account": ["physics", "bio"], "user": ["alice", "carol"],
                         "cpu_seconds": [125.0, 60.0]})
    sreport = pd.DataFrame({"cluster": ["c"] * 6,
                            "account": ["root", "science", "physics", "physics", "bio", "bio"],
                            "user": [None, None, None, "alice", None, "carol"],
                            "used": [3, 3, 2, 2, 1, 1]})
    parents = {"root": None, "science": "root", "physics": "science", "bio": "science"}
    out = usage.reconcile_sreport(ours, sreport, parents, unit_seconds=60)
    assert (out["diff"] == 0).all(), out


def test_efficiency_lost_gpu_hours_and_waits(crafted):
    runs = efficiency.runs(crafted.jobs, crafted.steps).set_index("job_id")
    assert runs.at[505, "lost_gpu_hours"] == pytest.approx(2 * 0.5)  # NODE_FAIL, 2 GPUs, 30 min
    assert runs.at[501, "lost_gpu_hours"] == pytest.approx(0.5)  # FAILED het component
    assert runs.at[500, "lost_gpu_hours"] == 0
    assert runs.at[500, "wait_eligible_s"] == 10 and runs.at[500, "wait_start_s"] == 590
    assert runs.at[500, "cpu_efficiency"] == pytest.approx(864000 / 1382400)
    assert runs.at[500, "gpu_util_pct"] == 87


def test_cost_uses_instance_prices_and_overrides(crafted, tmp_path):
    prices = load_prices()
    assert prices["h100"].price_per_hour_usd > 0 and prices["debug"].vcpus == 4
    user_file = tmp_path / "prices.yaml"
    user_file.write_text("partitions:\n  gpu: {instance_type: p5.48xlarge, price_per_hour_usd: 10}\n")
    prices = load_prices(user_file)
    assert prices["gpu"].price_per_hour_usd == 10
    jobs = crafted.jobs[crafted.jobs["job_id"] == 500]
    got = cost(jobs, by="user", prices={"gpu": PartitionPrice("gpu", None, 10.0, 192, 8)})
    assert got.set_index("user").at["dave", "cost_usd"] == pytest.approx(2 * 2 * 10)  # 2 nodes, 2 h


def test_instances_without_a_list_price_cost_nan_and_say_so(crafted, tmp_path):
    """p5e/trn2 have no AWS on-demand price: their partitions cost NaN (never a guess) and are named."""
    prices = load_prices()
    assert not prices["h200"].priced and not prices["trn"].priced and prices["h100"].priced
    jobs = crafted.jobs[crafted.jobs["job_id"] == 500].assign(partition="h200")
    assert cost(jobs, by="user", prices=prices)["cost_usd"].isna().all()
    from slinkyml.accounting.cost import unpriced

    assert unpriced(jobs, prices) == ["partition h200: no price (p5e.48xlarge has no on-demand list price; "
                                      "set price_per_hour_usd via SLINKYML_PRICES)"]
    assert unpriced(jobs.assign(partition="nope"), prices) == [
        "partition nope: no price (not in prices.yaml; add it via SLINKYML_PRICES)"]
    user_file = tmp_path / "prices.yaml"
    user_file.write_text("partitions:\n  h200: {price_per_hour_usd: 60}\n  x: {vcpus: 4}\n")
    with pytest.raises(SpecError, match="partitions.x: needs instance_type or price_per_hour_usd"):
        load_prices(user_file)
    user_file.write_text("partitions:\n  h200: {price_per_hour_usd: cheap}\n")
    with pytest.raises(SpecError, match="partitions.h200.price_per_hour_usd: must be a number"):
        load_prices(user_file)
    user_file.write_text("partitions:\n  h200: {price_per_hour_usd: 60}\n")
    priced = load_prices(user_file)
    assert priced["h200"].price_per_hour_usd == 60 and priced["h200"].gpus == 8
    assert unpriced(jobs, priced) == []


def _tree(text: str):
    df = fairshare.parse_sshare(text)
    return df, fairshare.build_tree(df)


def test_sshare_recording_fair_tree_ranks(tmp_path):
    df, root = _tree((DATA / "sshare_fairtree_2205.txt").read_text())
    assert list(df[df["depth"] == 1]["key"]) == ["root/root", "ml", "science"]
    assert df.set_index("key").at["physics", "parent"] == "science"
    ours = fairshare.fair_tree(root).merge(df, on="key", suffixes=("", "_sshare"))
    users = ours[ours["is_user"]]
    # ranks and FairShare are exact even from sshare's whole-number RawUsage
    assert users["fairshare"].tolist() == pytest.approx(users["fairshare_sshare"].tolist(), abs=1e-6)


SYNTHETIC = """Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS
root|||0.000000|1000||1.000000||
 root|root|1|0.009901|0|0.000000|0.000000|1.000000|inf
 ml||40|0.396040|600|0.600000|0.600000||0.660066
  ml|dave|1|0.500000|600|0.600000|1.000000|0.333333|0.500000
  ml|root|parent|0.500000|0|0.000000|0.000000|0.500000|inf
 science||60|0.594059|400|0.400000|0.400000||1.485148
  bio||60|0.600000|100|0.100000|0.250000||2.400000
   bio|carol|1|1.000000|100|0.100000|1.000000|0.833333|1.000000
  physics||40|0.400000|300|0.300000|0.750000||0.533333
   physics|alice|1|0.500000|300|0.300000|1.000000|0.666667|0.500000
   physics|bob|1|0.500000|0|0.000000|0.000000|0.833333|inf
"""


def test_fair_tree_exact_on_exact_usage():
    """With exact (integer) raw usage the recomputation equals Slurm's formulas to 1e-9."""
    df, root = _tree(SYNTHETIC)
    assert df.set_index("key").at["ml/root", "raw_shares"] == fairshare.PARENT
    ft = fairshare.fair_tree(root).set_index("key")
    assert ft.at["science", "level_fs"] == pytest.approx((60 / 101) / 0.4, abs=1e-9)
    assert ft.at["physics", "level_fs"] == pytest.approx(0.4 / 0.75, abs=1e-9)
    assert ft.at["bio", "level_fs"] == pytest.approx(0.6 / 0.25, abs=1e-9)
    assert math.isinf(ft.at["root/root", "level_fs"])
    # root/root (inf) first, then science (1.49) → bio (2.4: carol) before physics (bob inf,
    # alice 0.5), then ml (0.66)
    order = ft["rank"].dropna().sort_values(ascending=False).index.tolist()
    assert order[:4] == ["root/root", "bio/carol", "physics/bob", "physics/alice"]
    assert ft.at["bio/carol", "fairshare"] == pytest.approx(5 / 6)
    text = fairshare.explain(root, "alice", "carol")
    assert "account physics has LevelFS 0.533333 vs account bio 2.4" in text
    assert "first common ancestor science" in text and "below" in text


def test_fair_tree_ties_share_a_rank():
    df, root = _tree("""root|||0.000000|0||1.000000||
 a||1|0.5|0|0|0||inf
  a|u1|1|0.5|0|0|0|1.0|inf
  a|u2|1|0.5|0|0|0|1.0|inf
 b||1|0.5|0|0|0||inf
  b|u3|1|1.0|0|0|0|1.0|inf
""")
    ft = fairshare.fair_tree(root)
    assert ft["fairshare"].dropna().tolist() == [1.0, 1.0, 1.0]


def test_classic_formula():
    _df, root = _tree(SYNTHETIC)
    cl = fairshare.classic(root).set_index("key")
    s_alice = (60 / 101) * (40 / 100) * 0.5
    assert cl.at["physics/alice", "norm_shares"] == pytest.approx(s_alice)
    # EffectvUsage: science (under root) 0.4; physics 0.3 + (0.4 - 0.3) * 40/100 = 0.34;
    # alice 0.3 + (0.34 - 0.3) * 1/2 = 0.32 (Slurm's classic, see the recorded test below)
    assert cl.at["physics/alice", "effectv_usage"] == pytest.approx(0.32)
    assert cl.at["physics/alice", "fairshare"] == pytest.approx(2 ** (-0.32 / s_alice))
    assert cl.at["ml/root", "effectv_usage"] == pytest.approx(0.6)  # "parent": uses ml's


def test_what_if_and_recovery():
    _df, root = _tree(SYNTHETIC)
    diff = fairshare.what_if(root, add_usage={"bio/carol": 10_000}).set_index("key")
    assert diff.at["bio/carol", "rank_after"] < diff.at["bio/carol", "rank_before"]
    diff = fairshare.what_if(root, shares={"physics": 400}).set_index("key")
    assert diff.at["physics/alice", "level_fs_after"] == diff.at["physics/alice", "level_fs_before"]
    assert diff.at["physics/alice", "rank_after"] >= diff.at["physics/alice", "rank_before"]
    week = 7 * 86400
    # Slurm's decay: (1 - 0.693/HL) per second, so one half-life leaves a hair over half
    assert fairshare.decayed(800, week, week) == pytest.approx(800 * (1 - 0.693 / week) ** week)
    assert 400 < fairshare.decayed(800, week, week) < 400.1
    assert fairshare.recovery_seconds(800, 100, week) == pytest.approx(3 * week, rel=1e-3)
    assert fairshare.decayed(800, fairshare.recovery_seconds(800, 100, week), week) == \
        pytest.approx(100)
    # dave is the only share holder in ml (root there uses "parent"): fair already
    assert fairshare.recovery_to_fair(root, "ml/dave", week) == 0
    # alice: S=0.5, bob unused → never by decay alone
    assert math.isinf(fairshare.recovery_to_fair(root, "physics/alice", week))
    # physics vs bio: S=0.4, bio=100 → physics must decay from 300 to 66.7
    assert fairshare.recovery_to_fair(root, "physics", week) == pytest.approx(
        week * math.log2(300 / (0.4 * 100 / 0.6)), rel=1e-3)
    with pytest.raises(SlinkyError):
        fairshare.what_if(root, shares={"nope": 1})


def test_parse_when_errors_name_the_flag():
    now = utc(2026, 11, 30, 12)
    assert parse_when("7d", now=now) == utc(2026, 11, 23, 12)
    assert parse_when("2026-11-01", now=now) == utc(2026, 11, 1)
    with pytest.raises(SlinkyError, match="^--until:"):
        parse_when("tomorrowish", "--until")


def test_assoc_mgr_usage_parser():
    text = """ClusterName=slinkyml Account=root UserName= Partition= Priority=0 ID=1
    SharesRaw/Norm/Level/Factor=1/0.00/1/0.00
    UsageRaw/Norm/Efctv=36.25/1.00/1.00
ClusterName=slinkyml Account=ml UserName=dave(1004) Partition= Priority=0 ID=10
    UsageRaw/Norm/Efctv=0.50/0.01/0.02
"""
    assert fairshare.parse_assoc_mgr_usage(text) == {"root": 36.25, "ml/dave": 0.5}


def test_cli_module_imports_only_stdlib(imported_by):
    assert imported_by("import slinkyml.cli.accounting", ("pandas", "rich", "matplotlib")) == []


# --- the pyarrow fast path must give exactly the pandas path's frames -----------------------

def _odd_rows() -> str:
    """Recorded rows plus the shapes the fast path hands to Python: array/het ids, requeues,
    sizes with units, odd durations and gpuutil values, blank and malformed lines."""
    text = (DATA / "sacct_crafted_gpu_het.txt").read_text()
    rows = [line.split("\x1f") for line in text.splitlines() if line.count("\x1f") == 28]
    extra = []
    for i, fields in enumerate(rows):
        f = list(fields)
        f[0] = f"{700 + i}_{i}.batch" if i % 3 == 0 else f"{700 + i}"  # steps without allocation
        f[1] = f"{700 + i}.batch" if i % 3 == 0 else f"{700 + i}"
        f[22] = ["1:02:03.5", "45", "", "UNLIMITED", "2-00:00:01", "00:07.250"][i % 6]
        f[24] = "" if i % 2 else f"{i}K"
        f[25] = f"gres/gpuutil= {i},mem=1" if i % 4 == 0 else f"gres/gpuutil={i},mem=1"
        extra.append("\x1f".join(f))
    return text + "   \n\n" + "\n".join(extra) + "\nshort\x1fline\n"


def _common_case() -> str:
    """One record per job id (no requeue): the vectorised key/inheritance branch."""
    lines = (DATA / "sacct_2205.txt").read_text().splitlines()
    requeued = {line.split("\x1f")[1].partition(".")[0] for line in lines
                if "\x1fREQUEUED\x1f" in line}
    return "\n".join(line for line in lines if line.split("\x1f")[1].partition(".")[0] not in requeued) + "\n"


@pytest.mark.parametrize("name", ["sacct_2205", "sacct_crafted_gpu_het", "sacct_efficiency_2205", "odd_rows",
                                  "common_case"])
def test_the_one_transform_gives_the_reference_frames(name):
    """tests/data/accounting/golden/ holds the frames of the retired pandas reference parser (written
    when it and the Arrow path last agreed value for value): the one transform still gives them, and
    records filled as Arrow columns (the slurmrestd and pyslurm backends) give the same as the text."""
    text = {"odd_rows": _odd_rows, "common_case": _common_case}.get(name, lambda: (DATA / f"{name}.txt").read_text())()
    table = parse_sacct(text)
    for part in ("jobs", "steps"):
        golden = pd.read_parquet(DATA / "golden" / f"{name}.{part}.parquet")
        pd.testing.assert_frame_equal(getattr(table, part), golden, check_exact=True)
    rows = [dict(zip(FIELDS, line.split(SEP), strict=True)) for line in text.splitlines()
            if line.count(SEP) == len(FIELDS) - 1]
    filled = rows_to_table(rows)
    pd.testing.assert_frame_equal(filled.jobs, table.jobs, check_exact=True)
    pd.testing.assert_frame_equal(filled.steps, table.steps, check_exact=True)


def test_records_keep_names_whole_without_text_in_between():
    row = dict.fromkeys(FIELDS, "") | {"JobID": "5", "JobIDRaw": "5", "DBIndex": "1", "JobName": "a|b\nc\x1fd",
                                       "State": "COMPLETED"}
    assert rows_to_table([row]).jobs["name"].tolist() == ["a|b\nc\x1fd"]


def test_empty_and_unreadable_text():
    empty = parse_sacct("")
    assert empty.malformed == 0 and empty.jobs.empty and list(empty.jobs.columns) == list(parse_sacct(
        (DATA / "sacct_2205.txt").read_text()).jobs.columns)
    got = parse_sacct("only\x1ftwo\n")
    assert got.malformed == 1 and got.jobs.empty


def test_classic_recomputation_equals_recorded_sshare():
    """Real 22.05 sshare under PriorityFlags=NO_FAIR_TREE (NormShares the product down the tree,
    EffectvUsage pulled toward the parent's): ours agrees within sshare's printing precision."""
    df = fairshare.parse_sshare((DATA / "sshare_classic_2205.txt").read_text())
    # This snapshot's whole-number RawUsage lags its NormUsage (jobs were running), so feed the
    # printed NormUsage back as usage over a root of 10,000: assoc_mgr-style ±0.005 is then
    # exactly NormUsage's own ±5e-7 printing precision.
    scale = 10_000
    usage = {row.key: (scale if row.parent is None or not isinstance(row.parent, str)
                       else row.norm_usage * scale) for row in df.itertuples()}
    assert fairshare.classic_mismatches(df, usage) == []
    cl = fairshare.classic(fairshare.build_tree(df)).set_index("key")
    assert cl.at["physics/alice", "norm_shares"] == pytest.approx((60 / 101) * 0.4 * 0.5)
    # bio: N + (E_science - N) * 60/100 — not plain NormUsage (which would be 0.128134)
    assert cl.at["bio", "effectv_usage"] == pytest.approx(0.142027, abs=2e-4)


# --- the deep, uneven tree recorded from the live cluster (tests/test_fairshare_live.py) -------

def _recorded(name: str):
    assocs = fairshare.parse_sshare((DATA / f"sshare_deep_{name}_2205.txt").read_text())
    raw = fairshare.parse_assoc_mgr_usage((DATA / f"assoc_mgr_deep_{name}_2205.txt").read_text())
    return assocs, raw


def test_fair_tree_equals_recorded_sshare_on_deep_tree_with_parent_shares():
    assocs, raw = _recorded("fairtree")
    assert fairshare.fair_tree_mismatches(assocs, raw) == []
    ours = fairshare.fair_tree(fairshare.build_tree(assocs, raw)).set_index("key")
    # fsp and fsq have fairshare=parent: their users are fsa's children (1+7+100+3, fsb 7)
    assert ours.at["fsp/carol", "norm_shares"] == pytest.approx(100 / 118)
    assert ours.at["fsq/dave", "norm_shares"] == pytest.approx(3 / 118)
    assert ours.at["fsa/alice", "norm_shares"] == pytest.approx(1 / 118)
    assert ours.at["fsp", "norm_shares"] == ours.at["fsa", "norm_shares"]  # a parent account
    # every user's rank, as sshare's FairShare × N
    users = ours[ours["is_user"]]
    expected = (assocs.set_index("key").loc[users.index, "fairshare"] * len(users)).round()
    assert users["rank"].astype(float).tolist() == expected.tolist()
    # the case: the 100-share user under a parent account outranks the 1-share sibling
    assert ours.at["fsp/carol", "rank"] > ours.at["fsa/alice", "rank"]


def test_classic_equals_recorded_sshare_on_deep_tree_with_parent_shares():
    assocs, raw = _recorded("classic")
    assert fairshare.classic_mismatches(assocs, raw) == []
    cl = fairshare.classic(fairshare.build_tree(assocs, raw)).set_index("key")
    assert cl.at["fsp/carol", "norm_shares"] == pytest.approx(3 / 105 * 100 / 118)
    assert cl.at["fsb/carol", "effectv_usage"] == cl.at["fsb", "effectv_usage"]  # a parent user
    carol = cl.loc["fsp/carol"]
    assert carol["fairshare"] == pytest.approx(2 ** (-carol["effectv_usage"] / carol["norm_shares"]))


def test_compare_and_recompute_give_one_frame_per_association():
    assocs, raw = _recorded("fairtree")
    frame = fairshare.compare(fairshare.recompute(fairshare.build_tree(assocs, raw)), assocs)
    assert list(frame["key"]) == list(assocs["key"])
    assert set(fairshare.TREE_COLUMNS) <= set(frame.columns)
    assert {"level_fs_sshare", "level_fs_diff", "fairshare_diff"} <= set(frame.columns)
    assert frame.set_index("key").at["fsq/dave", "fs_parent"] == "fsa"
    with pytest.raises(ValueError):
        fairshare.recompute(fairshare.build_tree(assocs), "fair_share")


# --- efficiency by seff's definition, on sacct recorded from tests/test_efficiency_live.py --------

def test_recorded_efficiency_is_seffs():
    table = parse_sacct((DATA / "sacct_efficiency_2205.txt").read_text())
    runs = efficiency.runs(table.jobs, table.steps).set_index("name")
    # -n3 --mem-per-cpu=300M over 2 nodes, 3 tasks of ~108 MiB: the step total over ReqMem 900M
    nodes = runs.loc["eff-nodes"]
    assert nodes["mem_used_bytes"] == 339345408 and nodes["req_mem_bytes"] == 900 * 2**20
    assert nodes["mem_efficiency"] == pytest.approx(339345408 / (900 * 2**20))  # 36 %, not 24 %
    assert nodes["nnodes"] == 2
    assert runs.loc["eff-single", "mem_efficiency"] == pytest.approx(113094656 / (400 * 2**20))
    busy = runs.loc["eff-busy"]
    assert busy["time_efficiency"] == pytest.approx(busy["elapsed_s"] / 120)
    assert busy["cpu_efficiency"] == pytest.approx(busy["total_cpu_s"] / busy["cpu_time_s"])
    array = runs.loc[["eff-array"]].sort_values("array_task_id")
    assert array["job"].tolist() == ["39_0", "39_1"]
    assert array["array_job_id"].tolist() == [39, 39]


def test_req_mem_per_cpu_and_per_node_before_21_08():
    """Pre-21.08 ReqMem says per CPU (``c``) or per node (``n``): seff multiplies by the allocation."""


    base = dict.fromkeys(FIELDS, "")
    rows = []
    for job, req in ((1, "300Mc"), (2, "450Mn"), (3, "900M")):
        row = dict(base, JobID=str(job), JobIDRaw=str(job), DBIndex=str(job), AllocCPUS="3",
                   NNodes="2", ReqMem=req, Submit="2026-01-01T00:00:00", State="COMPLETED")
        rows.append(SEP.join(row[f] for f in FIELDS))
    jobs = parse_sacct("\n".join(rows) + "\n").jobs
    assert jobs["req_mem_bytes"].tolist() == [900 * 2**20] * 3


def test_sreport_window_and_minute_rounding():
    """sreport rounds each window edge to the nearest hour (≥ 1 h) and prints minutes with
    ``%.0lf`` (exact halves to even): what ``usage`` warns about and reconcile_sreport mirrors."""
    t = lambda h, m, s=0: datetime(2026, 1, 1, h, m, s, tzinfo=UTC)  # noqa: E731
    assert usage.sreport_window(t(10, 29, 29), t(12, 30)) == (pd.Timestamp(t(10, 0)),
                                                               pd.Timestamp(t(13, 0)))
    assert usage.sreport_window(t(10, 29, 30), t(10, 40)) == (pd.Timestamp(t(11, 0)),
                                                               pd.Timestamp(t(12, 0)))
    assert usage.sreport_window_note(t(10, 0), t(12, 0)) is None
    assert "sreport would report 2026-01-01 10:00–2026-01-01 12:00" in \
        usage.sreport_window_note(t(10, 10), t(12, 0))
    ours = pd.DataFrame({"account": ["a", "a", "b"], "user": ["u", "v", "w"],
                         "cpu_seconds": [30.0, 90.0, 2266.0]})
    sreport = pd.DataFrame({"account": ["a", "a", "b"], "user": ["u", "v", "w"],
                            "used": [0, 2, 38]})
    assert usage.reconcile_sreport(ours, sreport, {"a": None, "b": None}, 60)["diff"].eq(0).all()


def test_a_newline_in_a_job_name_keeps_its_row():
    """sacct prints a name's newline as is: the row is joined back (records.split_records), nothing skipped."""
    text = (DATA / "sacct_2205.txt").read_text()
    first = text.splitlines()[0].split(SEP)
    nasty = "train|v2\n\tq`d'q\nnext"
    changed = text.replace(SEP.join(first), SEP.join(first[:3] + [nasty] + first[4:]), 1)
    table, plain = parse_sacct(changed), parse_sacct(text)
    assert table.malformed == 0 and len(table.jobs) == len(plain.jobs) and len(table.steps) == len(plain.steps)
    assert nasty in table.jobs["name"].tolist()
    assert parse_sacct(changed + "short\x1fline\n").malformed == 1


def test_typed_records_fill_the_same_frames_as_sacct_text():
    """What the slurmrestd/pyslurm backends give: epoch seconds (None for Unknown) and numbers, no text."""
    text = (DATA / "sacct_efficiency_2205.txt").read_text()
    rows = [dict(zip(FIELDS, line.split(SEP), strict=True)) for line in text.splitlines() if line.count(SEP) == 28]

    def epoch(value: str) -> int | None:
        return None if value in ("", "Unknown", "None") else int(datetime.fromisoformat(value).replace(
            tzinfo=UTC).timestamp())

    typed = [{**row, **{f: epoch(row[f]) for f in ("Submit", "Eligible", "Start", "End")},
              **{f: (float(row[f]) if row[f] else None) for f in ("ElapsedRaw", "AllocCPUS", "NNodes", "CPUTimeRAW")},
              "DBIndex": int(row["DBIndex"])} for row in rows]
    filled, parsed = rows_to_table(typed), parse_sacct(text)
    pd.testing.assert_frame_equal(filled.jobs, parsed.jobs, check_exact=True)
    pd.testing.assert_frame_equal(filled.steps, parsed.steps, check_exact=True)


# --- the fair-share report without pandas (`slinkyml fairshare`) -----------------------------

@pytest.mark.parametrize(("name", "algorithm", "flags"), [
    ("sshare_fairtree_2205.txt", "fair_tree", ""), ("sshare_classic_2205.txt", "classic", "NO_FAIR_TREE"),
    ("sshare_deep_fairtree_2205.txt", "fair_tree", ""), ("sshare_deep_classic_2205.txt", "classic", "NO_FAIR_TREE"),
    ("sshare_deep_fairtree_2205.txt", "classic", "")])
def test_plain_fairshare_rows_equal_the_frames_exactly(name, algorithm, flags):
    """The CLI's rows (sharetree.report) hold the values of fairshare.compare over recompute's frame, bit
    for bit (NaN where the frame has NaN or NA), in the same order and columns; the deep trees with
    assoc_mgr's finer usage."""
    text = (DATA / name).read_text()
    mgr = DATA / name.replace("sshare_", "assoc_mgr_")
    raw = fairshare.parse_assoc_mgr_usage(mgr.read_text()) if mgr.exists() else {}
    assocs = fairshare.parse_sshare(text)
    frame = fairshare.compare(fairshare.recompute(fairshare.build_tree(assocs, raw), algorithm), assocs)
    done = sharetree.report(sharetree.share_rows(records.parse_sshare(text)), raw,
                            {"PriorityFlags": flags, "PriorityCalcPeriod": "00:05:00"},
                            None if flags or algorithm == "fair_tree" else algorithm)
    assert done.algorithm == algorithm and done.slurm_algorithm == ("classic" if flags else "fair_tree")
    assert list(done.rows[0]) == list(frame.columns) and len(done.rows) == len(frame) > 5
    for row, expected in zip(done.rows, frame.to_dict("records"), strict=True):
        for column, want in expected.items():
            got = row[column]
            if want is None or want is pd.NA or (isinstance(want, float) and math.isnan(want)):
                assert got is None or (isinstance(got, float) and math.isnan(got)), (row["key"], column, got)
            else:
                assert got == want, (row["key"], column, got, want)
                assert not isinstance(want, float) or repr(float(got)) == repr(want), (row["key"], column)


def test_plain_rows_print_as_the_frames_do():
    """rows.to_json/to_csv and the text table's cells equal render's for a DataFrame of the same values
    (floats with inf, -inf, NaN and long fractions; a whole-number column with gaps; text with commas and
    quotes; mixed object values as fair-share's RawShares)."""
    columns = ["name", "shares", "usage", "ratio", "rank", "flag"]
    data = [["a,b", 10, 1234.5, 1 / 3, 3, True], ['say "hi"', "parent", math.inf, -math.inf, None, False],
            ["root", None, 0.0, math.nan, 1, True], ["x", 7, 1e-12, 12345678.9, None, False]]
    df = pd.DataFrame(data, columns=columns)
    df["shares"] = df["shares"].astype(object).where(df["shares"].notna(), None)
    df["rank"] = df["rank"].astype("Int64")
    table = rows.Rows(columns, data, frozenset({"usage", "ratio", "rank", "flag"}))
    assert rows.to_json(table) == render.to_json(df)
    assert rows.to_csv(table) == render.to_csv(df)
    ours, theirs = rows.rich_table(table, "t"), render.rich_table(df, "t")
    assert [c.justify for c in ours.columns] == [c.justify for c in theirs.columns]
    assert [list(c.cells) for c in ours.columns] == [list(c.cells) for c in theirs.columns]
    # a text table's repeated headers (fair-share's "sshare", "diff"): pandas sees no numeric column there
    df.columns = table.columns = ["name", "shares", "diff", "diff", "rank", "flag"]
    ours, theirs = rows.rich_table(table, "t"), render.rich_table(df, "t")
    assert [c.justify for c in ours.columns] == [c.justify for c in theirs.columns]


def test_explain_picks_the_user_ranked_next_above():
    """`fairshare --explain USER` without --vs compares with the next user above: sharetree.next_above names
    a user of the smallest rank above USER's (the first in sshare's order where several tie; the frame path
    took whichever pandas' unstable sort put first), for every user of the recorded trees, and the
    sentence is the frame path's for the same pair."""
    sentences = 0
    for name in ("fairtree_2205", "deep_fairtree_2205"):
        assocs = fairshare.parse_sshare((DATA / f"sshare_{name}.txt").read_text())
        root = fairshare.build_tree(assocs)
        ft, rows_ = fairshare.fair_tree(root), sharetree.fair_tree(root)
        for node in sharetree.walk(root):
            if not node.is_user:
                continue
            above = ft[ft["rank"].notna() & (ft["rank"] > ft.set_index("key").at[node.key, "rank"])]
            nearest = above[above["rank"] == above["rank"].min()]["key"].tolist()  # sshare's order
            got = sharetree.next_above(rows_, node.key)
            assert got == (nearest[0].split("/", 1)[1] if nearest else None), node.key
            if got and sharetree.find_user(root, node.user) is node and got != node.user:  # names one association
                assert sharetree.explain(root, node.user, got, rows_) == fairshare.explain(root, node.user, got, ft)
                sentences += 1
    assert sentences >= 3
