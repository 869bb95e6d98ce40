"""``slinkyml usage`` over plain records (``sacct_rows``), for small answers: the same table as
``usage.usage`` merged with ``cost.cost`` gives, to the last bit, without pandas or numpy (whose
imports were most of a small report's run time).

To the last bit: the rows are taken in the frames' order and each group's float columns are summed as
pandas 3's ``groupby(...).sum()`` sums them: when the rows are already in group order and no value is
NaN, by ``np.add.reduceat`` (each group's first value plus numpy's pairwise sum of the rest,
:func:`_pairwise`); otherwise by the compensated (Kahan) sum of its Cython ``group_sum`` (a compensation
that is not finite, as after an infinity, is reset to 0), skipping NaN. The costs' sums are NaN for a
group without a price (``min_count=1``); the arithmetic of each row follows ``usage.overlap_seconds`` and
``cost.job_costs`` operation by operation. tests/test_usage_rows.py compares the printed JSON, CSV and
text tables of both paths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from slinkyml.accounting.prices import PartitionPrice, unpriced_lines
from slinkyml.accounting.rows import Rows

GROUPS = ("user", "account", "partition", "gpu_type")
#: the job columns usage and its cost read (a store read of only these is a fraction of the whole)
COLUMNS = ("user", "account", "partition", "alloc_gpu_type", "start", "end", "elapsed_s", "alloc_cpu",
           "alloc_cpus", "alloc_gpus", "alloc_billing", "alloc_node", "nnodes", "state")
_COLUMN = {"gpu_type": "alloc_gpu_type"}
#: the columns of the table, after the groups
REPORTED = ("jobs", "cpu_hours", "gpu_hours", "billing_hours", "cost_usd")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(value: datetime) -> int:
    """Nanoseconds since the epoch, as ``pd.Timestamp(value).value`` (a naive time is UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1) * 1000


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _div(a: float, b: float) -> float:
    """``a / b`` as numpy divides float64 (x/0 is ±inf or NaN, not an error)."""
    if b == 0.0:
        return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _maximum(a: float, b: float) -> float:
    """``np.maximum``: NaN if either is."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


class _Kahan:
    """pandas' ``group_sum`` for one group and column: compensated, NaN skipped and counted out."""

    __slots__ = ("total", "compensation", "count")

    def __init__(self) -> None:
        self.total, self.compensation, self.count = 0.0, 0.0, 0

    def add(self, value: float) -> None:
        if math.isnan(value):
            return
        self.count += 1
        y = value - self.compensation
        t = self.total + y
        self.compensation = t - self.total - y
        if not math.isfinite(self.compensation):  # pandas' GH#53606/GH#60303: an infinity's NaN
            self.compensation = 0.0
        self.total = t

    def result(self, min_count: int = 0) -> float:
        return math.nan if self.count < min_count else self.total


def _pairwise(values: Sequence[float]) -> float:
    """numpy's pairwise summation of float64 (``pairwise_sum``: eight accumulators in blocks of up to
    128 values, halves above), which ``np.add.reduceat`` adds to each segment's first value."""
    n = len(values)
    if n < 8:
        total = 0.0
        for value in values:
            total += value
        return total
    if n <= 128:
        r = list(values[:8])
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for value in values[i:]:
            total += value
        return total
    half = n // 2
    half -= half % 8
    return _pairwise(values[:half]) + _pairwise(values[half:])


