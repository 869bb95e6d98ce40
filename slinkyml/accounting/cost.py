"""Cost per user and account: a job pays for the fraction of an instance it holds.

Prices: the instance presets mapped per partition by ``data/prices.yaml``, a user file merged over.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from slinkyml import DATA_DIR
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
    import yaml  # lazy: PyYAML only when the data file is first read

    data = yaml.safe_load(DATA_FILE.read_text()) or {}
    user = path or os.environ.get("SLINKYML_PRICES")
    parts = dict(data.get("partitions") or {})
    if user:
        try:
            extra = yaml.safe_load(Path(user).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
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


def unpriced(jobs: pd.DataFrame, prices: dict[str, PartitionPrice]) -> list[str]:
    """One line per partition of these jobs that has no price (its jobs' cost is NaN)."""
    lines = []
    for part in sorted(set(jobs["partition"].dropna().astype(str).unique()) - {""}):
        entry = prices.get(part)
        if entry is None:
            lines.append(f"partition {part}: no price (not in prices.yaml; add it via SLINKYML_PRICES)")
        elif not entry.priced:
            lines.append(f"partition {part}: no price ({entry.instance_type} has no on-demand list price; "
                         "set price_per_hour_usd via SLINKYML_PRICES)")
    return lines


def job_costs(jobs: pd.DataFrame, prices: dict[str, PartitionPrice], seconds=None) -> pd.DataFrame:
    """Cost of each allocation row: instance-hours held × price, where a job holds
    max(GPUs/instance GPUs, CPUs/instance vCPUs) instances (unknown partitions cost NaN)."""
    seconds = jobs["elapsed_s"].fillna(0).to_numpy() if seconds is None else seconds
    # per distinct partition, then spread by code: a few partitions over a million rows
    codes, names = pd.factorize(jobs["partition"].astype("string").fillna(""))
    known = [prices.get(str(name)) for name in names]
    price = np.array([p.price_per_hour_usd if p else np.nan for p in known], dtype="float64")[codes]
    vcpus = np.array([p.vcpus if p else np.nan for p in known], dtype="float64")[codes]
    gpus = np.array([p.gpus if p else 0 for p in known], dtype="float64")[codes]
    cpu_frac = jobs["alloc_cpu"].fillna(0).to_numpy() / vcpus
    gpu_frac = np.where(gpus > 0, jobs["alloc_gpus"].fillna(0).to_numpy() / np.maximum(gpus, 1), 0.0)
    instances = np.maximum(cpu_frac, gpu_frac)
    out = jobs[["user", "account", "partition"]].copy()
    out["cost_usd"] = instances * seconds / 3600.0 * price
    return out


def cost(jobs: pd.DataFrame, by=("account", "user"), prices=None, seconds=None) -> pd.DataFrame:
    prices = load_prices() if prices is None else prices
    return grouped(job_costs(jobs, prices, seconds), by)


def grouped(priced: pd.DataFrame, by=("account", "user")) -> pd.DataFrame:
    """:func:`job_costs`' rows summed per ``by`` (one pricing serves several groupings)."""
    by = [by] if isinstance(by, str) else list(by)
    return priced.groupby(by, dropna=False)["cost_usd"].sum(min_count=1).reset_index()
