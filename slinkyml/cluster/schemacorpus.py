"""A corpus generated from the schemas, not hand-picked: for every field of every kind the examples
render (its schema from :mod:`.schemas`), its type, enum, pattern, format and bounds violated and
valid variants beside them; every CEL rule violated where a violating value can be built (searched
offline among values the rule and the schema suggest); ObjectMeta's rules; the operator's webhook
rules and what breaks the objects the operator builds (:data:`OPERATOR_CASES`). Each case is one
example's render with one object changed, judged offline (:mod:`.agreement`) and by the live API
server (benchmarks/cluster_agreement.py --schema, tests/test_cluster_agreement.py).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.corpus import EXAMPLES, Case
from slinkyml.cluster.render import render
from slinkyml.cluster.schemas import (
    _openapi,
    apply_defaults,
    check_rules,
    kind_schema,
)

#: how deep fields are followed below the object (spec.a.b.c.d), and at most how many field cases
#: one kind contributes (mariadb-operator's CRD alone has thousands of fields)
MAX_DEPTH = 6
MAX_PER_KIND = 700
#: Kubernetes' kinds whose fields are generated (a Pod template inside a Slinky object is judged by
#: the operator's Pods, not by admission: :data:`.agreement.OFFLINE_ONLY` "embedded")
SKIP_FIELDS = ("metadata", "status", "apiVersion", "kind")


@dataclass(frozen=True)
class Site:
    path: tuple[Any, ...]  # keys and list indexes from the object's root
    node: dict[str, Any]   # the structural schema there (refs resolved)


def _resolve(node: Any) -> dict[str, Any]:
    """A core schema's ``$ref``/``allOf: [$ref]`` followed into the vendored definitions."""
    while isinstance(node, dict):
        ref = node.get("$ref") or next((s.get("$ref") for s in node.get("allOf") or [] if isinstance(s, dict)), None)
        if not ref:
            return node
        node = _openapi()["schemas"][ref.rsplit("/", 1)[1]]
    return {}


def sites(node: dict[str, Any], depth: int = 0, path: tuple[Any, ...] = ()) -> Iterator[Site]:
    """Every field below ``node`` (list items as index 0), parents first."""
    node = _resolve(node)
    for key, sub in sorted((node.get("properties") or {}).items()):
        if not path and key in SKIP_FIELDS:
            continue
        sub = _resolve(sub)
        here = (*path, key)
        yield Site(here, sub)
        if depth < MAX_DEPTH:
            if isinstance(sub.get("items"), dict):
                items = _resolve(sub["items"])
                yield Site((*here, 0), items)
                yield from sites(items, depth + 1, (*here, 0))
            elif sub.get("properties"):
                yield from sites(sub, depth + 1, here)


def _sample(node: dict[str, Any], depth: int = 0) -> Any:
    """A minimal value of ``node``'s shape: its enum's first value, its required fields filled."""
    node = _resolve(node)
    if "default" in node:
        return copy.deepcopy(node["default"])
    if node.get("enum"):
        return node["enum"][0]
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        return 1
    if kind == "object" or node.get("properties"):
        props = node.get("properties") or {}
        return {k: _sample(props[k], depth + 1) for k in node.get("required") or [] if k in props and depth < 8}
    if kind == "array":
        return []
    if kind == "integer":
        return max(1, node.get("minimum", 1))
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return False
    if node.get("format") == "date-time":
        return "2026-01-01T00:00:00Z"
    return "a" * max(1, node.get("minLength", 1))


def _put(obj: dict[str, Any], path: tuple[Any, ...], value: Any, root: dict[str, Any]) -> None:
    """Set ``path`` in ``obj``, building the missing parents from the schema's samples."""
    node: Any = obj
    schema = root
    for i, key in enumerate(path[:-1]):
        schema = _resolve((schema.get("properties") or {}).get(key) if isinstance(key, str) else schema.get("items"))
        following = path[i + 1]
        if isinstance(key, int):
            while len(node) <= key:
                node.append(_sample(schema))
            if not isinstance(node[key], (dict, list)):
                node[key] = _sample(schema)
            node = node[key]
            continue
        if key not in node or not isinstance(node[key], (dict, list)):
            node[key] = [] if isinstance(following, int) else _sample(schema)
            if not isinstance(node[key], (dict, list)):
                node[key] = {}
        node = node[key]
    if isinstance(path[-1], int):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = value


