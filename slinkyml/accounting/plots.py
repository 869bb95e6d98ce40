"""PNG plots (matplotlib, Agg backend — no display needed on clusters or in CI)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from slinkyml.errors import SlinkyError


def _plt():
    import matplotlib  # lazy: matplotlib is the optional plots extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib is the optional plots extra

    return plt


def usage_over_time_png(series: pd.DataFrame, path: str | Path, *, kind: str = "GPU") -> Path:
    """Stacked bars: hours per account per window (``usage.usage_over_time``)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if series.empty:
        ax.text(0.5, 0.5, "no usage in this window", ha="center", va="center")
    else:
        bottom = None
        labels = [ts.strftime("%m-%d %H:%M") for ts in series.index]
        for col in series.columns:
            ax.bar(labels, series[col].to_numpy(), bottom=bottom, label=str(col))
            bottom = series[col].to_numpy() if bottom is None else bottom + series[col].to_numpy()
        ax.legend(title="account", fontsize=8)
        ax.tick_params(axis="x", rotation=45, labelsize=7)
    ax.set_ylabel(f"{kind}-hours")
    ax.set_title(f"{kind}-hours over time by account")
    return _save(plt, fig, path)


def fairshare_tree_png(table: pd.DataFrame, path: str | Path) -> Path:
    """The association tree, one row per association, bars = LevelFS (users also FairShare)."""
    plt = _plt()
    rows = table[table["parent"].notna() | table["is_user"]].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(9, 0.45 * max(len(rows), 2) + 1.2))
    labels, values, colors = [], [], []
    for row in rows.itertuples(index=False):
        name = f"{row.user} ({row.account})" if row.is_user else row.account
        labels.append("    " * int(row.depth) + name)
        level = row.level_fs if not math.isinf(row.level_fs) else float("nan")
        values.append(level)
        colors.append("tab:green" if row.is_user else "tab:blue")
    finite = [v for v in values if not math.isnan(v)]
    cap = max(finite) * 1.2 if finite else 1.0
    y = list(range(len(labels)))[::-1]
    ax.barh(y, [cap if math.isnan(v) else v for v in values], color=colors,
            alpha=0.8)
    for yi, v, row in zip(y, values, rows.itertuples(index=False), strict=False):
        text = "LevelFS inf" if math.isnan(v) else f"LevelFS {v:.3g}"
        if row.is_user and not math.isnan(row.fairshare):
            text += f"  FairShare {row.fairshare:.3f}"
        ax.text(0.01 * cap, yi, text, va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8, family="monospace")
    ax.set_xlabel("LevelFS (shares / usage among siblings; inf drawn full width)")
    ax.set_title("Fair-share tree")
    return _save(plt, fig, path)


def efficiency_hist_png(runs: pd.DataFrame, path: str | Path) -> Path:
    """Histogram of CPU efficiency (and GPU utilisation where recorded) per run."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    eff = runs["cpu_efficiency"].dropna().clip(0, 1.5) * 100 if len(runs) else pd.Series([])
    ax.hist(eff, bins=20, range=(0, 150), alpha=0.8, label="CPU efficiency")
    if len(runs) and runs["gpu_util_pct"].notna().any():
        ax.hist(runs["gpu_util_pct"].dropna(), bins=20, range=(0, 150), alpha=0.6,
                label="GPU utilisation")
    ax.set_xlabel("percent")
    ax.set_ylabel("runs")
    ax.set_title(f"Efficiency of {len(runs)} runs")
    ax.legend()
    return _save(plt, fig, path)


def _save(plt, fig, path: str | Path) -> Path:
    """Lay out, write the PNG and free the figure (pyplot keeps every open figure alive)."""
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110, format="png")  # PNG whatever the name ends with (--png FILE)
    except OSError as exc:
        raise SlinkyError(f"--png {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return Path(path)
