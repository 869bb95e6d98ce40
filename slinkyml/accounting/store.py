"""The incremental accounting store: slurmdbd's job and step records kept locally, in DuckDB.

The first report ingests its window; later syncs fetch only what can have changed, by Slurm's own
window semantics (``sacct -S/-E`` without ``--state`` selects a record when ``time_eligible`` is set and
before the end and ``time_end`` is 0 or at/after the start, as_mysql_jobacct_process.c):

- ``sacct -S W -E now``, W the watermark: every record that started being eligible since the last
  sync, is still pending or running, or ended since W (new jobs, requeued runs, array tasks split
  off their pending record, late completions);
- the store's unfinished records that answer did not return are fetched again by job id (``-j``:
  jobs that ended while slurmdbd was behind, runaway jobs fixed later), until they end;
- W is the last sync's start minus a margin (``--margin``, default 300 s: clock skew between this
  host and slurmctld, slurmdbd's commit lag), and it only moves on when slurmctld's DBD agent queue
  was empty when the sync began (``sdiag``): while slurmdbd is behind, records of jobs that ended
  earlier can still arrive, so the next sync looks back from the old W again.

Records are keyed by (cluster, job id, DBIndex, step): a record fetched again replaces its rows (a
job's steps travel with it), so nothing is counted twice. What efficiency needs of a record's steps
(``STEP_STATS``: largest step memory, GPU utilisation sum and count) is kept per record at
ingest, so efficiency and the dashboard read one row per record instead of its three or four steps.
A report reads the records its window selects with the same predicate as slurmdbd, and the per-window
key columns (``segment``) are recomputed as the one transform computes them for what sacct would have
returned.

DuckDB rather than Parquet files by measurement (benchmarks/store_format.py): reports read far more
often than syncs write, and DuckDB read a window 1.7-2.4x faster (projection and predicate
pushdown); its transactions make each sync's replace-and-insert atomic without a manifest of our own.
Concurrent syncs are serialised by a file lock; readers take it shared.

Two ways in and out: the transform's frames (pandas, Arrow), and plain records (``sacct_rows``, up to its
``LIMIT``), which a small cluster's reports take: their sync inserts sacct's few records and their reads
fetch rows, so ``slinkyml usage`` and ``efficiency`` import DuckDB but not pandas, pyarrow or numpy
(those are imported where the frames are made, with a note). Both write the same rows
(tests/test_accounting_store.py compares the tables after each).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from slinkyml.accounting import sacct_rows
from slinkyml.accounting.efficiency_sql import STEP_STATS, runs_sql
from slinkyml.errors import SlinkyError
from slinkyml.slurm import records

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from slinkyml.accounting.sacct import SacctTable

#: bumped when the stored columns change; an older store is rebuilt on request (formats 2 and 3, before
#: the step statistics were columns of each record, are upgraded in place by the next sync)
FORMAT = 4
_UPGRADABLE = ("2", "3")
MARGIN_S = 300
#: the store's own column beside the frames': the row's place in sacct's answer (steps keep their order)
_ORDER = "_seq"
#: columns a read of steps takes whatever a report asks for: what their per-window keys are made of
_KEYS = frozenset({"cluster", "job_id", "db_index", "submit", "step", "segment", "key", "parent_key"})
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
#: the stored columns' DuckDB types that are not VARCHAR (the frames' Int64, UInt64, UTC times, float64)
_TYPES = {**dict.fromkeys(("job_id", "array_job_id", "array_task_id", "het_job_id", "het_offset", "segment"), "BIGINT"),
          "db_index": "UBIGINT", **dict.fromkeys(("submit", "eligible", "start", "end"), "TIMESTAMPTZ"),
          **dict.fromkeys(sacct_rows.FLOATS, "DOUBLE")}
#: sacct's own order (22.05, recorded and live): by submit time; within a second, plain jobs by id
#: before array tasks by array id and task id; steps keep their place under their record. Reports sum
#: floats in row order, so the same order gives the same last bits.
_SACCT_ORDER = ("submit, array_job_id IS NOT NULL, coalesce(array_job_id, job_id), coalesce(array_task_id, -1), "
                "db_index")


class StoreError(SlinkyError):
    """The store cannot be read or written; the message says how to rebuild it."""


@dataclass
class SyncStats:
    """What one sync did (printed by ``slinkyml accounting sync``)."""

    kind: str  # cold, incremental, backfill+incremental, rebuild
    fetched_jobs: int
    fetched_steps: int
    refetched_ids: int
    seconds: float
    watermark: datetime
    watermark_held: bool
    stored_jobs: int
    stored_steps: int
    read: Any = None  # what ``sync(then=...)`` read from the synced store


@lru_cache(maxsize=1)
def _empty() -> pd.DataFrame:
    """The one transform's frame, empty: its columns and dtypes."""
    from slinkyml.accounting.sacct_arrow import parse_sacct  # lazy: pandas, for the frames' way only

    return parse_sacct("").jobs


