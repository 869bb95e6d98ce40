"""Offline validation against the live API server and the slurm-operator's webhooks, case by case
over :mod:`.corpus`: the confusion table, the misses (the server rejects, ``cluster validate``
accepts: must be none) and, where offline is stricter, the reason the server cannot see it.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from slinkyml.cluster.apply import Verdict, dynamic_client, judge
from slinkyml.cluster.corpus import DEPENDENCIES, Case
from slinkyml.cluster.issues import Issue
from slinkyml.cluster.runtime_checks import CONTAINER_FIELDS, after_admission_issues, operator_build_issues
from slinkyml.cluster.validate import (
    DROPPED,
    core_issues,
    cross_check,
    validate_object,
    webhook_issues,
    webhook_release,
)
from slinkyml.errors import SlinkyError
from slinkyml.kube import dig, mapping

#: why an offline rule rejects what admission accepts: a problem only the run time shows
OFFLINE_ONLY = {
    "embedded": "the CRD keeps container and pod-template fields open (x-kubernetes-preserve-unknown-fields); "
                "the operator copies them into the Pods of its StatefulSets, which the API server refuses then, "
                "so the NodeSet never gets a pod",
    "dropped": "the API server drops the field on create without an error (a PVC's dataSource of another "
               "kind, a cross-namespace dataSourceRef), so what it asks for never happens",
    "names": "custom resources only need a path-segment name, but the operator names Services, StatefulSets "
             "and pod host names after it, which must be DNS-1123 labels",
    "references": "admission does not look referenced objects up (Controller, NodePool, PVC); the operator "
                  "waits for one that never comes",
    "operator": "the CRD admits it (a Service spec kept open, any string as a Secret name, replicas without "
                "a scale subresource), but the Service, Deployment or Secret the operator builds from it is "
                "refused by the API server (port 70000, type Loadbalancer, a Secret named Bad_Name, replicas -1)",
    "runtime": "decided after admission by Karpenter, the device plugins, the scheduler or slurmd (taints, "
               "affinity, allocatable, gres.conf host names, images, FSx parameters)",
}
SLINKY = ("Controller", "NodeSet", "LoginSet", "Accounting", "RestApi", "Token")


@dataclass(frozen=True)
class Offline:
    """``cluster validate``'s findings for a case, each tagged with the stage that made it."""

    issues: tuple[tuple[str, Issue], ...]

    @property
    def rejected(self) -> bool:
        return bool(self.issues)

    def offline_only(self) -> set[str]:
        """The reasons (keys of OFFLINE_ONLY) its findings have; "admission" for one the server
        should have shared."""
        return {stage for stage, _ in self.issues}


def _stage(kind: str, issue: Issue, default: str) -> str:
    if default != "admission":
        return default
    embedded = ("spec.template.", *(f"spec.{f}." for f in CONTAINER_FIELDS.get(kind, ())),
                *(f"spec.{f}" for f in CONTAINER_FIELDS.get(kind, ())))
    if issue.path.startswith(embedded) and kind in SLINKY:
        return "embedded"
    if issue.path == "metadata.name" and kind in SLINKY:
        return "names"
    if issue.reason.startswith(DROPPED):
        return "dropped"
    return "admission"


def offline(objs: list[dict[str, Any]], plugin_values: dict[str, Any] | None,
            operator_version: str | None = None) -> Offline:
    """The same checks as :func:`.validate.validate_objects`, kept apart by stage; the webhook
    rules of ``operator_version`` (the running operator's)."""
    ok = [o for o in objs if isinstance(o, dict) and isinstance(o.get("metadata"), dict)]
    kinds = {id(o): str(o.get("kind")) for o in ok}
    tagged: list[tuple[str, Issue]] = []
    for o in ok:
        tagged += [(_stage(kinds[id(o)], i, "admission"), i) for i in validate_object(o) + core_issues(o)]
    tagged += [("admission", i) for i in webhook_issues(ok, webhook_release(operator_version))]
    tagged += [("references", i) for i in cross_check(ok)]
    tagged += [("operator", i) for i in operator_build_issues(ok)]
    tagged += [("runtime", i) for i in after_admission_issues(ok, plugin_values)]
    return Offline(tuple(tagged))


@dataclass
class Row:
    case: Case
    offline: Offline
    server_rejected: bool
    verdicts: list[tuple[str, Verdict]] = field(default_factory=list)  # the rejections
    offline_seconds: float = 0.0
    server_seconds: float = 0.0

    @property
    def miss(self) -> bool:
        return self.server_rejected and not self.offline.rejected

    @property
    def unexplained(self) -> bool:
        """Offline rejects, the server accepts, and no run-time reason covers it."""
        return not self.server_rejected and "admission" in self.offline.offline_only()

    def reason_shared(self) -> bool:
        """One of our findings names a field the server's rejection names, or shares at least three
        of its words (the webhooks' messages are quoted offline)."""
        ours = [(i.path, i.reason) for _, i in self.offline.issues]
        for _, verdict in self.verdicts:
            fields = [f for f, _ in verdict.causes if f] + FIELD_IN_MESSAGE.findall(verdict.message) \
                + DOTTED_FIELD.findall(verdict.message)
            if any(_same_field(f, p) for f in fields for p, _ in ours):
                return True
            said = _words(verdict.message + " " + " ".join(m for _, m in verdict.causes))
            if any(len(_words(r) & said) >= min(3, len(_words(r))) for _, r in ours):
                return True
        return False


