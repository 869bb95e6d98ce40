"""The accounting dashboard: figures as DataFrames (:func:`collect`), then one self-contained HTML
page (:func:`render_html`; no network fetch); ``data-v`` attributes let a browser test check it.
"""

from __future__ import annotations

import html
import math
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from slinkyml import DATA_DIR
from slinkyml.accounting import cost as cost_mod
from slinkyml.accounting import efficiency, fairshare, usage
from slinkyml.accounting.sacct import SacctTable
from slinkyml.errors import SlinkyError
from slinkyml.slurm import records
from slinkyml.slurm.states import LOST_STATES, State

#: Segment end states whose allocation produced nothing kept (lost hours), in display order.
#: Time-bin widths to choose from: the first giving at most MAX_BINS bins over the window.
BIN_CHOICES = (("1min", 60), ("5min", 300), ("15min", 900), ("1h", 3600), ("6h", 21600), ("1D", 86400),
               ("7D", 604800), ("30D", 2592000))
MAX_BINS = 96
TOP_JOBS = 50
EFFICIENCY_BINS = np.array([0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, np.inf])
METRICS = (("cpu_hours", "CPU-hours"), ("gpu_hours", "GPU-hours"), ("cost_usd", "cost (USD)"))
#: the record columns :func:`collect` reads beside the runs (a store read of these serves the page)
COLUMNS = (*usage.COLUMNS, "job_id", "segment", "nodelist")


@dataclass
class DashboardData:
    """The dashboard's figures; :func:`render_html` draws exactly these."""

    start: datetime
    end: datetime
    bin: str
    records: int
    usage_over_time: pd.DataFrame  # bin_start, account, cpu_hours, gpu_hours, cost_usd
    usage_by: dict[str, pd.DataFrame]  # "account"/"user"/"partition" → jobs, cpu/gpu hours, cost
    fairshare: pd.DataFrame  # tree order: depth, name, shares, usage, LevelFS, FairShare, ranks
    runs: pd.DataFrame  # one row per run (requeued segments stitched), efficiencies
    distributions: pd.DataFrame  # metric, bin_lo, bin_hi, runs
    lost: pd.DataFrame  # state, segments, cpu_hours, gpu_hours
    waits: pd.DataFrame  # bin_start, partition, user, runs, median eligible/start wait (s)
    pending: pd.DataFrame  # squeue's pending jobs now: job_id, user, account, partition, reason, wait_s
    top_jobs: pd.DataFrame  # by GPU-hours (CPU-hours when no GPUs), with their segments
    unpriced: list[str] = field(default_factory=list)
    generated: datetime = field(default_factory=lambda: datetime.now(UTC))


# -- figures ---------------------------------------------------------------------------------------
def choose_bin(start: datetime, end: datetime) -> tuple[str, int]:
    """Minutes for an hour's window, hours for a day's, days for a month's: ≤ MAX_BINS bins."""
    span = max(1.0, (pd.Timestamp(end) - pd.Timestamp(start)).total_seconds())
    for label, seconds in BIN_CHOICES:
        if span / seconds <= MAX_BINS:
            return label, seconds
    return BIN_CHOICES[-1]


