"""The plain-Python usage path (``sacct_rows`` + ``usage_rows``, what ``slinkyml usage --no-cache`` runs on
a small answer) against the pandas one (``sacct_arrow`` + ``usage`` + ``cost``): the same bytes printed as
JSON, CSV and a text table, on recorded and crafted sacct text and on synthetic records whose float sums
need pandas' compensated summation to agree to the last bit."""

from __future__ import annotations

import argparse
import math
import random
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from test_accounting_parse import DATA, _common_case, _odd_rows

from slinkyml.accounting import sacct_rows, usage_rows
from slinkyml.accounting.sacct import FIELDS, SEP
from slinkyml.accounting.sacct_arrow import parse_sacct
from slinkyml.cli import accounting as cli

pytestmark = pytest.mark.offline

NOW = datetime(2026, 11, 30, 3, 0, 7, 250000, tzinfo=UTC)


def _well_formed(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if line.count(SEP) == len(FIELDS) - 1) + "\n"


def _synthetic(n: int, seed: int, one: bool = False) -> str:
    """Records of a few users, accounts and partitions with odd lengths and CPU counts (sums that
    differ in the last bits when added naively), some running, some without a start; ``one``: one user,
    account and partition (rows already in group order: pandas sums them by reduceat, not Kahan)."""
    rng = random.Random(seed)
    lines = []
    base = datetime(2026, 11, 29, 12, tzinfo=UTC)
    for i in range(n):
        submit = base + timedelta(seconds=rng.randrange(0, 40000))
        start = submit + timedelta(seconds=rng.randrange(0, 3000))
        end = start + timedelta(seconds=rng.randrange(1, 90000))
        running, pending = rng.random() < 0.1, rng.random() < 0.05
        cpus = rng.choice([1, 3, 7, 13, 96])
        gpus = rng.choice([0, 0, 1, 3, 8])
        tres = f"billing={cpus * 3 + gpus},cpu={cpus},{f'gres/gpu:h100={gpus},gres/gpu={gpus},' if gpus else ''}" \
               f"mem={cpus * 1000}M,node=1"
        fields = dict.fromkeys(FIELDS, "")
        fields.update({
            "JobID": str(1000 + i), "JobIDRaw": str(1000 + i), "DBIndex": str(5000 + i), "JobName": f"j{i}",
            "User": "root" if one else rng.choice(["alice", "bob", "carol", "zoë", ""]),
            "Account": "root" if one else rng.choice(["ml", "bio", "physics"]),
            "Partition": "debug" if one else rng.choice(["debug", "gpu", "cpu", "nowhere", ""]), "QOS": "normal",
            "State": "PENDING" if pending else "RUNNING" if running else rng.choice(["COMPLETED", "FAILED", "TIMEOUT"]),
            "ExitCode": "0:0", "Submit": f"{submit:%Y-%m-%dT%H:%M:%S}", "Eligible": f"{submit:%Y-%m-%dT%H:%M:%S}",
            "Start": "Unknown" if pending else f"{start:%Y-%m-%dT%H:%M:%S}",
            "End": "Unknown" if pending or running else f"{end:%Y-%m-%dT%H:%M:%S}",
            "ElapsedRaw": str((end - start).seconds), "TimelimitRaw": "1440", "AllocCPUS": str(cpus), "NNodes": "1",
            "AllocTRES": "" if pending else tres, "ReqTRES": tres, "ReqMem": f"{cpus * 1000}M", "TotalCPU": "00:01.5",
            "CPUTimeRAW": str(cpus * (end - start).seconds), "Cluster": "slinkyml",
        })
        lines.append(SEP.join(fields[name] for name in FIELDS))
    return "\n".join(lines) + "\n"


TEXTS = {
    "sacct_2205": lambda: (DATA / "sacct_2205.txt").read_text(),
    "sacct_efficiency_2205": lambda: (DATA / "sacct_efficiency_2205.txt").read_text(),
    "common_case": _common_case,
    "crafted": lambda: _well_formed((DATA / "sacct_crafted_gpu_het.txt").read_text()),
    "odd_rows": lambda: _well_formed(_odd_rows()),
    "synthetic": lambda: _synthetic(400, 7),
    "one_group": lambda: _synthetic(300, 8, one=True),
    "empty": lambda: "",
}
WINDOWS = {
    "day": (datetime(2026, 11, 29, 12, tzinfo=UTC), NOW),
    "odd": (datetime(2026, 11, 30, 1, 47, 40, tzinfo=UTC), datetime(2026, 11, 30, 1, 48, 1, 500, tzinfo=UTC)),
    "hours": (datetime(2026, 11, 30, 0, tzinfo=UTC), datetime(2026, 11, 30, 2, tzinfo=UTC)),
    "before": (datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 1, 2, tzinfo=UTC)),
}


def _printed(capsys, run, fmt: str) -> tuple[str, str]:
    args = argparse.Namespace(json=fmt == "json", csv=fmt == "csv", png=None)
    assert run(args) == 0
    out = capsys.readouterr()
    return out.out, out.err


@pytest.mark.parametrize("fmt", ["json", "csv", "text"])
@pytest.mark.parametrize("window", list(WINDOWS))
@pytest.mark.parametrize("name", list(TEXTS))
def test_plain_usage_prints_what_the_frames_print(capsys, name, window, fmt):
    text = TEXTS[name]()
    start, end = WINDOWS[window]
    jobs = sacct_rows.parse(text).jobs
    for by in (["account", "user"], ["partition"], ["gpu_type", "user"], ["user", "account", "partition"]):
        plain = _printed(capsys, lambda a, by=by: cli._usage_plain(a, jobs, start, end, by, now=NOW), fmt)
        frames = _printed(capsys, lambda a, by=by: cli._usage_frames(a, start, end, by, text, now=NOW), fmt)
        assert plain == frames, (name, window, by)


