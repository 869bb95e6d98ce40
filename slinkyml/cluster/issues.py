"""One validation finding (:class:`Issue`) and how objects are named in it; shared by the schema
checks (:mod:`.validate`) and the run-time rules (:mod:`.runtime_checks`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slinkyml.kube import mapping

#: apimachinery's IsDNS1123Label / IsDNS1123Subdomain (lengths checked beside them: 63 / 253)
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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
