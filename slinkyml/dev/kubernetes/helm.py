"""The slurm-operator's real Helm charts, installed with Helm built from its Go module, into a ``dev kube`` plane.

Helm is ``helm.sh/helm/v3``'s ``cmd/helm`` at the version ``kube/helm/go.mod`` pins, built by ``kube/build.sh``
into a cache entry of its own. The charts are the ``helm/`` folders of the operator's Go module at the version
the plane runs (``slurm-operator-crds``, ``slurm-operator``, ``slurm``), copied out of the module cache (read-only)
with two things the module zip lacks: the ``slurm-operator`` chart's dependency (``helm dependency build``
from its ``file://../slurm-operator-crds``) and the ``slurm`` chart's ``templates/vendor/`` folder, which the go
command leaves out of every module zip; ``data/helm/slurm-vendor-absent.tpl`` stands in for it with the vendor
integrations (NVIDIA DCGM, Google A3) off, as slinkyml's values always have them.

cert-manager is not built: the operator chart is installed with ``certManager.enabled=false``, the chart's own
alternative (Helm generates the webhook's CA and serving certificate at install time and puts the CA in the
webhook configuration's ``caBundle``); see :func:`install_operator` for why its webhook is off on a plane
without a node.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.cluster.schemas import apply_defaults
from slinkyml.dev.kubernetes.kube import (
    BUILD_SCRIPT,
    GO_FALLBACK_DIR,
    OPERATOR_NAMESPACE,
    KubeControlPlane,
    operator_label,
)
from slinkyml.errors import SlinkyError
from slinkyml.kube import dig
from slinkyml.specload import load_data_all

KUBE_DIR = BUILD_SCRIPT.parent
OPERATOR_MODULE = "github.com/SlinkyProject/slurm-operator"
CHARTS = ("slurm-operator-crds", "slurm-operator", "slurm")
VENDOR_STAND_IN = DATA_DIR / "helm" / "slurm-vendor-absent.tpl"
#: the objects of the slurm chart and of ``cluster render`` that are compared, by kind
COMPARED_KINDS = ("Controller", "NodeSet", "LoginSet", "RestApi", "Accounting", "Token", "ConfigMap", "Secret")
TIMEOUT_S = 300


def _go_env() -> dict[str, str]:
    """The environment kube/build.sh gives the go command: its PATH fallback and the file mirror of the
    operator versions the public proxy refuses (``<repo>/../shared/go-modules``), when that folder exists."""
    env = dict(os.environ)
    if shutil.which("go") is None:
        env["PATH"] = f"{env.get('PATH', '/usr/bin:/bin')}:{GO_FALLBACK_DIR}"
    mirror = KUBE_DIR.parent.parent / "shared" / "go-modules"
    if mirror.is_dir():
        proxy = subprocess.run(["go", "env", "GOPROXY"], capture_output=True, text=True, env=env, check=False)
        env["GOPROXY"] = f"file://{mirror.resolve()},{proxy.stdout.strip() or 'https://proxy.golang.org,direct'}"
        env["GONOSUMDB"] = ",".join(filter(None, [env.get("GONOSUMDB"), "github.com/SlinkyProject"]))
    return env


def helm_binary() -> Path:
    """``$SLINKYML_HELM``, else the helm kube/build.sh built (``--helm-bindir``); a one-line error if neither."""
    given = os.environ.get("SLINKYML_HELM")
    if given:
        return Path(given)
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--helm-bindir"], capture_output=True, text=True, timeout=60,
                          env=_go_env())
    if done.returncode != 0:
        raise SlinkyError(done.stderr.strip() or f"{BUILD_SCRIPT} --helm-bindir failed ({done.returncode})")
    return Path(done.stdout.strip()) / "helm"


def operator_module(label: str) -> Path:
    """The operator's Go module at the version ``kube/operator-LABEL`` pins, in the Go module cache (downloaded
    there if missing, as the operator's build does)."""
    folder = KUBE_DIR / f"operator-{operator_label(label)}"
    done = subprocess.run(["go", "mod", "download", "-json", OPERATOR_MODULE], cwd=folder, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=_go_env())
    try:
        return Path(json.loads(done.stdout)["Dir"])
    except (ValueError, KeyError):
        raise SlinkyError(f"{OPERATOR_MODULE} (kube/operator-{label}): go mod download failed: "
                          f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}") from None