def _missing_last(key: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    """A group key's place among pandas' sorted groups (a missing value after every other)."""
    return tuple((value is None, "" if value is None else value) for value in key)


def group_sums(keys: Sequence[tuple[Any, ...]], columns: Sequence[Sequence[float]], min_count: int = 0
               ) -> dict[tuple[Any, ...], list[float]]:
    """Each group's sum of each column, as ``DataFrame.groupby(keys, sort=True).sum(min_count=...)``
    computes it (see the module's note: reduceat for rows in group order without NaN, else Kahan)."""
    if not keys:
        return {}
    places = [_missing_last(key) for key in keys]
    in_order = all(a <= b for a, b in zip(places, places[1:], strict=False))
    if in_order and not any(math.isnan(v) for column in columns for v in column):
        starts = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
        return {keys[a]: [column[a] + _pairwise(column[a + 1:b]) for column in columns]
                for a, b in zip(starts, [*starts[1:], len(keys)], strict=True)}
    sums: dict[tuple[Any, ...], list[_Kahan]] = {}
    for i, key in enumerate(keys):
        kahans = sums.setdefault(key, [_Kahan() for _ in columns])
        for kahan, column in zip(kahans, columns, strict=True):
            kahan.add(column[i])
    return {key: [k.result(min_count) for k in kahans] for key, kahans in sums.items()}


def overlap_seconds(jobs: Sequence[dict[str, Any]], start: datetime, end: datetime,
                    now: datetime | None = None) -> list[float]:
    """``usage.overlap_seconds`` per record: seconds inside [start, end), running jobs until now."""
    t0, t1 = _ns(start), _ns(end)
    run_ns = _ns(now or datetime.now(UTC))
    out = []
    for job in jobs:
        begin, finish = job["start"], job["end"]
        if begin is None:
            out.append(0 / 1e9)
            continue
        lo = max(_ns(begin), t0)
        hi = min(run_ns if finish is None else _ns(finish), t1)
        out.append(max(hi - lo, 0) / 1e9)
    return out


def _or(*values: float) -> float:
    """The first value that is not NaN (``fillna`` chained), else 0."""
    for value in values:
        if not math.isnan(value):
            return value
    return 0.0


def _job_cost(job: dict[str, Any], seconds: float, prices: dict[str, PartitionPrice]) -> float:
    """``cost.job_costs`` of one record."""
    entry = prices.get(job["partition"] or "")
    price = entry.price_per_hour_usd if entry else math.nan
    vcpus = float(entry.vcpus) if entry else math.nan
    gpus = float(entry.gpus) if entry else 0.0
    cpu_frac = _div(_or(job["alloc_cpu"]), vcpus)
    gpu_frac = _div(_or(job["alloc_gpus"]), max(gpus, 1.0)) if gpus > 0 else 0.0
    return _maximum(cpu_frac, gpu_frac) * seconds / 3600.0 * price


def unpriced(jobs: Iterable[dict[str, Any]], prices: dict[str, PartitionPrice]) -> list[str]:
    """``cost.unpriced``: one line per partition of these records without a price."""
    return unpriced_lines((job["partition"] for job in jobs), prices)


def report(jobs: Sequence[dict[str, Any]], start: datetime, end: datetime, by: Sequence[str],
           load_prices: Callable[[], dict[str, PartitionPrice]], now: datetime | None = None
           ) -> tuple[Rows, dict[str, PartitionPrice] | None]:
    """What ``slinkyml usage`` prints: per group (sorted) jobs, CPU/GPU/billing hours and, when any
    group has usage, the cost, with the prices it read (``load_prices`` is called only then: the
    price file and the instance presets are not read for an empty window)."""
    by = list(by)
    seconds = overlap_seconds(jobs, start, end, now)
    keys = [tuple(job[_COLUMN.get(name, name)] or "" for name in by) for job in jobs]
    cpu = [held * _or(job["alloc_cpu"], job["alloc_cpus"]) for job, held in zip(jobs, seconds, strict=True)]
    gpu = [held * _or(job["alloc_gpus"]) for job, held in zip(jobs, seconds, strict=True)]
    billing = [held * _or(job["alloc_billing"], job["alloc_cpu"]) for job, held in zip(jobs, seconds, strict=True)]
    counts: dict[tuple[str, ...], int] = {}
    for key, held in zip(keys, seconds, strict=True):
        counts[key] = counts.get(key, 0) + (held > 0)
    kept = sorted(key for key, count in counts.items() if count > 0)
    columns = by + list(REPORTED[:4])
    numeric = frozenset(REPORTED)
    if not kept:
        return Rows(columns, [], numeric), None
    sums = group_sums(keys, [cpu, gpu, billing])
    prices = load_prices()
    # cost groups are the records' own values: a missing one is its own group, which no usage group
    # ("" for missing) matches, as in pandas' merge
    costs = group_sums([tuple(job[_COLUMN.get(name, name)] for name in by) for job in jobs],
                       [[_job_cost(job, held, prices) for job, held in zip(jobs, seconds, strict=True)]], min_count=1)
    data = [[*key, counts[key], *(total / 3600.0 for total in sums[key]), costs.get(key, [math.nan])[0]]
            for key in kept]
    return Rows(columns + ["cost_usd"], data, numeric), prices


def _ts(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def sreport_window(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The window sreport actually reports for ``start``/``end`` (``slurmdb_report_set_start_end_
    time``): each edge rounded to the *nearest* hour (seconds ≥ 30 round the minute up, minutes
    ≥ 30 the hour), and at least one hour long. Hours of sreport's time zone; slinkyml runs it in
    UTC."""
    def nearest(value: datetime) -> datetime:
        ts = _ts(value)
        minute = ts.minute + (1 if ts.second >= 30 else 0)
        hour = ts.replace(minute=0, second=0, microsecond=0)
        return hour + timedelta(hours=1) if minute >= 30 else hour

    lo, hi = nearest(start), nearest(end)
    return lo, max(hi, lo + timedelta(hours=1))


def sreport_window_note(start: datetime, end: datetime) -> str | None:
    """A line for windows sreport would not report as given (None when it would)."""
    lo, hi = sreport_window(start, end)
    if lo == _ts(start) and hi == _ts(end):
        return None
    return (f"note: {_ts(start):%Y-%m-%d %H:%M:%S}–{_ts(end):%Y-%m-%d %H:%M:%S} UTC is not whole "
            f"hours; these numbers are for exactly that window, while sreport would report "
            f"{lo:%Y-%m-%d %H:%M}–{hi:%Y-%m-%d %H:%M} (it rounds each edge to the nearest hour, "
            "at least one hour long): compare with sreport on whole-hour windows only")
