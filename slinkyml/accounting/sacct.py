"""``sacct --parsable2`` text → tidy pandas DataFrames (jobs and steps).

Fields are separated by ASCII US (it cannot occur in job names, unlike ``|``); parsing is
column-wise; lines with the wrong field count are counted in :attr:`SacctTable.malformed`, never raised.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from slinkyml.accounting.tres import alloc_tres, parse_duration, parse_size, split_tres, usage_tres
from slinkyml.slurm import records
from slinkyml.slurm.records import SEP

#: sacct fields, in the order requested (``--format``); all exist on 22.05 and 24.11.
FIELDS = (
    "JobID", "JobIDRaw", "DBIndex", "JobName", "User", "Account", "Partition", "QOS", "State",
    "ExitCode", "Submit", "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "AllocCPUS",
    "NNodes", "NodeList", "ReqMem", "ReqTRES", "AllocTRES", "TotalCPU", "CPUTimeRAW", "MaxRSS",
    "TRESUsageInAve", "Reservation", "Cluster", "TRESUsageInTot",
)
_NUMERIC = {"ElapsedRaw", "AllocCPUS", "NNodes", "CPUTimeRAW"}
#: slurmdbd's record index, read exactly as an unsigned 64-bit integer: a small counter on 22.05,
#: numbers near 1.7e19 on 24.11 (e.g. 17340697680727278592), past int64 and float64 precision.
_UINT64 = {"DBIndex"}
_TIMES = ("Submit", "Eligible", "Start", "End")


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


def sacct_args(start: str, end: str, *, users: list[str] | None = None,
               accounts: list[str] | None = None, job_ids: list[int] | None = None,
               duplicates: bool = True) -> list[str]:
    """sacct arguments for :data:`FIELDS` over [start, end] (sacct's own time syntax)."""
    args = records.sacct_args(FIELDS, ["--noconvert", "-S", start, "-E", end])
    if duplicates:
        args.append("--duplicates")  # requeued runs: every segment, not only the last
    if job_ids:
        args += ["--jobs", ",".join(map(str, job_ids))]
    elif users:
        args += ["--user", ",".join(users)]
    else:
        args.append("--allusers")
    if accounts:
        args += ["--accounts", ",".join(accounts)]
    return args


def parse_pandas(text: str, sep: str = SEP) -> SacctTable:
    """The reference parser of sacct output for :data:`FIELDS` (no header): pandas' C reader, then
    :func:`tidy`. Never raises on bad lines. :func:`slinkyml.accounting.sacct_arrow.parse_sacct`
    is the fast path with the same output, and falls back to this one."""
    good, bad = _split_good_lines(text, sep)
    if good is None:
        raw = _empty_frame()
    else:
        raw = pd.read_csv(io.StringIO(good), sep=sep, header=None, names=list(FIELDS),
                          dtype={name: _raw_dtype(name) for name in FIELDS},
                          keep_default_na=False, na_values={n: [""] for n in _NUMERIC | _UINT64},
                          quoting=3, engine="c")
    df = tidy(raw)
    is_step = df["step"].notna()
    return SacctTable(jobs=df[~is_step].reset_index(drop=True),
                      steps=df[is_step].reset_index(drop=True),
                      malformed=len(bad), malformed_examples=bad[:5])


def _split_good_lines(text: str, sep: str) -> tuple[str | None, list[str]]:
    """Return the well-formed text (or None when empty) and the malformed lines."""
    want = len(FIELDS) - 1
    lines = text.split("\n")
    counts = [line.count(sep) for line in lines]
    bad = [line for line, n in zip(lines, counts, strict=False) if n != want and line.strip()]
    if not bad:
        body = text if any(counts) else None
        return body, []
    kept = [line for line, n in zip(lines, counts, strict=False) if n == want]
    return ("\n".join(kept) if kept else None), bad


def _raw_dtype(name: str) -> str | type:
    return "float64" if name in _NUMERIC else "UInt64" if name in _UINT64 else object


def _empty_frame() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=_raw_dtype(name))
                         for name in FIELDS})


