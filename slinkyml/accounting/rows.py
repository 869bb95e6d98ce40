"""Plain rows → rich tables, JSON and CSV, as ``render.py`` prints DataFrames, for the reports that
compute without pandas (``slinkyml fairshare``): importing pandas would be most of their run time."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Rows:
    """A table: column names (may repeat in a text table's headers), rows of values, and which columns
    hold numbers (right-justified in text, as ``render.rich_table`` does for numeric dtypes)."""

    columns: list[str]
    data: list[list[Any]]
    numeric: frozenset[str] = field(default_factory=frozenset)

    def __len__(self) -> int:
        return len(self.data)


def missing(value: Any) -> bool:
    """None or NaN: an empty cell."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def cell(value: Any) -> str:
    """One value as the text tables print it."""
    if missing(value):
        return ""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:.6f}" if abs(value) < 1 else f"{value:,.2f}"
    return str(value)


def rich_table(rows: Rows, title: str | None = None):
    from rich.table import Table  # lazy: rich costs the CLI's start-up; only text tables need it

    table = Table(title=title)
    repeated = {c for c in rows.columns if rows.columns.count(c) > 1}  # a DataFrame's repeated column is not numeric
    for col in rows.columns:
        table.add_column(col, justify="right" if col in rows.numeric and col not in repeated else "left")
    for row in rows.data:
        table.add_row(*[cell(v) for v in row])
    return table


def to_json(rows: Rows) -> str:
    records = [{key: None if missing(value) else "inf" if isinstance(value, float) and math.isinf(value) else value
                for key, value in zip(rows.columns, row, strict=True)} for row in rows.data]
    return json.dumps(records, indent=2)


def to_csv(rows: Rows) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(rows.columns)
    writer.writerows([["" if missing(v) else repr(v) if isinstance(v, float) else v for v in row]
                      for row in rows.data])
    return out.getvalue()


def column_max_abs(values: Sequence[Any]) -> float:
    """The largest |value| over the numbers that are there (NaN when none is), as pandas'
    ``abs().max(skipna=True)``."""
    present = [abs(v) for v in values if not missing(v)]
    return max(present) if present else math.nan
