"""The incremental accounting store, offline: recorded sacct output (Slurm 22.05) goes in, the frames the
one transform gives come back out (dtypes, values, keys), a record fetched again replaces its rows, a
requeued job's runs are numbered per window, and a damaged store is one line with its rebuild path.
The live equality with sacct after requeues, arrays, a slurmdbd restart and state changes between
syncs is tests/test_accounting_store_live.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from slinkyml.accounting import sacct
from slinkyml.accounting.sacct_arrow import parse_sacct
from slinkyml.accounting.store import AccountingStore, StoreError, store_path
from slinkyml.slurm import records

DATA = Path(__file__).parent / "data" / "accounting"
RECORDED = (DATA / "sacct_2205.txt").read_text()
START, END = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC)


class Recorded:
    """A job source answering every fetch with recorded sacct text (offline: no Slurm here, so
    no sdiag either, and the store keeps its watermark as it does when it cannot tell)."""

    name = "recorded"
    slurm = None

    def __init__(self, text: str):
        self.text = text
        self.calls: list[tuple[datetime, datetime, list[str] | None]] = []

    def jobs(self, start, end, *, users=None, accounts=None, job_ids=None) -> sacct.SacctTable:
        return parse_sacct(self.sacct_text(start, end, job_ids=job_ids))

    def sacct_text(self, start, end, *, users=None, accounts=None, job_ids=None) -> str:
        self.calls.append((start, end, job_ids))
        return self.text


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["job_id", "db_index", "key"], kind="stable").reset_index(drop=True)


def _lines(text: str, keep) -> str:
    return "".join(line + "\n" for line in text.splitlines() if keep(line.split(sacct.SEP)))


def test_round_trip_gives_the_transforms_frames(tmp_path):
    """Every column, dtype and value of parse_sacct's frames comes back from the store."""
    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    stats = store.sync(START)
    direct = parse_sacct(RECORDED)
    got = store.table(START, END)
    assert stats.kind == "cold" and stats.stored_jobs == len(direct.jobs) and stats.stored_steps == len(direct.steps)
    # no sdiag to say slurmdbd is caught up: the next sync looks back to the window's start again
    assert stats.watermark_held and stats.watermark == START
    # in sacct's own row order too (reports sum floats in row order: the same last bits)
    pd.testing.assert_frame_equal(got.jobs, direct.jobs, check_exact=True)
    pd.testing.assert_frame_equal(got.steps, direct.steps, check_exact=True)


def test_a_record_fetched_again_replaces_its_rows(tmp_path):
    """Two syncs of the same records store them once; a record that changed (here: job 42 still
    running at the first sync, with no steps) is replaced by its new rows, steps included."""
    running = RECORDED.replace("\x1fCOMPLETED\x1f", "\x1fRUNNING\x1f", 1)
    running = _lines(running, lambda f: not f[0].startswith("42."))
    backend = Recorded(running)
    store = AccountingStore(tmp_path / "s.duckdb", backend)
    store.sync(START)
    first = store.table(START, END)
    assert (first.jobs["job_id"] == 42).sum() == 1 and not (first.steps["job_id"] == 42).any()
    backend.text = RECORDED
    stats = store.sync(START)
    got = store.table(START, END)
    direct = parse_sacct(RECORDED)
    assert stats.kind == "incremental" and stats.stored_jobs == len(direct.jobs)
    pd.testing.assert_frame_equal(_sorted(got.jobs), _sorted(direct.jobs))
    pd.testing.assert_frame_equal(_sorted(got.steps), _sorted(direct.steps))


def test_a_requeued_jobs_runs_are_numbered_per_window(tmp_path):
    """Job 46 ran twice (REQUEUED, then COMPLETED). A window that holds only its second run gets
    what sacct would return for it: one run, segment 0, keys ``46#0``."""
    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    whole = store.table(START, END)
    runs = whole.jobs[whole.jobs["job_id"] == 46].sort_values("submit")
    assert runs["segment"].tolist() == [0, 1] and runs["key"].tolist() == ["46#0", "46#1"]
    second_end = runs["end"].iloc[1]
    first_end = runs["end"].iloc[0]
    later = (first_end + pd.Timedelta(seconds=1)).to_pydatetime()
    assert later <= second_end.to_pydatetime()
    window = store.table(later, END)
    only = window.jobs[window.jobs["job_id"] == 46]
    assert len(only) == 1 and only["segment"].tolist() == [0] and only["key"].tolist() == ["46#0"]
    steps = window.steps[window.steps["job_id"] == 46]
    assert steps["parent_key"].tolist() == ["46#0"] * len(steps) and len(steps) >= 1
    # the same as parsing just the records sacct would have printed for that window
    selected = set(only["db_index"].astype(int))
    direct = parse_sacct(_lines(RECORDED, lambda f: f[1].split(".")[0] == "46" and int(f[2]) in selected))
    pd.testing.assert_frame_equal(_sorted(only.reset_index(drop=True)), _sorted(direct.jobs))
    pd.testing.assert_frame_equal(_sorted(steps.reset_index(drop=True)), _sorted(direct.steps))
    # runs computed in the store: its two runs stitched over the whole window, the second alone after
    from slinkyml.accounting import efficiency

    for since, frames, segments in ((START, whole, 2), (later, window, 1)):
        in_store = store.runs(since, END)
        pd.testing.assert_frame_equal(in_store, efficiency.runs(frames.jobs, frames.steps), check_exact=True)
        assert in_store.loc[in_store["job_id"] == 46, "segments"].tolist() == [segments]


