"""Every kind's real schema, as the API server applies it on create: the CRDs' openAPIV3Schema
(Slinky from :mod:`.crds`; Karpenter and mariadb-operator vendored from their Go modules in
``data/crds/upstream``) and Kubernetes' OpenAPI v3 for core kinds (``data/openapi/kubernetes.json``,
trimmed from k8s.io/kubernetes by kube/vendor_schemas.py).

Turned into strict JSON Schemas (unknown fields are errors: a strict server-side apply refuses
them) with the formats the server enforces (int32/int64 bounds, date-time, quantities); defaults
applied before the CEL rules and list-map keys are checked, as the server does.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema

from slinkyml import DATA_DIR
from slinkyml.cluster import celrules
from slinkyml.cluster.crds import crd_documents

UPSTREAM_CRDS = DATA_DIR / "crds" / "upstream"
KUBERNETES_OPENAPI = DATA_DIR / "openapi" / "kubernetes.json"
#: apimachinery's quantity regular expression (resource.Quantity's parser accepts exactly these)
QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
#: RFC 3339 date-time (metav1.Time, and CRD fields of format date-time)
DATE_TIME = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
             r"([Zz]|[+-][0-9]{2}:[0-9]{2})$")
BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
OBJECT_META_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
QUANTITY_REF = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def to_json_schema(node: Any, ref_prefix: str = "") -> Any:
    """openAPIV3 (structural) -> JSON Schema, *strict*: unknown fields are errors, formats become
    bounds and patterns. ``ref_prefix``: where ``#/components/schemas/`` refs point now, given for
    Kubernetes' own OpenAPI, whose ``default`` is documentation (no defaulting before ``required``);
    there a null is every field's zero value (:func:`without_nulls`)."""
    core = bool(ref_prefix)
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "$defs"):
            out[key] = {name: to_json_schema(sub, ref_prefix) for name, sub in value.items()}

        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_json_schema(value, ref_prefix)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub, ref_prefix) for sub in value]
        elif key not in ("description", "default", "x-kubernetes-validations", "format", "example") \
                and not (key.startswith("x-kubernetes-") and key != "x-kubernetes-int-or-string"):
            out[key] = value
    if isinstance(node.get("$ref"), str) and ref_prefix:
        out["$ref"] = ref_prefix + node["$ref"].rsplit("/", 1)[1]
    fmt = node.get("format")
    if fmt in BOUNDS:
        out["minimum"], out["maximum"] = max(out.get("minimum", BOUNDS[fmt][0]), BOUNDS[fmt][0]), \
            min(out.get("maximum", BOUNDS[fmt][1]), BOUNDS[fmt][1])
    elif fmt == "date-time" and "pattern" not in out:
        out["pattern"] = DATE_TIME
    elif fmt == "int-or-string":
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("x-kubernetes-int-or-string")
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    out.pop("x-kubernetes-int-or-string", None)
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields") \
            and "additionalProperties" not in node:
        out["additionalProperties"] = False
    if core and isinstance(node.get("required"), list):  # Go's validation: a required string is non-empty
        for key in node["required"]:
            sub = out.get("properties", {}).get(key)
            if isinstance(sub, dict) and sub.get("type") == "string" and "enum" not in sub:
                sub.setdefault("minLength", 1)
    if isinstance(node.get("required"), list) and not core:  # the server defaults before it checks required
        props = node.get("properties") or {}
        out["required"] = [r for r in node["required"] if "default" not in (props.get(r) or {})]
        if not out["required"]:
            del out["required"]
    return out


def without_nulls(value: Any) -> Any:
    """A core object as Go's JSON decoder sees it: a null field is its zero value, i.e. unset."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


# ---------------------------------------------------------------- defaults, CEL, list-map keys


@dataclass
class Walk:
    """What one pass over an object (its schema beside it) found."""

    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, message)
    not_checked: list[str] = field(default_factory=list)


def _path(parent: str, key: Any) -> str:
    return f"{parent}[{key}]" if isinstance(key, int) else (f"{parent}.{key}" if parent else str(key))


def apply_defaults(node: Any, value: Any) -> Any:
    """A copy of ``value`` with the schema's defaults filled in (structural defaulting)."""
    if not isinstance(node, dict):
        return value
    if isinstance(value, dict):
        out = dict(value)
        for key, sub in (node.get("properties") or {}).items():
            if key not in out and isinstance(sub, dict) and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = apply_defaults(sub, out[key])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            props = node.get("properties") or {}
            for key in out:
                if key not in props:
                    out[key] = apply_defaults(extra, out[key])
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [apply_defaults(node["items"], v) for v in value]
    return value


