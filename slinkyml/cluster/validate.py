"""Offline validation of rendered (or hand-written) cluster objects.

Every kind by its real schema at the pinned version (:mod:`.schemas`: the Slinky, Karpenter and
mariadb-operator CRDs with their CEL rules, Kubernetes 1.36's OpenAPI for core kinds), ObjectMeta's
rules, embedded pod fragments, Kubernetes' own validation of core kinds (:func:`core_issues`), the
operator's webhooks, cross-object references and fits; then :mod:`.runtime_checks`.
"""

from __future__ import annotations

import base64
import binascii
import importlib.resources
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from slinkyml.cluster import addons
from slinkyml.cluster.issues import DNS1123_LABEL, DNS1123_SUBDOMAIN, Issue, describe
from slinkyml.cluster.runtime_checks import CONTAINER_FIELDS, runtime_issues
from slinkyml.cluster.schemas import (
    DATE_TIME,
    apply_defaults,
    check_rules,
    core_kind,
    kind_schema,
    slinky_kinds,
    without_nulls,
)
from slinkyml.errors import SlinkyError
from slinkyml.instances import load_instance_types
from slinkyml.kube import dig, mapping, quantity
from slinkyml.specload import load_data_all, read_text

#: the Kubernetes release whose OpenAPI is vendored (data/openapi/kubernetes.json); another
#: --kubernetes-version is judged by kubernetes-validate's bundled schemas of that release
DEFAULT_KUBERNETES_VERSION = "1.36"
#: kinds whose name becomes a Service/pod host name: must be a DNS-1123 *label*.
LABEL_NAMED = {"Namespace", "Controller", "NodeSet", "LoginSet", "Accounting", "RestApi", "MariaDB"}
CONTAINER_DEF, PODSPEC_DEF = "io.k8s.api.core.v1.Container", "io.k8s.api.core.v1.PodSpec"
CLUSTER_SCOPED = {"Namespace", "StorageClass", "NodePool", "EC2NodeClass", "PersistentVolume",
                  "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


def _fmt_path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__)


def _schema_issues(obj_name: str, validator: Any, instance: Any, prefix: tuple = (),
                   ignore_required: frozenset[str] = frozenset()) -> list[Issue]:
    """Turn jsonschema errors into one-line :class:`Issue` s with field paths."""
    out = []
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    for e in errors:
        for leaf in (e.context or [e]) if e.validator in ("anyOf", "oneOf") and not e.context else [e]:
            out += _one(obj_name, leaf, prefix, ignore_required)
    return out


def _one(obj_name: str, e: Any, prefix: tuple, ignore_required: frozenset[str]) -> list[Issue]:
    path = (*prefix, *e.absolute_path)
    inst = e.instance
    if e.validator == "additionalProperties" and isinstance(inst, dict):
        props = (e.schema.get("properties") or {}).keys()
        extra = sorted(k for k in inst if k not in props) or ["?"]
        return [Issue(obj_name, _fmt_path((*path, k)), "unknown field") for k in extra]
    if e.validator == "required" and isinstance(inst, dict):
        missing = [k for k in e.validator_value if k not in inst and k not in ignore_required]
        return [Issue(obj_name, _fmt_path((*path, k)), "required field missing") for k in missing]
    if e.validator == "type":
        want = e.validator_value if isinstance(e.validator_value, str) else " or ".join(e.validator_value)
        return [Issue(obj_name, _fmt_path(path), f"expected {want}, got {_json_type(inst)} {_short(inst)}")]
    if e.validator == "enum":
        return [Issue(obj_name, _fmt_path(path), f"{_short(inst)} is not one of "
                      f"{', '.join(map(str, e.validator_value))}")]
    if e.validator == "const":
        return [Issue(obj_name, _fmt_path(path), f"must be {e.validator_value!r}, got {_short(inst)}")]
    if e.validator == "pattern":
        return [Issue(obj_name, _fmt_path(path), f"{_short(inst)} does not match {e.validator_value}")]
    if e.validator == "oneOf" and e.schema.get("oneOf") and all("required" in s for s in e.schema["oneOf"]):
        keys = " or ".join(s["required"][0] for s in e.schema["oneOf"])
        return [Issue(obj_name, _fmt_path(path), f"exactly one of {keys} must be set")]
    if e.validator in ("anyOf", "oneOf"):
        return [Issue(obj_name, _fmt_path(path), f"{_short(inst)} matches none of the allowed forms")]
    msg = " ".join(str(e.message).split())
    return [Issue(obj_name, _fmt_path(path), msg if len(msg) <= 160 else msg[:157] + "...")]


# ---------------------------------------------------------------- schema sources


