"""Diff rendered objects against live ones (:func:`diff_object`) or an earlier render
(:func:`diff_manifests`); pure and offline, one unified diff per object.

Only the fields we set count, as server-side apply sees them; Secret values are always hidden and
``last-applied-configuration`` (which may hold a Secret's content) ignored.
"""

from __future__ import annotations

import base64
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slinkyml.cluster import dump_yaml
from slinkyml.cluster.validate import load_documents
from slinkyml.errors import SlinkyError
from slinkyml.kube import mapping, quantity

FIELD_MANAGER = "slinkyml"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
HIDDEN = "*** (hidden)"
#: metadata fields only the API server sets; their presence marks a dict as a live object.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def object_key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): what identifies an object across renders."""
    meta = obj.get("metadata") or {}
    return (str(obj.get("apiVersion", "")), str(obj.get("kind", "")), str(meta.get("namespace") or ""),
            str(meta.get("name", "")))


def object_label(obj: dict[str, Any]) -> str:
    """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects)."""
    _, kind, namespace, name = object_key(obj)
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


# --- normalising ---------------------------------------------------------------------------------

def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """A plain deep copy (no shared YAML anchors), without last-applied-configuration; a
    Secret's ``stringData`` folded into ``data`` as the API server stores it."""
    out = json.loads(json.dumps(obj, default=str))
    annotations = (out.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:
        del annotations[LAST_APPLIED]
        if not annotations:
            del out["metadata"]["annotations"]
    if out.get("kind") == "Secret" and "stringData" in out:
        out = _fold_string_data(out)
    return out


def _fold_string_data(secret: dict[str, Any]) -> dict[str, Any]:
    data = dict(secret.get("data") or {}) if isinstance(secret.get("data"), dict) else {}
    string_data = secret.get("stringData")
    if isinstance(string_data, dict):
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
    out: dict[str, Any] = {}
    for k, v in secret.items():
        if k == "stringData":
            if "data" not in secret:
                out["data"] = data
        elif k == "data":
            out["data"] = data
        else:
            out[k] = v
    return out


def _mask_secrets(before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    """Replace every Secret value on both sides (in place) by a marker that only says whether it
    changed."""
    sides = [s for s in (before, after) if s is not None and s.get("kind") == "Secret"]
    if not sides:
        return
    data = [mapping(s.get("data")) for s in (before or {}, after or {})]
    for side, tag, own, other in ((before, "before", data[0], data[1]), (after, "after", data[1], data[0])):
        if side is None or side.get("kind") != "Secret":
            continue
        for key in ("data", "stringData"):
            value = side.get(key)
            if isinstance(value, dict):
                side[key] = {k: HIDDEN if k not in other or other[k] == own.get(k) else f"*** (hidden, {tag})"
                             for k in value}
            elif value is not None:
                side[key] = HIDDEN


# --- projecting a live object onto the fields we set -----------------------------------------------

def owned_fields(live: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any] | None:
    """The fieldsV1 tree of what ``manager`` owns by server-side apply (None: no record)."""
    entries = (live.get("metadata") or {}).get("managedFields") or []
    trees = [e.get("fieldsV1") for e in entries if isinstance(e, dict) and e.get("manager") == manager
             and e.get("operation") == "Apply" and not e.get("subresource")]
    found = [t for t in trees if isinstance(t, dict)]
    if not found:
        return None
    merged: dict[str, Any] = {}
    for t in found:
        _merge(merged, t)
    return merged


def _merge(into: dict[str, Any], tree: dict[str, Any]) -> None:
    for k, v in tree.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = json.loads(json.dumps(v))


def _field(owned: Any, key: str) -> Any:
    return owned.get(f"f:{key}") if isinstance(owned, dict) else None


def _item_entries(owned: Any, prefix: str) -> list[tuple[Any, Any]]:
    """Parsed ``k:{...}`` (list-map keys) or ``v:...`` (set values) entries of a fieldsV1 node."""
    out = []
    for k, v in (owned.items() if isinstance(owned, dict) else []):
        if k.startswith(prefix):
            try:
                out.append((json.loads(k[len(prefix):]), v))
            except ValueError:
                continue
    return out


def _owned_item(owned: Any, item: Any) -> Any:
    """The fieldsV1 subtree owning a list item (None if we do not own it)."""
    for keys, sub in _item_entries(owned, "k:"):
        if isinstance(keys, dict) and isinstance(item, dict) and all(item.get(f) == v for f, v in keys.items()):
            return sub
    for value, sub in _item_entries(owned, "v:"):
        if value == item:
            return sub
    return None


def project_live(live: Any, want: Any, owned: Any = None) -> Any:
    """The part of ``live`` that an apply of ``want`` would manage.

    Keys ``want`` sets or ``owned`` (our managedFields) says we set before; list items matched by
    list-map keys, name or position; equal Kubernetes quantities (``1Gi``/``1024Mi``) are equal.
    """
    if isinstance(want, dict) and isinstance(live, dict):
        if owned == {} and live:  # an atomic map: an apply replaces it whole
            return live
        out = {k: project_live(live[k], v, _field(owned, k)) for k, v in want.items() if k in live}
        for k, v in live.items():
            if k not in want and _field(owned, k) is not None:
                out[k] = _owned_part(v, _field(owned, k))
        return out
    if isinstance(want, list) and isinstance(live, list):
        return _project_list(live, want, owned)
    if live != want and quantity(live) is not None and quantity(live) == quantity(want):
        return want
    return live


def _project_list(live: list[Any], want: list[Any], owned: Any) -> list[Any]:
    has_entries = bool(_item_entries(owned, "k:") or _item_entries(owned, "v:"))
    if not (all(isinstance(i, dict) for i in live) and all(isinstance(i, dict) for i in want)):
        if has_entries:  # a set: values others added stay after an apply
            return [x for x in live if x in want or _owned_item(owned, x) is not None]
        return live
    keys: tuple[str, ...] | None = None
    map_keys = [k for k, _ in _item_entries(owned, "k:") if isinstance(k, dict)]
    if map_keys:
        keys = tuple(map_keys[0])
    elif len(live) != len(want) and _unique_names(live) and _unique_names(want):
        keys = ("name",)
    if keys is None:
        out = [project_live(lv, w, _owned_item(owned, lv)) for lv, w in zip(live, want, strict=False)]
        return out + [_project_extra(lv, want) for lv in live[len(want):]]
    out, matched = [], set()
    for w in want:
        for i, lv in enumerate(live):
            if i not in matched and all(lv.get(f) == w.get(f) for f in keys):
                matched.add(i)
                out.append(project_live(lv, w, _owned_item(owned, lv)))
                break
    for i, lv in enumerate(live):
        if i in matched:
            continue
        sub = _owned_item(owned, lv)
        if sub is not None:
            out.append(_owned_part(lv, sub))  # ours before, not any more: an apply removes it
        elif not has_entries:  # no ownership record: show it (atomic lists lose it on apply)
            out.append(_project_extra(lv, want))
    return out


def _unique_names(items: list[dict[str, Any]]) -> bool:
    names = [i.get("name") for i in items]
    return all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def _project_extra(item: Any, want: list[Any]) -> Any:
    """A live list item with no rendered counterpart, cut to the fields rendered items use."""
    fields = {k for w in want if isinstance(w, dict) for k in w}
    if isinstance(item, dict) and fields:
        return {k: v for k, v in item.items() if k in fields}
    return item


def _owned_part(value: Any, owned: Any) -> Any:
    """The part of ``value`` the fieldsV1 tree ``owned`` covers."""
    if isinstance(value, dict) and isinstance(owned, dict) and any(k.startswith("f:") for k in owned):
        return {k: _owned_part(v, owned[f"f:{k}"]) for k, v in value.items() if f"f:{k}" in owned}
    if isinstance(value, list) and (_item_entries(owned, "k:") or _item_entries(owned, "v:")):
        out = []
        for item in value:
            sub = _owned_item(owned, item)
            if sub is not None:
                out.append(_owned_part(item, sub))
        return out
    return value


# --- output ----------------------------------------------------------------------------------------

def _yaml_lines(obj: dict[str, Any] | None) -> list[str]:
    return [] if obj is None else dump_yaml(obj).splitlines(True)


def _unified(before: dict[str, Any] | None, after: dict[str, Any] | None, before_label: str,
             after_label: str) -> str:
    a, b = _yaml_lines(before), _yaml_lines(after)
    if a == b:
        return ""
    return "".join(difflib.unified_diff(a, b, before_label if before is not None else "/dev/null",
                                        after_label if after is not None else "/dev/null"))


def diff_object(rendered: dict[str, Any], live: dict[str, Any] | None, *, manager: str = FIELD_MANAGER,
                live_prefix: str = "live", rendered_prefix: str = "rendered") -> str:
    """Unified diff of ``live`` (as the API server returns it; None: absent) against ``rendered``,
    over the fields an apply of ``rendered`` by ``manager`` manages; '' when they agree."""
    label = object_label(rendered)
    want = _clean(rendered)
    want.pop("status", None)
    have = None
    if live is not None:
        # aligned: the API server returns some maps with their keys sorted (a Secret reference's
        # {key, name}), and key order means nothing to Kubernetes
        have = _align(project_live(_clean(live), want, owned_fields(live, manager)), want)
        if isinstance(have, dict) and isinstance(have.get("metadata"), dict):
            for k in SERVER_METADATA:  # never ours, even if a stale record claims them
                have["metadata"].pop(k, None)
    _mask_secrets(have, want)
    return _unified(have, want, f"{live_prefix}/{label}", f"{rendered_prefix}/{label}")


def _align(value: Any, like: Any) -> Any:
    """``value`` with its mapping keys in the order ``like`` has them (others after, as they were):
    key order means nothing to Kubernetes, so it must not show as a difference."""
    if isinstance(value, dict) and isinstance(like, dict):
        keys = [k for k in like if k in value] + [k for k in value if k not in like]
        return {k: _align(value[k], like.get(k)) for k in keys}
    if isinstance(value, list) and isinstance(like, list):
        return [_align(v, like[i] if i < len(like) else None) for i, v in enumerate(value)]
    return value


def looks_live(obj: dict[str, Any]) -> bool:
    """True for an object as the API server returns it (``kubectl get -o yaml``), not a render."""
    meta = obj.get("metadata") or {}
    return any(k in meta for k in SERVER_METADATA)


@dataclass
class ManifestDiff:
    """Result of :func:`diff_manifests`: the diff text and the labels in each category."""

    text: str = ""
    created: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{len(self.changed)} changed, {len(self.created)} created, {len(self.removed)} removed"


def diff_manifests(previous: list[dict[str, Any]], rendered: list[dict[str, Any]], *,
                   previous_prefix: str = "previous", rendered_prefix: str = "rendered") -> ManifestDiff:
    """Object-by-object diff of an earlier render (or a ``kubectl get -o yaml`` export: compared
    like :func:`diff_object`) against a fresh one. Output follows the fresh render's order, then
    removed objects in their earlier order."""
    result = ManifestDiff()
    old = {object_key(o): o for o in previous}
    new_keys = {object_key(o) for o in rendered}
    parts = []
    for obj in rendered:
        label = object_label(obj)
        before = old.get(object_key(obj))
        if before is None:
            text = diff_object(obj, None, live_prefix=previous_prefix, rendered_prefix=rendered_prefix)
            result.created.append(label)
        elif looks_live(before):
            text = diff_object(obj, before, live_prefix=previous_prefix, rendered_prefix=rendered_prefix)
        else:
            b = _clean(obj)
            a = _align(_clean(before), b)
            _mask_secrets(a, b)
            text = _unified(a, b, f"{previous_prefix}/{label}", f"{rendered_prefix}/{label}")
        if text and before is not None:
            result.changed.append(label)
        parts.append(text)
    for obj in previous:
        if object_key(obj) not in new_keys:
            gone = _clean(obj)
            _mask_secrets(gone, None)
            result.removed.append(object_label(obj))
            parts.append(_unified(gone, None, f"{previous_prefix}/{object_label(obj)}", ""))
    result.text = "".join(parts)
    return result


def load_manifests(path: str | Path) -> list[dict[str, Any]]:
    """Kubernetes objects from rendered YAML: a file, a folder (recursively), or a ``render -o``
    folder (its ``rendered/``). ``kind: List`` documents are unpacked; documents that are not
    Kubernetes objects (Helm values) are skipped. Raises :class:`SlinkyError` naming the path."""
    p = Path(path)
    if p.is_dir() and (p / "rendered").is_dir():
        p = p / "rendered"
    docs: list[tuple[str, Any]] = []
    for source, doc in load_documents(p):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            docs += [(source, item) for item in doc["items"]]
        else:
            docs.append((source, doc))
    objs: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    spec_seen = False
    for source, doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            spec_seen = spec_seen or (isinstance(doc, dict) and "node_sets" in doc)
            continue
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise SlinkyError(f"{source}: a {doc['kind']} without metadata.name")
        key = object_key(doc)
        if key in objs and objs[key] != doc:
            raise SlinkyError(f"{source}: {object_label(doc)} appears twice with different content")
        objs[key] = doc
    if not objs:
        hint = " (that is a cluster spec; pass what `slinkyml cluster render` wrote)" if spec_seen else ""
        raise SlinkyError(f"{path}: no Kubernetes objects found{hint}")
    return list(objs.values())
