"""One validation finding (:class:`Issue`) and how objects are named in it; shared by the schema
checks (:mod:`.validate`) and the run-time rules (:mod:`.runtime_checks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slinkyml.kube import mapping


@dataclass(frozen=True)
class Issue:
    """One validation error: which object, which field, why."""

    obj: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.obj}: {self.path or '<root>'}: {self.reason}"


def describe(obj: Any) -> str:
    if not isinstance(obj, dict):
        return "<not an object>"
    meta = mapping(obj.get("metadata"))
    name = meta.get("name", "<unnamed>")
    ns = meta.get("namespace")
    return f"{obj.get('kind', '<no kind>')} {ns + '/' if isinstance(ns, str) else ''}{name}"
