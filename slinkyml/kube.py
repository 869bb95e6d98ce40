"""Reading Kubernetes values: a field deep inside an object, and resource quantities (``500m``,
``1.5Gi``, ``4``). One copy for cluster validation, ``cluster diff``, ``slinkyml import`` and
``sbatch check``."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

#: apimachinery's resource.Quantity: a signed decimal, then an exponent or a suffix
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+))?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX: dict[str | None, Fraction | int] = {None: 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 10**3,
           "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20,
           "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value: Any) -> Fraction | None:
    """``value`` as an exact number (cores for CPU, bytes for memory); None when it is no quantity."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    m = _QUANTITY.match(str(value).strip())
    if not m:
        return None
    return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2) or 0) * _SUFFIX[m.group(3)]


def mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else an empty one (a manifest field that is absent or malformed)."""
    return value if isinstance(value, dict) else {}


def dig(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``; None as soon as a step is missing or not a mapping."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
