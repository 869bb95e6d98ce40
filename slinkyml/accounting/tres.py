"""TRES strings (``billing=2,cpu=2,gres/gpu:a100=4,gres/gpu=4,mem=1024M,node=1``) → numbers.

GPUs are counted once: Slurm lists both the untyped ``gres/gpu`` total and one entry per type.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_SIZE_RE = re.compile(r"^([0-9.]+)([KMGTP]?)$")


def parse_size(text: str, default_unit: str = "") -> float:
    """``1024M`` → bytes; a bare number is in ``default_unit`` (AllocTRES mem: M, usage: bytes)."""
    text = (text or "").strip()
    if not text:
        return math.nan
    match = _SIZE_RE.match(text)
    if not match:
        return math.nan
    number, unit = match.groups()
    return float(number) * _UNITS[unit or default_unit]


def parse_duration(text: str) -> float:
    """Slurm durations (``MM:SS.mmm``, ``HH:MM:SS``, ``D-HH:MM:SS``) → seconds; NaN if absent."""
    if not text or text in ("UNLIMITED", "INVALID", "Partition_Limit"):
        return math.nan
    days = 0
    if "-" in text:
        day_text, _, text = text.partition("-")
        try:
            days = int(day_text)
        except ValueError:
            return math.nan
    parts = text.split(":")
    try:
        if len(parts) == 3:
            seconds = int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])
        elif len(parts) == 2:
            seconds = int(parts[0]) * 60 + float(parts[1])
        elif len(parts) == 1:
            seconds = float(parts[0])
        else:
            return math.nan
    except ValueError:
        return math.nan
    return days * 86400 + seconds


def split_tres(text: str) -> dict[str, str]:
    """``a=1,b=2`` → ``{"a": "1", "b": "2"}`` (raw strings; empty text → empty dict)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key:
            out[key.strip()] = value.strip()
    return out


@lru_cache(maxsize=65536)
def alloc_tres(text: str) -> tuple[float, float, float, float, float, str]:
    """An AllocTRES/ReqTRES string → (cpu, mem bytes, node, billing, gpus, gpu type).

    Cached: a cluster has few distinct shapes. ``mem`` without a suffix is in MB (Slurm's unit).
    """
    tres = split_tres(text)
    cpu = _num(tres.get("cpu"))
    mem = parse_size(tres.get("mem", ""), "M")
    node = _num(tres.get("node"))
    billing = _num(tres.get("billing"))
    gpus, gpu_type = gpu_count(tres)
    return cpu, mem, node, billing, gpus, gpu_type


def gpu_count(tres: dict[str, str]) -> tuple[float, str]:
    """GPUs in a TRES dict, counted once; the type names (``a100`` or ``a100+h100``) kept."""
    typed = {k.split(":", 1)[1]: _num(v) for k, v in tres.items()
             if k.startswith("gres/gpu:") and not k.startswith("gres/gpumem")}
    total = _num(tres.get("gres/gpu"))
    if math.isnan(total):
        total = sum(typed.values()) if typed else 0.0
    return total, "+".join(sorted(typed))


def usage_tres(text: str) -> dict[str, float]:
    """TRESUsageIn* → numbers: ``cpu`` as seconds, ``mem``/``vmem``/``fs/disk`` in bytes,
    ``gres/gpuutil`` in percent, ``gres/gpumem`` in bytes."""
    out: dict[str, float] = {}
    for key, value in split_tres(text).items():
        if key == "cpu":
            out[key] = parse_duration(value)
        elif key in ("mem", "vmem", "fs/disk", "gres/gpumem"):
            out[key] = parse_size(value, "")
        else:
            out[key] = _num(value)
    return out


def _num(value: str | None) -> float:
    if value is None or value == "":
        return math.nan
    try:
        return float(value)
    except ValueError:
        size = parse_size(value, "")
        return size