@lru_cache(maxsize=1)
def _schema() -> pa.Schema:
    """The Arrow schema of the one transform's frames (pandas dtypes in its metadata)."""
    import pyarrow as pa  # lazy: the frames' way only

    return pa.Schema.from_pandas(_empty(), preserve_index=False)


def default_dir() -> Path:
    """``$SLINKYML_ACCOUNTING_STORE``, else the user's state dir (``$XDG_STATE_HOME/slinkyml/accounting``)."""
    chosen = os.environ.get("SLINKYML_ACCOUNTING_STORE")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "slinkyml" / "accounting"


def _cluster_name(conf: str | None) -> str:
    """``ClusterName`` from slurm.conf (read, not asked: a report must not need slurmctld for it)."""
    try:
        text = Path(conf).read_text(errors="replace") if conf else ""
    except OSError:
        text = ""
    found = re.search(r"(?im)^\s*ClusterName\s*=\s*(\S+)", text)
    name = found.group(1) if found else "cluster"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]


def store_path(backend: Any, directory: str | os.PathLike[str] | None = None) -> Path:
    """One store file per data source and user: the cluster's name and a digest of where the records
    come from (backend, slurm.conf, slurmrestd URL) and who reads them (with PrivateData=jobs each user
    sees other records), so two clusters or users never share records."""
    slurm = getattr(backend, "slurm", None)
    conf = getattr(slurm, "conf", None)
    source = "|".join(str(part) for part in (getattr(backend, "name", "cli"), os.path.realpath(conf) if conf else "",
                                             getattr(backend, "url", "") or "", os.getuid()))
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    return Path(directory or default_dir()) / f"{_cluster_name(conf)}-{digest}.duckdb"


