"""Environment presets as data: network (``data/network_presets.yaml``) and launcher runtime
(``data/runtime_presets.yaml``), each variable with its upstream source.

Version-dependent variables follow the versions the job really runs (detected at job start, else
declared).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from slinkyml import DATA_DIR, specload
from slinkyml.errors import SpecError
from slinkyml.jobs.spec import JobSpec

#: A bash function the detecting script uses to compare versions (GNU ``sort -V``, as Python's
#: :func:`version_below` on the dotted numbers).
VERSION_BELOW_FUNCTION = ('slinkyml_version_below() { [[ "$1" != "$2" && '
                          '"$(printf \'%s\\n\' "$1" "$2" | sort -V | head -n 1)" == "$1" ]]; }')


@lru_cache(maxsize=4)
def _load(name: str) -> dict[str, Any]:
    data = specload.load_data_file(DATA_DIR / name) or {}
    for preset, body in data.items():
        for key, entry in _variables(body):
            if not isinstance(entry, Mapping) or "value" not in entry or not entry.get("source"):
                raise SpecError(f"{name}: {preset}", f"{key} needs a value and a source")
    return data


def _variables(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    out = list((body.get("env") or {}).items())
    for rule in body.get("when") or ():
        out += list(rule["env"].items())
    return out


def load_presets() -> dict[str, Any]:
    """The network presets (``data/network_presets.yaml``)."""
    return _load("network_presets.yaml")


def load_runtime_presets() -> dict[str, Any]:
    """Per-launcher runtime environment (``data/runtime_presets.yaml``)."""
    return _load("runtime_presets.yaml")


def _values(env: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v["value"]) for k, v in (env or {}).items()}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", str(text))
    if not parts:
        raise SpecError("library_versions", f"not a version number: {text!r}")
    return tuple(int(p) for p in parts[:3])


def version_below(have: str, bound: str) -> bool:
    return _version_tuple(have) < _version_tuple(bound)


def _preset(network: str) -> dict[str, Any]:
    presets = load_presets()
    if network not in presets:
        raise SpecError("network", f"unknown preset {network!r} (have {', '.join(sorted(presets))})")
    return presets[network]


def declared_versions(network: str, library_versions: Mapping[str, str] | None = None) -> dict[str, str]:
    """The preset's defaults (the shipped worker image) overridden by the spec's declared versions."""
    versions = {str(k): str(v) for k, v in (_preset(network).get("defaults") or {}).items()}
    versions.update({str(k): str(v) for k, v in (library_versions or {}).items()})
    for value in versions.values():
        _version_tuple(value)  # a bad declared version fails here, at render time
    return versions


def network_env(network: str, library_versions: Mapping[str, str] | None = None, *,
                rdma: bool = False) -> dict[str, str]:
    """The environment for one network preset, given the library versions the job runs and whether
    its instance type's EFA device does RDMA."""
    preset = _preset(network)
    env = _values(preset.get("env"))
    versions = declared_versions(network, library_versions)
    for rule in preset.get("when") or ():
        have = versions.get(rule["library"])
        if rule.get("rdma") and not rdma:
            continue
        if have is not None and version_below(have, rule["below"]):
            env.update(_values(rule["env"]))
    return env


def instance_rdma(spec: JobSpec) -> bool:
    """Whether the spec's instance type has an RDMA-capable EFA device (unknown type: no)."""
    if not spec.instance_type:
        return False
    from slinkyml.instances import get_instance_type  # lazy: only a spec naming an instance type reads them

    return get_instance_type(spec.instance_type).efa_rdma


def runtime_env(launcher: str) -> dict[str, str]:
    """The launcher's runtime settings (e.g. the Neuron runtime's), before the spec's own env."""
    return _values((load_runtime_presets().get(launcher) or {}).get("env"))


def spec_preset_env(spec: JobSpec) -> dict[str, str]:
    """Network and runtime environment of a spec with its declared versions (no node to read)."""
    env = network_env(spec.network, spec.library_versions, rdma=instance_rdma(spec))
    env.update(runtime_env(spec.launcher))
    return env


def _shell_name(library: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", library) + "_version"


def preset_env_lines(spec: JobSpec) -> list[str]:
    """Bash lines exporting the network preset and the launcher's runtime settings.

    Outside a container, versions are detected at job start; in a container the declared ones rule.
    """
    preset = _preset(spec.network)
    rdma = instance_rdma(spec)
    detect = preset.get("detect") or {}
    rules = [r for r in preset.get("when") or () if rdma or not r.get("rdma")]
    own = spec.env  # exported right after these by the renderer: the spec's value wins
    if spec.container is not None or not detect or not rules:
        env = network_env(spec.network, spec.library_versions, rdma=rdma)
        lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k not in own]
    else:
        versions = declared_versions(spec.network, spec.library_versions)
        lines = ["# versions as installed on this node; where unreadable, as declared (library_versions, "
                 "else the worker image's)",
                 VERSION_BELOW_FUNCTION]
        for library, how in detect.items():
            var = _shell_name(library)
            lines += [f'{var}="$({how["command"]})" || true',
                      f'{var}="${{{var}:-{versions[library]}}}"']
        found = ", ".join(f"{lib} ${_shell_name(lib)}" for lib in detect)
        lines.append(f'echo "slinkyml: network {spec.network}: {found}"')
        lines += [f"export {k}={shlex.quote(v)}" for k, v in _values(preset.get("env")).items() if k not in own]
        for rule in rules:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in _values(rule["env"]).items())
            lines.append(f'if slinkyml_version_below "${_shell_name(rule["library"])}" '
                         f'{shlex.quote(str(rule["below"]))}; then export {exports}; fi')
    lines += [f"export {k}={shlex.quote(v)}" for k, v in runtime_env(spec.launcher).items() if k not in own]
    return lines