def test_window_selects_as_slurmdbd_does(tmp_path):
    """A record is in [S, E) when it became eligible before E and ended at/after S (or has not ended)."""
    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    jobs = store.table(START, END).jobs
    direct = parse_sacct(RECORDED).jobs
    for start, end in ((direct["end"].min(), direct["end"].max()), (direct["eligible"].max(), END),
                       (START, direct["eligible"].min())):
        got = store.table(start.to_pydatetime() if hasattr(start, "to_pydatetime") else start,
                          end.to_pydatetime() if hasattr(end, "to_pydatetime") else end).jobs
        want = jobs[jobs["eligible"].notna() & (jobs["eligible"] < end)
                    & (jobs["end"].isna() | (jobs["end"] >= start))]
        assert sorted(got["db_index"].astype(int)) == sorted(want["db_index"].astype(int))
    users = store.table(START, END, users=["alice"]).jobs
    assert len(users) and set(users["user"]) == {"alice"}


def test_unfinished_records_are_fetched_again_by_id(tmp_path):
    """A stored record without an end that the window query no longer returns (it ended while
    slurmdbd was behind, before the watermark) is asked for by job id."""
    running = RECORDED.replace("\x1fCOMPLETED\x1f", "\x1fRUNNING\x1f", 1)
    fields = running.splitlines()[2].split(sacct.SEP)  # job 42's allocation
    fields[sacct.FIELDS.index("End")] = "Unknown"
    lines = running.splitlines()
    lines[2] = sacct.SEP.join(fields)
    backend = Recorded("\n".join(lines) + "\n")
    store = AccountingStore(tmp_path / "s.duckdb", backend)
    store.sync(START)
    backend.text = _lines(RECORDED, lambda f: not f[0].startswith("42"))  # the window answer lacks 42 now
    stats = store.sync(START)
    assert stats.refetched_ids == 1 and backend.calls[-1][2] == ["42"]


def test_damaged_store_is_one_line_with_its_rebuild(tmp_path, cli, monkeypatch):
    path = tmp_path / "s.duckdb"
    path.write_bytes(b"this is not a database" * 100)
    store = AccountingStore(path, Recorded(RECORDED))
    with pytest.raises(StoreError) as caught:
        store.table(START, END)
    message = caught.value.one_line()
    assert str(path) in message and "accounting sync --rebuild" in message and "--no-cache" in message
    assert "\n" not in str(caught.value)
    stats = store.sync(START, rebuild=True)
    assert stats.kind == "rebuild" and stats.stored_jobs == len(parse_sacct(RECORDED).jobs)


def test_store_of_another_format_is_refused(tmp_path):
    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    import duckdb

    con = duckdb.connect(str(store.path))
    con.execute("UPDATE meta SET value = '999' WHERE key = 'format'")
    con.close()
    with pytest.raises(StoreError, match="format '999'.*--rebuild"):
        store.table(START, END)