def binned_hours(jobs: pd.DataFrame, start: datetime, end: datetime, width_s: int, weights: pd.DataFrame,
                 group: str = "account", now: datetime | None = None) -> pd.DataFrame:
    """Σ weight × seconds inside each bin per group, in O(N log N): for sorted starts s and ends f,
    the weighted overlap with [0, t) is Σ_{s<t} w·(t − s) − Σ_{f<t} w·(t − f); bins are differences
    of that at their edges. Running jobs run until ``now``; hours are pro-rated like :func:`usage`."""
    t0 = pd.Timestamp(start).tz_convert("UTC") if pd.Timestamp(start).tzinfo else pd.Timestamp(start, tz="UTC")
    t1 = pd.Timestamp(end).tz_convert("UTC") if pd.Timestamp(end).tzinfo else pd.Timestamp(end, tz="UTC")
    edges = np.arange(t0.value, t1.value, width_s * 10**9, dtype="int64")
    edges = np.append(edges, t1.value)
    now_ns = pd.Timestamp(now or datetime.now(UTC)).value
    begin = jobs["start"].to_numpy(dtype="datetime64[ns]").astype("int64")
    finish = jobs["end"].to_numpy(dtype="datetime64[ns]").astype("int64")
    nat = np.iinfo("int64").min
    ok = begin != nat
    finish = np.where(finish == nat, now_ns, finish)
    finish = np.maximum(finish, begin)
    codes, names = pd.factorize(jobs[group].astype("string").fillna("")) if len(jobs) else \
        (np.array([], dtype="int64"), pd.Index([], dtype="string"))
    rows = []
    for code in sorted(np.unique(codes[ok]), key=lambda code: str(names[code])):
        name, mask = str(names[code]), ok & (codes == code)
        s, f = begin[mask].astype("float64") / 1e9, finish[mask].astype("float64") / 1e9
        e = edges.astype("float64") / 1e9
        order_s, order_f = np.argsort(s), np.argsort(f)
        out = {"account": name}
        for column in weights.columns:
            w = weights[column].to_numpy(dtype="float64")[mask]
            w = np.nan_to_num(w)
            ws, wf = w[order_s], w[order_f]
            cw_s, cws_s = np.concatenate([[0], np.cumsum(ws)]), np.concatenate([[0], np.cumsum(ws * s[order_s])])
            cw_f, cwf_f = np.concatenate([[0], np.cumsum(wf)]), np.concatenate([[0], np.cumsum(wf * f[order_f])])
            i = np.searchsorted(s[order_s], e, side="left")
            j = np.searchsorted(f[order_f], e, side="left")
            integral = (cw_s[i] * e - cws_s[i]) - (cw_f[j] * e - cwf_f[j])
            out[column] = np.diff(integral) / 3600.0
        rows.append(out)
    frames = [pd.DataFrame({"bin_start": pd.to_datetime(edges[:-1], utc=True), "account": r["account"],
                            **{c: r[c] for c in weights.columns}}) for r in rows]
    if not frames:
        return pd.DataFrame(columns=["bin_start", "account", *weights.columns])
    return pd.concat(frames, ignore_index=True)


def _rate_weights(jobs: pd.DataFrame, prices) -> pd.DataFrame:
    """Per allocation row: CPUs, GPUs and USD per second held (what each second of it is worth)."""
    one_hour = np.full(len(jobs), 3600.0)
    per_hour = cost_mod.job_costs(jobs, prices, seconds=one_hour)["cost_usd"].to_numpy(dtype="float64")
    return pd.DataFrame({
        "cpu_hours": jobs["alloc_cpu"].fillna(jobs["alloc_cpus"]).fillna(0).to_numpy(dtype="float64"),
        "gpu_hours": jobs["alloc_gpus"].fillna(0).to_numpy(dtype="float64"),
        "cost_usd": per_hour,  # USD per hour held: Σ rate × hours = USD
    })


def _usage_by(jobs: pd.DataFrame, start, end, prices) -> dict[str, pd.DataFrame]:
    priced = cost_mod.job_costs(jobs, prices, usage.overlap_seconds(jobs, start, end)) if len(jobs) else None
    out = {}
    for group in ("account", "user", "partition"):
        table = usage.usage(jobs, start, end, by=(group,))
        if priced is not None:
            costs = cost_mod.grouped(priced, (group,))
            costs[group] = costs[group].astype("string").fillna("")
            table = table.merge(costs, on=group, how="left")
        else:
            table["cost_usd"] = pd.Series(dtype="float64")
        out[group] = table[[group, "jobs", "cpu_hours", "gpu_hours", "cost_usd"]].sort_values(
            ["gpu_hours", "cpu_hours"], ascending=False, ignore_index=True)
    return out


