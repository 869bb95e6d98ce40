"""Cost per user and account: a job pays for the fraction of an instance it holds.

Prices: the instance presets mapped per partition by ``data/prices.yaml``, a user file merged over.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slinkyml.accounting.prices import DATA_FILE, PartitionPrice, load_prices, unpriced_lines  # noqa: F401 - this module's names


def unpriced(jobs: pd.DataFrame, prices: dict[str, PartitionPrice]) -> list[str]:
    """One line per partition of these jobs that has no price (its jobs' cost is NaN)."""
    return unpriced_lines(jobs["partition"].dropna().astype(str).unique(), prices)


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
    if "alloc_gpu_type" in jobs:  # usage --by gpu_type groups its costs too
        out["gpu_type"] = jobs["alloc_gpu_type"]
    out["cost_usd"] = instances * seconds / 3600.0 * price
    return out


def cost(jobs: pd.DataFrame, by=("account", "user"), prices=None, seconds=None) -> pd.DataFrame:
    prices = load_prices() if prices is None else prices
    return grouped(job_costs(jobs, prices, seconds), by)


def grouped(priced: pd.DataFrame, by=("account", "user")) -> pd.DataFrame:
    """:func:`job_costs`' rows summed per ``by`` (one pricing serves several groupings)."""
    by = [by] if isinstance(by, str) else list(by)
    return priced.groupby(by, dropna=False)["cost_usd"].sum(min_count=1).reset_index()
