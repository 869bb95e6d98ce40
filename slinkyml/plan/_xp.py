"""Tiny scalar-or-array helpers: the cost and memory models run unchanged on Python numbers (one
candidate, as the CLI's ``--check`` and the reference loop do) and on numpy arrays (the search)."""

from __future__ import annotations

import math
from typing import Any


def _is_array(*xs: Any) -> bool:
    return any(hasattr(x, "shape") and getattr(x, "ndim", 0) for x in xs)


def where(cond: Any, a: Any, b: Any) -> Any:
    if _is_array(cond, a, b):
        import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

        return np.where(cond, a, b)
    return a if cond else b


def minimum(a: Any, b: Any) -> Any:
    if _is_array(a, b):
        import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

        return np.minimum(a, b)
    return a if a <= b else b


def maximum(a: Any, b: Any) -> Any:
    if _is_array(a, b):
        import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

        return np.maximum(a, b)
    return a if a >= b else b


def floor(a: Any) -> Any:
    if _is_array(a):
        import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

        return np.floor(a)
    return float(math.floor(a))


def ceil(a: Any) -> Any:
    if _is_array(a):
        import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

        return np.ceil(a)
    return float(math.ceil(a))
