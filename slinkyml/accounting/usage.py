"""CPU-, GPU- and billing-hours over a time window, pro-rated at the window edges.

A job that crosses an edge counts only its seconds inside the window, so consecutive windows
add up exactly to the whole (like slurmdbd's hourly rollups, which sreport reads).
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from slinkyml.accounting import usage_rows
from slinkyml.accounting.usage_rows import sreport_window_note  # noqa: F401 - this module's name
from slinkyml.errors import SlinkyError

GROUPS = usage_rows.GROUPS
COLUMNS = usage_rows.COLUMNS
_COLUMN = {"gpu_type": "alloc_gpu_type"}


def _ts(value) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def overlap_seconds(jobs: pd.DataFrame, start: datetime, end: datetime, *,
                    now: datetime | None = None, as_of: datetime | None = None,
                    running_until: datetime | None = None) -> np.ndarray:
    """Seconds of each allocation row inside [start, end); running jobs run until ``running_until``.

    ``as_of`` reproduces a snapshot taken then (what a slurmdbd rollup forced at ``as_of`` records).
    """
    t0, t1 = _ts(start).value, _ts(end).value
    now_ns = _ts(now or pd.Timestamp.now(tz="UTC")).value
    run_ns = _ts(running_until).value if running_until is not None else now_ns
    begin = jobs["start"].to_numpy(dtype="datetime64[ns]").astype("int64")
    finish = jobs["end"].to_numpy(dtype="datetime64[ns]").astype("int64")
    nat = np.iinfo("int64").min
    started = begin != nat
    finish = np.where(finish == nat, run_ns, finish)
    if as_of is not None:
        cut = _ts(as_of).value
        started &= begin <= cut
        finish = np.where(finish > cut, run_ns, finish)
    lo = np.maximum(begin, t0)
    hi = np.minimum(finish, t1)
    seconds = np.where(started, np.maximum(hi - lo, 0), 0) / 1e9
    return seconds


def usage(jobs: pd.DataFrame, start: datetime, end: datetime, by=("user",), *,
          now: datetime | None = None, as_of: datetime | None = None,
          running_until: datetime | None = None) -> pd.DataFrame:
    """Usage per group over [start, end): cpu/gpu/billing seconds and hours, job count."""
    by = [by] if isinstance(by, str) else list(by)
    for name in by:
        if name not in GROUPS:
            raise SlinkyError(f"--by: unknown grouping {name!r} (choose from {', '.join(GROUPS)})")
    seconds = overlap_seconds(jobs, start, end, now=now, as_of=as_of,
                              running_until=running_until)
    frame = pd.DataFrame({
        "cpu_seconds": seconds * jobs["alloc_cpu"].fillna(jobs["alloc_cpus"]).fillna(0).to_numpy(),
        "gpu_seconds": seconds * jobs["alloc_gpus"].fillna(0).to_numpy(),
        "billing_seconds": seconds * jobs["alloc_billing"].fillna(jobs["alloc_cpu"]).fillna(0)
        .to_numpy(),
        "jobs": (seconds > 0).astype("int64"),
    })
    columns = {name: _COLUMN.get(name, name) for name in by}
    keys = pd.DataFrame({name: jobs[col].astype("string").fillna("").array  # Arrow strings group fast
                         for name, col in columns.items()}) if len(jobs) else \
        pd.DataFrame({name: pd.Series(dtype="string") for name in by})
    frame = pd.concat([keys, frame], axis=1)
    out = frame.groupby(by, dropna=False, sort=True).sum(numeric_only=True).reset_index()
    out = out[out["jobs"] > 0].reset_index(drop=True)
    for kind in ("cpu", "gpu", "billing"):
        out[f"{kind}_hours"] = out[f"{kind}_seconds"] / 3600.0
    return out


def usage_over_time(jobs: pd.DataFrame, start: datetime, end: datetime, *, freq: str = "1h",
                    by: str = "account", kind: str = "gpu", now: datetime | None = None
                    ) -> pd.DataFrame:
    """Hours per ``by`` in consecutive windows of ``freq`` (rows: window start, cols: group)."""
    edges = pd.date_range(_ts(start), _ts(end), freq=freq)
    if len(edges) == 0 or edges[-1] < _ts(end):
        edges = edges.append(pd.DatetimeIndex([_ts(end)]))
    table = {}
    for lo, hi in zip(edges[:-1], edges[1:], strict=False):
        part = usage(jobs, lo, hi, by=(by,), now=now)
        table[lo] = dict(zip(part[by], part[f"{kind}_hours"], strict=False))
    return pd.DataFrame.from_dict(table, orient="index").fillna(0.0).sort_index()


def sreport_window(start: datetime, end: datetime) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The window sreport actually reports for ``start``/``end`` (``usage_rows.sreport_window``)."""
    lo, hi = usage_rows.sreport_window(_ts(start).to_pydatetime(), _ts(end).to_pydatetime())
    return pd.Timestamp(lo), pd.Timestamp(hi)


def reconcile_sreport(ours: pd.DataFrame, sreport: pd.DataFrame, parents: dict[str, str | None],
                      unit_seconds: int = 1) -> pd.DataFrame:
    """Our per (account, user) CPU seconds next to sreport AccountUtilizationByUser.

    ``parents``: account → parent (sreport's rows include sub-accounts); ours is rounded as sreport's
    ``%.0lf`` does (halves to even), in ``unit_seconds``.
    """
    per_user = {(a, u): s for a, u, s in zip(ours["account"], ours["user"], ours["cpu_seconds"], strict=False)}
    per_account: dict[str, float] = {}
    for (account, _user), seconds in per_user.items():
        node: str | None = account
        while node:
            per_account[node] = per_account.get(node, 0.0) + seconds
            node = parents.get(node)
    rows = []
    for row in sreport.itertuples(index=False):
        if isinstance(row.user, str) and row.user:
            mine = per_user.get((row.account, row.user), 0.0)
        else:
            mine = per_account.get(row.account, 0.0)
        rows.append(dict(account=row.account, user=row.user, sreport=int(row.used),
                         ours_seconds=mine, ours=_units(mine, unit_seconds)))
    seen = {(r["account"], r["user"]) for r in rows}
    for (account, user), seconds in per_user.items():
        if (account, user) not in seen and _units(seconds, unit_seconds):
            rows.append(dict(account=account, user=user, sreport=0, ours_seconds=seconds,
                             ours=_units(seconds, unit_seconds)))
    out = pd.DataFrame(rows, columns=["account", "user", "sreport", "ours_seconds", "ours"])
    out["diff"] = out["ours"] - out["sreport"]
    return out


def _units(seconds: float, unit_seconds: int) -> int:
    """sreport prints ``seconds / unit`` with ``%.0lf`` (sreport/common.c): to the nearest, and
    exact halves (a 30-second remainder in minutes) to the even neighbour, as Python's round."""
    return int(round(seconds / unit_seconds))