def fairshare_tree(shares: pd.DataFrame, algorithm: str = "fair_tree") -> pd.DataFrame:
    """sshare's associations in tree order with slinkyml's own recomputation beside sshare's columns
    and both rank orders (sshare's: users by its FairShare, highest first)."""
    if shares is None or shares.empty:
        return pd.DataFrame(columns=["key", "name", "depth", "is_user", "raw_shares", "norm_shares",
                                     "raw_usage", "effectv_usage", "level_fs", "fairshare", "rank",
                                     "sshare_norm_shares", "sshare_effectv_usage", "sshare_level_fs",
                                     "sshare_fairshare", "sshare_rank"])
    if "norm_shares_sshare" not in shares:  # plain sshare rows: recompute them here
        shares = fairshare.compare(fairshare.recompute(fairshare.build_tree(shares), algorithm),
                                   shares)
    rows = []
    for row in shares[shares["parent"].notna()].itertuples(index=False):  # the root left out
        rows.append({
            "key": row.key, "name": row.key.split("/")[-1], "depth": int(row.depth),
            "is_user": bool(row.is_user), "raw_shares": row.raw_shares,
            "raw_usage": float(row.raw_usage),
            **{col: _number(getattr(row, col)) for col in ("norm_shares", "effectv_usage", "level_fs",
                                                           "fairshare", "rank")},
            **{f"sshare_{col}": _number(getattr(row, f"{col}_sshare"))
               for col in ("norm_shares", "effectv_usage", "level_fs", "fairshare")},
        })
    tree = pd.DataFrame(rows)
    # rank as Fair Tree counts it: the users whose FairShare is ≤ one's own (ties share the rank)
    users = tree[tree["is_user"]]
    values = np.sort(users["sshare_fairshare"].to_numpy(dtype="float64"))
    ranks = np.searchsorted(values, users["sshare_fairshare"].to_numpy(dtype="float64"), side="right")
    tree["sshare_rank"] = tree["key"].map(dict(zip(users["key"], ranks.astype(float), strict=True)))
    return tree


def _number(value) -> float:
    return math.nan if value is None or value is pd.NA else float(value)


