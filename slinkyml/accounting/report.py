"""``slinkyml report --html out.html``: usage, cost, efficiency and fair-share in one page,
plots embedded as base64 PNG so the file stands alone."""

from __future__ import annotations

import base64
import html
import tempfile
from datetime import datetime
from pathlib import Path

import pandas as pd

from slinkyml.accounting import efficiency, fairshare, plots, usage
from slinkyml.accounting.sacct import SacctTable


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="", border=0)


def build_html(table: SacctTable, shares: pd.DataFrame, start: datetime, end: datetime,
               out: str | Path, *, prices=None, half_life_s: float | None = None) -> Path:
    from slinkyml.accounting import cost

    jobs = table.jobs
    by_user = usage.usage(jobs, start, end, by=("account", "user"))
    seconds = usage.overlap_seconds(jobs, start, end)
    costs = cost.cost(jobs, by=("account", "user"), prices=prices, seconds=seconds) \
        if len(jobs) else pd.DataFrame(columns=["account", "user", "cost_usd"])
    if len(by_user):
        by_user = by_user.merge(costs, on=["account", "user"], how="left")
    runs = efficiency.runs(jobs, table.steps)
    span = (end - start).total_seconds()
    freq = "1h" if span <= 3 * 86400 else "1D"
    series = usage.usage_over_time(jobs, start, end, freq=freq, by="account",
                                   kind="gpu" if jobs["alloc_gpus"].fillna(0).sum() else "cpu")
    root = fairshare.build_tree(shares)
    ft = fairshare.fair_tree(root)
    tree = shares.merge(ft[["key", "rank"]], on="key", how="left")
    with tempfile.TemporaryDirectory() as tmp:
        kind = "GPU" if jobs["alloc_gpus"].fillna(0).sum() else "CPU"
        img_usage = _img(plots.usage_over_time_png(series, Path(tmp) / "u.png", kind=kind))
        img_tree = _img(plots.fairshare_tree_png(shares, Path(tmp) / "t.png"))
        img_eff = _img(plots.efficiency_hist_png(runs, Path(tmp) / "e.png"))
    cols = ["job_id", "name", "user", "account", "segments", "state", "cpu_efficiency",
            "mem_efficiency", "gpu_hours", "lost_gpu_hours", "lost_cpu_hours", "wait_eligible_s",
            "wait_start_s"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>slinkyml accounting</title>",
        "<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse}"
        "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}</style></head><body>",
        f"<h1>Accounting {html.escape(f'{start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC')}</h1>",
        f"<p>{len(jobs)} job records, {table.malformed} malformed sacct lines skipped.</p>",
        "<h2>Usage and cost by account and user</h2>", _table(by_user), img_usage,
        "<h2>Fair-share</h2>", _table(tree[["account", "user", "raw_shares", "norm_shares",
                                             "raw_usage", "effectv_usage", "level_fs",
                                             "fairshare", "rank"]]), img_tree,
        "<h2>Efficiency per run</h2>", img_eff, _table(runs[cols] if len(runs) else runs),
        "</body></html>",
    ]
    path = Path(out)
    path.write_text("\n".join(parts))
    return path