@pytest.mark.parametrize("old_format", ["2", "3"])
def test_store_before_step_statistics_is_upgraded_by_a_sync(tmp_path, old_format):
    """A format-2 store (records without their steps' statistics) or format-3 (the statistics in a table
    of their own): a read says to sync, the sync puts the statistics from the stored steps beside each
    record, and efficiency over it equals efficiency over every column."""
    from slinkyml.accounting import efficiency
    from slinkyml.accounting.store import _STEP_STATS_SQL

    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    import duckdb

    con = duckdb.connect(str(store.path))
    if old_format == "3":
        con.execute(f"CREATE TABLE step_stats AS {_STEP_STATS_SQL.format(steps='steps')}")
    for column in efficiency.STEP_STATS:
        con.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    con.execute("UPDATE meta SET value = ? WHERE key = 'format'", [old_format])
    con.close()
    with pytest.raises(StoreError, match=f"format {old_format}.*`slinkyml accounting sync` upgrades it"):
        store.table(START, END, step_stats=True)
    store.sync()
    every = store.table(START, END)
    pd.testing.assert_frame_equal(store.runs(START, END), efficiency.runs(every.jobs, every.steps),
                                  check_exact=True)
    whole, stats = store.table(START, END), store.table(START, END, step_stats=True)
    pd.testing.assert_frame_equal(efficiency.runs(stats.jobs, stats.steps),
                                  efficiency.runs(whole.jobs, whole.steps), check_exact=True)
    few_stats = store.table(START, END, columns=efficiency.COLUMNS, step_stats=True)  # what `efficiency` reads
    assert few_stats.steps.empty and len(few_stats.jobs.columns) < len(stats.jobs.columns)
    pd.testing.assert_frame_equal(efficiency.runs(few_stats.jobs, few_stats.steps),
                                  efficiency.runs(whole.jobs, whole.steps), check_exact=True)


def test_concurrent_syncs_are_serialised(tmp_path):
    """Four syncs at once (threads; the lock is fcntl's, per open file): none fails, nothing doubles."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED)).sync(START)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    got = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED)).table(START, END)
    assert len(got.jobs) == len(parse_sacct(RECORDED).jobs)


def test_store_path_is_per_cluster_and_user(tmp_path):
    class Backend:
        name = "cli"

        class slurm:  # noqa: N801 - stands for a Slurm's conf attribute
            conf = str(tmp_path / "slurm.conf")

    (tmp_path / "slurm.conf").write_text("ClusterName=llm\n")
    path = store_path(Backend(), tmp_path / "stores")
    assert path.parent == tmp_path / "stores" and path.name.startswith("llm-") and path.suffix == ".duckdb"
    Backend.slurm.conf = str(tmp_path / "other.conf")
    assert store_path(Backend(), tmp_path / "stores") != path


def test_dbd_agent_queue_is_read_from_sdiag():
    assert records.dbd_agent_queue("Agent queue size:     0\nDBD Agent queue size: 17\n") == 17
    assert records.dbd_agent_queue("nothing here") is None


def test_cli_store_errors_are_one_line(cli, tmp_path):
    (tmp_path / "file").write_text("")
    code, out, err = cli("usage", "--store", str(tmp_path / "file"), "--since", "1h")
    assert code == 2 and err.count("\n") == 1 and "cannot create the accounting store" in err
    code, out, err = cli("usage", "--store", "", "--since", "1h")
    assert code == 2 and "--store" in err and "Traceback" not in err


def test_fresh_store_may_be_read_without_a_sync(tmp_path):
    """``--max-age``: fresh when synced recently and covering the window's start, else a sync is due."""
    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    assert not store.fresh(START, 3600)  # no store yet
    store.sync(START)
    assert store.fresh(START, 3600) and store.fresh(END, 3600)
    assert not store.fresh(START, 0)  # 0: always sync
    assert not store.fresh(datetime(2026, 10, 1, tzinfo=UTC), 3600)  # before what it covers


def test_sshare_ranks_over_another_user_count_are_recognised():
    """Fair Tree's FairShare is rank / users ranked: after 3 of 9 user associations were deleted,
    sshare still prints slurmctld's last calculation (ranks out of 9, as recorded live) until the next."""
    from slinkyml.accounting.fairshare import ranked_over

    stale = [0.111111, 0.888889, 1.0, 0.444444, 0.222222, 0.333333]
    assert ranked_over(stale, 6) == 9
    assert ranked_over([0.166667, 0.833333, 1.0, 0.666667, 0.333333, 0.5], 6) is None
    assert ranked_over([1.0, 0.5, 0.5, float("nan")], 4) is None  # tied ranks 4, 2, 2
    assert ranked_over([], 3) is None


