"""sacct's fields, the table every accounting backend returns, and the per-value rules of the one
transform (:func:`slinkyml.accounting.sacct_arrow.parse_sacct`): job ids, time limits, ReqMem, MaxRSS.

Fields are separated by ASCII US (``slurm/records.py``; it cannot occur in job names, unlike ``|``).
DBIndex, slurmdbd's record index, is read exactly as an unsigned 64-bit integer: a small counter on
22.05, numbers near 1.7e19 on 24.11, past int64 and float64 precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# the fields, arguments and per-value rules live in the pandas-free sacct_fields (re-exported here)
from slinkyml.accounting.sacct_fields import FIELDS, job_id_parts, sacct_args  # noqa: F401
from slinkyml.accounting.sacct_fields import PER_CPU as _PER_CPU  # noqa: F401
from slinkyml.accounting.sacct_fields import PER_NODE as _PER_NODE
from slinkyml.accounting.sacct_fields import TIMES as _TIMES  # noqa: F401
from slinkyml.accounting.sacct_fields import req_mem as _req_mem  # noqa: F401
from slinkyml.accounting.sacct_fields import req_mem_scale as _req_mem_scale  # noqa: F401
from slinkyml.accounting.sacct_fields import timelimit_seconds as _timelimit_seconds  # noqa: F401
from slinkyml.accounting.tres import parse_size, split_tres, usage_tres
from slinkyml.slurm.records import SEP  # noqa: F401 - the delimiter of sacct text, for its readers


@dataclass
class SacctTable:
    """Parsed sacct output: allocation rows (``jobs``), step rows (``steps``) and what was skipped."""

    jobs: pd.DataFrame
    steps: pd.DataFrame
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)

    @property
    def all(self) -> pd.DataFrame:
        return pd.concat([self.jobs, self.steps], ignore_index=True)


def _inherit_from_job(df: pd.DataFrame) -> None:
    """Steps carry no user/partition/QOS in sacct: copy them from their allocation row."""
    steps = df["step"].notna().to_numpy(dtype=bool)
    if not steps.any():
        return
    jobs = df[~steps]
    parent = df.loc[steps, "parent_key"]
    for col in ("user", "partition", "qos", "account"):
        lookup = pd.Series(jobs[col].to_numpy(), index=jobs["key"].to_numpy())
        lookup = lookup[~lookup.index.duplicated()]
        filled = parent.map(lookup)
        df.loc[steps, col] = df.loc[steps, col].fillna(filled.astype("string"))


def _add_keys(df: pd.DataFrame) -> None:
    """``key``: unique per record even with ``--duplicates`` (requeued runs share a job id);
    ``segment`` numbers the runs of one job id by submit order, steps inherit theirs."""
    if df.empty:
        df["segment"] = pd.Series(dtype="Int64")
        df["key"] = pd.Series(dtype="string")
        df["parent_key"] = pd.Series(dtype="string")
        return
    is_alloc = df["step"].isna().to_numpy(dtype=bool)
    alloc = df.loc[is_alloc, ["job_id", "db_index", "submit"]]
    alloc = alloc.sort_values(["job_id", "submit", "db_index"], kind="stable")
    alloc = alloc.assign(segment=alloc.groupby("job_id", sort=False).cumcount())
    seg = df[["job_id", "db_index"]].merge(
        alloc.drop_duplicates(["job_id", "db_index"])[["job_id", "db_index", "segment"]],
        on=["job_id", "db_index"], how="left")["segment"].fillna(0).astype("int64").to_numpy()
    df["segment"] = pd.array(seg, dtype="Int64")
    job_ids = df["job_id"].astype("string").fillna("?").tolist()
    parents = [f"{j}#{s}" for j, s in zip(job_ids, seg.tolist(), strict=False)]
    steps = df["step"].tolist()
    keys = [p if st is None or st is pd.NA else f"{p}.{st}"
            for p, st in zip(parents, steps, strict=False)]
    df["parent_key"] = pd.array(parents, dtype="string")
    df["key"] = pd.array(keys, dtype="string")


def _max_rss(maxrss: pd.Series) -> pd.Series:
    """MaxRSS: plain bytes with ``--noconvert``; sizes with a unit suffix are still understood."""
    numeric = pd.to_numeric(maxrss, errors="coerce")
    needs = numeric.isna() & maxrss.fillna("").ne("")
    if needs.any():
        numeric[needs] = [parse_size(v, "") for v in maxrss[needs]]
    return numeric.astype("float64")


def _gpuutil(text: str) -> float:
    """``gres/gpuutil=N`` out of a TRESUsageIn* string (the only key we need from it)."""
    value = text.partition("gres/gpuutil=")[2].partition(",")[0]
    try:
        return float(value)
    except ValueError:
        return usage_tres(text).get("gres/gpuutil", math.nan)


def req_mem_total(values: np.ndarray, scales: np.ndarray, cpus: np.ndarray,
                  nodes: np.ndarray) -> np.ndarray:
    """The job's requested memory in bytes, as seff reads it: per-CPU requests × allocated CPUs,
    per-node ones × nodes (only pre-21.08 records say which; newer ReqMem is already the total)."""
    factor = np.where(scales == _PER_CPU, cpus, np.where(scales == _PER_NODE, nodes, 1.0))
    return values * factor


def tres_mem(text) -> float:
    """``mem`` of a TRESUsageIn* string in bytes (``--noconvert``), NaN where absent."""
    if text is None or text is pd.NA or "mem=" not in str(text):
        return math.nan
    return parse_size(split_tres(str(text)).get("mem", ""), "")