def _by_unique(series: pd.Series, func) -> pd.Series:
    """Apply ``func`` once per distinct value (most sacct columns repeat a lot)."""
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    mapped = [func(value) for value in uniques]
    return codes, mapped


def job_id_parts(head: str) -> tuple[int | None, int | None, int | None]:
    """(base, array task, het offset) of a JobID head such as ``7_3``, ``10+1`` or ``7_[4-9]``."""
    base, underscore, rest = head.partition("_")
    if underscore:
        task, plus, het = rest.partition("+")
    else:
        task = None
        base, plus, het = head.partition("+")
    return (int(base) if base.isdigit() else None,
            int(task) if task and task.isdigit() else None,
            int(het) if plus and het.isdigit() else None)


def _split_job_ids(job_ids: list, raw_ids: list) -> dict[str, list]:
    """JobID (``7_3.batch``, ``10+1.0``, ``7_[4-9]``) and JobIDRaw → id parts, in one pass."""
    job, display, steps, bases, tasks, hets = [], [], [], [], [], []
    for text, raw_text in zip(job_ids, raw_ids, strict=False):
        if not isinstance(text, str):
            text = ""
        head, dot, step = text.partition(".")
        steps.append(step if dot else None)
        display.append(head)
        rid = raw_text.partition(".")[0] if isinstance(raw_text, str) else ""
        job.append(int(rid) if rid.isdigit() else None)
        if head.isdigit():  # the common case: a plain job id
            bases.append(int(head))
            tasks.append(None)
            hets.append(None)
            continue
        base, task, het = job_id_parts(head)
        bases.append(base)
        tasks.append(task)
        hets.append(het)
    return {"job_id": job, "display": display, "step": steps, "base": bases, "task": tasks,
            "het": hets}