@dataclass(frozen=True)
class Helm:
    """The helm binary, run against one plane, with its config, cache and data folders in the plane's state."""

    binary: Path
    plane: KubeControlPlane

    def env(self) -> dict[str, str]:
        home = self.plane.state_dir / "helm"
        return {**os.environ, "KUBECONFIG": str(self.plane.kubeconfig), "HELM_CONFIG_HOME": str(home / "config"),
                "HELM_CACHE_HOME": str(home / "cache"), "HELM_DATA_HOME": str(home / "data")}

    def run(self, *args: str) -> str:
        done = subprocess.run([str(self.binary), *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=self.env())
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()] or [f"exit {done.returncode}"]
            error = next((line for line in lines if line.startswith("Error: ")), lines[-1])
            raise SlinkyError(f"helm {' '.join(args[:2])}: {error.removeprefix('Error: ')}")
        return done.stdout

    def version(self) -> str:
        return self.run("version", "--template", "{{.Version}}").strip()


def prepare_charts(helm: Helm, label: str | None = None) -> Path:
    """The three charts of the operator version the plane runs (or ``label``), ready for Helm, under the plane's
    state (``charts/<module version>``); prepared once, then reused."""
    module = operator_module(label or helm.plane.operator_version)
    dest = helm.plane.state_dir / "charts" / module.name.rsplit("@", 1)[1]
    if (dest / ".prepared").is_file():
        return dest
    work = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    for chart in CHARTS:
        shutil.copytree(module / "helm" / chart, work / chart)
    for root, dirs, files in os.walk(work):  # the module cache's files are read-only
        for name in [*dirs, *files]:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    vendor = work / "slurm" / "templates" / "vendor"
    vendor.mkdir(exist_ok=True)
    shutil.copyfile(VENDOR_STAND_IN, vendor / "_slinkyml-vendor-absent.tpl")
    helm.run("dependency", "build", str(work / "slurm-operator"))
    (work / ".prepared").write_text(f"{OPERATOR_MODULE} {module.name.rsplit('@', 1)[1]}\n")
    shutil.rmtree(dest, ignore_errors=True)
    work.rename(dest)
    return dest


def install_operator(helm: Helm, charts: Path, log: Callable[[str], None] = lambda _: None) -> None:
    """``slurm-operator-crds`` and ``slurm-operator`` as INSTALL.md installs them, with two differences:
    ``certManager.enabled=false`` (cert-manager is not built here; the chart's alternative), and
    ``webhook.enabled=false``: no node runs the chart's pods on such a plane, so a webhook configuration naming
    their Service (failurePolicy Fail) would refuse every Slinky object; the plane's own webhook, the same
    operator version built from its module, keeps judging them, and its manager reconciles. The CRDs the plane
    installed itself are taken over by the chart (``--take-ownership``). A plane with a node runs its operator as
    the Deployment ``slinky/slurm-operator``, the chart's own name: refused."""
    if (helm.plane.state_dir / "node").is_dir():
        raise SlinkyError(f"{helm.plane.state_dir}: a plane with a node runs its operator as Deployment "
                          f"{OPERATOR_NAMESPACE}/slurm-operator, the name the chart installs: use a plane without one")
    helm.run("upgrade", "--install", "slurm-operator-crds", str(charts / "slurm-operator-crds"), "--take-ownership")
    log("helm: slurm-operator-crds installed")
    helm.run("upgrade", "--install", "slurm-operator", str(charts / "slurm-operator"), "--namespace",
             OPERATOR_NAMESPACE, "--create-namespace", "--set", "crds.enabled=false", "--set",
             "certManager.enabled=false", "--set", "webhook.enabled=false")
    log("helm: slurm-operator installed")


def install_cluster(helm: Helm, charts: Path, release: str, namespace: str, values: Path) -> None:
    """The ``slurm`` chart with our values, as INSTALL.md's Helm route runs it."""
    helm.run("upgrade", "--install", release, str(charts / "slurm"), "--namespace", namespace, "--create-namespace",
             "-f", str(values))


def template(helm: Helm, charts: Path, release: str, namespace: str, values: Path) -> list[dict[str, Any]]:
    """The objects the ``slurm`` chart makes from ``values`` (``helm template``, no server)."""
    text = helm.run("template", release, str(charts / "slurm"), "--namespace", namespace, "-f", str(values))
    return [doc for doc in load_data_all(text) if isinstance(doc, dict)]


# ---------------------------------------------------------------- what the chart makes against ``cluster render``


