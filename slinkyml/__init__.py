"""slinkyml: batch training on Slurm-on-Kubernetes (Slinky).

Public names are imported lazily so that ``import slinkyml`` (and the CLI) stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

#: the packaged data files (tables, schemas, CRDs, templates): data kept as data, not code
DATA_DIR = Path(__file__).resolve().parent / "data"

_LAZY = {
    "LocalCluster": "slinkyml.dev",
    "Slurm": "slinkyml.slurm",
    "SlinkyError": "slinkyml.errors",
    "submit": "slinkyml.dispatch",
    "map_array": "slinkyml.dispatch",
    "Executor": "slinkyml.dispatch",
}


def lazy_names(package: str, module_of: dict[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562): each name imported from its module on first use."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__


__getattr__ = lazy_names("slinkyml", _LAZY)


__all__ = sorted(_LAZY)