def tidy(raw: pd.DataFrame) -> pd.DataFrame:
    """Raw string columns → typed columns (see module docstring)."""
    out = pd.DataFrame(index=raw.index)
    parts = _split_job_ids(raw["JobID"].tolist(), raw["JobIDRaw"].tolist())
    out["job_id"] = pd.array(parts["job_id"], dtype="Int64")
    out["job_id_display"] = pd.array(parts["display"], dtype="string")
    out["step"] = pd.array(parts["step"], dtype="string")
    base = pd.array(parts["base"], dtype="Int64")
    task = pd.array(parts["task"], dtype="Int64")
    is_array = np.array([t is not None for t in parts["task"]], dtype=bool) | \
        raw["JobID"].str.contains("_", regex=False).fillna(False).to_numpy(dtype=bool)
    out["array_job_id"] = pd.Series(base, index=raw.index).where(is_array)
    out["array_task_id"] = task
    het = pd.array(parts["het"], dtype="Int64")
    out["het_job_id"] = pd.Series(base, index=raw.index).where(~pd.isna(het))
    out["het_offset"] = het
    out["db_index"] = raw["DBIndex"].astype("UInt64")
    for name, col in (("name", "JobName"), ("user", "User"), ("account", "Account"),
                      ("partition", "Partition"), ("qos", "QOS"), ("nodelist", "NodeList"),
                      ("reservation", "Reservation"), ("cluster", "Cluster")):
        out[name] = raw[col].replace("", None).astype("string")
    codes, mapped = _by_unique(raw["State"], lambda v: str(v).partition(" ")[0])
    out["state"] = pd.array(np.array(list(mapped) + [None], dtype=object)[codes], dtype="string")
    out["exit_code"] = raw["ExitCode"].astype("string")
    for col in _TIMES:
        out[col.lower()] = pd.to_datetime(raw[col], format="%Y-%m-%dT%H:%M:%S", errors="coerce",
                                          utc=True)
    out["elapsed_s"] = raw["ElapsedRaw"].astype("float64")
    codes, mapped = _by_unique(raw["TimelimitRaw"], _timelimit_seconds)
    out["timelimit_s"] = _take(codes, mapped)
    out["alloc_cpus"] = raw["AllocCPUS"].astype("float64")
    out["nnodes"] = raw["NNodes"].astype("float64")
    codes, mapped = _by_unique(raw["ReqMem"], _req_mem)
    scale_codes, scales = _by_unique(raw["ReqMem"], _req_mem_scale)
    out["req_mem_bytes"] = req_mem_total(_take(codes, mapped), _take(scale_codes, scales),
                                         out["alloc_cpus"].to_numpy(), out["nnodes"].to_numpy())
    for prefix, col in (("alloc", "AllocTRES"), ("req", "ReqTRES")):
        codes, mapped = _by_unique(raw[col], alloc_tres)
        table = np.array([m[:5] for m in mapped], dtype="float64").reshape(-1, 5) if mapped \
            else np.empty((0, 5))
        table = np.vstack([table, np.full((1, 5), np.nan)])  # code -1 → NaN row
        values = table[codes]
        for i, name in enumerate(("cpu", "mem_bytes", "node", "billing", "gpus")):
            if not (prefix == "req" and name == "mem_bytes"):  # ReqMem gives req_mem_bytes
                out[f"{prefix}_{name}"] = values[:, i]
        types = np.array([m[5] for m in mapped] + [""], dtype=object)
        out[f"{prefix}_gpu_type"] = pd.array(types[codes], dtype="string")
    out["total_cpu_s"] = _durations(raw["TotalCPU"])
    out["cpu_time_s"] = raw["CPUTimeRAW"].astype("float64")
    out["max_rss_bytes"] = _max_rss(raw["MaxRSS"])
    codes, mapped = _by_unique(raw["TRESUsageInTot"], tres_mem)
    out["mem_used_bytes"] = _take(codes, mapped)
    ave = raw["TRESUsageInAve"].fillna("")
    util = pd.Series(np.nan, index=raw.index, dtype="float64")
    has_gpu = ave.str.contains("gres/gpuutil", regex=False).to_numpy(dtype=bool)
    if has_gpu.any():
        util[has_gpu] = [_gpuutil(v) for v in ave[has_gpu]]
    out["gpu_util_pct"] = util
    _add_keys(out)
    _inherit_from_job(out)
    return out


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


def _take(codes: np.ndarray, mapped: list) -> np.ndarray:
    table = np.array(list(mapped) + [math.nan], dtype="float64")
    return table[codes]


def _durations(series: pd.Series) -> np.ndarray:
    values = series.fillna("").tolist()
    cache: dict[str, float] = {}
    out = np.empty(len(values), dtype="float64")
    for i, text in enumerate(values):
        got = cache.get(text)
        if got is None:
            got = cache[text] = parse_duration(text)
        out[i] = got
    return out


def _timelimit_seconds(text) -> float:
    if text is None or text is pd.NA or text in ("", "UNLIMITED", "Partition_Limit", "INVALID"):
        return math.nan
    try:
        return float(text) * 60.0  # TimelimitRaw is in minutes
    except ValueError:
        return math.nan


def _req_mem(text) -> float:
    """ReqMem's number in bytes: ``900M`` (since 21.08 the job's total request) or, before,
    ``300Mc`` (per CPU) / ``900Mn`` (per node) — see :func:`req_mem_total`."""
    if text is None or text is pd.NA or not text:
        return math.nan
    text = str(text).rstrip("cn")
    return parse_size(text, "M")


_PER_CPU, _PER_NODE = 2.0, 3.0


def _req_mem_scale(text) -> float:
    """ReqMem's unit: 1 = the job's total, :data:`_PER_CPU` (``c``), :data:`_PER_NODE` (``n``)."""
    text = "" if text is None or text is pd.NA else str(text)
    return _PER_CPU if text.endswith("c") else _PER_NODE if text.endswith("n") else 1.0


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
