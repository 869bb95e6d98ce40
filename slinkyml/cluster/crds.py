"""Find the Slinky CRDs and turn their openAPIV3Schema into JSON Schemas we can validate with.

Lookup: ``$SLINKYML_CRD_DIR``, ``<repo>/../shared/slinky-crds``, then the copies in ``data/crds``.
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR, specload
from slinkyml.errors import SlinkyError

PACKAGED_DIR = DATA_DIR / "crds"
REPO_SHARED_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "slinky-crds"


def crd_dir() -> Path:
    """The directory holding the current CRDs (``slinky.slurm.net_*.yaml``)."""
    env = os.environ.get("SLINKYML_CRD_DIR")
    if env:
        p = Path(env)
        if not p.is_dir():
            raise SlinkyError(f"SLINKYML_CRD_DIR={env}: not a directory")
        return p
    shared = REPO_SHARED_DIR.resolve()
    if shared.is_dir() and any(shared.glob("slinky.slurm.net_*.yaml")):
        return shared
    return PACKAGED_DIR


def crd_files(operator_version: str | None = None) -> list[Path]:
    """CRD files for an operator release: current by default, else a ``legacy/v<version>*`` folder."""
    base = crd_dir()
    if operator_version in (None, "", "current", "latest", "v1beta1"):
        files = sorted(base.glob("slinky.slurm.net_*.yaml"))
    else:
        want = operator_version if operator_version.startswith("v") else f"v{operator_version}"
        legacy = base / "legacy"
        folders = sorted(p for p in legacy.glob(f"{want}*") if p.is_dir()) if legacy.is_dir() else []
        if not folders:
            known = sorted(p.name for p in legacy.iterdir()) if legacy.is_dir() else []
            raise SlinkyError(f"--operator-version {operator_version}: no CRDs for it under {legacy} "
                              f"(known: {', '.join(known) or 'none'}; current v1beta1 is the default)")
        files = sorted(folders[-1].glob("*.yaml"))
    if not files:
        raise SlinkyError(f"no Slinky CRD files in {base}")
    return files


def _to_json_schema(node: Any) -> Any:
    """openAPIV3 (structural) -> JSON Schema, *strict*: unknown fields are errors.

    The API server drops unknown fields silently; a dropped field is a bug to catch offline.
    """
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items()
           if k not in ("description", "default", "x-kubernetes-validations", "format")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields") \
            and "additionalProperties" not in node:
        out["additionalProperties"] = False
    if isinstance(node.get("required"), list):  # the server defaults a field before it checks required
        props = node.get("properties") or {}
        out["required"] = [r for r in node["required"] if "default" not in (props.get(r) or {})]
        if not out["required"]:
            del out["required"]
    return out


def _cel_rules(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str, str]]:
    out = []
    if isinstance(node, dict):
        for r in node.get("x-kubernetes-validations") or []:
            out.append((path, r["rule"], r.get("message", r["rule"])))
        for k, v in (node.get("properties") or {}).items():
            out += _cel_rules(v, (*path, k))
    return out


@lru_cache(maxsize=4)
def crd_schemas(operator_version: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> {"schema": JSON Schema, "cel": [(path, rule, message)], "source": file,
    "replicas_path": the scale subresource's spec replicas path, () without one}."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for f in crd_files(operator_version):
        crd = specload.load_data(f.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for ver in crd["spec"]["versions"]:
            if not ver.get("served", True):
                continue
            raw = ver["schema"]["openAPIV3Schema"]
            scale = (ver.get("subresources") or {}).get("scale") or {}
            out[(f"{group}/{ver['name']}", kind)] = {
                "schema": _to_json_schema(copy.deepcopy(raw)),
                "cel": _cel_rules(raw),
                "source": str(f),
                # the scale subresource's replicas path: the server refuses a negative value there
                "replicas_path": tuple(p for p in str(scale.get("specReplicasPath", "")).split(".") if p),
            }
    return out