def test_reads_of_a_reports_columns_give_its_numbers(tmp_path):
    """usage reads only usage.COLUMNS of the jobs, efficiency only efficiency.STEP_COLUMNS of the steps or
    none of them but their statistics: the reports from those reads equal the reports from every column."""
    from slinkyml.accounting import efficiency, usage

    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    whole = store.table(START, END)
    few = store.table(START, END, columns=usage.COLUMNS)
    assert few.steps.empty and set(few.jobs.columns) < set(whole.jobs.columns)
    pd.testing.assert_frame_equal(usage.usage(few.jobs, START, END, by=["account", "user"], now=END),
                                  usage.usage(whole.jobs, START, END, by=["account", "user"], now=END), check_exact=True)
    steps_few = store.table(START, END, step_columns=efficiency.STEP_COLUMNS)
    assert len(steps_few.steps) == len(whole.steps) and len(steps_few.steps.columns) < len(whole.steps.columns)
    pd.testing.assert_frame_equal(efficiency.runs(steps_few.jobs, steps_few.steps),
                                  efficiency.runs(whole.jobs, whole.steps), check_exact=True)
    # efficiency and report: no steps, each record with its steps' statistics (kept at ingest)
    stats = store.table(START, END, step_stats=True)
    assert stats.steps.empty and set(efficiency.STEP_STATS) <= set(stats.jobs.columns)
    assert stats.jobs["step_gpu_util_count"].sum() == whole.steps["gpu_util_pct"].notna().sum()
    assert stats.jobs["step_max_rss_bytes"].max() == whole.steps["max_rss_bytes"].max() > 0
    pd.testing.assert_frame_equal(efficiency.runs(stats.jobs, stats.steps),
                                  efficiency.runs(whole.jobs, whole.steps), check_exact=True)
    # efficiency's own read: the runs computed in the store, all users or some
    pd.testing.assert_frame_equal(store.runs(START, END), efficiency.runs(whole.jobs, whole.steps), check_exact=True)
    some = sorted(whole.jobs["user"].dropna().unique())[:1]
    mine = store.table(START, END, users=some)
    assert 0 < len(mine.jobs) < len(whole.jobs)
    pd.testing.assert_frame_equal(store.runs(START, END, users=some), efficiency.runs(mine.jobs, mine.steps),
                                  check_exact=True)


def test_the_report_from_its_columns_and_the_stores_runs_is_the_full_ones(tmp_path):
    """``report`` reads dashboard.COLUMNS of the records and the runs computed in the store (of the
    partitions asked for): every figure equals the page drawn from every column and the steps."""
    from slinkyml.accounting import dashboard

    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    whole = store.table(START, END)
    page = store.table(START, END, columns=dashboard.COLUMNS)
    assert page.steps.empty and set(page.jobs.columns) < set(whole.jobs.columns)
    partition = sorted(whole.jobs["partition"].dropna().unique())[0]
    for partitions, background in ((None, False), ([partition], False), ([partition], True)):
        # background: the runs computed by another thread while the records are drawn, as `report` does
        with ThreadPoolExecutor(max_workers=1) as pool:
            runs = pool.submit(store.runs, START, END, partitions=partitions) if background else \
                store.runs(START, END, partitions=partitions)
            a = dashboard.collect(page, None, START, END, now=END, runs=runs, partitions=partitions, prices={})
        b = dashboard.collect(whole, None, START, END, now=END, partitions=partitions, prices={})
        for name in ("usage_over_time", "usage_by", "runs", "distributions", "lost", "waits", "top_jobs"):
            left, right = getattr(a, name), getattr(b, name)
            for key in left if isinstance(left, dict) else [None]:
                pd.testing.assert_frame_equal(left[key] if key else left, right[key] if key else right,
                                              obj=f"{name}[{key}]", check_exact=True)
        b.generated = a.generated
        assert dashboard.render_html(a) == dashboard.render_html(b)
    assert 0 < len(store.runs(START, END, partitions=[partition])) < len(store.runs(START, END))  # debug, not short


def _contents(path: Path) -> dict[str, list[tuple]]:
    """Every row of the store's tables (NaN and NULL told apart), in a fixed order."""
    import duckdb

    with duckdb.connect(str(path), read_only=True) as con:
        out = {}
        for name in ("jobs", "steps"):
            rows = con.execute(f"SELECT * FROM {name} ORDER BY job_id, db_index, _seq").fetchall()
            out[name] = [tuple("NaN" if isinstance(v, float) and v != v else v for v in row) for row in rows]
        out["meta"] = con.execute("SELECT key, value FROM meta WHERE key <> 'last_sync' ORDER BY key").fetchall()
    return out


def _changed(text: str) -> str:
    """The recorded text with a running job (no end, no steps yet) and one record gone: what a later
    sync fetches again and replaces."""
    running = text.replace("\x1fCOMPLETED\x1f", "\x1fRUNNING\x1f", 1)
    return _lines(running, lambda f: not f[0].startswith("42.") and not f[0].startswith("44"))