@lru_cache(maxsize=4)
def _k8s_registry(kube_version: str) -> tuple[Any, Path]:
    root = Path(str(importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"))
    versions = sorted((p for p in root.iterdir() if p.name.endswith("-local-strict")),
                      key=lambda p: tuple(int(x) for x in p.name[1:].split("-")[0].split(".")))
    match = re.fullmatch(r"v?([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]{1,4})?", kube_version.strip(), re.ASCII)
    if not match:
        raise SlinkyError(f"--kubernetes-version: {kube_version[:40]!r} is not a version like 1.32 or v1.32.4")
    want = (int(match.group(1)), int(match.group(2)))
    usable = [p for p in versions if tuple(int(x) for x in p.name[1:].split(".")[:2]) <= want]
    if not usable:
        raise SlinkyError(f"no bundled Kubernetes schemas for {kube_version} (oldest: {versions[0].name})")
    folder = usable[-1]
    defs = json.loads((folder / "_definitions.json").read_text())
    # crawled once: an uncrawled registry re-crawls _definitions.json on every $ref
    registry = Registry().with_resource("/api/_definitions.json",
                                        Resource.from_contents(defs, default_specification=DRAFT202012)).crawl()
    return registry, folder


@lru_cache(maxsize=64)
def k8s_validator(kube_version: str, filename: str) -> Any:
    """A strict validator for one bundled Kubernetes schema file (e.g. ``container-v1.json``)."""
    registry, folder = _k8s_registry(kube_version)
    path = folder / filename
    if not path.exists():
        return None
    return jsonschema.Draft202012Validator(json.loads(path.read_text()), registry=registry)


def _k8s_schema_file(api_version: str, kind: str) -> str:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


# ---------------------------------------------------------------- per-object validation


def _is_vendored(kube_version: str) -> bool:
    match = re.fullmatch(r"v?([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]{1,4})?", kube_version.strip(), re.ASCII)
    return bool(match) and f"{match.group(1)}.{match.group(2)}" == DEFAULT_KUBERNETES_VERSION  # type: ignore[union-attr]


def validate_object(obj: Any, *, operator_version: str | None = None,
                    kube_version: str = DEFAULT_KUBERNETES_VERSION,
                    notes: list[str] | None = None) -> list[Issue]:
    """Schema checks for one object by its kind's real schema (:mod:`.schemas`): strict fields,
    formats, the CRDs' CEL rules and list-map keys; ObjectMeta's rules; embedded pod fragments."""
    name = describe(obj)
    if not isinstance(obj, dict):
        return [Issue(name, "", f"expected a mapping, got {_json_type(obj)}")]
    api, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api, str) or not isinstance(kind, str):
        return [Issue(name, "apiVersion" if not isinstance(api, str) else "kind", "required field missing")]
    issues = _metadata_issues(obj, name)
    slinky = api.startswith("slinky.slurm.net/")
    if slinky and (api, kind) not in slinky_kinds(operator_version):
        known = sorted({a for a, _ in slinky_kinds(operator_version)})
        return issues + [Issue(name, "apiVersion", f"no CRD for {api} {kind} in this operator version "
                               f"(served: {', '.join(known)})")]
    schema = kind_schema(api, kind, operator_version)
    if schema is not None and schema.source.startswith("k8s.io/kubernetes") and not _is_vendored(kube_version):
        validator = k8s_validator(kube_version, _k8s_schema_file(api, kind))  # another release's schemas
        return issues + ([Issue(name, "kind", f"no schema for {api} {kind}: cannot validate it offline")]
                         if validator is None else _schema_issues(name, validator, obj))
    if schema is None:
        return issues + [Issue(name, "kind", f"no schema for {api} {kind}: cannot validate it offline")]
    # the status subresource: the server drops status on create
    body = {k: v for k, v in obj.items() if k != "status"} if schema.status_subresource else obj
    body = without_nulls(body) if schema.core else body
    body, dropped = pvc_as_created(body)
    issues += [Issue(name, path, why) for path, why in dropped]
    structural = _schema_issues(name, schema.validator, body)
    issues += structural
    replicas = dig(obj, *schema.replicas_path) if schema.replicas_path else None
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas < 0:
        issues.append(Issue(name, ".".join(schema.replicas_path), f"Invalid value: {replicas}: should be a "
                            "non-negative integer (the scale subresource's replicas)"))
    if not structural:  # CEL runs on well-typed values only (the server's order too)
        walk = check_rules(schema.raw, apply_defaults(schema.raw, body))
        issues += [Issue(name, path, message) for path, message in walk.failed]
        if notes is not None:
            notes += [f"{name}: {text}" for text in walk.not_checked]
    if slinky:
        issues += _embedded_issues(obj, name, kind, kube_version)
    return issues


#: what the API server drops from a PVC on create before validating it (pkg/api/persistentvolumeclaim
#: util.go: DropDisabledFields, EnforceDataSourceBackwardsCompatibility)
DROPPED = "dropped by the API server on create, without a word"
PVC_DATA_SOURCES = (("PersistentVolumeClaim", ""), ("VolumeSnapshot", "snapshot.storage.k8s.io"))


def pvc_as_created(obj: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A PVC as the server validates it on create, and (field, why) of each part it dropped: a
    dataSourceRef with a namespace (CrossNamespaceVolumeDataSource is alpha, off); then, without a
    dataSourceRef, a dataSource that is not a PersistentVolumeClaim or VolumeSnapshot."""
    spec = obj.get("spec")
    if obj.get("kind") != "PersistentVolumeClaim" or not isinstance(spec, dict):
        return obj, []
    spec = dict(spec)
    dropped = []
    ref = spec.get("dataSourceRef")
    if isinstance(ref, dict) and ref.get("namespace"):
        del spec["dataSourceRef"]
        dropped.append(("spec.dataSourceRef", f"{DROPPED}: a namespace in it needs the CrossNamespaceVolumeDataSource "
                        "feature gate (alpha, off), so the volume is made empty"))
    source = spec.get("dataSource")
    if spec.get("dataSourceRef") is None and isinstance(source, dict) \
            and (source.get("kind"), source.get("apiGroup") or "") not in PVC_DATA_SOURCES:
        del spec["dataSource"]
        dropped.append(("spec.dataSource", f"{DROPPED}: without dataSourceRef only a PersistentVolumeClaim or a "
                        "snapshot.storage.k8s.io VolumeSnapshot is kept, so the volume is made empty"))
    return {**obj, "spec": spec}, dropped


def _metadata_issues(obj: dict[str, Any], name: str) -> list[Issue]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [Issue(name, "metadata", "required field missing" if meta is None else
                      f"expected object, got {_json_type(meta)}")]
    out = [Issue(name, f"metadata.{key}", "unknown field") for key in meta if key not in OBJECT_META]
    n = meta.get("name")
    kind = obj.get("kind")
    if not isinstance(n, str) or not n:
        out.append(Issue(name, "metadata.name", "required field missing"))
    elif kind in LABEL_NAMED and (not DNS1123_LABEL.match(n) or len(n) > 63):
        out.append(Issue(name, "metadata.name", f"'{n}' is not a DNS-1123 label (lower-case alphanumerics "
                         "and '-', at most 63 characters)"))
    elif not DNS1123_SUBDOMAIN.match(n) or len(n) > 253:
        out.append(Issue(name, "metadata.name", f"'{n}' is not a DNS-1123 subdomain"))
    ns = meta.get("namespace")
    if kind in CLUSTER_SCOPED and ns is not None:
        out.append(Issue(name, "metadata.namespace", f"{kind} is cluster-scoped; remove the namespace"))
    elif ns is not None and (not isinstance(ns, str) or not DNS1123_LABEL.match(ns) or len(ns) > 63):
        out.append(Issue(name, "metadata.namespace", f"{_short(ns)} is not a DNS-1123 label"))
    for key in ("labels", "annotations"):
        val = meta.get(key)
        if val is None:
            continue
        if not isinstance(val, dict):
            out.append(Issue(name, f"metadata.{key}", f"expected object, got {_json_type(val)}"))
            continue
        for k, v in val.items():
            if not isinstance(v, str):
                out.append(Issue(name, f"metadata.{key}.{k}", f"expected string, got {_json_type(v)} {_short(v)}"))
                continue
            out += [Issue(name, f"metadata.{key}.{k}", why) for why in label_problems(str(k), v, key == "labels")]
    api = obj.get("apiVersion")
    core = isinstance(api, str) and isinstance(kind, str) and core_kind(api, kind) is not None
    return out + _object_meta_rules(meta, name, kind, core)


#: apimachinery's finalizer names that need no domain prefix (metav1 and core)
STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
#: apimachinery ValidateAnnotations: the total size of keys and values
TOTAL_ANNOTATION_BYTES = 256 * 1024
OWNER_REFERENCE = {"apiVersion": str, "kind": str, "name": str, "uid": str, "controller": bool,
                   "blockOwnerDeletion": bool}


def finalizer_problems(value: Any, kube: bool = True) -> list[str]:
    """apimachinery ValidateFinalizerName: a qualified name; ``kube``: core's ValidateFinalizerName
    too (a Kubernetes kind's metadata.finalizers, a Namespace's spec.finalizers): without a '/', a
    standard one. A custom resource's finalizer without a domain is only a warning: admitted."""
    if not isinstance(value, str):
        return [f"expected string, got {_json_type(value)} {_short(value)}"]
    out = label_problems(value, "", False)
    if kube and not out and "/" not in value and value not in STANDARD_FINALIZERS:
        out.append(f"Invalid value: {_short(value)}: name is neither a standard finalizer name nor is it "
                   "fully qualified")
    return out


def _object_meta_rules(meta: dict[str, Any], name: str, kind: Any, core: bool) -> list[Issue]:
    """ValidateObjectMeta's rules beyond names and labels: generateName, finalizers (``core``: a
    Kubernetes kind, whose finalizers core's ValidateFinalizerName judges; a custom resource's only
    apimachinery's), owner references and the annotations' total size."""
    out = []
    prefix = meta.get("generateName")
    if prefix is not None:
        masked = prefix[:-1] + "a" if isinstance(prefix, str) and prefix.endswith("-") else prefix
        good = DNS1123_LABEL if kind in LABEL_NAMED else DNS1123_SUBDOMAIN
        if not isinstance(masked, str) or not good.match(masked) or len(masked) > (63 if kind in LABEL_NAMED else 253):
            out.append(Issue(name, "metadata.generateName", f"Invalid value: {_short(prefix)}: a lowercase RFC 1123 "
                             f"{'label' if kind in LABEL_NAMED else 'subdomain'} prefix (lower-case alphanumerics, "
                             "'-'" + ("" if kind in LABEL_NAMED else ", '.'") + ")"))
    finalizers = meta.get("finalizers")
    if finalizers is not None and not isinstance(finalizers, list):
        out.append(Issue(name, "metadata.finalizers", f"expected array, got {_json_type(finalizers)}"))
    for i, item in enumerate(finalizers if isinstance(finalizers, list) else []):
        out += [Issue(name, f"metadata.finalizers[{i}]", why) for why in finalizer_problems(item, kube=core)]
    owners = meta.get("ownerReferences")
    if owners is not None and not isinstance(owners, list):
        out.append(Issue(name, "metadata.ownerReferences", f"expected array, got {_json_type(owners)}"))
    owners = owners if isinstance(owners, list) else []
    for i, ref in enumerate(owners):
        where = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            out.append(Issue(name, where, f"expected object, got {_json_type(ref)}"))
            continue
        out += [Issue(name, f"{where}.{k}", "unknown field") for k in ref if k not in OWNER_REFERENCE]
        for key, typ in OWNER_REFERENCE.items():
            if key in ref and not isinstance(ref[key], typ):
                out.append(Issue(name, f"{where}.{key}", f"expected {typ.__name__}, got {_json_type(ref[key])}"))
            elif typ is str and not ref.get(key):
                out.append(Issue(name, f"{where}.{key}", "Required value: " + (
                    "uid must not be empty" if key == "uid" else f"{key} must not be empty")))
    if sum(1 for ref in owners if isinstance(ref, dict) and ref.get("controller") is True) > 1:
        out.append(Issue(name, "metadata.ownerReferences", "Invalid value: Only one reference can have "
                         "Controller set to true"))
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
        if size > TOTAL_ANNOTATION_BYTES:
            out.append(Issue(name, "metadata.annotations", f"Too long: may not be more than {TOTAL_ANNOTATION_BYTES} "
                             f"bytes (have {size})"))
    return out


#: metav1.ObjectMeta's fields (a strict server-side apply refuses any other under metadata)
OBJECT_META = frozenset({"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                         "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
                         "annotations", "ownerReferences", "finalizers", "managedFields"})
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_problems(key: str, value: str, is_label: bool) -> list[str]:
    """apimachinery validation.IsQualifiedName for the key (an optional DNS-1123 subdomain prefix
    and '/') and IsValidLabelValue for a label's value, worded as the API server words them."""
    out = []
    prefix, _, name = key.rpartition("/") if "/" in key else ("", "", key)
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        out.append(f"name part of {key!r}: prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name) or key.count("/") > 1:
        out.append(f"{key!r}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                   "and end with an alphanumeric character, at most 63 characters")
    if is_label and (len(value) > 63 or not LABEL_VALUE.match(value)):
        out.append(f"Invalid value: {_short(value)}: a valid label must be an empty string or consist of "
                   "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                   "character, at most 63 characters")
    return out


def _definition(name: str) -> Any:
    found = core_kind("", name)
    return found.validator if found is not None else None


def _embedded_issues(obj: dict[str, Any], name: str, kind: str, kube_version: str) -> list[Issue]:
    spec = mapping(obj.get("spec"))
    out = []
    vendored = _is_vendored(kube_version)
    container = _definition(CONTAINER_DEF) if vendored else k8s_validator(kube_version, "container-v1.json")
    for field_name in CONTAINER_FIELDS.get(kind, ()):
        frag = spec.get(field_name)
        if isinstance(frag, dict) and container is not None:
            out += _schema_issues(name, container, without_nulls(frag) if vendored else frag, ("spec", field_name), frozenset({"name"}))
        if isinstance(frag, dict):  # the pod the operator builds from it is refused at run time
            out += _quantity_issues(name, f"spec.{field_name}.resources", frag.get("resources"))
            out += _duplicates(name, f"spec.{field_name}.volumeMounts", frag.get("volumeMounts"), "mountPath")
    for key in ("labels", "annotations"):
        entries = dig(obj, "spec", "template", "metadata", key)
        for k, v in entries.items() if isinstance(entries, dict) else ():
            out += [Issue(name, f"spec.template.metadata.{key}.{k}", why)
                    for why in label_problems(str(k), str(v), key == "labels")]
    pod = dig(obj, "spec", "template", "spec")
    if isinstance(pod, dict):
        out += _duplicates(name, "spec.template.spec.volumes", pod.get("volumes"), "name")
        containers = [*(c for c in pod.get("containers") or [] if isinstance(c, dict)),
                      *(c for c in pod.get("initContainers") or [] if isinstance(c, dict))] \
            if isinstance(pod.get("containers") or [], list) and isinstance(pod.get("initContainers") or [], list) else []
        out += _duplicates(name, "spec.template.spec.containers", containers, "name")
    podspec = _definition(PODSPEC_DEF) if vendored else k8s_validator(kube_version, "podspec-v1.json")
    if isinstance(pod, dict) and podspec is not None:
        out += _schema_issues(name, podspec, without_nulls(pod) if vendored else pod, ("spec", "template", "spec"),
                              frozenset({"containers"}))
    return out


def _duplicates(name: str, path: str, items: Any, key: str) -> list[Issue]:
    """core/validation's uniqueness of a Pod's volume names, container names (init containers
    included) and a container's mount paths: list-map keys Go's validation refuses twice."""
    seen: set[Any] = set()
    out = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        value = item.get(key) if isinstance(item, dict) else None
        if isinstance(value, str) and value in seen:
            out.append(Issue(name, f"{path}[{i}].{key}", f"Duplicate value: {value!r} (the operator's Pod "
                             "is refused)"))
        seen.add(value)
    return out


# ---------------------------------------------------------------- cross-object checks


def cross_check(objs: list[dict[str, Any]]) -> list[Issue]:
    """Checks no single schema can make: references, partitions, accelerators, EFA zones."""
    out: list[Issue] = []
    ok = [o for o in objs if isinstance(o, dict) and isinstance(o.get("metadata"), dict)]

    def index(kind: str) -> dict[tuple[Any, Any], dict[str, Any]]:
        return {(o["metadata"].get("namespace"), o["metadata"].get("name")): o for o in ok if o.get("kind") == kind}

    controllers, accountings = index("Controller"), index("Accounting")
    pvcs = index("PersistentVolumeClaim")
    pools = {o["metadata"].get("name"): o for o in ok if o.get("kind") == "NodePool"}
    classes = {o["metadata"].get("name"): o for o in ok if o.get("kind") == "EC2NodeClass"}
    types = load_instance_types()

    named = {(o.get("kind"), o["metadata"].get("name")) for o in ok}
    for o in ok:
        kind, ns = o.get("kind"), o["metadata"].get("namespace")
        spec = mapping(o.get("spec"))
        name = describe(o)
        owners = o["metadata"].get("ownerReferences")
        for i, owner in enumerate(owners if isinstance(owners, list) else []):
            if isinstance(owner, dict) and (owner.get("kind"), owner.get("name")) not in named:
                out.append(Issue(name, f"metadata.ownerReferences[{i}]", f"owner {owner.get('kind')} "
                                 f"{owner.get('name')!r} is not among the objects: the garbage collector deletes "
                                 "this object at once unless that owner exists with that uid"))
        ref = dig(spec, "controllerRef", "name")
        if kind in ("NodeSet", "LoginSet", "RestApi") and isinstance(ref, str) and (ns, ref) not in controllers \
                and (ref or kind == "RestApi"):  # an empty one on the others: the webhook's finding
            out.append(Issue(name, "spec.controllerRef.name", f"no Controller '{ref}' in namespace {ns}"))
        if kind == "Controller":
            acc = dig(spec, "accountingRef", "name")
            if isinstance(acc, str) and (ns, acc) not in accountings:
                out.append(Issue(name, "spec.accountingRef.name", f"no Accounting '{acc}' in namespace {ns}"))
        pod = dig(spec, "template", "spec") or {}
        for i, vol in enumerate(pod.get("volumes") or [] if isinstance(pod, dict) else []):
            claim = dig(vol, "persistentVolumeClaim", "claimName")
            if isinstance(claim, str) and (ns, claim) not in pvcs:
                out.append(Issue(name, f"spec.template.spec.volumes[{i}].persistentVolumeClaim.claimName",
                                 f"no PersistentVolumeClaim '{claim}' in namespace {ns}"))
        if kind == "NodePool":
            nc = dig(spec, "template", "spec", "nodeClassRef", "name")
            if isinstance(nc, str) and nc not in classes:
                out.append(Issue(name, "spec.template.spec.nodeClassRef.name", f"no EC2NodeClass '{nc}'"))
        if kind == "NodeSet":
            out += _nodeset_checks(o, name, spec, pod if isinstance(pod, dict) else {}, pools, types)
    out += _partition_checks(ok)
    return out


def _pool_values(pool: dict[str, Any] | None, key: str) -> list[str] | None:
    for req in dig(pool, "spec", "template", "spec", "requirements") or []:
        if isinstance(req, dict) and req.get("key") == key and req.get("operator") == "In":
            return [str(v) for v in req.get("values") or []]
    return None


def _nodeset_checks(o: dict[str, Any], name: str, spec: dict[str, Any], pod: dict[str, Any],
                    pools: dict[str, Any], types: dict[str, Any]) -> list[Issue]:
    out = []
    selector = mapping(pod.get("nodeSelector"))
    pool_name = selector.get("karpenter.sh/nodepool")
    pool = pools.get(pool_name) if isinstance(pool_name, str) else None
    if isinstance(pool_name, str) and pools and pool is None:
        out.append(Issue(name, "spec.template.spec.nodeSelector.karpenter.sh/nodepool", f"no NodePool '{pool_name}'"))
    itype_name = selector.get("node.kubernetes.io/instance-type")
    if itype_name is None and pool is not None:
        vals = _pool_values(pool, "node.kubernetes.io/instance-type")
        itype_name = vals[0] if vals and len(vals) == 1 else None
    itype = types.get(itype_name) if isinstance(itype_name, str) else None
    res = dig(spec, "slurmd", "resources") or {}
    for part in ("requests", "limits"):
        asked = res.get(part) if isinstance(res, dict) else None
        if not isinstance(asked, dict) or itype is None:
            continue
        have = {"vpc.amazonaws.com/efa": itype.efa_interfaces}
        if itype.accelerator:
            have[itype.accelerator.resource] = itype.accelerator.count
        for resource in ("nvidia.com/gpu", "aws.amazon.com/neuron", "vpc.amazonaws.com/efa"):
            if resource not in asked:
                continue
            try:
                n = int(asked[resource])
            except (TypeError, ValueError):
                continue
            if n > have.get(resource, 0):
                out.append(Issue(name, f"spec.slurmd.resources.{part}.{resource}",
                                 f"{n} requested but {itype.name} has {have.get(resource, 0)}"))
    gres = re.search(r"Gres=\S*?:(\d+)\b", str(spec.get("extraConf") or ""))
    if gres and itype is not None and int(gres.group(1)) > itype.accelerator_count:
        out.append(Issue(name, "spec.extraConf", f"Gres count {gres.group(1)} exceeds {itype.name}'s "
                         f"{itype.accelerator_count} accelerators"))
    wants_efa = any(isinstance(res.get(p), dict) and "vpc.amazonaws.com/efa" in res[p]
                    for p in ("requests", "limits")) if isinstance(res, dict) else False
    if wants_efa:
        zones = [selector["topology.kubernetes.io/zone"]] if "topology.kubernetes.io/zone" in selector \
            else _pool_values(pool, "topology.kubernetes.io/zone")
        if not zones or len(zones) != 1:
            out.append(Issue(name, "spec.template.spec.nodeSelector", "EFA requested but the node set is not "
                             "pinned to exactly one availability zone (topology.kubernetes.io/zone)"))
    return out


def _partition_checks(objs: list[dict[str, Any]]) -> list[Issue]:
    """Partition names must be unique within one Slurm cluster (one Controller)."""
    out = []
    seen: dict[tuple[Any, Any, str], str] = {}
    for o in objs:
        ns, kind = o["metadata"].get("namespace"), o.get("kind")
        spec = mapping(o.get("spec"))
        found: list[tuple[Any, str]] = []
        if kind == "NodeSet" and dig(spec, "partition", "enabled") is True:
            found.append((dig(spec, "controllerRef", "name"), str(o["metadata"].get("name"))))
        if kind == "Controller":
            found += [(o["metadata"].get("name"), p) for p in
                      re.findall(r"(?im)^\s*PartitionName=(\S+)", str(spec.get("extraConf") or ""))]
        for ctrl, part in found:
            key = (ns, ctrl, part)
            if key in seen:
                out.append(Issue(describe(o), "spec.extraConf" if kind == "Controller" else "spec.partition",
                                 f"Slurm partition '{part}' is defined more than once in cluster '{ctrl}' "
                                 f"(first by {seen[key]})"))
            else:
                seen[key] = describe(o)
    return out


# ---------------------------------------------------------------- Kubernetes' own validation


CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")


def _quantity_issues(name: str, path: str, resources: Any) -> list[Issue]:
    out = []
    for part in ("requests", "limits"):
        values = resources.get(part) if isinstance(resources, dict) else None
        for key, value in values.items() if isinstance(values, dict) else ():
            amount = quantity(value)
            if amount is None:
                out.append(Issue(name, f"{path}.{part}.{key}", f"{_short(value)}: quantities must match the regular "
                                 "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
            elif amount < 0:  # core/validation ValidateResourceRequirements: ValidateNonnegativeQuantity
                out.append(Issue(name, f"{path}.{part}.{key}", f"Invalid value: {_short(value)}: must be greater "
                                 "than or equal to 0"))
    return out


SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _selector_issues(name: str, path: str, selector: Any) -> list[Issue]:
    """metav1 ValidateLabelSelector: label syntax, known operators, values only with In/NotIn."""
    out = []
    for key, value in mapping(dig(selector, "matchLabels") if isinstance(selector, dict) else None).items():
        out += [Issue(name, f"{path}.matchLabels", why) for why in label_problems(str(key), str(value), True)]
    exprs = selector.get("matchExpressions") if isinstance(selector, dict) else None
    for i, expr in enumerate(exprs if isinstance(exprs, list) else []):
        if not isinstance(expr, dict):
            continue
        where = f"{path}.matchExpressions[{i}]"
        op, values = expr.get("operator"), expr.get("values") or []
        if op not in SELECTOR_OPERATORS:
            out.append(Issue(name, f"{where}.operator", f"Invalid value: {_short(op)}: not a valid selector operator"))
        elif op in ("In", "NotIn") and not values:
            out.append(Issue(name, f"{where}.values", "Required value: must be specified when `operator` is "
                             "'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            out.append(Issue(name, f"{where}.values", "Forbidden: may not be specified when `operator` is "
                             "'Exists' or 'DoesNotExist'"))
        out += [Issue(name, f"{where}.key", why) for why in label_problems(str(expr.get("key") or ""), "", False)]
    return out


#: pkg/apis/core/validation ValidateSecret: the keys a typed Secret must hold
SECRET_TYPE_KEYS = {"kubernetes.io/tls": ("tls.crt", "tls.key"), "kubernetes.io/ssh-auth": ("ssh-privatekey",),
                    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",), "kubernetes.io/dockercfg": (".dockercfg",)}
#: core.MaxSecretSize and ConfigMap's limit: the total bytes of the values
MAX_DATA_BYTES = 1024 * 1024


def _size_issues(o: dict[str, Any], name: str) -> list[Issue]:
    total = 0
    for field_name in ("data", "stringData", "binaryData"):
        for value in mapping(o.get(field_name)).values():
            if not isinstance(value, str):
                continue
            decoded = field_name == "binaryData" or (field_name == "data" and o.get("kind") == "Secret")
            total += len(value) * 3 // 4 if decoded else len(value.encode())
    if total > MAX_DATA_BYTES:
        return [Issue(name, "data", f"Too long: must have at most {MAX_DATA_BYTES} bytes (have about {total})")]
    return []


def core_issues(o: dict[str, Any]) -> list[Issue]:
    """What kube-apiserver's own validation (pkg/apis/core/validation, pkg/apis/storage/validation)
    and its decoding refuse in the core kinds slinkyml renders, beyond their JSON schemas: Secret
    data that is not base64, ConfigMap/Secret keys, StorageClass and PVC enums, quantities."""
    kind, name, out = o.get("kind"), describe(o), []
    if kind in ("Secret", "ConfigMap"):
        for field_name in ("data", "stringData", "binaryData"):
            entries = o.get(field_name)
            for key, value in entries.items() if isinstance(entries, dict) else ():
                if not CONFIG_KEY.match(str(key)) or len(str(key)) > 253 or str(key) in (".", ".."):
                    out.append(Issue(name, f"{field_name}[{key}]", "Invalid value: a valid config key must consist "
                                     "of alphanumeric characters, '-', '_' or '.'"))
                if field_name in ("data", "binaryData") and (kind == "Secret" or field_name == "binaryData") \
                        and isinstance(value, str):
                    try:
                        base64.b64decode(value, validate=True)
                    except (binascii.Error, ValueError):
                        out.append(Issue(name, f"{field_name}[{key}]", "illegal base64 data (Secret data is "
                                         "base64; use stringData for text)"))
    if kind in ("Secret", "ConfigMap"):
        out += _size_issues(o, name)
    if kind == "Secret":
        for key in SECRET_TYPE_KEYS.get(str(o.get("type")), ()):
            if key not in (mapping(o.get("data")) | mapping(o.get("stringData"))):
                out.append(Issue(name, f"data[{key}]", f"Required value: a {o.get('type')} Secret needs the key "
                                 f"{key}"))
    if kind == "ConfigMap":
        for key in mapping(o.get("binaryData")):
            if key in mapping(o.get("data")):
                out.append(Issue(name, f"binaryData[{key}]", "Invalid value: duplicate of key present in data"))
    if kind == "Namespace":
        for i, item in enumerate(dig(o, "spec", "finalizers") or [] if isinstance(dig(o, "spec", "finalizers"), list)
                                 else []):
            out += [Issue(name, f"spec.finalizers[{i}]", why) for why in finalizer_problems(item)]
    if kind == "StorageClass":
        provisioner = o.get("provisioner")
        if isinstance(provisioner, str) and label_problems(provisioner, "", False):
            out.append(Issue(name, "provisioner", f"Invalid value: {_short(provisioner)}: a qualified name "
                             "(an optional DNS-subdomain prefix and '/', then alphanumerics, '-', '_', '.')"))
        for i, term in enumerate(o.get("allowedTopologies") or [] if isinstance(o.get("allowedTopologies"), list)
                                 else []):
            for j, expr in enumerate(dig(term, "matchLabelExpressions") or [] if isinstance(term, dict) else []):
                if isinstance(expr, dict) and not expr.get("values"):
                    out.append(Issue(name, f"allowedTopologies[{i}].matchLabelExpressions[{j}].values",
                                     "Required value: must specify as least one value"))
    if kind == "StorageClass":
        if o.get("reclaimPolicy") not in (None, "Delete", "Retain"):
            out.append(Issue(name, "reclaimPolicy", f"Unsupported value: {_short(o['reclaimPolicy'])}: supported "
                             "values: \"Delete\", \"Retain\""))
        if o.get("volumeBindingMode") not in (None, "Immediate", "WaitForFirstConsumer"):
            out.append(Issue(name, "volumeBindingMode", f"Unsupported value: {_short(o['volumeBindingMode'])}: "
                             "supported values: \"Immediate\", \"WaitForFirstConsumer\""))
    if kind == "PersistentVolumeClaim":
        spec = mapping(pvc_as_created(o)[0].get("spec"))
        modes = spec.get("accessModes")
        if not modes:
            out.append(Issue(name, "spec.accessModes", "Required value: at least 1 access mode is required"))
        for mode in modes if isinstance(modes, list) else []:
            if mode not in ACCESS_MODES:
                out.append(Issue(name, "spec.accessModes", f"Unsupported value: {_short(mode)}: supported values: "
                                 + ", ".join(f'"{m}"' for m in ACCESS_MODES)))
        storage = dig(spec, "resources", "requests", "storage")
        if spec.get("dataSourceRef") is None and storage is None:
            out.append(Issue(name, "spec.resources[storage]", "Required value"))
        amount = quantity(storage) if isinstance(storage, (str, int, float)) else None
        if amount is not None and amount <= 0:
            out.append(Issue(name, "spec.resources.requests[storage]", f"Invalid value: {_short(storage)}: must be "
                             "greater than zero"))
        if spec.get("volumeMode") not in (None, "Block", "Filesystem"):
            out.append(Issue(name, "spec.volumeMode", f"Unsupported value: {_short(spec['volumeMode'])}: supported "
                             "values: \"Block\", \"Filesystem\""))
        for ref_field in ("dataSource", "dataSourceRef"):
            ref = spec.get(ref_field)
            if isinstance(ref, dict) and not ref.get("apiGroup") and ref.get("kind") != "PersistentVolumeClaim":
                out.append(Issue(name, f"spec.{ref_field}", f"Invalid value: {_short(ref.get('kind'))}: must be "
                                 "'PersistentVolumeClaim' when referencing the default apiGroup"))
        out += _selector_issues(name, "spec.selector", spec.get("selector"))
        klass = spec.get("storageClassName")
        if isinstance(klass, str) and klass and (not DNS1123_SUBDOMAIN.match(klass) or len(klass) > 253):
            out.append(Issue(name, "spec.storageClassName", f"Invalid value: {_short(klass)}: a lowercase RFC 1123 "
                             "subdomain"))
        out += _quantity_issues(name, "spec.resources", spec.get("resources"))
    return out


# ---------------------------------------------------------------- the operator's admission webhooks


#: slurm-operator internal/webhook/controller_webhook.go: config files the operator writes itself
RESERVED_CONFIG_FILES = ("slurm.conf", "slurmdbd.conf")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_error(text: str) -> str | None:
    """Go's time.ParseDuration (what metav1.Duration reads): its error message, None if it parses."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return None
    if not body:
        return f"time: invalid duration {json.dumps(text)}"
    while body:
        number = re.match(r"[0-9]*(\.[0-9]*)?", body)
        digits = number.group(0) if number else ""
        if digits.strip(".") == "":
            return f"time: invalid duration {json.dumps(text)}"
        body = body[len(digits):]
        unit = re.match(r"[^0-9.]*", body).group(0)  # type: ignore[union-attr]
        if not unit:
            return f"time: missing unit in duration {json.dumps(text)}"
        if unit not in _GO_UNITS:
            return f"time: unknown unit {json.dumps(unit)} in duration {json.dumps(text)}"
        body = body[len(unit):]
    return None


def go_duration_seconds(text: str) -> float | None:
    """Go's time.ParseDuration, in seconds; None if it does not parse (:func:`go_duration_error`)."""
    if go_duration_error(text) is not None:
        return None
    sign = -1.0 if text.startswith("-") else 1.0
    return sign * sum(float(n) * _GO_UNITS[u] for n, _, u in re.findall(r"([0-9]*(\.[0-9]*)?)(ns|us|µs|ms|s|m|h)", text)
                      if n not in ("", "."))


def _dns_subdomain_prefix(name: str) -> bool:
    """apimachinery NameIsDNSSubdomain(name, prefix=true): a trailing '-' is allowed."""
    masked = name[:-1] + "a" if name.endswith("-") else name
    return len(masked) <= 253 and bool(DNS1123_SUBDOMAIN.match(masked))


def webhook_release(version: str | None = None) -> str:
    """The webhook rule set of an operator release: ``v1.0.1`` -> "1.0"; None -> the default ("1.3"); a
    listed revision, by its short hash or as a module pseudo-version (``v1.1.0-rc1.0.DATE-f2ed3fc53252``),
    -> its own (the pseudo-version's base release says nothing about the code)."""
    data = addons.addons()["slurm_operator"]["webhook"]
    if not version:
        return str(data["default"])
    for revision, release in (data.get("revisions") or {}).items():
        if version == revision or re.search(rf"-{re.escape(revision)}[0-9a-f]*$", version):
            return str(release)
    m = re.match(r"v?(\d+)\.(\d+)", version)
    want = (int(m.group(1)), int(m.group(2))) if m else (99, 0)
    known = sorted({r for releases in data["rules"].values() for r in releases},
                   key=lambda r: tuple(int(x) for x in r.split(".")))
    older = [r for r in known if tuple(int(x) for x in r.split(".")) <= want]
    return older[-1] if older else known[0]


def webhook_issues(objs: list[dict[str, Any]], release: str | None = None) -> list[Issue]:
    """What the slurm-operator's validating webhooks (internal/webhook/*_webhook.go) of ``release``
    (:func:`webhook_release`) refuse on create, with their messages."""
    release = release or webhook_release()
    rules = {name for name, releases in addons.addons()["slurm_operator"]["webhook"]["rules"].items()
             if release in releases}
    out: list[Issue] = []
    configmaps = {(dig(o, "metadata", "namespace"), dig(o, "metadata", "name")): o
                  for o in objs if o.get("kind") == "ConfigMap"}
    for o in objs:
        kind, name = o.get("kind"), describe(o)
        spec = mapping(o.get("spec"))
        if kind == "Controller":
            cluster = spec.get("clusterName") or f"{dig(o, 'metadata', 'namespace')}_{dig(o, 'metadata', 'name')}"
            if "cluster_name_length" in rules and isinstance(cluster, str) and len(cluster) > 40:
                out.append(Issue(name, "spec.clusterName", f"ClusterName exceeds 40 characters ({len(cluster)}): "
                                 f"{cluster} (Slurm's ClusterName limit)"))
            refs = spec.get("configFileRefs")
            for i, ref in enumerate(refs if isinstance(refs, list) and "config_files" in rules else []):
                ref_name = dig(ref, "name") if isinstance(ref, dict) else None
                cm = configmaps.get((dig(o, "metadata", "namespace"), ref_name))
                if cm is None:
                    out.append(Issue(name, f"spec.configFileRefs[{i}].name", f"ConfigMap \"{ref_name or ''}\" not "
                                     "found (the webhook reads every configFileRefs ConfigMap)"))
                    continue
                data = dig(cm, "data")
                for key in data if isinstance(data, dict) else {}:
                    if key in RESERVED_CONFIG_FILES:
                        out.append(Issue(name, f"spec.configFileRefs[{i}]", f"the configFile is reserved for "
                                         f"slurm-operator use: {key} (in ConfigMap {ref_name})"))
        if kind in ("NodeSet", "LoginSet") and "controller_ref_name" in rules \
                and dig(spec, "controllerRef", "name") == "":
            out.append(Issue(name, "spec.controllerRef.name", "controllerRef.name must not be empty"))
        if kind == "LoginSet" and "loginset_sssd_conf" in rules and isinstance(spec.get("sssdConfRef"), dict) \
                and not spec["sssdConfRef"].get("name"):
            out.append(Issue(name, "spec.sssdConfRef.name", "sssdConfRef.name must not be empty"))
        if kind == "NodeSet":
            out += _nodeset_webhook(name, spec, rules)
        for path, parse in TYPED_FIELDS.get(str(kind), ()):
            value = dig(spec, *path)
            problem = parse(value) if isinstance(value, str) else None
            if problem is not None:
                out.append(Issue(name, ".".join(("spec", *path)), f"{problem} (the webhook decodes it as a "
                                 f"{'Go duration like 90m or 24h' if parse is go_duration_error else 'RFC 3339 time'}"
                                 " first)"))
    return out


def _rfc3339_error(text: str) -> str | None:
    """metav1.Time's parse (RFC 3339), worded as Go's time.Parse error starts."""
    return None if re.fullmatch(DATE_TIME, text) else f"parsing time {json.dumps(text)} as \"2006-01-02T15:04:05Z07:00\""


#: metav1.Duration / metav1.Time fields of the Slinky types (api/v1beta1): the operator's webhooks
#: decode the object into them first, so a value Go cannot parse is refused before any rule
TYPED_FIELDS: dict[str, tuple[tuple[tuple[str, ...], Any], ...]] = {
    "Token": ((("lifetime",), go_duration_error),),
    "NodeSet": ((("updateStrategy", "scheduledUpdate", "duration"), go_duration_error),
                (("updateStrategy", "scheduledUpdate", "startTime"), _rfc3339_error)),
}


def _nodeset_webhook(name: str, spec: dict[str, Any], rules: set[str]) -> list[Issue]:
    out = []
    strategy = dig(spec, "updateStrategy", "type") or "RollingUpdate"
    if "update_strategy_type" in rules and strategy not in ("RollingUpdate", "OnDelete"):
        out.append(Issue(name, "spec.updateStrategy.type", f"`NodeSet.Spec.UpdateStrategy.Type` is not valid. Got: "
                         f"{strategy}. Expected of: RollingUpdate; OnDelete (this operator release)"))
    unavailable = dig(spec, "updateStrategy", "rollingUpdate", "maxUnavailable")
    if "max_unavailable" in rules and isinstance(unavailable, int) and not isinstance(unavailable, bool) \
            and unavailable < 1:
        out.append(Issue(name, "spec.updateStrategy.rollingUpdate.maxUnavailable",
                         f"maxUnavailable must be > 0, got {unavailable}"))
    elif "max_unavailable" in rules and unavailable == "0%":
        out.append(Issue(name, "spec.updateStrategy.rollingUpdate.maxUnavailable", "maxUnavailable must not be 0%"))
    duration = dig(spec, "updateStrategy", "scheduledUpdate", "duration")
    seconds = go_duration_seconds(duration) if isinstance(duration, str) else None
    if "scheduled_update_duration" in rules and seconds is not None and seconds != 0 and seconds < 60:
        out.append(Issue(name, "spec.updateStrategy.scheduledUpdate.duration",
                         "UpdateStrategy.ScheduledUpdate.Duration must be at least 1 minute"))
    if "ssh_sssd_conf" in rules and dig(spec, "ssh", "enabled") is True and not dig(spec, "ssh", "sssdConfRef", "name"):
        out.append(Issue(name, "spec.ssh.sssdConfRef.name", "ssh.sssdConfRef.name must not be empty when ssh "
                         "is enabled"))
    hostname = dig(spec, "template", "spec", "hostname")
    if "template_hostname" in rules and isinstance(hostname, str) and hostname and not _dns_subdomain_prefix(hostname):
        out.append(Issue(name, "spec.template.spec.hostname", f"template.spec.hostname: {hostname!r}: a lowercase "
                         "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"))
    extra = spec.get("extraConf")
    for item in extra.split() if isinstance(extra, str) and "extra_conf_tokens" in rules else []:
        if "=" not in item:
            out.append(Issue(name, "spec.extraConf", f"invalid extraConf: malformed --conf item {item!r}: "
                             "expected Key=Value"))
    return out


# ---------------------------------------------------------------- entry points


def validate_objects(objs: list[Any], *, operator_version: str | None = None,
                     kube_version: str = DEFAULT_KUBERNETES_VERSION,
                     notes: list[str] | None = None,
                     plugin_values: dict[str, dict[str, Any]] | None = None,
                     webhook: str | None = None) -> list[Issue]:
    """All per-object, cross-object and run-time issues; an empty list means valid.

    ``plugin_values``: device plugin -> the Helm values it is installed with (the render's
    ``helm/device-plugins/``); without them the charts' default tolerations are assumed.
    ``webhook``: the operator release whose webhook rules apply (default: the documented chart's).
    """
    issues: list[Issue] = []
    for obj in objs:
        issues += validate_object(obj, operator_version=operator_version, kube_version=kube_version, notes=notes)
    issues += [i for o in objs if isinstance(o, dict) for i in core_issues(o)]
    issues += webhook_issues([o for o in objs if isinstance(o, dict) and isinstance(o.get("metadata"), dict)],
                             webhook_release(webhook))
    issues += cross_check([o for o in objs if isinstance(o, dict)])
    issues += runtime_issues([o for o in objs if isinstance(o, dict)], plugin_values)
    return issues


def load_documents(path: str | Path) -> list[tuple[str, Any]]:
    """(source, document) for every YAML document in a file or, recursively, a folder."""
    p = Path(path)
    try:
        files = sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml") and f.is_file()) if p.is_dir() else [p]
    except OSError as exc:  # a name too long, a folder that cannot be listed
        raise SlinkyError(f"{str(p)[:200]}: cannot read: {exc.strerror or exc}") from None
    out = []
    for f in files:
        text = read_text(f)  # missing, unreadable, not UTF-8: worded as for every spec file
        try:
            docs = load_data_all(text)
        except RecursionError:
            raise SlinkyError(f"{f}: not valid YAML: nested too deeply") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{mark.line + 1}:" if mark is not None else ""
            raise SlinkyError(f"{f}:{where} not valid YAML: {getattr(exc, 'problem', None) or 'parse error'}") from None
        out += [(str(f), d) for d in docs if d is not None]
    return out