PATTERN_TRIES = ("", "-", "x y", "UPPER_lower!", "a" * 300, "0", "@", "a/b/c", "é")
WRONG_TYPE = {"string": True, "integer": "x", "number": "x", "boolean": "yes", "array": "x", "object": "x"}


def violations(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(label, value) breaking one constraint of ``node`` each."""
    typ = node.get("type")
    if node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string":
        yield "type object for int-or-string", {"x": 1}
    elif typ in WRONG_TYPE:
        yield f"type {typ} -> {type(WRONG_TYPE[typ]).__name__}", WRONG_TYPE[typ]
    if node.get("enum"):
        yield "not in enum", "NotInTheEnum"
    if isinstance(node.get("pattern"), str):
        pattern = re.compile(node["pattern"])
        bad = next((t for t in PATTERN_TRIES if not pattern.search(t)), None)
        if bad is not None:
            yield f"pattern broken {bad[:12]!r}", bad
    fmt = node.get("format")
    if fmt == "int32":
        yield "int32 overflow", 2**31
    if fmt == "int64":
        yield "int64 overflow", 2**63
    if fmt == "date-time":
        yield "not a date-time", "yesterday"
    if typ in ("integer", "number"):
        if "minimum" in node:
            yield "below minimum", node["minimum"] - (0 if node.get("exclusiveMinimum") else 1)
        if "maximum" in node:
            yield "above maximum", node["maximum"] + (0 if node.get("exclusiveMaximum") else 1)
    if typ == "string" or node.get("x-kubernetes-int-or-string"):
        if node.get("minLength"):
            yield "shorter than minLength", "a" * (node["minLength"] - 1)
        if "maxLength" in node:
            yield "longer than maxLength", "a" * (node["maxLength"] + 1)
    if typ == "array":
        if node.get("minItems"):
            yield "fewer than minItems", []
        if "maxItems" in node and isinstance(node.get("items"), dict):
            yield "more than maxItems", [_sample(node["items"])] * (node["maxItems"] + 1)
    if typ == "object" and node.get("properties") and not node.get("x-kubernetes-preserve-unknown-fields"):
        yield "unknown field", {"slinkymlUnknown": 1}


def valid_variants(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for value in (node.get("enum") or [])[:3]:
        yield f"enum {value!r}", value
    typ = node.get("type")
    if typ in ("integer", "number"):
        for bound in ("minimum", "maximum"):
            if bound in node and not node.get(f"exclusive{bound.title()}"):
                yield f"at {bound}", node[bound]
        if node.get("format") == "int32":
            yield "int32 max", 2**31 - 1
    if typ == "boolean":
        yield "true", True
    if typ == "string" and "pattern" not in node and not node.get("enum") and node.get("format") != "date-time":
        yield "a plain string", "a" * max(1, node.get("minLength", 1))


# ---------------------------------------------------------------- CEL rules


def rule_sites(node: dict[str, Any], path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict, str]]:
    """(path, schema, rule) of every create-time rule (items as index 0)."""
    for rule in node.get("x-kubernetes-validations") or []:
        if "oldSelf" not in rule.get("rule", ""):
            yield path, node, rule["rule"]
    for key, sub in (node.get("properties") or {}).items():
        if not path and key in ("metadata", "status"):
            continue
        yield from rule_sites(sub, (*path, key))
    if isinstance(node.get("items"), dict):
        yield from rule_sites(node["items"], (*path, 0))
    if isinstance(node.get("additionalProperties"), dict):
        yield from rule_sites(node["additionalProperties"], (*path, "slinkyml-key"))


def _literals(rule: str) -> list[Any]:
    found = [m[1:-1] for m in re.findall(r"'[^']*'|\"[^\"]*\"", rule)]
    return [*dict.fromkeys(found), "", "x", 0, -1, 2, 3, True, False, [], {}]


def candidates(node: dict[str, Any], value: Any, rule: str) -> Iterator[tuple[str, Any]]:
    """Values near ``value`` the rule may refuse: a field dropped or set to a literal of the rule,
    a list emptied or its item repeated, a map key from the rule's literals."""
    literals = _literals(rule)
    props = node.get("properties") or {}
    if isinstance(value, dict):
        yield "emptied", {}
        for key in sorted(value):
            yield f"{key} removed", {k: v for k, v in value.items() if k != key}
        for key in sorted(props):
            for lit in literals:
                yield f"{key}={json.dumps(lit)[:30]}", {**value, key: lit}
            yield f"{key} sampled", {**value, key: _sample(props[key])}
        if isinstance(node.get("additionalProperties"), dict):
            for lit in literals:
                if isinstance(lit, str):
                    yield f"key {lit!r}", {**value, lit: "x"}
                    yield f"key {lit!r} empty value", {**value, lit: ""}
            for key in [k for k in literals if isinstance(k, str) and k][:4]:
                for lit in literals:
                    if isinstance(lit, str):
                        yield f"key {key!r}={lit!r}", {**value, key: lit}
        for a in sorted(props):
            for b in sorted(props):
                if a < b:
                    yield f"{a} and {b} set", {**value, a: _sample(props[a]) or "x", b: _sample(props[b]) or "x"}
    if isinstance(value, list):
        yield "emptied", []
        if not value and isinstance(node.get("items"), dict):
            value = [_sample(node["items"])]
            yield "one sampled item", value
        if value:
            yield "first item repeated", [value[0], value[0]]
            for label, item in candidates(_resolve(node.get("items")), value[0], rule):
                yield f"[0] {label}", [item, *value[1:]]
                yield f"[0] {label}, twice", [item, item]
    if isinstance(value, str) or node.get("type") == "string":
        for lit in literals:
            if isinstance(lit, str):
                yield f"={lit[:30]!r}", lit
                yield f"={lit[:20]!r}@x", f"{lit}@x"
        yield "='a'*64", "a" * 64


def rule_violation(root: dict[str, Any], obj: dict[str, Any], path: tuple[Any, ...], node: dict[str, Any],
                   rule: str) -> tuple[str, dict[str, Any]] | None:
    """A copy of ``obj`` whose value at ``path`` breaks ``rule`` (and nothing else the schema checks
    there, if one such can be found), with what was done; None when none of the candidates does."""
    base: Any = obj
    for key in path:
        base = base.get(key) if isinstance(base, dict) else (base[key] if isinstance(base, list) and
                                                              len(base) > key else None)  # type: ignore[index]
        if base is None:
            break
    start = base if base is not None else _sample(node)
    for label, value in candidates(node, start, rule):
        found = check_rules({"x-kubernetes-validations": [{"rule": rule}]}, apply_defaults(node, value))
        if found.failed:
            out = copy.deepcopy(obj)
            _put(out, path, value, root)
            return label, out
    return None


# ---------------------------------------------------------------- the corpus


META_CASES = (
    ("metadata.name upper case", ("name",), "Bad_Name"),
    ("metadata.generateName underscore", ("generateName",), "bad_prefix-"),
    ("metadata.labels key with a space", ("labels",), {"bad key": "v"}),
    ("metadata.labels value of 64", ("labels",), {"k": "v" * 64}),
    ("metadata.annotations over 256 KiB", ("annotations",), {"a": "x" * (256 * 1024)}),
    ("metadata.finalizers 'bad finalizer!'", ("finalizers",), ["bad finalizer!"]),
    ("metadata.finalizers without a domain", ("finalizers",), ["cleanup"]),
    ("metadata.finalizers qualified", ("finalizers",), ["example.com/cleanup"]),
    ("metadata.ownerReferences without uid", ("ownerReferences",), [{"apiVersion": "v1", "kind": "ConfigMap",
                                                                     "name": "x"}]),
    ("metadata.ownerReferences complete", ("ownerReferences",), [{"apiVersion": "v1", "kind": "ConfigMap",
                                                                  "name": "x", "uid": "0b4f4c0e-1"}]),
    ("metadata.unknown field", ("slinkymlUnknown",), 1),
)


#: (kind, what, path below the object, value): what admission takes but the operator's webhook
#: refuses, or what passes both but breaks the objects the operator builds (the "operator" reason
#: of :data:`.agreement.OFFLINE_ONLY`); valid neighbours beside them
OPERATOR_CASES = (
    ("RestApi", "replicas -1", ("spec", "replicas"), -1),
    ("RestApi", "replicas 0", ("spec", "replicas"), 0),
    ("LoginSet", "service.port 70000", ("spec", "service", "port"), 70000),
    ("LoginSet", "service.nodePort 70000", ("spec", "service", "nodePort"), 70000),
    ("LoginSet", "service.spec.ports[0].port 70000", ("spec", "service", "spec", "ports"),
     [{"name": "extra", "port": 70000}]),
    ("LoginSet", "service.spec.ports[0].port 2222", ("spec", "service", "spec", "ports"),
     [{"name": "extra", "port": 2222}]),
    ("LoginSet", "service.spec.ports[0].protocol tcp", ("spec", "service", "spec", "ports"),
     [{"name": "extra", "port": 2222, "protocol": "tcp"}]),
    ("LoginSet", "service.spec.type Loadbalancer", ("spec", "service", "spec", "type"), "Loadbalancer"),
    ("LoginSet", "service.spec.type NodePort", ("spec", "service", "spec", "type"), "NodePort"),
    ("LoginSet", "service.spec.ports a string", ("spec", "service", "spec", "ports"), "22"),
    ("LoginSet", "sssdConfRef.name Bad_Name", ("spec", "sssdConfRef", "name"), "Bad_Name"),
    ("Token", "secretRef.name Bad_Name", ("spec", "secretRef", "name"), "Bad_Name"),
    ("Token", "secretRef.name other-name", ("spec", "secretRef", "name"), "other-name"),
    ("Token", "lifetime 1d (not a Go duration)", ("spec", "lifetime"), "1d"),
    ("Token", "lifetime 90m", ("spec", "lifetime"), "90m"),
    ("Accounting", "storageConfig.passwordKeyRef.name Bad_Name", ("spec", "storageConfig", "passwordKeyRef", "name"),
     "Bad_Name"),
    ("Controller", "jwtKeyRef.name Bad_Name", ("spec", "jwtKeyRef", "name"), "Bad_Name"),
    ("Controller", "configFileRefs[0].name Bad_Name", ("spec", "configFileRefs"), [{"name": "Bad_Name"}]),
    ("Controller", "slurmctld cpu request -2", ("spec", "slurmctld", "resources", "requests", "cpu"), "-2"),
    ("Controller", "slurmctld memory limit -1Gi", ("spec", "slurmctld", "resources", "limits", "memory"), "-1Gi"),
    ("Controller", "clusterName '--'", ("spec", "clusterName"), "--"),
    ("Controller", "clusterName of 41", ("spec", "clusterName"), "c" * 41),
    ("Controller", "clusterName of 40", ("spec", "clusterName"), "c" * 40),
    ("NodeSet", "controllerRef.name empty", ("spec", "controllerRef", "name"), ""),
    ("NodeSet", "updateStrategy.scheduledUpdate.duration 59s", ("spec", "updateStrategy", "scheduledUpdate",
                                                                "duration"), "59s"),
    ("NodeSet", "updateStrategy.scheduledUpdate.duration 1d", ("spec", "updateStrategy", "scheduledUpdate",
                                                               "duration"), "1d"),
    ("NodeSet", "updateStrategy.scheduledUpdate.duration 2m", ("spec", "updateStrategy", "scheduledUpdate",
                                                               "duration"), "2m"),
    ("NodeSet", "updateStrategy.rollingUpdate.maxUnavailable 0", ("spec", "updateStrategy", "rollingUpdate",
                                                                  "maxUnavailable"), 0),
    ("NodeSet", "updateStrategy.rollingUpdate.maxUnavailable 0%", ("spec", "updateStrategy", "rollingUpdate",
                                                                   "maxUnavailable"), "0%"),
    ("NodeSet", "template.spec.hostname Bad_Host", ("spec", "template", "spec", "hostname"), "Bad_Host"),
    ("NodeSet", "ssh enabled without sssdConfRef", ("spec", "ssh"), {"enabled": True}),
    ("NodeSet", "slurmd cpu request -1", ("spec", "slurmd", "resources", "requests", "cpu"), "-1"),
    ("LoginSet", "template.spec.volumes name twice", ("spec", "template", "spec", "volumes"),
     [{"name": "fsx", "persistentVolumeClaim": {"claimName": "llm-fsx"}}, {"name": "fsx", "emptyDir": {}}]),
    ("LoginSet", "login.volumeMounts mountPath twice", ("spec", "login", "volumeMounts"),
     [{"name": "fsx", "mountPath": "/fsx"}, {"name": "fsx", "mountPath": "/fsx"}]),
)
#: the example whose render has every kind OPERATOR_CASES change
OPERATOR_EXAMPLE = "h100-efa"


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value


def operator_cases() -> list[Case]:
    rendered = render(load_spec(EXAMPLES_DIR / OPERATOR_EXAMPLE / "cluster.yaml"))
    out = []
    for kind, label, path, value in OPERATOR_CASES:
        index = next(i for i, o in enumerate(rendered.objects) if o["kind"] == kind)
        changed = copy.deepcopy(rendered.objects[index])
        _set(changed, path, copy.deepcopy(value))
        objs = [*rendered.objects[:index], changed, *rendered.objects[index + 1:]]
        out.append(Case(f"{OPERATOR_EXAMPLE}: {kind} {changed['metadata']['name']}: {label}", OPERATOR_EXAMPLE, objs,
                        rendered.plugin_values, "operator"))
    return out


def cases() -> list[Case]:
    """The generated corpus (deterministic): field cases, CEL cases and ObjectMeta cases per kind."""
    out: list[Case] = []
    seen_kinds: set[tuple[str, str]] = set()
    for example in EXAMPLES:
        rendered = render(load_spec(EXAMPLES_DIR / example / "cluster.yaml"))
        base = rendered.objects
        for index, obj in enumerate(base):
            key = (obj["apiVersion"], obj["kind"])
            schema = kind_schema(*key)
            if key in seen_kinds or schema is None:
                continue
            seen_kinds.add(key)
            root = _resolve(schema.raw)
            where = f"{example}: {obj['kind']} {obj['metadata']['name']}"
            values = rendered.plugin_values

            def case(label: str, changed: dict[str, Any], origin: str, index: int = index, where: str = where,
                     example: str = example, base: list[dict[str, Any]] = base, values: Any = values) -> Case:
                objs = [*base[:index], changed, *base[index + 1:]]
                return Case(f"{where}: {label}", example, objs, values, origin)

            fields = []
            for site in sites(root):
                for label, value in [*violations(site.node), *valid_variants(site.node)]:
                    changed = copy.deepcopy(obj)
                    _put(changed, site.path, value, root)
                    fields.append(case(f"{'.'.join(map(str, site.path))}: {label}", changed, "schema"))
            step = max(1, len(fields) / MAX_PER_KIND)
            out += [fields[int(i * step)] for i in range(min(len(fields), MAX_PER_KIND))]
            for path, node, rule in rule_sites(root):
                found = rule_violation(root, obj, path, node, rule)
                label = f"CEL {' '.join(rule.split())[:80]!r} at {'.'.join(map(str, path)) or '<root>'}"
                if found is not None:
                    out.append(case(f"{label}: {found[0]}", found[1], "cel"))
        for index, obj in enumerate(base):
            for label, path, value in META_CASES:
                changed = copy.deepcopy(obj)
                changed["metadata"] = {**changed["metadata"], path[0]: value}
                out.append(Case(f"{example}: {obj['kind']} {obj['metadata']['name']}: {label}", example,
                                [*base[:index], changed, *base[index + 1:]], rendered.plugin_values, "meta"))
    return out + operator_cases()


def unbuildable_rules() -> list[str]:
    """The create-time rules of the rendered kinds for which no violating value was found."""
    out = []
    for example in EXAMPLES:
        for obj in render(load_spec(EXAMPLES_DIR / example / "cluster.yaml")).objects:
            schema = kind_schema(obj["apiVersion"], obj["kind"])
            if schema is None:
                continue
            for path, node, rule in rule_sites(_resolve(schema.raw)):
                if rule_violation(_resolve(schema.raw), obj, path, node, rule) is None:
                    out.append(f"{obj['kind']} {'.'.join(map(str, path))}: {' '.join(rule.split())}")
    return sorted(set(out))
