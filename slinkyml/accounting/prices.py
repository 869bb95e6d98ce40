"""Partition prices for the cost reports, in the standard library only (the plain usage report and
the pandas one read the same prices): the instance presets mapped per partition by ``data/prices.yaml``,
a user file merged over.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from slinkyml import DATA_DIR, specload
from slinkyml.errors import SpecError
from slinkyml.instances import load_instance_types

DATA_FILE = DATA_DIR / "prices.yaml"


@dataclass(frozen=True)
class PartitionPrice:
    partition: str
    instance_type: str | None
    price_per_hour_usd: float  # NaN when nobody set one: such jobs cost NaN, not a guess
    vcpus: int
    gpus: int

    @property
    def priced(self) -> bool:
        return self.price_per_hour_usd == self.price_per_hour_usd


def load_prices(path: str | os.PathLike[str] | None = None) -> dict[str, PartitionPrice]:
    """Each partition's price: the packaged file, a user file (``path`` or ``$SLINKYML_PRICES``) merged
    over. Read through specload's cache of parsed data files (no PyYAML import once a file was seen)."""
    data = specload.load_data_file(DATA_FILE) or {}
    user = path or os.environ.get("SLINKYML_PRICES")
    parts = dict(data.get("partitions") or {})
    if user:
        try:
            extra = specload.load_data_file(Path(user)) or {}
        except OSError as exc:
            raise SpecError(str(user), f"cannot read price file: {exc}") from None
        except Exception as exc:
            if not isinstance(exc, specload.yaml_error()):
                raise
            raise SpecError(str(user), f"cannot read price file: {exc}") from None
        for name, entry in (extra.get("partitions") or {}).items():
            parts[name] = {**parts.get(name, {}), **(entry or {})}
    types = load_instance_types()
    out = {}
    for name, entry in parts.items():
        where = f"partitions.{name}"
        itype = entry.get("instance_type")
        preset = types.get(itype) if itype else None
        if itype and preset is None:
            raise SpecError(f"{where}.instance_type", f"unknown instance type {itype!r}")
        price = entry.get("price_per_hour_usd", preset.price_per_hour_usd if preset else None)
        if price is None and not itype:
            raise SpecError(where, "needs instance_type or price_per_hour_usd")
        valid = price is None or (isinstance(price, (int, float)) and not isinstance(price, bool) and price >= 0)
        if not valid:
            raise SpecError(f"{where}.price_per_hour_usd", f"must be a number ≥ 0, got {price!r}")
        out[name] = PartitionPrice(name, itype, float("nan") if price is None else float(price),
                                   int(entry.get("vcpus", preset.vcpus if preset else 1)),
                                   int(entry.get("gpus", preset.accelerator_count if preset else 0)))
    return out


def unpriced_lines(partitions: Iterable[str], prices: dict[str, PartitionPrice]) -> list[str]:
    """One line per partition (sorted, empty names left out) that has no price: both reports' notes."""
    lines = []
    for part in sorted({p for p in partitions if p}):
        entry = prices.get(part)
        if entry is None:
            lines.append(f"partition {part}: no price (not in prices.yaml; add it via SLINKYML_PRICES)")
        elif not entry.priced:
            lines.append(f"partition {part}: no price ({entry.instance_type} has no on-demand list price; "
                         "set price_per_hour_usd via SLINKYML_PRICES)")
    return lines
