"""DataFrames → plain text, rich tables, JSON and CSV (the CLI's output formats)."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from slinkyml.accounting import rows


def _cell(value) -> str:
    if value is pd.NA:
        return ""
    if isinstance(value, pd.Timestamp):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return rows.cell(value)


def text_table(df: pd.DataFrame) -> str:
    header = [str(c) for c in df.columns]
    rows = [[_cell(v) for v in row] for row in df.itertuples(index=False)]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.rjust(w) if _numeric(c) else c.ljust(w)
                               for c, w in zip(row, widths, strict=False)))
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    return bool(text) and text.replace(",", "").replace(".", "").replace("-", "").isdigit()


def rich_table(df: pd.DataFrame, title: str | None = None):
    from rich.table import Table  # lazy: rich costs the CLI's start-up; only text tables need it

    table = Table(title=title)
    for col in df.columns:
        table.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(df[col])
                         else "left")
    for row in df.itertuples(index=False):
        table.add_row(*[_cell(v) for v in row])
    return table


def to_json(df: pd.DataFrame) -> str:
    records = []
    for row in df.to_dict(orient="records"):
        clean: dict[str, Any] = {}
        for key, value in row.items():
            if value is pd.NA or value is None or (isinstance(value, float) and math.isnan(value)):
                clean[key] = None
            elif isinstance(value, float) and math.isinf(value):
                clean[key] = "inf"
            elif isinstance(value, pd.Timestamp):
                clean[key] = value.isoformat()
            elif hasattr(value, "item"):
                clean[key] = value.item()
            else:
                clean[key] = value
        records.append(clean)
    return json.dumps(records, indent=2)


def to_csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False)
