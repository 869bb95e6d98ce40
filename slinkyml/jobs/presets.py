"""Network environment presets (NCCL/libfabric/EFA) — data in ``slinkyml/data/network_presets.yaml``.

Variables that only old libraries need are applied only when the job says it runs those versions
(``library_versions``), so a modern image is not pinned to yesterday's workarounds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from slinkyml.errors import SpecError


@lru_cache(maxsize=1)
def load_presets() -> dict[str, Any]:
    import yaml

    text = resources.files("slinkyml").joinpath("data", "network_presets.yaml").read_text()
    return yaml.safe_load(text)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", str(text))
    if not parts:
        raise SpecError("library_versions", f"not a version number: {text!r}")
    return tuple(int(p) for p in parts[:3])


def network_env(network: str, library_versions: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for one network preset, given the library versions the job runs."""
    presets = load_presets()
    if network not in presets:
        raise SpecError("network", f"unknown preset {network!r} (have {', '.join(sorted(presets))})")
    preset = presets[network]
    env = {str(k): str(v) for k, v in (preset.get("env") or {}).items()}
    versions = dict(library_versions or {})
    for rule in preset.get("when") or ():
        have = versions.get(rule["library"])
        if have is not None and _version_tuple(have) < _version_tuple(rule["below"]):
            env.update({str(k): str(v) for k, v in rule["env"].items()})
    return env
