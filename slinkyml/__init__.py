"""slinkyml: batch training on Slurm-on-Kubernetes (Slinky).

Public names are imported lazily so that ``import slinkyml`` (and the CLI) stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "LocalCluster": "slinkyml.dev",
    "Slurm": "slinkyml.slurm",
    "SlinkyError": "slinkyml.errors",
    "submit": "slinkyml.dispatch",
    "map_array": "slinkyml.dispatch",
    "Executor": "slinkyml.dispatch",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'slinkyml' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