@dataclass(frozen=True)
class Difference:
    """One field where the chart's object and the rendered one differ (``None``: absent on that side)."""

    kind: str
    path: str
    rendered: Any
    chart: Any

    def __str__(self) -> str:
        return f"{self.kind} {self.path}: rendered {_short(self.rendered)}, chart {_short(self.chart)}"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _pairs(rendered: list[dict[str, Any]], chart: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any] | None,
                                                                                          dict[str, Any] | None]]:
    """(label, rendered object, chart object) for each compared object: one Controller, RestApi, Accounting and
    Token each; NodeSets and LoginSets by their key (the chart names them ``<release>-worker-<key>``, render
    ``<cluster>-<key>``); the Controller's configFileRefs ConfigMaps and the LoginSets' sssd.conf Secret by use."""
    def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
        return [o for o in objs if o.get("kind") == kind]

    for kind in ("Controller", "RestApi", "Accounting", "Token"):
        ours, theirs = by_kind(rendered, kind), by_kind(chart, kind)
        if ours or theirs:
            yield kind, next(iter(ours), None), next(iter(theirs), None)
    for kind, infix in (("NodeSet", "-worker-"), ("LoginSet", "-login-")):
        keyed = {str(o["metadata"]["name"]).split(infix, 1)[-1]: o for o in by_kind(chart, kind)}
        for obj in by_kind(rendered, kind):
            name = str(obj["metadata"]["name"])
            key = next((k for k in keyed if name.endswith(f"-{k}")), None)
            yield f"{kind}[{key or name}]", obj, keyed.pop(key) if key else None
        for key, obj in keyed.items():
            yield f"{kind}[{key}]", None, obj

    def referenced(objs: list[dict[str, Any]], kind: str, paths: list[tuple[str, ...]]) -> dict[str, Any] | None:
        wanted = {dig(o, *p) for o in objs for p in paths} - {None}
        return next((o for o in by_kind(objs, kind) if o["metadata"]["name"] in wanted), None)

    def config_refs(objs: list[dict[str, Any]]) -> dict[str, Any] | None:
        names = {r.get("name") for o in by_kind(objs, "Controller") for r in dig(o, "spec", "configFileRefs") or []}
        return next((o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] in names), None)

    yield "ConfigMap[configFileRefs]", config_refs(rendered), config_refs(chart)
    sssd: list[tuple[str, ...]] = [("spec", "sssdConfRef", "name")]
    yield "Secret[sssdConfRef]", referenced(rendered, "Secret", sssd), referenced(chart, "Secret", sssd)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """path -> leaf; empty maps, lists, strings and nulls are left out (absent and empty read the same to the
    operator, which merges the template over its defaults)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}[{i}]"))
        return out
    return {} if value in (None, "") else {prefix: value}


def crd_schemas(charts: Path) -> dict[str, Any]:
    """kind -> the openAPIV3Schema of its served version, from the ``slurm-operator-crds`` chart."""
    out = {}
    for path in sorted((charts / "slurm-operator-crds" / "templates").glob("*.yaml")):
        for crd in load_data_all(path.read_text()):
            if isinstance(crd, dict) and crd.get("kind") == "CustomResourceDefinition":
                version = next(v for v in crd["spec"]["versions"] if v.get("served"))
                out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return out


def _body(obj: dict[str, Any] | None, renames: dict[str, str], schemas: dict[str, Any]) -> dict[str, Any]:
    """The compared part of an object as the API server stores it (the CRD's defaults filled in, as structural
    defaulting does for both): spec, data, stringData (a Secret's data decoded to stringData's form), each
    ``extraConf`` as its non-empty lines, the chart's names replaced by ours."""
    if obj is None:
        return {}
    if obj.get("kind") in schemas:
        obj = apply_defaults(schemas[str(obj["kind"])], obj)
    body = {k: obj[k] for k in ("spec", "data", "stringData") if k in obj}
    spec = body.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("extraConf"), str):
        spec = body["spec"] = {**spec, "extraConf": [line.strip() for line in spec["extraConf"].splitlines()
                                                     if line.strip()]}
    if obj.get("kind") == "Secret" and isinstance(body.get("data"), dict):
        body["stringData"] = {**{k: base64.b64decode(v).decode(errors="replace") for k, v in body.pop("data").items()},
                              **(body.get("stringData") or {})}
    text = json.dumps(body, sort_keys=True)
    for theirs, ours in sorted(renames.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f'"{theirs}"', f'"{ours}"')
    return _flatten(json.loads(text))


def compare(rendered: list[dict[str, Any]], chart: list[dict[str, Any]],
            schemas: dict[str, Any] | None = None) -> list[Difference]:
    """Every field where what the ``slurm`` chart makes from our values differs from what ``cluster render``
    writes for the same spec, over the Slinky objects and the ConfigMap and Secret they reference; both
    defaulted by ``schemas`` (:func:`crd_schemas`) as the API server would."""
    schemas = schemas or {}
    pairs = list(_pairs(rendered, chart))
    renames = {str(c["metadata"]["name"]): str(r["metadata"]["name"]) for _, r, c in pairs if r and c}
    out = []
    for label, ours, theirs in pairs:
        if ours is None or theirs is None:
            out.append(Difference(label, "(object)", dig(ours, "metadata", "name") if ours else None,
                                  dig(theirs, "metadata", "name") if theirs else None))
            continue
        a, b = _body(ours, renames, schemas), _body(theirs, renames, schemas)
        for path in sorted(set(a) | set(b)):
            if a.get(path) != b.get(path):
                out.append(Difference(label, path, a.get(path), b.get(path)))
    return out