def check_rules(node: Any, value: Any, path: str = "", found: Walk | None = None) -> Walk:
    """The CEL rules and list-map key uniqueness of ``node`` over a defaulted ``value``."""
    found = found if found is not None else Walk()
    if not isinstance(node, dict) or value is None:
        return found
    for rule in node.get("x-kubernetes-validations") or []:
        text = rule.get("rule", "")
        if celrules.is_transition_rule(text):
            continue
        outcome = celrules.evaluate(text, value)
        if outcome.ok is None:
            found.not_checked.append(f"{path or '<root>'}: {outcome.why}")
        elif not outcome.ok:
            message = rule.get("message") or f"failed rule: {' '.join(text.split())}"
            if "rule evaluation error" not in message and outcome.why:
                message += f" ({outcome.why})"
            found.failed.append((path, message))
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for key, sub in props.items():
            if key in value:
                check_rules(sub, value[key], _path(path, key), found)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for key, sub_value in value.items():
                if key not in props:
                    check_rules(extra, sub_value, _path(path, key), found)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        keys = node.get("x-kubernetes-list-map-keys")
        if node.get("x-kubernetes-list-type") == "map" and keys:
            seen: dict[str, int] = {}
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    key = json.dumps([item.get(k) for k in keys])
                    if key in seen:
                        found.failed.append((_path(path, i), f"Duplicate value: {key} (also item {seen[key]})"))
                    seen.setdefault(key, i)
        for i, item in enumerate(value):
            check_rules(node["items"], item, _path(path, i), found)
    return found


# ---------------------------------------------------------------- the sources


@dataclass(frozen=True)
class KindSchema:
    """One kind's strict validator, its raw structural schema (defaults, CEL) and where it is from."""

    validator: Any
    raw: Any
    source: str
    status_subresource: bool = False
    replicas_path: tuple[str, ...] = ()
    core: bool = False  #: a Kubernetes type (Go's decoder: nulls are unset)


def _crd_kinds(crd: dict[str, Any], source: str) -> dict[tuple[str, str], KindSchema]:
    out = {}
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    for ver in crd["spec"]["versions"]:
        if not ver.get("served", True):
            continue
        raw = ver["schema"]["openAPIV3Schema"]
        subresources = ver.get("subresources") or {}
        scale = subresources.get("scale") or {}
        out[(f"{group}/{ver['name']}", kind)] = KindSchema(
            jsonschema.Draft7Validator(to_json_schema(raw)), raw, source, "status" in subresources,
            tuple(p for p in str(scale.get("specReplicasPath", "")).split(".") if p))
    return out


@lru_cache(maxsize=1)
def upstream_sources() -> dict[str, str]:
    """file name -> ``module@version path`` of each vendored upstream CRD."""
    out = {}
    for line in (UPSTREAM_CRDS / "SOURCES.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, path = line.split()
            out[path.rsplit("/", 1)[1].rsplit(".", 1)[0] + ".json"] = f"{module} {path}"
    return out


@lru_cache(maxsize=1)
def upstream_kinds() -> dict[tuple[str, str], KindSchema]:
    """Karpenter's and mariadb-operator's CRDs at the pinned versions (kube/crds.txt)."""
    out: dict[tuple[str, str], KindSchema] = {}
    for name, source in upstream_sources().items():
        out.update(_crd_kinds(json.loads((UPSTREAM_CRDS / name).read_text()), source))
    return out


@lru_cache(maxsize=4)
def slinky_kinds(operator_version: str | None = None) -> dict[tuple[str, str], KindSchema]:
    out: dict[tuple[str, str], KindSchema] = {}
    for source, crd in crd_documents(operator_version):
        out.update(_crd_kinds(crd, source))
    return out


@lru_cache(maxsize=1)
def _openapi() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(KUBERNETES_OPENAPI.read_text())
    return data


def kubernetes_source() -> str:
    return str(_openapi()["source"])


@lru_cache(maxsize=1)
def _core_defs() -> dict[str, Any]:
    defs = {name: to_json_schema(schema, "#/$defs/") for name, schema in _openapi()["schemas"].items()}
    defs[OBJECT_META_REF] = {"type": "object"}  # metadata: validate.metadata_issues, with the server's words
    defs[QUANTITY_REF] = {"anyOf": [{"type": "string", "pattern": QUANTITY}, {"type": "number"}]}
    return defs


@lru_cache(maxsize=32)
def core_kind(api_version: str, kind: str) -> KindSchema | None:
    """A core kind (``v1 Secret``, ``storage.k8s.io/v1 StorageClass``) or a definition name."""
    name = _openapi()["kinds"].get(f"{api_version}/{kind}") if api_version else kind
    if name is None:
        return None
    schema = {"$defs": _core_defs(), "$ref": f"#/$defs/{name}"}
    return KindSchema(jsonschema.Draft202012Validator(schema), _openapi()["schemas"][name], kubernetes_source(),
                      core=True)


def core_kinds() -> list[tuple[str, str]]:
    return [tuple(k.rsplit("/", 1)) for k in _openapi()["kinds"]]  # type: ignore[misc]


def kind_schema(api_version: str, kind: str, operator_version: str | None = None) -> KindSchema | None:
    if api_version.startswith("slinky.slurm.net/"):
        return slinky_kinds(operator_version).get((api_version, kind))
    found = upstream_kinds().get((api_version, kind))
    return found if found is not None else core_kind(api_version, kind)