@pytest.mark.parametrize("name", ["sacct_2205.txt", "sacct_efficiency_2205.txt"])
def test_the_plain_sync_writes_the_rows_the_frames_write(tmp_path, name):
    """A store synced through plain records (a small cluster's reports) holds, row for row and byte for
    byte (a missing number NULL, steps' statistics, places), what a sync through the frames writes, over a
    change between syncs (records replaced, unfinished ones fetched again), from a new store on."""
    text = (DATA / name).read_text()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    stores = {}
    for way in ("frames", "plain"):
        backend = Recorded(_changed(text))
        store = AccountingStore(tmp_path / f"{way}.duckdb", backend)
        store.sync(START, now=now, plain=way == "plain")  # a new store
        backend.text = text
        store.sync(START, now=now, plain=way == "plain")
        store.sync(START, now=now, plain=way == "plain")  # nothing new: replaced by the same rows
        stores[way] = store
    assert _contents(stores["plain"].path) == _contents(stores["frames"].path)
    assert len(_contents(stores["plain"].path)["steps"]) > 0


def test_plain_reads_are_the_frames_reads(tmp_path, capsys):
    """usage's plain read (records of its columns, a missing number NaN) is the frames' read value for
    value, and the runs' plain rows print what the runs' frame prints."""
    import argparse
    import math

    from slinkyml.accounting import efficiency_rows, usage_rows
    from slinkyml.cli import accounting as cli

    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START)
    for users in (None, ["alice"]):
        plain = store.table_rows(START, END, columns=usage_rows.COLUMNS, users=users)
        frame = store.table(START, END, columns=usage_rows.COLUMNS, users=users).jobs
        assert len(plain) == len(frame) > 0 and list(plain[0]) == list(frame.columns)
        for row, want in zip(plain, frame.to_dict("records"), strict=True):
            for column, value in want.items():
                same = (value is pd.NA or value is pd.NaT or value is None) and row[column] is None or \
                    isinstance(value, float) and math.isnan(value) and math.isnan(row[column]) or \
                    row[column] == value
                assert same, (column, row[column], value)
        for fmt in ("json", "csv", "text"):
            args = argparse.Namespace(json=fmt == "json", csv=fmt == "csv", png=None)
            cli._emit(args, efficiency_rows.printed(store.runs_rows(START, END, users=users)), "Efficiency per run")
            printed = capsys.readouterr().out
            cli._emit(args, store.runs(START, END, users=users).reindex(columns=list(efficiency_rows.COLUMNS)),
                      "Efficiency per run")
            assert printed == capsys.readouterr().out
    with pytest.raises(ValueError):
        store.table_rows(START, END, columns=["key"])
    # a report's read on the sync's own connection (one connection to the file) reads the same
    import json

    for read in (lambda con: store.table_rows(START, END, columns=usage_rows.COLUMNS, con=con),
                 lambda con: store.runs_rows(START, END, con=con)):
        stats = store.sync(START, plain=True, then=read)
        assert json.dumps(stats.read, default=str) == json.dumps(read(None), default=str) and stats.read


def test_the_stores_tables_have_the_types_duckdb_gives_the_frames(tmp_path):
    """The store's tables are made without pandas (a small cluster's first report): their columns and
    types are those DuckDB gives an Arrow table of the transform's frames."""
    import duckdb

    from slinkyml.accounting import store as store_mod

    store = AccountingStore(tmp_path / "s.duckdb", Recorded(""))
    store.sync(START, plain=True)
    with duckdb.connect(str(store.path), read_only=True) as con:
        made = [row[:2] for row in con.execute("DESCRIBE steps").fetchall()]
        stats = [row[:2] for row in con.execute("DESCRIBE jobs").fetchall()][len(made):]
    with duckdb.connect() as con:
        con.register("empty", store_mod._schema().empty_table())
        want = [row[:2] for row in con.execute("DESCRIBE SELECT *, 0::BIGINT AS _seq FROM empty").fetchall()]
    assert made == want
    assert stats == [(c, "DOUBLE") for c in store_mod.STEP_STATS]


def test_large_answers_take_the_frames_way(tmp_path, monkeypatch):
    """Past sacct_rows.LIMIT records the plain way declines (Arrow and pandas are then faster): in the
    sync before anything is written, and in the reads."""
    from slinkyml.accounting import sacct_rows

    store = AccountingStore(tmp_path / "s.duckdb", Recorded(RECORDED))
    store.sync(START, plain=True)
    monkeypatch.setattr(sacct_rows, "LIMIT", 3)
    before = _contents(store.path)
    with pytest.raises(sacct_rows.Declined):
        store.sync(START, plain=True)
    assert _contents(store.path) == before
    with pytest.raises(sacct_rows.Declined):
        store.table_rows(START, END, columns=["user"])
    with pytest.raises(sacct_rows.Declined):
        store.runs_rows(START, END)