#: a field path quoted in a server message: ``.spec.unknownField``, ``spec.replicas``, ``data[k]``
FIELD_IN_MESSAGE = re.compile(r"(?<![\w/])\.?((?:spec|metadata|data|stringData|binaryData|reclaimPolicy|"
                              r"volumeBindingMode|provisioner|parameters)(?:[.\[][\w./\[\]-]*)?)")


#: any field path the structured-merge decoder names: ``.slinkymlExtra: field not declared in schema``
DOTTED_FIELD = re.compile(r"\s\.([A-Za-z][\w./\[\]-]*):")


def _same_field(server: str, ours: str) -> bool:
    norm = [x.replace("[", ".").replace("]", "").strip(".") for x in (server, ours)]
    return norm[0] == norm[1] or norm[1].startswith(norm[0] + ".") or norm[0].startswith(norm[1] + ".")


def _words(text: str) -> set[str]:
    return {w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split() if len(w) > 3}


def in_namespace(objs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The case's objects in a namespace of its own (the Namespace object renamed with them)."""
    spaces = Counter(dig(o, "metadata", "namespace") for o in objs if isinstance(dig(o, "metadata", "namespace"), str))
    old = spaces.most_common(1)[0][0] if spaces else None
    out = []
    for o in objs:
        o = {**o, "metadata": dict(o["metadata"])} if isinstance(o.get("metadata"), dict) else o
        meta = mapping(o.get("metadata"))
        if o.get("kind") == "Namespace" and meta.get("name") == old:
            meta["name"] = namespace
        elif meta.get("namespace") == old:
            meta["namespace"] = namespace
        out.append(o)
    return out


def server(api: Any, dyn: Any, objs: list[dict[str, Any]], namespace: str) -> list[tuple[str, Verdict]]:
    """Judge a case on the live server: its own Namespace object as a dry-run create (a namespace
    that exists already takes no spec.finalizers), then its namespace, Secrets and ConfigMaps applied
    for real (the Controller webhook reads its ConfigMaps), everything else as a dry-run create."""
    ours = [o for o in objs if isinstance(o, dict) and o.get("kind") == "Namespace"
            and isinstance(o.get("metadata"), dict) and o["metadata"].get("name") == namespace]
    rejected = []
    for o in ours:
        verdict = judge(api, o, dry_run=True, dynamic=dyn)
        if verdict is not None and not verdict.accepted:
            rejected.append((f"Namespace {namespace}", verdict))
    judge(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, dry_run=False,
          dynamic=dyn)
    for o in objs:
        if not isinstance(o, dict) or not isinstance(o.get("metadata"), dict) or any(o is n for n in ours):
            continue
        real = o.get("kind") in DEPENDENCIES and o.get("kind") != "Namespace"
        verdict = judge(api, o, dry_run=not real, dynamic=dyn)
        if verdict is not None and not verdict.accepted:
            rejected.append((f"{o.get('kind')} {o['metadata'].get('name')}", verdict))
    return rejected


def changed_objects(case: Case, base: list[dict[str, Any]] | None) -> list[int] | None:
    """The indexes of the objects ``case`` changed from its example's ``base``, when it can be judged by
    dry-running only those beside the base (no change to the namespace, its Secrets or ConfigMaps, which
    exist for real; as many objects as the base); None when it needs a namespace of its own."""
    if base is None or len(case.objects) != len(base):
        return None
    changed = [i for i, (o, b) in enumerate(zip(case.objects, base, strict=True)) if o is not b and o != b]
    for i in changed:
        o = case.objects[i]
        if not isinstance(o, dict) or not isinstance(o.get("metadata"), dict) or o.get("kind") in DEPENDENCIES \
                or base[i].get("kind") in DEPENDENCIES:
            return None
    return changed


def run(api: Any, cases: list[Case], prefix: str, operator_version: str | None = None,
        bases: dict[str, list[dict[str, Any]]] | None = None) -> list[Row]:
    """Every case offline and on the server; ``operator_version``: the running operator's, whose webhook
    rules the offline side applies. A case is judged in a namespace of its own (``<prefix>-<n>``: its
    Namespace, Secrets and ConfigMaps created, the rest dry-run, ~15 requests), or, given ``bases`` (each
    example's rendered objects) and a case that changed other objects only (:func:`changed_objects`), by
    dry-running just the objects it changed in its example's namespace (``<prefix>-base-<n>``), where the
    base was judged first and must be accepted whole: the others are the base's, which the server accepts.
    Every namespace is deleted afterwards."""
    dyn = dynamic_client(api)
    bases = bases or {}
    rows = []
    namespaces: list[str] = []
    shared: dict[str, str] = {}
    try:
        for n, case in enumerate(cases):
            changed = changed_objects(case, bases.get(case.example))
            if changed is None:
                namespace = f"{prefix}-{n:03d}"
            elif case.example in shared:
                namespace = shared[case.example]
            else:
                namespace = shared[case.example] = f"{prefix}-base-{len(shared)}"
                namespaces.append(namespace)
                refused = server(api, dyn, in_namespace(bases[case.example], namespace), namespace)
                if refused:
                    raise SlinkyError(f"{case.example}: the server refuses its render, which every case of it "
                                      f"is judged beside: {refused[0][0]}: {refused[0][1].message}")
            objs = in_namespace(case.objects, namespace)
            start = time.perf_counter()
            found = offline(objs, case.plugin_values, operator_version)
            middle = time.perf_counter()
            if changed is None:
                namespaces.append(namespace)
                rejected = server(api, dyn, objs, namespace)
            else:
                rejected = [(f"{objs[i].get('kind')} {objs[i]['metadata'].get('name')}", verdict) for i in changed
                            if (verdict := judge(api, objs[i], dry_run=True, dynamic=dyn)) is not None
                            and not verdict.accepted]
            rows.append(Row(case, found, bool(rejected), rejected, middle - start, time.perf_counter() - middle))
    finally:
        delete_namespaces(api, namespaces)
    return rows


def delete_namespaces(api: Any, names: list[str]) -> None:
    # lazy: the kubernetes client is the optional [k8s] extra
    from kubernetes import client

    core = client.CoreV1Api(api)
    for name in names:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except Exception:  # noqa: BLE001 - best-effort clean-up of our own namespaces
            continue


def confusion(rows: list[Row]) -> str:
    """The confusion table and its per-origin split, as text."""
    cells = Counter((r.offline.rejected, r.server_rejected) for r in rows)
    lines = [
        f"{len(rows)} cases ({', '.join(f'{k} {v}' for k, v in sorted(Counter(r.case.origin for r in rows).items()))})",
        "",
        "| | server accepts | server rejects |",
        "| --- | --- | --- |",
        f"| offline accepts | {cells[(False, False)]} | {cells[(False, True)]} (misses) |",
        f"| offline rejects | {cells[(True, False)]} (offline stricter) | {cells[(True, True)]} |",
    ]
    stricter = Counter(reason for r in rows if r.offline.rejected and not r.server_rejected
                       for reason in r.offline.offline_only())
    if stricter:
        lines += ["", "offline stricter, by reason (a case may have several):"]
        lines += [f"- {reason} ({count}): {OFFLINE_ONLY.get(reason, 'NO REASON: admission should have agreed')}"
                  for reason, count in sorted(stricter.items())]
    return "\n".join(lines)


def kind_of(case: Case) -> str:
    """The kind a case changed (its name: ``example: Kind name: what``); "spec" for a spec case."""
    parts = case.name.split(": ")
    return parts[1].split()[0] if len(parts) > 2 else "spec"


def verdict_text(found: Offline) -> str:
    """One line per case for the recorded offline verdicts: accept, or reject with its stages."""
    return f"reject: {','.join(sorted(found.offline_only()))}" if found.rejected else "accept"


def confusion_by_kind(rows: list[Row]) -> str:
    """The confusion table split by the kind each case changed, as a Markdown table."""
    lines = ["| kind | cases | offline accepts, server accepts | offline accepts, server rejects (misses) | "
             "offline rejects, server accepts | offline rejects, server rejects |",
             "| --- | --- | --- | --- | --- | --- |"]
    by_kind: dict[str, Counter[tuple[bool, bool]]] = {}
    for r in rows:
        by_kind.setdefault(kind_of(r.case), Counter())[(r.offline.rejected, r.server_rejected)] += 1
    total: Counter[tuple[bool, bool]] = Counter()
    for kind, cells in sorted(by_kind.items()):
        lines.append(f"| {kind} | {sum(cells.values())} | {cells[(False, False)]} | {cells[(False, True)]} | "
                     f"{cells[(True, False)]} | {cells[(True, True)]} |")
        total.update(cells)
    lines.append(f"| all | {sum(total.values())} | {total[(False, False)]} | {total[(False, True)]} | "
                 f"{total[(True, False)]} | {total[(True, True)]} |")
    return "\n".join(lines)


#: where README.md holds the per-kind table of the generated corpus (benchmarks/cluster_agreement.py --schema
#: --readme writes it)
README_TABLE_BEGIN = "<!-- BEGIN agreement table (benchmarks/cluster_agreement.py --schema --readme; do not edit) -->"
README_TABLE_END = "<!-- END agreement table -->"


def with_readme_table(text: str, table: str) -> str:
    """``text`` (README.md) with ``table`` between its agreement-table markers."""
    start, end = text.find(README_TABLE_BEGIN), text.find(README_TABLE_END)
    if start < 0 or end < start:
        raise SlinkyError(f"README.md: no '{README_TABLE_BEGIN}' ... '{README_TABLE_END}' block to write the table in")
    return f"{text[:start]}{README_TABLE_BEGIN}\n{table}\n{text[end:]}"
