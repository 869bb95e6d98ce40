"""Regenerate the schemas `slinkyml cluster validate` judges non-Slinky kinds by, from the Go modules
that ship them (the ordinary `go mod download`, into the shared module cache):

- the CRDs kube/crds.txt lists (Karpenter, mariadb-operator), parsed and written unchanged as JSON
  (a YAML parse of mariadb-operator's 330 kB CRD alone costs 0.15 s, half of `cluster validate`'s
  budget) into slinkyml/data/crds/upstream/, with their module@version in SOURCES.txt;
- Kubernetes' OpenAPI v3 (k8s.io/kubernetes at kube/controlplane/go.mod's pin,
  api/openapi-spec/v3/), trimmed to the kinds in KINDS and the definitions they reach, descriptions
  dropped, into slinkyml/data/openapi/kubernetes.json.

They are vendored as data because a user of `cluster validate` has no Go toolchain; the tests
(tests/test_cluster_schemas.py) compare them with the modules when those are in the module cache.
Usage: .venv/bin/python kube/vendor_schemas.py
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "slinkyml" / "data"
#: (OpenAPI file, apiVersion, kind) of every core kind slinkyml renders or embeds (pod templates)
KINDS = (
    ("api__v1_openapi.json", "v1", "Namespace"),
    ("api__v1_openapi.json", "v1", "Secret"),
    ("api__v1_openapi.json", "v1", "ConfigMap"),
    ("api__v1_openapi.json", "v1", "PersistentVolumeClaim"),
    ("api__v1_openapi.json", "v1", "PersistentVolume"),
    ("api__v1_openapi.json", "v1", "Service"),
    ("api__v1_openapi.json", "v1", "ServiceAccount"),
    ("api__v1_openapi.json", "v1", "Pod"),
    ("apis__storage.k8s.io__v1_openapi.json", "storage.k8s.io/v1", "StorageClass"),
)


def module_dir(module: str) -> Path:
    out = subprocess.run(["go", "mod", "download", "-json", module], check=True, capture_output=True, text=True)
    return Path(json.loads(out.stdout)["Dir"])


def kubernetes_pin() -> str:
    text = (HERE / "controlplane" / "go.mod").read_text()
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)", text, re.M)
    if not match:
        raise SystemExit("kube/controlplane/go.mod: no k8s.io/kubernetes pin")
    return f"k8s.io/kubernetes@{match.group(1)}"


def crd_list() -> list[tuple[str, str]]:
    rows = []
    for line in (HERE / "crds.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, file = line.split()
            rows.append((module, file))
    return rows


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[1]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(refs(v) for v in node))
    return set()


def trimmed_openapi(root: Path) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for file, api_version, kind in KINDS:
        components = json.loads((root / file).read_text())["components"]["schemas"]
        for name, schema in components.items():
            gvks = schema.get("x-kubernetes-group-version-kind") or []
            if any(g["kind"] == kind and "/".join(p for p in (g["group"], g["version"]) if p) == api_version
                   for g in gvks):
                kinds[f"{api_version}/{kind}"] = name
                todo = [name]
                while todo:
                    current = todo.pop()
                    if current not in schemas:
                        schemas[current] = strip(components[current])
                        todo += sorted(refs(components[current]))
        if f"{api_version}/{kind}" not in kinds:
            raise SystemExit(f"{file}: no {api_version} {kind}")
    return {"kinds": kinds, "schemas": dict(sorted(schemas.items()))}


def main() -> None:
    upstream = DATA / "crds" / "upstream"
    upstream.mkdir(parents=True, exist_ok=True)
    sources = ["# module@version file-in-the-module (its data as JSON, by kube/vendor_schemas.py)"]
    for module, file in crd_list():
        crd = yaml.load((module_dir(module) / file).read_text(), Loader=yaml.CSafeLoader)
        (upstream / Path(file).with_suffix(".json").name).write_text(json.dumps(crd, separators=(",", ":")) + "\n")
        sources.append(f"{module} {file}")
    (upstream / "SOURCES.txt").write_text("\n".join(sources) + "\n")
    pin = kubernetes_pin()
    openapi = trimmed_openapi(module_dir(pin) / "api" / "openapi-spec" / "v3")
    out = DATA / "openapi" / "kubernetes.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"source": f"{pin} api/openapi-spec/v3", **openapi}, indent=None,
                              separators=(",", ":"), sort_keys=False) + "\n")
    print(f"wrote {upstream} ({len(sources) - 1} CRDs) and {out} ({len(openapi['schemas'])} definitions)")


if __name__ == "__main__":
    main()
