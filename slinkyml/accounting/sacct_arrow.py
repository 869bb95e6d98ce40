"""The sacct transform, :func:`parse_sacct`: sacct's field text → typed pandas frames, on Arrow.

Every backend ends here: the CLI's ``\\x1f``-delimited text is read into Arrow string columns; the
slurmrestd and pyslurm records fill the same columns directly (:func:`rows_to_table`, no text in
between). Repeated columns are converted once per distinct value; pandas only holds the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from slinkyml.accounting import sacct
from slinkyml.accounting.tres import alloc_tres, parse_duration
from slinkyml.errors import SlinkyError
from slinkyml.slurm import records

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_STR = pa.large_string()  # what pandas' ArrowStringArray holds: no cast when wrapping
_BLOCK = 4 << 20  # bytes per parse block: small enough for both cores to share a 300 MB input
_DURATION = r"^(?:(?P<d>[0-9]+)-)?(?:(?P<h>[0-9]+):)?(?P<m>[0-9]+):(?P<s>[0-9]+(?:\.[0-9]+)?)$"


def rows_to_table(rows: Sequence[Mapping[str, Any]]) -> sacct.SacctTable:
    """Records of sacct fields by name (the slurmrestd and pyslurm backends') → the one transform,
    as Arrow columns: text kept whole (a name with ``|`` or a newline too); times (epoch seconds,
    None where Slurm has none) and counts (numbers) fill typed columns, with no text in between."""
    return _frames(_columns(rows), [])


#: sacct fields a backend may give as typed values: times as epoch seconds, the rest as numbers
_TYPED = {**dict.fromkeys(sacct._TIMES, pa.timestamp("s")), "ElapsedRaw": pa.float64(), "AllocCPUS": pa.float64(),
          "NNodes": pa.float64(), "CPUTimeRAW": pa.float64(), "DBIndex": pa.uint64()}


def _columns(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    columns = {}
    for name in sacct.FIELDS:
        values = [row[name] for row in rows]
        if name in _TYPED and not all(isinstance(v, str) for v in values):
            kind = _TYPED[name]
            raw = pa.array(values, type=pa.int64() if pa.types.is_timestamp(kind) else kind)
            columns[name] = raw.cast(kind)
        else:
            columns[name] = pa.array([str(v) for v in values], type=_STR)
    return pa.table(columns)


def parse_sacct(text: str, sep: str = sacct.SEP) -> sacct.SacctTable:
    """Parse sacct output for :data:`~.sacct.FIELDS` (no header). Lines with the wrong field
    count are counted in ``malformed``, never raised; a value sacct never prints (text in a
    numeric field) raises :class:`SlinkyError`."""
    if not text.strip():
        return _frames(pa.table({name: pa.array([], type=_STR) for name in sacct.FIELDS}), [])
    try:
        table, bad = _read(text, sep)
    except (pa.ArrowException, UnicodeError) as exc:
        raise SlinkyError(f"sacct output not understood: {exc}") from exc
    if bad:  # a newline inside a value (a job name) splits its row: join it back, row by row
        rows = records.split_records(text, sacct.FIELDS, sep=sep)
        if rows.malformed < len(bad):
            return _frames(_columns(rows), rows.malformed_examples, rows.malformed)
    return _frames(table, bad)


def _frames(table: pa.Table, bad: list[str], malformed: int | None = None) -> sacct.SacctTable:
    malformed = len(bad) if malformed is None else malformed
    try:
        if table.num_rows == 0:  # the frames of one template row, emptied: the same columns and dtypes
            jobs = _frames(pa.table({name: pa.array([_TEMPLATE.get(name, "")], type=_STR)
                                     for name in sacct.FIELDS}), []).jobs.iloc[0:0]
            return sacct.SacctTable(jobs=jobs, steps=jobs.copy(), malformed=malformed, malformed_examples=bad[:5])
        df = _tidy(table)
        if isinstance(df, pd.DataFrame):
            is_step = df["step"].notna().to_numpy(dtype=bool)
            jobs = df[~is_step].reset_index(drop=True)
            steps = df[is_step].reset_index(drop=True)
        else:  # split the column arrays directly: one take per column instead of two frames'
            is_step = np.asarray(df["step"].isna()) == False  # noqa: E712
            # copy=False: the arrays are fresh and ours; copying would double the frame cost
            jobs, steps = (pd.DataFrame({name: _take(values, rows) for name, values in df.items()},
                                        copy=False)
                           for rows in (np.flatnonzero(~is_step), np.flatnonzero(is_step)))
    except (pa.ArrowException, UnicodeError, ValueError, OverflowError) as exc:
        raise SlinkyError(f"sacct output not understood: {exc}") from exc
    return sacct.SacctTable(jobs=jobs, steps=steps, malformed=malformed, malformed_examples=bad[:5])


_TEMPLATE = {"JobID": "1", "JobIDRaw": "1", "DBIndex": "1"}


class _Coded:
    """A string column kept as (codes, distinct values) until the jobs/steps split: each part is
    built from its own codes once, instead of building the whole column and taking twice."""

    __slots__ = ("codes", "values", "_dictionary")

    def __init__(self, codes: np.ndarray, values: list[str | None]) -> None:
        self.codes, self.values = codes, values
        self._dictionary: Any = None

    def take(self, rows: np.ndarray) -> pd.api.extensions.ExtensionArray:
        if not _arrow_strings():
            return _strings_from_codes(self.codes[rows], self.values)
        if self._dictionary is None:
            self._dictionary = pa.array(self.values, type=_STR)
        return pd.array(self._dictionary.take(pa.array(self.codes[rows])), dtype="string")

    def materialise(self) -> pd.api.extensions.ExtensionArray:
        return _strings_from_codes(self.codes, self.values)


class _Built:
    """A column computed from row numbers, once per part (no whole-column intermediate)."""

    __slots__ = ("build",)

    def __init__(self, build: Callable[[Any], object]) -> None:
        self.build = build

    def take(self, rows: np.ndarray) -> object:
        return self.build(rows)


def _take(values: Any, rows: np.ndarray) -> object:
    if isinstance(values, (_Coded, _Built)):
        return values.take(rows)
    if isinstance(values, pd.Series):
        values = values.array
    if isinstance(values, np.ndarray):
        return values[rows]
    return values.take(rows)


def _read(text: str, sep: str) -> tuple[pa.Table, list[str]]:
    """All fields as strings; lines with the wrong field count are collected, not raised."""
    bad: list[str] = []

    def invalid(row) -> str:
        if row.text.strip():  # whitespace-only lines are dropped silently, as before
            bad.append(row.text)
        return "skip"

    table = pacsv.read_csv(
        pa.py_buffer(text.encode()),
        read_options=pacsv.ReadOptions(column_names=list(sacct.FIELDS), block_size=_BLOCK),
        parse_options=pacsv.ParseOptions(delimiter=sep, quote_char=False, double_quote=False,
                                          escape_char=False, invalid_row_handler=invalid),
        convert_options=pacsv.ConvertOptions(
            column_types={name: _STR for name in sacct.FIELDS},
            strings_can_be_null=False, quoted_strings_can_be_null=False))
    if len(bad) > 1 and len(bad) <= 50:
        # blocks are parsed in parallel, so the handler may see lines out of order
        bad.sort(key=text.find)
    return table, bad


# --- small helpers --------------------------------------------------------------------------

def _encode(col: pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """Codes into one dictionary of distinct values (fields are never null here)."""
    encoded = pc.dictionary_encode(col)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()  # unifies the per-chunk dictionaries
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()


def _per_unique(col: pa.ChunkedArray, func: Callable[[str], float]) -> np.ndarray:
    """``func`` once per distinct value, as float64."""
    codes, uniques = _encode(col)
    table = np.array([func(value) for value in uniques], dtype="float64")
    return table[codes] if len(table) else np.full(len(codes), math.nan)


_TRES_MEM = r"(?:^|,)mem=(?P<number>[0-9.]+)(?P<unit>[KMGTP]?)(?:,|$)"
_UNIT_FACTOR = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}


def _tres_mem(col: pa.ChunkedArray) -> np.ndarray:
    """``mem`` of a TRESUsageIn* column in bytes (NaN where absent), as :func:`sacct.tres_mem` per
    value but in one regex pass: every step row has its own usage string, so per-distinct-value
    parsing was most of the parse time."""
    found = pc.extract_regex(col, _TRES_MEM)
    if isinstance(found, pa.ChunkedArray):
        found = found.combine_chunks()
    # struct_field keeps the row null where the pattern did not match (.field() would give "")
    number = pc.cast(pc.struct_field(found, "number"), pa.float64()).to_numpy(zero_copy_only=False)
    unit = pc.fill_null(pc.struct_field(found, "unit"), "").to_numpy(zero_copy_only=False)
    factor = pd.Series(unit, dtype=object).map(_UNIT_FACTOR).to_numpy(dtype="float64")
    return number * factor


@lru_cache(maxsize=1)
def _arrow_strings() -> bool:
    return pd.StringDtype().storage == "pyarrow"


def _strings(arr: pa.Array | pa.ChunkedArray) -> pd.api.extensions.ExtensionArray:
    """An Arrow string array as pandas ``string`` dtype (whichever storage pandas defaults to)."""
    if _arrow_strings():
        return pd.array(arr, dtype="string")
    return pd.array(arr.to_numpy(zero_copy_only=False), dtype="string")


def _strings_from_codes(codes: np.ndarray, values: list[str | None]
                        ) -> pd.api.extensions.ExtensionArray:
    if _arrow_strings():
        return pd.array(pa.array(values, type=_STR).take(pa.array(codes)), dtype="string")
    return pd.array(np.array(values + [None], dtype=object)[:-1][codes], dtype="string")


def _ints(values: np.ndarray, mask: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.where(mask, 0, values).astype("int64"), mask.copy())


def _nullable_text(col: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.if_else(pc.equal(col, ""), pa.scalar(None, _STR), col)


def _uint64(col: pa.ChunkedArray) -> pd.arrays.IntegerArray:
    """DBIndex: exact unsigned 64-bit (24.11's indices pass int64 and float64 precision)."""
    values = pc.cast(_nullable_text(col) if _is_text(col) else col, pa.uint64())
    mask = values.is_null().to_numpy(zero_copy_only=False)
    return pd.arrays.IntegerArray(values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.uint64),
                                  np.asarray(mask, dtype=bool))


def _floats(col: pa.ChunkedArray) -> np.ndarray:
    """Numeric field: empty → NaN; anything else unparsable raises (as pandas' reader did)."""
    return pc.cast(_nullable_text(col) if _is_text(col) else col, pa.float64()).to_numpy(zero_copy_only=False)


def _is_text(col: pa.ChunkedArray) -> bool:
    return pa.types.is_large_string(col.type) or pa.types.is_string(col.type)


@lru_cache(maxsize=1)
def _time_unit() -> str:
    """The resolution pandas' ``to_datetime`` gives (``ns`` on pandas 2, ``us`` on 3)."""
    probe = pd.to_datetime(pd.Series(["2026-01-01T00:00:00"]), format=_TIME_FORMAT,
                           errors="coerce", utc=True)
    return probe.dtype.unit


def _times(col: pa.ChunkedArray) -> pd.Series:
    """Parsed once per distinct value (steps repeat their job's times); typed ones taken as they are."""
    if not _is_text(col):
        values = col.to_numpy(zero_copy_only=False).astype(f"datetime64[{_time_unit()}]")
        return pd.Series(values).dt.tz_localize("UTC")
    encoded = pc.dictionary_encode(col)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    parsed = pc.strptime(encoded.dictionary, format=_TIME_FORMAT, unit="s", error_is_null=True)
    values = parsed.to_numpy(zero_copy_only=False).astype(f"datetime64[{_time_unit()}]")
    return pd.Series(values[encoded.indices.to_numpy(zero_copy_only=False)]).dt.tz_localize("UTC")


def _heads(col: pa.ChunkedArray, tail: bool = True) -> tuple[pa.Array, pa.Array | None]:
    """``head[.rest]`` → head and rest (null without a dot), like ``str.partition('.')``."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    # one regex pass (matches every string) is ~3x cheaper than split_pattern + list kernels
    parts = pc.extract_regex(col, r"(?s)^(?P<h>[^.]*)(?:\.(?P<r>.*))?$")
    head = pc.struct_field(parts, "h")
    if not tail:
        return head, None
    has_dot = pc.greater_equal(pc.find_substring(col, "."), 0)
    return head, pc.if_else(has_dot, pc.struct_field(parts, "r"), pa.scalar(None, _STR))


def _digits(head: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Integer value of all-ASCII-digit heads, and that mask (other heads: Python, per value)."""
    is_digits = pc.ascii_is_decimal(head)  # False for ""
    mask = is_digits.to_numpy(zero_copy_only=False, writable=True)
    values = pc.cast(pc.if_else(is_digits, head, "0"), pa.int64()).to_numpy(
        zero_copy_only=False, writable=True)
    return values, mask


# --- the columns ----------------------------------------------------------------------------

def _job_ids(table: pa.Table, out: dict) -> None:
    jid = table.column("JobID")
    head, step = _heads(jid)
    out["step"] = step
    out["job_id_display"] = head
    n = len(head)
    # job_id: JobIDRaw before the dot, when it is a number
    raw_head = _heads(table.column("JobIDRaw"), tail=False)[0]
    job, is_num = _digits(raw_head)
    job_na = ~is_num
    if job_na.any():
        rows = np.flatnonzero(job_na)
        codes, uniques = _encode(pa.chunked_array([raw_head.take(pa.array(rows))]))
        parsed = [int(v) if v.isdigit() else None for v in uniques]
        got = [parsed[c] for c in codes]
        job[rows] = [0 if v is None else v for v in got]
        job_na[rows] = [v is None for v in got]
    out["job_id"] = _ints(job, job_na)
    # base / task / het: plain numbers vectorised, the rest per distinct head
    base, plain = _digits(head)
    base_na = ~plain
    task = np.zeros(n, dtype="int64")
    task_na = np.ones(n, dtype=bool)
    het = np.zeros(n, dtype="int64")
    het_na = np.ones(n, dtype=bool)
    if base_na.any():
        rows = np.flatnonzero(base_na)
        codes, uniques = _encode(pa.chunked_array([head.take(pa.array(rows))]))
        parsed = np.array([[-1 if x is None else x for x in sacct.job_id_parts(v)] for v in uniques],
                          dtype="int64").reshape(-1, 3)[codes]
        base[rows], task[rows], het[rows] = parsed[:, 0], parsed[:, 1], parsed[:, 2]
        base_na[rows], task_na[rows], het_na[rows] = (parsed[:, 0] < 0, parsed[:, 1] < 0,
                                                      parsed[:, 2] < 0)
    is_array = pc.match_substring(jid, "_").to_numpy(zero_copy_only=False)
    out["array_job_id"] = _ints(base, base_na | ~is_array)
    out["array_task_id"] = _ints(task, task_na)
    out["het_job_id"] = _ints(base, base_na | het_na)
    out["het_offset"] = _ints(het, het_na)


def _durations(col: pa.ChunkedArray) -> np.ndarray:
    """[D-][HH:]MM:SS[.mmm] → seconds, vectorised over distinct values; the odd ones (empty,
    UNLIMITED, bare numbers) through :func:`parse_duration`. Same arithmetic order as it."""
    codes, uniques = _encode(col)
    values = pa.array(uniques, type=_STR)
    parts = pc.extract_regex(values, _DURATION)
    matched = parts.is_valid().to_numpy(zero_copy_only=False)
    result = np.full(len(uniques), math.nan)

    def field(name: str, kind: pa.DataType, default: str) -> np.ndarray:
        text = pc.struct_field(parts, name)
        text = pc.if_else(pc.or_(pc.is_null(text), pc.equal(text, "")), default, text)
        return pc.cast(text, kind).to_numpy(zero_copy_only=False)

    if matched.any():
        days, hours, minutes = (field(k, pa.int64(), "0") for k in ("d", "h", "m"))
        seconds = field("s", pa.float64(), "0")
        whole = (hours * 3600 + minutes * 60).astype("float64") + seconds
        result = np.where(matched, (days * 86400).astype("float64") + whole, math.nan)
    for i in np.flatnonzero(~matched):
        result[i] = parse_duration(uniques[i])
    return result[codes] if len(result) else np.full(len(codes), math.nan)


def _max_rss(col: pa.ChunkedArray) -> np.ndarray:
    try:
        return _floats(col)
    except pa.ArrowInvalid:  # sizes with units, odd text: per value, by sacct.py's rules
        series = pd.Series(col.to_numpy(zero_copy_only=False), dtype=object)
        return sacct._max_rss(series).to_numpy()


def _gpu_util(col: pa.ChunkedArray) -> np.ndarray:
    has = pc.match_substring(col, "gres/gpuutil")
    mask = has.to_numpy(zero_copy_only=False)
    util = np.full(len(mask), math.nan)
    if not mask.any():
        return util
    texts = pc.filter(col, has)
    value = pc.struct_field(pc.extract_regex(texts, r"gres/gpuutil=(?P<v>[^,]*)"), "v")
    try:
        if value.null_count:
            raise pa.ArrowInvalid("gres/gpuutil without a value")
        util[mask] = pc.cast(value, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        util[mask] = [sacct._gpuutil(v) for v in texts.to_pylist()]
    return util


def _tidy(table: pa.Table) -> pd.DataFrame | dict[str, Any]:
    """Arrow string columns → typed columns (the retired pandas reference's order and dtypes): a
    DataFrame (general case) or, in the common one-record-per-job case, the column arrays."""
    col = table.column
    parts: dict = {}
    _job_ids(table, parts)
    n = table.num_rows
    steps_mask = parts["step"].is_valid().to_numpy(zero_copy_only=False)
    out: dict[str, Any] = {
        "job_id": parts["job_id"],
        "job_id_display": _strings(parts["job_id_display"]),
        "step": _strings(parts["step"]),
        "array_job_id": parts["array_job_id"], "array_task_id": parts["array_task_id"],
        "het_job_id": parts["het_job_id"], "het_offset": parts["het_offset"],
        "db_index": _uint64(col("DBIndex")),
    }
    texts: dict[str, tuple[np.ndarray, list[str | None]]] = {}
    for name, field in (("name", "JobName"), ("user", "User"), ("account", "Account"),
                        ("partition", "Partition"), ("qos", "QOS"), ("nodelist", "NodeList"),
                        ("reservation", "Reservation"), ("cluster", "Cluster")):
        codes, uniques = _encode(col(field))
        texts[name] = (codes, [v if v != "" else None for v in uniques])
        out[name] = None  # placeholder: keeps the column order; filled after inheritance
    codes, uniques = _encode(col("State"))
    out["state"] = _Coded(codes, [v.partition(" ")[0] for v in uniques])
    out["exit_code"] = _Coded(*_encode(col("ExitCode")))
    for field in sacct._TIMES:
        out[field.lower()] = _times(col(field))
    out["elapsed_s"] = _floats(col("ElapsedRaw"))
    out["timelimit_s"] = _per_unique(col("TimelimitRaw"), sacct._timelimit_seconds)
    out["alloc_cpus"] = _floats(col("AllocCPUS"))
    out["nnodes"] = _floats(col("NNodes"))
    out["req_mem_bytes"] = sacct.req_mem_total(
        _per_unique(col("ReqMem"), sacct._req_mem), _per_unique(col("ReqMem"), sacct._req_mem_scale),
        out["alloc_cpus"], out["nnodes"])
    for prefix, field in (("alloc", "AllocTRES"), ("req", "ReqTRES")):
        codes, uniques = _encode(col(field))
        mapped = [alloc_tres(v) for v in uniques]
        values = np.array([m[:5] for m in mapped], dtype="float64").reshape(-1, 5)[codes]
        for i, name in enumerate(("cpu", "mem_bytes", "node", "billing", "gpus")):
            if not (prefix == "req" and name == "mem_bytes"):  # ReqMem gives req_mem_bytes
                out[f"{prefix}_{name}"] = values[:, i]
        out[f"{prefix}_gpu_type"] = _Coded(codes, [m[5] for m in mapped])
    out["total_cpu_s"] = _durations(col("TotalCPU"))
    out["cpu_time_s"] = _floats(col("CPUTimeRAW"))
    out["max_rss_bytes"] = _max_rss(col("MaxRSS"))
    out["mem_used_bytes"] = _tres_mem(col("TRESUsageInTot"))
    out["gpu_util_pct"] = _gpu_util(col("TRESUsageInAve"))

    job = parts["job_id"]
    alloc_ids = job[~steps_mask]
    if alloc_ids.isna().any() or not pd.Index(alloc_ids).is_unique:
        # requeued runs (--duplicates) or odd ids: the general pandas-path code
        for name, (codes, values) in texts.items():
            out[name] = _strings_from_codes(codes, values)
        for name, values in out.items():
            if isinstance(values, _Coded):
                out[name] = values.materialise()
            elif isinstance(values, _Built):
                out[name] = values.build(None)
        df = pd.DataFrame(out, copy=False)
        sacct._add_keys(df)
        sacct._inherit_from_job(df)
        return df
    # One record per job id: every segment is 0, and a step's allocation is the row with its id.
    parent_row = pd.Index(np.asarray(alloc_ids, dtype="int64")).get_indexer(
        np.where(job.isna(), -1, job.to_numpy(dtype="int64", na_value=-1)))
    alloc_rows = np.flatnonzero(~steps_mask)
    step_rows = np.flatnonzero(steps_mask & (parent_row >= 0))
    parents = alloc_rows[parent_row[step_rows]]
    for name in ("user", "partition", "qos", "account"):  # steps: empty → their allocation's
        codes, values = texts[name]
        codes = codes.astype("int64")
        missing = np.array([v is None for v in values], dtype=bool)[codes[step_rows]]
        codes[step_rows[missing]] = codes[parents[missing]]
        texts[name] = (codes, values)
    for name, (codes, values) in texts.items():
        out[name] = _Coded(codes, values)
    out["segment"] = pd.arrays.IntegerArray(np.zeros(n, dtype="int64"), np.zeros(n, dtype=bool))
    # keys are built per part: a job's key is its parent key; a step's adds ".step"
    job_values = job.to_numpy(dtype="int64", na_value=0)
    job_na = job.isna()
    step = parts["step"]
    built: dict[int, tuple[np.ndarray, pa.Array, pa.Array]] = {}

    def keys(rows: np.ndarray) -> tuple[pa.Array, pa.Array]:
        if id(rows) not in built:
            built.clear()
            job_text = pc.fill_null(pc.cast(pa.array(job_values[rows], mask=job_na[rows]), _STR),
                                    "?")
            parent_key = pc.binary_join_element_wise(job_text, pa.scalar("0", _STR),
                                                     pa.scalar("#", _STR))
            part_step = step.take(pa.array(rows))
            if part_step.null_count == len(part_step):
                key = parent_key
            else:
                key = pc.coalesce(pc.binary_join_element_wise(parent_key, part_step,
                                                              pa.scalar(".", _STR)), parent_key)
            built[id(rows)] = (rows, parent_key, key)
        return built[id(rows)][1:]

    out["parent_key"] = _Built(lambda rows: _strings(keys(rows)[0]))
    out["key"] = _Built(lambda rows: _strings(keys(rows)[1]))
    return out