def test_group_sums_are_pandas_group_sums():
    """Groups of awkward floats summed as pandas sums them: by reduceat (first value + numpy's pairwise sum)
    when the rows are in group order without NaN, by Kahan otherwise (infinities and NaN too); a missing
    key is a group of its own, sorted last."""
    rng = random.Random(5)
    awkward = [1e16, 1.0, -1e16, 0.1, 1 / 3, 7e-12, math.pi, 0.0]
    for trial in range(300):
        n = rng.randrange(1, 700)
        values = [rng.choice(awkward) * rng.random() for _ in range(n)]
        if trial % 5 == 0:
            values[rng.randrange(n)] = rng.choice([math.nan, math.inf])
        keys = [(rng.choice(["a", "b", "c", None]),) for _ in range(n)]
        if trial % 2:
            keys.sort(key=usage_rows._missing_last)  # in group order: reduceat unless a NaN is there
        frame = pd.DataFrame({"k": pd.array([k[0] for k in keys], dtype="string"), "v": values})
        for min_count in (0, 1):
            want = frame.groupby("k", dropna=False)["v"].sum(min_count=min_count)
            got = usage_rows.group_sums(keys, [values], min_count=min_count)
            assert sorted(got, key=usage_rows._missing_last) == [(None if k is pd.NA else k,) for k in want.index]
            for key, total in want.items():
                mine = got[(None if key is pd.NA else key,)][0]
                assert mine == total or (math.isnan(mine) and math.isnan(total)), (trial, key, mine, total)


def test_kahan_sums_are_pandas_group_sums():
    """The compensated sum, value for value, over groups of awkward floats (infinities and NaN too)."""
    rng = random.Random(3)
    values = [rng.choice([1e16, 1.0, -1e16, 0.1, 1 / 3, 7e-12, math.pi]) * rng.random() for _ in range(3000)]
    values[100:103] = [math.inf, math.nan, 2.5]
    keys = [rng.choice("abc") for _ in values]
    want = pd.DataFrame({"k": keys, "v": values}).groupby("k")["v"].sum()
    skipped = pd.DataFrame({"k": keys, "v": values}).groupby("k")["v"].sum(min_count=1)
    for key in "abc":
        kahan = usage_rows._Kahan()
        for k, v in zip(keys, values, strict=True):
            if k == key:
                kahan.add(v)
        assert kahan.result() == want[key] or (math.isnan(kahan.result()) and math.isnan(want[key]))
        assert kahan.result(min_count=1) == skipped[key] or math.isnan(skipped[key])
    assert math.isnan(usage_rows._Kahan().result(min_count=1)) and usage_rows._Kahan().result() == 0.0


def test_text_the_plain_reader_leaves_to_the_transform():
    """Malformed lines and job ids that are not numbers: declined, so the pandas path reads them
    (and says how many lines it skipped)."""
    with pytest.raises(sacct_rows.Declined):
        sacct_rows.parse((DATA / "sacct_crafted_gpu_het.txt").read_text())
    line = (DATA / "sacct_2205.txt").read_text().split("\n")[0].split(SEP)
    line[1] = "x41"
    with pytest.raises(sacct_rows.Declined):
        sacct_rows.parse(SEP.join(line) + "\n")
    assert parse_sacct(SEP.join(line) + "\n").jobs["job_id"].isna().all()


def _same(plain, framed) -> bool:
    """One cell of the plain records equal to the frame's, type included (NA/NaN/NaT as None or NaN)."""
    if framed is None or framed is pd.NA or framed is pd.NaT or (isinstance(framed, float) and math.isnan(framed)):
        return plain is None or (isinstance(plain, float) and math.isnan(plain))
    if isinstance(framed, pd.Timestamp):
        return type(plain) is datetime and plain == framed.to_pydatetime()
    return type(plain) is type(framed) and plain == framed


@pytest.mark.parametrize("name", ["sacct_2205", "sacct_efficiency_2205", "common_case", "crafted", "odd_rows",
                                  "synthetic"])
def test_plain_records_are_the_frames_cell_for_cell(name):
    """Every column of every record, as the one transform's frames hold it (the golden frames' test
    pins those frames to the retired pandas reference)."""
    text = TEXTS[name]()
    records, table = sacct_rows.parse(text), parse_sacct(text)
    for part in ("jobs", "steps"):
        frame, plain = getattr(table, part), getattr(records, part)
        assert list(frame.columns) == list(sacct_rows.COLUMNS) and len(frame) == len(plain)
        for row, framed in zip(plain, frame.to_dict("records"), strict=True):
            assert list(row) == list(sacct_rows.COLUMNS)
            assert all(_same(row[c], framed[c]) for c in sacct_rows.COLUMNS), \
                [(c, row[c], framed[c]) for c in sacct_rows.COLUMNS if not _same(row[c], framed[c])]


def test_the_plain_path_imports_nothing_heavy(imported_by):
    heavy = ("pandas", "numpy", "pyarrow", "duckdb", "rich")
    assert imported_by("from slinkyml.accounting import sacct_rows, usage_rows, prices", heavy) == []