def _ts(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(microsecond=0)


def _literal(value: datetime) -> str:
    """A timestamp literal for SQL (built from a datetime, never from user text)."""
    return f"TIMESTAMPTZ '{_ts(value):%Y-%m-%d %H:%M:%S}+00'"


class AccountingStore:
    """Job and step records of one cluster in one DuckDB file, synced incrementally."""

    @classmethod
    def for_backend(cls, backend: Any, directory: str | os.PathLike[str] | None = None, *,
                    margin_s: float = MARGIN_S) -> AccountingStore:
        """The store of ``backend``'s records and this user (:func:`store_path`) in ``directory``."""
        return cls(store_path(backend, directory), backend, margin_s=margin_s)

    def __init__(self, path: str | os.PathLike[str], backend: Any, *, margin_s: float = MARGIN_S):
        self.path = Path(path)
        self.backend = backend
        self.margin = timedelta(seconds=margin_s)

    # -- locking and opening ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self, exclusive: bool) -> Iterator[None]:
        """fcntl lock beside the file: syncs exclusive (one at a time, readers wait for the commit),
        reports shared."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.path}: cannot create the accounting store: {getattr(exc, 'strerror', None) or exc} "
                             "(choose another place with --store or $SLINKYML_ACCOUNTING_STORE, or use --no-cache)"
                             ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    def _unreadable(self, exc: BaseException) -> StoreError:
        reason = " ".join(str(exc).split())[:200]
        return StoreError(f"{self.path}: the accounting store cannot be read ({reason}); rebuild it with "
                          "`slinkyml accounting sync --rebuild` or bypass it with --no-cache")

    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        try:
            con = duckdb.connect(str(self.path), read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            raise self._unreadable(exc) from exc
        return con

    def _meta(self, con: duckdb.DuckDBPyConnection, *, upgrade: bool = False) -> dict[str, Any]:
        try:
            rows = con.execute("SELECT key, value FROM meta").fetchall()
        except duckdb.Error as exc:
            raise self._unreadable(exc) from exc
        meta = dict(rows)
        if meta.get("format") in _UPGRADABLE and upgrade:  # the same records: their step statistics beside them
            con.execute("BEGIN TRANSACTION")
            con.execute("DROP TABLE IF EXISTS step_stats")  # format 3 kept them in a table of their own
            for column in STEP_STATS:
                default = " DEFAULT 0" if column.endswith(("_sum", "_count")) else ""
                con.execute(f"ALTER TABLE jobs ADD COLUMN {column} DOUBLE{default}")
            assign = ", ".join(f"{c} = st.{c}" for c in STEP_STATS)
            con.execute(f"UPDATE jobs SET {assign} FROM ({_STEP_STATS_SQL.format(steps='steps')}) st "
                        f"WHERE {_same_record('jobs', 'st')}")
            con.execute("UPDATE meta SET value = ? WHERE key = 'format'", [str(FORMAT)])
            con.execute("COMMIT")
            meta["format"] = str(FORMAT)
        if meta.get("format") in _UPGRADABLE:
            raise StoreError(f"{self.path}: the accounting store has format {meta['format']}, this slinkyml reads "
                             f"{FORMAT}; `slinkyml accounting sync` upgrades it in place (or bypass it with --no-cache)")
        if meta.get("format") != str(FORMAT):
            raise StoreError(f"{self.path}: the accounting store has format {meta.get('format')!r}, this "
                             f"slinkyml writes {FORMAT}; rebuild it with `slinkyml accounting sync --rebuild` "
                             "or bypass it with --no-cache")
        return meta

    def exists(self) -> bool:
        return self.path.is_file()

    def status(self) -> dict[str, Any]:
        """Coverage, watermark, last sync and sizes (``slinkyml accounting status``)."""
        if not self.exists():
            return {"path": str(self.path), "exists": False}
        with self._lock(exclusive=False):
            con = self._connect(read_only=True)
            try:
                meta = self._meta(con)
                jobs = con.execute("SELECT count(*) FROM jobs").fetchone()
                steps = con.execute("SELECT count(*) FROM steps").fetchone()
            except duckdb.Error as exc:
                raise self._unreadable(exc) from exc
            finally:
                con.close()
        return {"path": str(self.path), "exists": True, "covered_since": meta.get("covered_since"),
                "watermark": meta.get("watermark"), "last_sync": meta.get("last_sync"),
                "syncs": int(meta.get("syncs") or 0),
                "jobs": jobs[0] if jobs else 0, "steps": steps[0] if steps else 0,
                "bytes": sum(p.stat().st_size for p in (self.path, Path(f"{self.path}.wal")) if p.is_file())}

    # -- sync -------------------------------------------------------------------------------------------
    def _fetch(self, start: datetime, end: datetime, job_ids: Sequence[str] | None = None, *,
               plain: bool = False) -> SacctTable | sacct_rows.Records:
        """The backend's records for the window (or ``job_ids``); ``plain``: sacct's text read as plain
        records (:class:`sacct_rows.Declined` for text only the frames read)."""
        if plain:
            return sacct_rows.parse(self.backend.sacct_text(start, end, job_ids=list(job_ids) if job_ids else None))
        return self.backend.jobs(start, end, job_ids=list(job_ids) if job_ids else None)

    def _dbd_behind(self) -> bool:
        """Whether slurmctld still holds messages for slurmdbd (or cannot say): records that
        arrive later may then end before the watermark, so it must not move."""
        slurm = getattr(self.backend, "slurm", None)
        if slurm is None:
            return True
        for attempt in range(3):  # a busy slurmctld empties its queue between messages
            if attempt:
                time.sleep(0.2)
            try:
                queued = records.dbd_agent_queue(slurm.run("sdiag", [], retries=0).stdout)
            except SlinkyError:
                return True
            if queued == 0:
                return False
        return True

    def sync(self, since: datetime | None = None, *, rebuild: bool = False,
             now: datetime | None = None, plain: bool = False,
             then: Callable[[duckdb.DuckDBPyConnection], Any] | None = None) -> SyncStats:
        """Bring the store up to date and make it cover ``since`` onwards (fetching the gap). ``plain``:
        through plain records (a backend with ``sacct_text``: the CLI's); :class:`sacct_rows.Declined`
        before anything is written when sacct's text needs the frames. ``then``: a read on the same
        connection right after the write (``table_rows``/``runs_rows`` with ``con=``; a second
        connection to the file costs a report ~40 ms), its answer in the stats' ``read``."""
        t0 = time.perf_counter()
        with self._lock(exclusive=True):
            if rebuild:
                for suffix in ("", ".wal"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{self.path}{suffix}")
            began = _ts(now or datetime.now(UTC))
            behind = self._dbd_behind()
            fresh = not self.exists()
            con = self._connect(read_only=False)
            try:
                if fresh:
                    self._create(con)
                meta = self._meta(con, upgrade=True)
                covered = datetime.fromisoformat(meta["covered_since"]) if meta.get("covered_since") else None
                watermark = datetime.fromisoformat(meta["watermark"]) if meta.get("watermark") else None
                if since is None:
                    since = covered or began - timedelta(days=30)
                since = _ts(since)
                fetched: list[Any] = []
                kind = []
                if covered is None or watermark is None:
                    fetched.append(self._fetch(since, began, plain=plain))
                    kind.append("rebuild" if rebuild else "cold")
                    covered = since
                else:
                    if since < covered:  # an earlier window: the records that ended before the store began
                        fetched.append(self._fetch(since, covered, plain=plain))
                        kind.append("backfill")
                        covered = since
                    fetched.append(self._fetch(watermark, began, plain=plain))
                    kind.append("incremental")
                refetch = self._unfinished_missing(con, fetched)
                if refetch:
                    fetched.append(self._fetch(_EPOCH, began, refetch, plain=plain))
                # behind: records of jobs that ended earlier are still to come, so the next sync looks
                # back as far as this one did (a new store: to the start of what it covers)
                new_watermark = (watermark or covered) if behind else began - self.margin
                if watermark is not None and new_watermark < watermark:
                    new_watermark = watermark
                jobs, steps = self._write(con, fetched, covered, new_watermark, began)
                read = then(con) if then is not None else None
            except duckdb.Error as exc:
                raise self._unreadable(exc) from exc
            finally:
                con.close()
        return SyncStats(kind="+".join(kind), fetched_jobs=sum(len(t.jobs) for t in fetched),
                         fetched_steps=sum(len(t.steps) for t in fetched), refetched_ids=len(refetch),
                         seconds=time.perf_counter() - t0, watermark=new_watermark,
                         watermark_held=behind, stored_jobs=jobs, stored_steps=steps, read=read)

    def _create(self, con: duckdb.DuckDBPyConnection) -> None:
        """The tables: the transform's columns in DuckDB's types for them (as DuckDB types an Arrow table
        of the frames: tests/test_accounting_store.py compares), plus each row's place and, for jobs,
        their steps' statistics."""
        columns = ", ".join(f'"{name}" {_TYPES.get(name, "VARCHAR")}' for name in sacct_rows.COLUMNS)
        stats = "".join(f", {c} DOUBLE" for c in STEP_STATS)
        con.execute(f"CREATE TABLE jobs ({columns}, {_ORDER} BIGINT{stats})")
        con.execute(f"CREATE TABLE steps ({columns}, {_ORDER} BIGINT)")
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        con.execute("INSERT INTO meta VALUES ('format', ?)", [str(FORMAT)])

    def _unfinished_missing(self, con: duckdb.DuckDBPyConnection, fetched: list[Any]) -> list[str]:
        """Job ids of stored records without an end that this sync's answers did not return."""
        rows = con.execute("SELECT DISTINCT job_id, db_index FROM jobs WHERE \"end\" IS NULL AND job_id IS NOT NULL"
                           ).fetchall()
        if not rows:
            return []
        seen: set[tuple[int, int]] = set()
        for table in fetched:
            if isinstance(table, sacct_rows.Records):
                seen.update((job["job_id"], job["db_index"] or 0) for job in table.jobs)
                continue
            ids = table.jobs["job_id"].to_numpy(dtype="int64", na_value=-1)
            dbi = table.jobs["db_index"].to_numpy(dtype="uint64", na_value=0)
            seen.update(zip(ids.tolist(), dbi.tolist(), strict=True))
        return sorted({str(job) for job, dbi in rows if (job, dbi or 0) not in seen}, key=int)

    def _write(self, con: duckdb.DuckDBPyConnection, fetched: list[Any], covered: datetime,
               watermark: datetime, began: datetime) -> tuple[int, int]:
        """Replace the fetched records' rows and insert them, in one transaction (later answers win)."""
        plain = any(isinstance(table, sacct_rows.Records) for table in fetched)
        con.execute("BEGIN TRANSACTION")
        try:
            if any(len(table.jobs) for table in fetched):
                (_stage_rows if plain else _stage_frames)(con, fetched)
                con.execute("CREATE TEMP TABLE _keys AS SELECT DISTINCT cluster, job_id, db_index FROM _new_jobs")
                stored = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
                for name in ("jobs", "steps") if stored else ():  # new: none to replace
                    con.execute(f"DELETE FROM {name} USING _keys k WHERE {_same_record(name, 'k')}")
                # only steps of records this sync fetched (their rows were just replaced)
                fetched_steps = f"(SELECT s.* FROM _new_steps s SEMI JOIN _keys k ON {_same_record('s', 'k')})"
                stats = ", ".join(f"coalesce(st.{c}, 0)" if c.endswith(("_sum", "_count")) else f"st.{c}"
                                  for c in STEP_STATS)
                con.execute(f"INSERT INTO jobs SELECT j.*, {stats} FROM _new_jobs j LEFT JOIN "
                            f"({_STEP_STATS_SQL.format(steps=fetched_steps)}) st ON {_same_record('j', 'st')}")
                con.execute(f"INSERT INTO steps SELECT * FROM {fetched_steps}")
                con.execute("DROP TABLE _keys")
                for name in ("_new_steps", "_new_jobs"):
                    if plain:
                        con.execute(f"DROP TABLE {name}")
                    else:
                        con.unregister(name)
            count = con.execute("SELECT value FROM meta WHERE key = 'syncs'").fetchone()
            for key, value in (("covered_since", covered.isoformat()), ("watermark", watermark.isoformat()),
                               ("last_sync", began.isoformat()), ("syncs", str(int(count[0]) + 1 if count else 1))):
                con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        jobs = con.execute("SELECT count(*) FROM jobs").fetchone()
        steps = con.execute("SELECT count(*) FROM steps").fetchone()
        return (jobs[0] if jobs else 0), (steps[0] if steps else 0)

    # -- reading ------------------------------------------------------------------------------------------
    def fresh(self, since: datetime, max_age_s: float) -> bool:
        """Whether the store covers ``since`` and was synced less than ``max_age_s`` ago (a report may
        then read it without syncing: ``--max-age``)."""
        if max_age_s <= 0 or not self.exists():
            return False
        with self._lock(exclusive=False):
            con = self._connect(read_only=True)
            try:
                meta = self._meta(con)
            finally:
                con.close()
        covered, last = meta.get("covered_since"), meta.get("last_sync")
        if not covered or not last:
            return False
        age = (datetime.now(UTC) - datetime.fromisoformat(last)).total_seconds()
        return datetime.fromisoformat(covered) <= _ts(since) and age < max_age_s

    def table(self, start: datetime, end: datetime, *, users: Sequence[str] | None = None,
              accounts: Sequence[str] | None = None, with_steps: bool = True,
              columns: Sequence[str] | None = None, step_columns: Sequence[str] | None = None,
              step_stats: bool = False) -> SacctTable:
        """The records sacct would return for [start, end) (``-S start -E end --duplicates``, all users
        or ``users``/``accounts``), as the one transform's frames. ``columns``/``step_columns`` limit the
        columns read for a report that needs few (the keys always come); ``columns`` alone leaves the
        steps out. ``step_stats``: no steps, each record with its ``STEP_STATS`` instead
        (what efficiency and the dashboard need of steps; ``columns`` then also reads the keys)."""
        import pyarrow as pa  # lazy: the frames' way only (see the module's note)

        from slinkyml.accounting.sacct import SacctTable

        where, params = _selection(start, end, users, accounts)
        schema = _schema()

        def wanted(names: Sequence[str] | None, keys: frozenset[str]) -> list[str]:
            return list(schema.names) if names is None else [c for c in schema.names if c in {*names, *keys}]

        # a projection of the jobs (usage) leaves their keys out unless it asks for one (the window's own
        # segments are made of them) or for the step statistics (efficiency's: runs stitched by segment)
        asks_keys = step_stats or bool(_KEYS.intersection(columns or ()) - {"job_id"})
        job_columns = wanted(columns, _KEYS if asks_keys else frozenset({"job_id"}))
        steps_columns = wanted(step_columns, _KEYS)
        read_steps = with_steps and not step_stats and (columns is None or step_columns is not None)
        stats = ""
        if step_stats:  # the store's per-record statistics, kept beside each record
            stats = "".join(f", {c}" for c in STEP_STATS)
        with self._lock(exclusive=False):
            con = self._connect(read_only=True)
            try:
                self._meta(con)
                select = ", ".join(f'"{c}"' for c in job_columns)
                jobs_arrow = con.sql(
                    f"SELECT {select}{stats} FROM jobs WHERE {' AND '.join(where)} "
                    f"ORDER BY {_SACCT_ORDER}, {_ORDER}",
                    params=params).to_arrow_table()
                steps_arrow = None
                if read_steps:
                    # a job's steps come with it (sacct prints them under their record, whatever
                    # their own times), in its order, then in the order sacct printed them
                    selected = (f"SELECT cluster, job_id, db_index, row_number() OVER (ORDER BY {_SACCT_ORDER}, "
                                f"{_ORDER}) AS _pos FROM jobs WHERE {' AND '.join(where)}")
                    select_s = ", ".join(f's."{c}"' for c in steps_columns)
                    steps_arrow = con.sql(
                        f"SELECT {select_s} FROM steps s JOIN ({selected}) j ON {_same_record('s', 'j')} "
                        f"ORDER BY j._pos, s.{_ORDER}", params=params).to_arrow_table()
            except duckdb.Error as exc:
                raise self._unreadable(exc) from exc
            finally:
                con.close()
        jobs = _frame(jobs_arrow, pa.schema([schema.field(c) for c in job_columns], metadata=schema.metadata))
        if step_stats:
            for name in STEP_STATS:
                jobs[name] = jobs_arrow.column(name).to_numpy().astype("float64")
        steps = _frame(steps_arrow, pa.schema([schema.field(c) for c in steps_columns], metadata=schema.metadata)) \
            if steps_arrow is not None else jobs.iloc[0:0].copy()
        _window_keys(jobs, steps)
        return SacctTable(jobs=jobs, steps=steps)

    def runs(self, start: datetime, end: datetime, *, users: Sequence[str] | None = None,
             accounts: Sequence[str] | None = None, partitions: Sequence[str] | None = None) -> pd.DataFrame:
        """``efficiency.runs`` of what :meth:`table` returns for the window (records of ``partitions``
        only, when given), computed where the records lie with the same SQL as for a frame from sacct:
        a million records never pass through pandas."""
        from slinkyml.accounting import efficiency  # lazy: pandas, the frames' way only

        answer = self._runs(start, end, users, accounts, partitions,
                            lambda con, sql, params: con.sql(sql, params=params).to_arrow_table())
        if not answer.num_rows:
            import pandas as pd

            return efficiency.runs(pd.DataFrame(), pd.DataFrame())
        return efficiency.runs_frame(answer, _empty().dtypes)

    def runs_rows(self, start: datetime, end: datetime, *, users: Sequence[str] | None = None,
                  accounts: Sequence[str] | None = None,
                  con: duckdb.DuckDBPyConnection | None = None) -> list[dict[str, Any]]:
        """:meth:`runs` as plain rows (column → value; a missing one None), from the same SQL (on ``con``,
        a sync's open connection, when given)."""
        result: list[dict[str, Any]] = []

        def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> None:
            answer = con.execute(sql, params)
            names = [column[0] for column in answer.description or ()]
            result.extend(dict(zip(names, row, strict=True)) for row in _few(answer))

        self._runs(start, end, users, accounts, None, rows, con)
        return result

    def _runs(self, start: datetime, end: datetime, users: Sequence[str] | None, accounts: Sequence[str] | None,
              partitions: Sequence[str] | None, take: Any, con: duckdb.DuckDBPyConnection | None = None) -> Any:
        where, params = _selection(start, end, users, accounts, partitions)
        # a job id's records in the window's segment order (the transform numbers them by submit time,
        # then DBIndex), ties as sacct prints them
        order = f"submit NULLS LAST, db_index NULLS LAST, {_SACCT_ORDER}, {_ORDER}"
        source = f"(SELECT * FROM jobs WHERE {' AND '.join(where)})"
        with self._reading(con) as reader:
            return take(reader, runs_sql(source, order, ["db_index", _ORDER]), params)

    @contextlib.contextmanager
    def _reading(self, con: duckdb.DuckDBPyConnection | None) -> Iterator[duckdb.DuckDBPyConnection]:
        """``con`` (a sync's, under its lock), else a read-only connection under a shared lock."""
        if con is not None:
            try:
                yield con
            except duckdb.Error as exc:
                raise self._unreadable(exc) from exc
            return
        with self._lock(exclusive=False):
            con = self._connect(read_only=True)
            try:
                self._meta(con)
                yield con
            except duckdb.Error as exc:
                raise self._unreadable(exc) from exc
            finally:
                con.close()

    def table_rows(self, start: datetime, end: datetime, *, columns: Sequence[str],
                   users: Sequence[str] | None = None, accounts: Sequence[str] | None = None,
                   con: duckdb.DuckDBPyConnection | None = None) -> list[dict[str, Any]]:
        """:meth:`table`'s jobs for a projection without keys (usage's ``columns``) as plain records, as
        ``sacct_rows`` gives them (a missing number NaN), in the same order (on ``con`` when given)."""
        if _KEYS.intersection(columns) - {"job_id"}:
            raise ValueError("table_rows: a projection without keys (the window's segments are not renumbered)")
        where, params = _selection(start, end, users, accounts)
        wanted = [c for c in sacct_rows.COLUMNS if c in {*columns, "job_id"}]
        select = ", ".join(f'"{c}"' for c in wanted)
        with self._reading(con) as reader:
            found = _few(reader.execute(f"SELECT {select} FROM jobs WHERE {' AND '.join(where)} "
                                        f"ORDER BY {_SACCT_ORDER}, {_ORDER}", params))
        numbers = [c in sacct_rows.FLOATS for c in wanted]
        return [{c: math.nan if v is None and number else v for c, v, number in zip(wanted, row, numbers, strict=True)}
                for row in found]


#: per record (cluster, job id, DBIndex): STEP_STATS of its steps, as efficiency.step_stats
#: computes them (max skips missing values; a record without GPU figures has sum 0 and count 0)
_STEP_STATS_SQL = ("SELECT cluster, job_id, db_index, max(max_rss_bytes) AS step_max_rss_bytes, "
                   "max(mem_used_bytes) AS step_mem_used_bytes, coalesce(sum(gpu_util_pct), 0) AS step_gpu_util_sum, "
                   "count(gpu_util_pct)::DOUBLE AS step_gpu_util_count FROM {steps} GROUP BY cluster, job_id, db_index")


def _selection(start: datetime, end: datetime, users: Sequence[str] | None, accounts: Sequence[str] | None,
               partitions: Sequence[str] | None = None) -> tuple[list[str], list[Any]]:
    """WHERE terms and their parameters for the records sacct selects for [start, end) (slurmdbd's
    window predicate), of ``users``/``accounts``/``partitions`` when given."""
    where = [f"eligible IS NOT NULL AND eligible < {_literal(end)} AND (\"end\" IS NULL OR \"end\" >= {_literal(start)})"]
    params: list[Any] = []
    for column, values in (('"user"', users), ("account", accounts), ('"partition"', partitions)):
        if values:
            where.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params += list(values)
    return where, params


def _same_record(a: str, b: str) -> str:
    """SQL: rows ``a`` and ``b`` are of one record (cluster, job id, DBIndex; a missing value equals a
    missing one), as plain equalities of non-null values."""
    return " AND ".join(f"coalesce({a}.{c}, {fill}) = coalesce({b}.{c}, {fill})"
                        for c, fill in (("cluster", "''"), ("job_id", "-1"), ("db_index", "0")))


def _few(answer: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    """An answer's rows as Python tuples, up to ``sacct_rows.LIMIT`` (:class:`sacct_rows.Declined` past it:
    Arrow and pandas are then faster than Python objects)."""
    found = answer.fetchmany(sacct_rows.LIMIT + 1)
    if len(found) > sacct_rows.LIMIT:
        raise sacct_rows.Declined(f"more than {sacct_rows.LIMIT} rows")
    return found


def _last_answers(parts: list[list[dict[str, Any]]], key: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per ``key``: the last answer's, in the order of the last answers (as the frames' way
    drops duplicates, keeping the last)."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for row in reversed([row for part in parts for row in part]):
        k = tuple(row[c] for c in key)
        if k not in seen:
            seen.add(k)
            kept.append(row)
    return kept[::-1]


def _stage_rows(con: duckdb.DuckDBPyConnection, fetched: list[sacct_rows.Records]) -> None:
    """Temporary tables ``_new_jobs``/``_new_steps`` of plain records (the store's columns and their
    place), a missing number NULL as the frames' Arrow tables give it."""
    record = ("cluster", "job_id", "db_index")
    for name, rows in (("_new_jobs", _last_answers([t.jobs for t in fetched], record)),
                       ("_new_steps", _last_answers([t.steps for t in fetched], (*record, "step")))):
        con.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM steps LIMIT 0")
        width = len(sacct_rows.COLUMNS) + 1
        for first in range(0, len(rows), 200):  # a few hundred parameters a statement
            chunk = rows[first:first + 200]
            values = [None if isinstance(v, float) and math.isnan(v) else v
                      for i, row in enumerate(chunk, first) for v in (*(row[c] for c in sacct_rows.COLUMNS), i)]
            one = "(" + ", ".join("?" * width) + ")"
            con.execute(f"INSERT INTO {name} VALUES {', '.join([one] * len(chunk))}", values)


def _stage_frames(con: duckdb.DuckDBPyConnection, fetched: list[SacctTable]) -> None:
    """``_new_jobs``/``_new_steps`` registered from the frames (as Arrow tables of the store's schema)."""
    import pandas as pd  # lazy: the frames' way only (see the module's note)
    import pyarrow as pa

    schema = _schema()
    tables = {}
    for name, part, key in (("_new_jobs", "jobs", ["cluster", "job_id", "db_index"]),
                            ("_new_steps", "steps", ["cluster", "job_id", "db_index", "step"])):
        frames = [getattr(t, part) for t in fetched if len(getattr(t, part))]
        arrow = schema.empty_table()
        if frames:
            new = pd.concat(frames, ignore_index=True)
            new = new.iloc[::-1].drop_duplicates(key).iloc[::-1]  # one row per record: the last answer's
            arrow = pa.Table.from_pandas(new, preserve_index=False).cast(schema)
        tables[name] = arrow.append_column(_ORDER, pa.array(range(arrow.num_rows), pa.int64()))
        con.register(name, tables[name])


def _frame(table: pa.Table, schema: pa.Schema) -> pd.DataFrame:
    """DuckDB's answer as the transform's frame: its types (DuckDB gives its own zone and string
    types back) and pandas dtypes (from the schema's pandas metadata)."""
    table = table.select(schema.names).cast(schema)  # pyarrow is loaded: the table is one
    frame = table.to_pandas()
    if list(frame.columns) != schema.names:  # a projection: metadata lists every column
        frame = frame[schema.names]
    return frame


def _window_keys(jobs: pd.DataFrame, steps: pd.DataFrame) -> None:
    """``segment``/``parent_key``/``key`` as the transform computes them over this window's records:
    only job ids whose stored keys can differ (several runs in the window, or a run numbered past 0
    when its earlier runs are outside it) are recomputed, by the transform's own function."""
    import pandas as pd  # lazy: the frames' way only (see the module's note)

    from slinkyml.accounting import sacct

    if jobs.empty or "key" not in jobs.columns:  # a projection without keys: nothing to renumber
        return
    ids = jobs["job_id"]
    affected_rows = ids.duplicated(keep=False).to_numpy(dtype=bool) | \
        jobs["segment"].fillna(0).ne(0).to_numpy(dtype=bool)
    if not affected_rows.any():
        return
    affected = pd.unique(ids[affected_rows].dropna())
    job_rows = ids.isin(affected).to_numpy(dtype=bool)
    step_rows = steps["job_id"].isin(affected).to_numpy(dtype=bool) if len(steps) else \
        pd.Series([], dtype=bool).to_numpy()
    combined = pd.concat([jobs[job_rows], steps[step_rows]], ignore_index=True)
    sacct._add_keys(combined)
    n = int(job_rows.sum())
    for name in ("segment", "parent_key", "key"):
        jobs.loc[job_rows, name] = combined[name].iloc[:n].to_numpy()
        if step_rows.any():
            steps.loc[step_rows, name] = combined[name].iloc[n:].to_numpy()