def _distributions(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for metric in ("cpu_efficiency", "mem_efficiency", "gpu_efficiency", "time_efficiency"):
        values = runs[metric].dropna().to_numpy(dtype="float64") if metric in runs else np.array([])
        counts, _ = np.histogram(values, bins=EFFICIENCY_BINS)
        for lo, hi, n in zip(EFFICIENCY_BINS[:-1], EFFICIENCY_BINS[1:], counts, strict=True):
            rows.append({"metric": metric, "bin_lo": lo, "bin_hi": hi, "runs": int(n)})
    return pd.DataFrame(rows)


def _lost(jobs: pd.DataFrame) -> pd.DataFrame:
    seconds = jobs["elapsed_s"].fillna(0)
    frame = pd.DataFrame({"state": jobs["state"].astype("string").fillna(""),
                          "cpu_hours": seconds * jobs["alloc_cpu"].fillna(jobs["alloc_cpus"]).fillna(0) / 3600,
                          "gpu_hours": seconds * jobs["alloc_gpus"].fillna(0) / 3600})
    frame = frame[frame["state"].isin(LOST_STATES)]
    out = frame.groupby("state").agg(segments=("state", "size"), cpu_hours=("cpu_hours", "sum"),
                                     gpu_hours=("gpu_hours", "sum")).reindex(list(LOST_STATES)).fillna(0)
    out["segments"] = out["segments"].astype("int64")
    return out.reset_index()


def _waits(runs: pd.DataFrame, start, width_s: int) -> pd.DataFrame:
    started = runs.dropna(subset=["start"]) if len(runs) else runs
    if not len(started):
        return pd.DataFrame(columns=["bin_start", "partition", "user", "runs", "median_eligible_wait_s",
                                     "median_start_wait_s"])
    origin = pd.Timestamp(start).value
    bins = (started["start"].to_numpy(dtype="datetime64[ns]").astype("int64") - origin) // (width_s * 10**9)
    frame = started.assign(bin_start=pd.to_datetime(origin + np.maximum(bins, 0) * width_s * 10**9, utc=True),
                           partition=started["partition"].astype("string").fillna(""),
                           user=started["user"].astype("string").fillna(""))
    return frame.groupby(["bin_start", "partition", "user"]).agg(
        runs=("job_id", "size"), median_eligible_wait_s=("wait_eligible_s", "median"),
        median_start_wait_s=("wait_start_s", "median")).reset_index()


def _runs(table: SacctTable, runs: pd.DataFrame | None) -> pd.DataFrame:
    runs = efficiency.runs(table.jobs, table.steps) if runs is None else runs.copy(deep=False)  # columns added
    if not len(runs):
        return runs
    if "time_efficiency" not in runs:
        limit = table.jobs.groupby("job_id")["timelimit_s"].max()
        runs["time_efficiency"] = runs["elapsed_s"] / runs["job_id"].map(limit)
    if "gpu_efficiency" not in runs:
        runs["gpu_efficiency"] = runs["gpu_util_pct"] / 100.0
    if "job" not in runs:
        array = runs["array_job_id"].astype("Int64")
        task = runs["array_task_id"].astype("Int64")
        runs["job"] = np.where(array.notna() & task.notna(), array.astype("string") + "_" + task.astype("string"),
                               runs["job_id"].astype("string"))
    runs["cpu_hours"] = runs["cpu_time_s"].fillna(0) / 3600
    return runs


def _top_jobs(runs: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    if not len(runs):
        return runs.assign(segments_detail=pd.Series(dtype=object))
    by = "gpu_hours" if runs["gpu_hours"].sum() > 0 else "cpu_hours"
    top = runs.nlargest(TOP_JOBS, by).copy()
    segs = jobs[jobs["job_id"].isin(top["job_id"])].sort_values(["job_id", "segment"])
    detail = {jid: [{"segment": int(r.segment), "state": str(r.state), "nodes": str(r.nodelist or ""),
                     "start": _when(r.start), "end": _when(r.end), "elapsed_s": float(r.elapsed_s or 0)}
                    for r in grp.itertuples()] for jid, grp in segs.groupby("job_id")}
    top["segments_detail"] = top["job_id"].map(detail)
    top.attrs["by"] = by
    return top.reset_index(drop=True)


def pending_jobs(slurm) -> pd.DataFrame:
    """squeue's pending jobs now, with the reason each waits (Priority, Resources, Dependency ...)."""
    columns = ["job_id", "user", "account", "partition", "reason", "submit", "wait_s"]
    if slurm is None:
        return pd.DataFrame(columns=columns)
    fields = ("JobArrayID", "UserName", "Account", "Partition", "Reason", "SubmitTime")
    rows = []
    now = pd.Timestamp.now(tz="UTC")
    for job in records.squeue(slurm, fields, [f"--states={State.PENDING}"], check=False):
        submit = pd.to_datetime(job["SubmitTime"], errors="coerce", utc=True)
        rows.append({"job_id": job["JobArrayID"], "user": job["UserName"], "account": job["Account"],
                     "partition": job["Partition"], "reason": job["Reason"], "submit": submit,
                     "wait_s": (now - submit).total_seconds() if submit is not pd.NaT else math.nan})
    return pd.DataFrame(rows, columns=columns)


def collect(table: SacctTable, shares: pd.DataFrame | None, start: datetime, end: datetime, *,
            pending: pd.DataFrame | None = None, prices=None, partitions: list[str] | None = None,
            algorithm: str = "fair_tree", now: datetime | None = None,
            runs: pd.DataFrame | Future | None = None) -> DashboardData:
    """Every figure of the dashboard as DataFrames (the HTML is drawn from these alone). ``runs``:
    ``efficiency.runs`` of the same records (of ``partitions``) when the store has computed them, or
    is computing them (a Future: the figures of records are drawn meanwhile); else they are computed
    from ``table`` (which then needs ``COLUMNS`` and the step statistics or steps)."""
    prices = cost_mod.load_prices() if prices is None else prices
    jobs = table.jobs
    if partitions:
        keep = jobs["partition"].astype("string").isin(partitions).fillna(False).to_numpy(dtype=bool)
        table = SacctTable(jobs=jobs[keep].reset_index(drop=True),
                           steps=table.steps[table.steps["job_id"].isin(jobs.loc[keep, "job_id"])]
                           if len(table.steps) else table.steps, malformed=table.malformed)
        jobs = table.jobs
    label, width = choose_bin(start, end)
    weights = _rate_weights(jobs, prices) if len(jobs) else pd.DataFrame(columns=[m for m, _ in METRICS])
    over_time = binned_hours(jobs, start, end, width, weights, now=now)
    usage_by, lost = _usage_by(jobs, start, end, prices), _lost(jobs)
    unpriced = cost_mod.unpriced(jobs, prices) if len(jobs) else []
    per_run = _runs(table, runs.result() if isinstance(runs, Future) else runs)
    return DashboardData(
        start=start, end=end, bin=label, records=len(jobs), usage_over_time=over_time, usage_by=usage_by,
        fairshare=fairshare_tree(shares, algorithm) if shares is not None else fairshare_tree(None),
        runs=per_run, distributions=_distributions(per_run) if len(per_run) else _distributions(pd.DataFrame()),
        lost=lost, waits=_waits(per_run, start, width),
        pending=pending if pending is not None else pending_jobs(None),
        top_jobs=_top_jobs(per_run, jobs), unpriced=unpriced)


# -- HTML ----------------------------------------------------------------------------------------
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")
#: the page's stylesheet and script (table sorting, filters, chart switches), inlined as they are
_TEMPLATES = DATA_DIR / "templates"
_CSS = (_TEMPLATES / "dashboard.css").read_text()
_JS = (_TEMPLATES / "dashboard.js").read_text()


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value, kind: str = "num") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return ""
    if kind == "pct":
        return f"{100 * value:.0f}%"
    if kind == "usd":
        return f"${value:,.2f}"
    if kind == "dur":
        seconds = float(value)
        return f"{seconds / 3600:.1f} h" if seconds >= 7200 else f"{seconds / 60:.1f} min" if seconds >= 120 \
            else f"{seconds:.0f} s"
    if isinstance(value, float):
        if math.isinf(value):
            return "∞"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _cell(value, kind: str = "num") -> str:
    if kind == "text":
        return f'<td class="t">{_esc("" if value is None or value is pd.NA else value)}</td>'
    number = float(value) if value is not None and value is not pd.NA and not isinstance(value, str) else math.nan
    shown = _fmt(number if not isinstance(value, (int, np.integer)) else int(value), kind)
    extra = ' class="inf"' if math.isinf(number) else ""
    raw = "Infinity" if math.isinf(number) else ("NaN" if math.isnan(number) else repr(number))
    return f'<td data-v="{raw}"{extra}>{_esc(shown)}</td>'


def _table(table_id: str, frame: pd.DataFrame, columns: list[tuple[str, str, str]], *, filter_box: bool = True,
           detail=None) -> str:
    """A sortable table of ``frame``'s ``columns`` (column, title, kind), numbers in data-v."""
    head = "".join(f'<th class="{"t" if kind == "text" else ""}">{_esc(title)}</th>' for _, title, kind in columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = "".join(_cell(getattr(row, col), kind) for col, _, kind in columns)
        body.append(f"<tr>{cells}</tr>" if detail is None else detail(row, cells))
    box = f'<input class="filter" placeholder="filter…" data-table="{table_id}">' if filter_box else ""
    return (f'{box}<div class="tw"><table class="sortable" id="{table_id}" data-rows="{len(frame)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _stacked_bars(frame: pd.DataFrame, metric: str, title: str, width: int = 1200, height: int = 260) -> str:
    """Stacked bars per time bin, one colour per account; axis in ``metric`` units."""
    if frame.empty:
        return '<p class="note">No usage in this window.</p>'
    pivot = frame.pivot_table(index="bin_start", columns="account", values=metric, aggfunc="sum").fillna(0)
    pivot = pivot.clip(lower=0)
    top = float(pivot.sum(axis=1).max()) or 1.0
    left, plot_h = 60, height - 50
    bar_w = (width - left - 10) / max(1, len(pivot))
    parts = [f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">']
    for i in range(5):
        y = 10 + plot_h * i / 4
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
                     f"{_esc(_fmt(top * (4 - i) / 4))}</text>")
    colours = {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(pivot.columns)}
    for i, (stamp, values) in enumerate(pivot.iterrows()):
        x, y = left + i * bar_w, 10 + plot_h
        for account, value in values.items():
            if value <= 0:
                continue
            h = plot_h * value / top
            y -= h
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 0.5):.1f}" height="{h:.1f}" '
                         f'fill="{colours[account]}"><title>{_esc(stamp)} {_esc(account)}: '
                         f"{_esc(_fmt(float(value)))}</title></rect>")
    ticks = max(1, len(pivot) // 8)
    for i, stamp in enumerate(pivot.index):
        if i % ticks == 0:
            parts.append(f'<text x="{left + i * bar_w:.1f}" y="{height - 8}" font-size="10">'
                         f"{_esc(pd.Timestamp(stamp).strftime('%m-%d %H:%M'))}</text>")
    legend = "".join(f'<span style="color:{c}">■</span> {_esc(a or "(none)")} ' for a, c in colours.items())
    parts.append("</svg>")
    return "".join(parts) + f'<div class="note">{legend}</div>'


def _histogram(frame: pd.DataFrame, metric: str, title: str) -> str:
    part = frame[frame["metric"] == metric]
    top = max(1, int(part["runs"].max()) if len(part) else 1)
    width, height, bar = 300, 140, 300 / max(1, len(part))
    bars = []
    for i, row in enumerate(part.itertuples()):
        h = 100 * row.runs / top
        label = f"{row.bin_lo * 100:.0f}–{row.bin_hi * 100:.0f}%" if np.isfinite(row.bin_hi) else f">{row.bin_lo * 100:.0f}%"
        bars.append(f'<rect x="{i * bar:.1f}" y="{110 - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                    f'fill="#4e79a7"><title>{label}: {row.runs} runs</title></rect>')
    return (f'<div><b>{_esc(title)}</b> <span class="note">({int(part["runs"].sum())} runs)</span>'
            f'<svg viewBox="0 0 {width} {height}" id="hist-{metric}">{"".join(bars)}'
            f'<text x="0" y="{height - 10}" font-size="10">0%</text>'
            f'<text x="{width - 40}" y="{height - 10}" font-size="10">≥100%</text></svg></div>')


def render_html(data: DashboardData, refresh_s: int | None = None) -> str:
    """The page, from :class:`DashboardData` alone (``refresh_s``: reload itself, when served)."""
    window = f"{pd.Timestamp(data.start):%Y-%m-%d %H:%M} – {pd.Timestamp(data.end):%Y-%m-%d %H:%M} UTC"
    sections = []
    charts = "".join(
        f'<div class="chart" data-group="usage" data-metric="{metric}" '
        f'style="display:{"block" if i == 0 else "none"}">{_stacked_bars(data.usage_over_time, metric, title)}</div>'
        for i, (metric, title) in enumerate(METRICS))
    buttons = "".join(f'<button class="m{" on" if i == 0 else ""}" data-group="usage" data-metric="{m}">{t}</button>'
                      for i, (m, t) in enumerate(METRICS))
    sections.append(("usage-over-time", "Usage over time",
                     f'<div>{buttons} <span class="note">bins of {data.bin}, stacked by account</span></div>{charts}'))
    tables = []
    for group in ("account", "user", "partition"):
        frame = data.usage_by[group]
        tables.append(f"<h3>By {group}</h3>" + _table(f"usage-{group}", frame, [
            (group, group, "text"), ("jobs", "jobs", "num"), ("cpu_hours", "CPU-hours", "num"),
            ("gpu_hours", "GPU-hours", "num"), ("cost_usd", "cost", "usd")]))
    note = "".join(f'<p class="note">{_esc(line)}</p>' for line in data.unpriced)
    sections.append(("usage", "Usage and cost", note + "".join(tables)))
    sections.append(("fairshare", "Fair-share tree", _fairshare_html(data.fairshare)))
    hists = "".join(_histogram(data.distributions, m, t) for m, t in (
        ("cpu_efficiency", "CPU efficiency"), ("mem_efficiency", "Memory efficiency"),
        ("gpu_efficiency", "GPU utilisation"), ("time_efficiency", "Time used of the limit")))
    lost = _table("lost", data.lost, [("state", "end state", "text"), ("segments", "segments", "num"),
                                      ("cpu_hours", "CPU-hours lost", "num"), ("gpu_hours", "GPU-hours lost", "num")],
                  filter_box=False)
    requeued = int((data.runs["segments"] > 1).sum()) if len(data.runs) else 0
    sections.append(("efficiency", "Efficiency",
                     f'<div class="grid">{hists}</div><h3>Lost hours by end state</h3>'
                     f'<p class="note">{requeued} runs were requeued; their segments are stitched into one '
                     f"run above and counted per segment here.</p>{lost}"))
    waits = _table("waits", data.waits.assign(bin_start=[_when(t)[:16] for t in data.waits["bin_start"]]), [
        ("bin_start", "from", "text"), ("partition", "partition", "text"), ("user", "user", "text"),
        ("runs", "runs", "num"), ("median_eligible_wait_s", "submit → eligible", "dur"),
        ("median_start_wait_s", "eligible → start", "dur")])
    pending = _table("pending", data.pending, [
        ("job_id", "job", "text"), ("user", "user", "text"), ("account", "account", "text"),
        ("partition", "partition", "text"), ("reason", "reason", "text"), ("wait_s", "waiting", "dur")])
    sections.append(("queue", "Queue", f"<h3>Wait times (median per bin)</h3>{waits}"
                                       f"<h3>Pending now ({len(data.pending)})</h3>{pending}"))
    sections.append(("top-jobs", f"Top jobs by {data.top_jobs.attrs.get('by', 'gpu_hours').replace('_', '-')}",
                     _top_jobs_html(data.top_jobs)))
    body = "".join(f'<section id="{sid}"><h2>{_esc(title)}</h2>{content}</section>' for sid, title, content in sections)
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            'content="width=device-width,initial-scale=1">'
            + (f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else "")
            + f'<title>slinkyml accounting {_esc(window)}</title>'
            f"<style>{_CSS}</style></head><body><header><h1>Accounting {_esc(window)}</h1>"
            f'<div class="note" style="color:#cfd8dc">{data.records} job records · generated '
            f"{data.generated:%Y-%m-%d %H:%M} UTC by slinkyml</div></header><main>{body}</main>"
            f"<script>{_JS}</script></body></html>")


def _fairshare_html(tree: pd.DataFrame) -> str:
    if tree.empty:
        return '<p class="note">No fair-share data.</p>'
    frame = tree.assign(label=[("\u2003" * int(d)) + n for d, n in zip(tree["depth"], tree["name"], strict=True)],
                        shares=tree["raw_shares"].map(_shares_text),
                        rank_diff=tree["rank"] - tree["sshare_rank"])
    table = _table("fairshare-tree", frame, [
        ("label", "association", "text"), ("shares", "shares", "text"), ("norm_shares", "NormShares", "num"),
        ("sshare_norm_shares", "sshare", "num"), ("raw_usage", "RawUsage", "num"),
        ("effectv_usage", "EffectvUsage", "num"), ("sshare_effectv_usage", "sshare", "num"),
        ("level_fs", "LevelFS", "num"), ("sshare_level_fs", "sshare", "num"), ("fairshare", "FairShare", "num"),
        ("sshare_fairshare", "sshare", "num"), ("rank", "rank", "num"), ("sshare_rank", "sshare rank", "num")])
    users = tree[tree["is_user"]]
    agree = int((users["rank"] == users["sshare_rank"]).sum())
    return (f'<p class="note">slinkyml recomputes every column from the association tree; sshare\'s own value '
            f"is beside each. Rank order: {agree} of {len(users)} users agree with sshare. LevelFS ∞: no usage "
            f"yet.</p>{table}")


def _shares_text(value) -> str:
    if value == fairshare.PARENT:
        return "parent"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _top_jobs_html(top: pd.DataFrame) -> str:
    if top.empty:
        return '<p class="note">No jobs in this window.</p>'
    columns = [("job", "job", "text"), ("name", "name", "text"), ("user", "user", "text"),
               ("account", "account", "text"), ("partition", "partition", "text"), ("state", "state", "text"),
               ("segments", "segments", "num"), ("gpu_hours", "GPU-hours", "num"), ("cpu_hours", "CPU-hours", "num"),
               ("cpu_efficiency", "CPU eff", "pct"), ("mem_efficiency", "mem eff", "pct"),
               ("time_efficiency", "time used", "pct")]

    def detail(row, cells: str) -> str:
        segments = "".join(
            f"<tr><td>{s['segment']}</td><td class='t'>{_esc(s['state'])}</td><td class='t'>{_esc(s['nodes'])}</td>"
            f"<td class='t'>{_esc(s['start'])}</td><td class='t'>{_esc(s['end'])}</td>"
            f"<td>{_esc(_fmt(s['elapsed_s'], 'dur'))}</td></tr>" for s in (row.segments_detail or []))
        inner = (f"<details><summary>{len(row.segments_detail or [])} segment(s)</summary><table><thead><tr>"
                 "<th>#</th><th class='t'>state</th><th class='t'>nodes</th><th class='t'>start</th>"
                 f"<th class='t'>end</th><th>elapsed</th></tr></thead><tbody>{segments}</tbody></table></details>")
        return f'<tr>{cells}</tr><tr class="detail"><td class="t" colspan="{len(columns)}">{inner}</td></tr>'

    return _table("top-jobs-table", top, columns, detail=detail)


def _when(value) -> str:
    return "" if value is None or value is pd.NaT or pd.isna(value) else pd.Timestamp(value).strftime("%Y-%m-%d %H:%M:%S")


def write(data: DashboardData, path: str | Path) -> Path:
    """The page into ``path``; a place that cannot be written is one line (``--html``), not a traceback."""
    path = Path(path)
    try:
        path.write_text(render_html(data), encoding="utf-8")
    except OSError as exc:
        raise SlinkyError(f"--html {path}: cannot write: {exc.strerror or exc}") from None
    return path
