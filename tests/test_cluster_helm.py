"""The slurm-operator's real Helm charts through Helm built from its Go module (issue 39 item 2), on a ``dev kube``
plane of this module's own (port base 21000; no node).

Helm reports the version ``kube/helm/go.mod`` pins; the charts are the operator module's ``helm/`` folders
with the module zip's missing ``templates/vendor`` stood in for (``data/helm/slurm-vendor-absent.tpl``: a values
file that turns a vendor integration on is refused); what the ``slurm`` chart makes from each example's
``helm/values.yaml`` is compared with what ``cluster render`` writes for the same spec, and every difference
must be one of ``INTENDED`` (each with its reason; the differences are printed per example). Then the real
charts are installed: ``slurm-operator-crds`` (taking over the plane's CRDs), ``slurm-operator``
(``certManager.enabled=false``) and ``slurm`` with cpu-small's values, whose objects the plane's operator
reconciles; and cpu-small's ``install.sh`` runs start to finish with ``ROUTE=helm``. That every key of our
values is one the chart knows is checked against the same module by tests/test_cluster_releases.py.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from private_cluster import port_shift
from rendered_example import render_renamed
from tiers import needs
from waiting import wait_until

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.render import render
from slinkyml.dev.kubernetes.helm import (
    Difference,
    Helm,
    compare,
    crd_schemas,
    helm_binary,
    install_cluster,
    install_operator,
    prepare_charts,
    template,
)
from slinkyml.dev.kubernetes.kube import BUILD_SCRIPT, KubeControlPlane, Ports
from slinkyml.errors import SlinkyError

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
PORT_BASE = 21000
KUBECTL = shutil.which("kubectl")
RECONCILE_TIMEOUT_S = 180.0

#: every difference between the chart's objects and the rendered ones that is meant, as (object label pattern,
#: field path pattern, why); fnmatch patterns. A difference outside this list fails the comparison.
INTENDED: list[tuple[str, str, str]] = [
    ("*", "spec.*imagePullPolicy", "the chart writes IfNotPresent; unset, Kubernetes gives IfNotPresent to an image "
     "with a tag other than latest, as every image we render has"),
    ("Controller", "spec.metrics.*", "the chart writes its metrics block switched off; unset, the operator makes no "
     "metrics either (Spec.Metrics.Enabled is false)"),
    ("Controller", "spec.reconfigure.image", "the chart names the reconfigure sidecar's image; the operator adds that "
     "sidecar only with inplaceReconfigure, which both leave off"),
    ("*", "spec.template.metadata.labels.*", "each tool's own labels on the pods (Helm's chart labels, slinkyml's "
     "cluster and node set); the operator's selectors use its own labels, neither of these"),
    ("NodeSet[[]*", "spec.template.spec.hostname", "the chart names slurmd pods <key>-<n>, the render keeps the "
     "operator's <NodeSet>-<n>; each gres.conf follows its own (cluster validate checks both)"),
    ("Controller", "spec.extraConf[[]*[]]", "the partition lines name the Slurm NodeSet, which the operator names "
     "after the pods' hostname prefix (common.GetSlurmNodeSetName): <key> for the chart, <NodeSet> for the render; "
     "the chart also sorts partitions by name"),
    ("ConfigMap[[]configFileRefs]", "data.gres.conf", "gres.conf's NodeName lines follow the pods' host names (above)"),
    ("NodeSet[[]*", "spec.template.spec.nodeSelector.kubernetes.io/os", "the chart's nodesetDefaults add "
     "kubernetes.io/os: linux; every node Karpenter launches carries it"),
    ("NodeSet[[]*", "spec.updateStrategy.*", "our node sets are OnDelete; the chart merges its RollingUpdate and "
     "ScheduledUpdate defaults, which OnDelete does not read"),
    ("LoginSet[[]*", "spec.login.securityContext.privileged", "the chart writes privileged: false, the same as unset"),
    ("Token", "(object)", "the chart makes no Token: its helm route applies rendered/'s Token with the other objects "
     "the chart does not make (install.sh, INSTALL.md)"),
]

REPORT: dict[str, list[Difference]] = {}


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    """The differences per example, printed at the end of the module (intended ones: they are the report)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not REPORT:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for name, diffs in sorted(REPORT.items()):
            reporter.write_line(f"{name}: {len(diffs)} difference(s) between the slurm chart's objects and the render")
            grouped: dict[str, list[Difference]] = {}
            for d in diffs:
                grouped.setdefault(_reason(d) or "NOT INTENDED", []).append(d)
            for why, group in grouped.items():
                reporter.write_line(f"  {len(group)} x {why}:")
                for d in group[:3]:
                    reporter.write_line(f"      {d}")
                if len(group) > 3:
                    reporter.write_line(f"      ... {len(group) - 3} more")


def _reason(d: Difference) -> str | None:
    return next((why for label, path, why in INTENDED if fnmatch.fnmatchcase(d.kind, label)
                 and fnmatch.fnmatchcase(d.path, path)), None)


@pytest.fixture(scope="module")
@needs("kube")
def plane() -> Iterator[KubeControlPlane]:
    """A control plane of this module's own (the charts take over its CRDs), without a node."""
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kube-helm-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(PORT_BASE + port_shift()))
    try:
        yield plane.up()
    finally:
        plane.reset()


@pytest.fixture(scope="module")
def helm(plane: KubeControlPlane) -> Helm:
    return Helm(helm_binary(), plane)


@pytest.fixture(scope="module")
def charts(helm: Helm) -> Path:
    return prepare_charts(helm)


def test_helm_is_the_pinned_build(helm: Helm) -> None:
    gomod = (BUILD_SCRIPT.parent / "helm" / "go.mod").read_text()
    pinned = re.search(r"^\thelm\.sh/helm/v3 (v\S+)", gomod, re.M)
    assert pinned and helm.version() == pinned.group(1)


def test_charts_are_the_modules_with_the_vendor_stand_in(helm: Helm, charts: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in charts.iterdir() if p.is_dir()) == ["slurm", "slurm-operator", "slurm-operator-crds"]
    assert (charts / "slurm" / "templates" / "vendor" / "_slinkyml-vendor-absent.tpl").is_file()
    assert [p.name for p in (charts / "slurm-operator" / "charts").iterdir()] == [
        f"slurm-operator-crds-{yaml.safe_load((charts / 'slurm-operator-crds' / 'Chart.yaml').read_text())['version']}.tgz"]
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"vendor": {"nvidia": {"dcgm": {"enabled": True}}},
                                      "nodesets": {"gpu": {"enabled": True}}}))
    with pytest.raises(SlinkyError, match="vendor.nvidia.dcgm is on, but the chart's templates/vendor folder"):
        template(helm, charts, "slurm", "slurm", values)


@pytest.mark.parametrize("name", EXAMPLES)
def test_chart_objects_agree_with_the_render(name: str, helm: Helm, charts: Path) -> None:
    spec = load_spec(EXAMPLES_DIR / name / "cluster.yaml")
    made = template(helm, charts, "slurm", spec.namespace, EXAMPLES_DIR / name / "helm" / "values.yaml")
    diffs = compare(render(spec).objects, made, crd_schemas(charts))
    REPORT[name] = diffs
    assert [str(d) for d in diffs if _reason(d) is None] == []


def test_real_charts_install_and_the_operator_reconciles(plane: KubeControlPlane, helm: Helm, charts: Path) -> None:
    api: Any = plane.api()
    install_operator(helm, charts)
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("controllers.slinky.slurm.net")
    assert crd.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"
    deployments = {d.metadata.name for d in client.AppsV1Api(api).list_namespaced_deployment("slinky").items}
    assert "slurm-operator" in deployments  # stored as the chart writes it; no node runs it here
    spec = load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
    tag = secrets.token_hex(3)
    namespace = f"slinkyml-helm-{tag}"
    with tempfile.TemporaryDirectory() as tmp:
        values = Path(tmp) / "values.yaml"
        data = yaml.safe_load((EXAMPLES_DIR / "cpu-small" / "helm" / "values.yaml").read_text())
        values.write_text(yaml.safe_dump(data))
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        for secret_ref in (data["slurmKey"]["secretRef"], data["jwtKey"]["secretRef"]):  # create: false in our values
            core.create_namespaced_secret(namespace, client.V1Secret(
                metadata=client.V1ObjectMeta(name=secret_ref["name"]),
                data={secret_ref["key"]: base64.b64encode(secrets.token_bytes(64)).decode()}))
        install_cluster(helm, charts, "slurm", namespace, values)
    dyn = DynamicClient(api)
    controllers = dyn.resources.get(api_version="slinky.slurm.net/v1beta1", kind="Controller")
    made = dyn.get(controllers, name="slurm", namespace=namespace).to_dict()
    assert made["spec"]["clusterName"] == spec.name
    wait_until("the operator's Service slurm-controller", lambda: _exists(core, "slurm-controller", namespace),
               timeout=RECONCILE_TIMEOUT_S, every=1.0)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (install.sh drives kubectl)")
def test_install_sh_helm_route_start_to_finish(plane: KubeControlPlane, helm: Helm, charts: Path,
                                               tmp_path: Path) -> None:
    cluster, _, folder = render_renamed("cpu-small", "h", "slinkyml-helmroute", tmp_path)
    env = {**helm.env(), "TARGET": "dev-kube", "ROUTE": "helm", "CHARTS": str(charts),
           "PATH": f"{helm.binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("FROM", None)
    run = subprocess.run(["sh", str(folder / "install.sh")], capture_output=True, text=True, env=env, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"install\.sh: \d+ steps done \(dev-kube, helm\)", run.stdout), run.stdout
    releases = helm.run("list", "--namespace", cluster.namespace, "--short").split()
    assert releases == ["slurm"]
    api: Any = plane.api()
    dyn = DynamicClient(api)
    nodesets = dyn.resources.get(api_version="slinky.slurm.net/v1beta1", kind="NodeSet")
    made = dyn.get(nodesets, name="slurm-worker-cpu", namespace=cluster.namespace).to_dict()
    assert made["spec"]["replicas"] == cluster.node_sets[0].count
    # the files of rendered/ that are not Slinky objects were applied: the NodePool, its EC2NodeClass
    custom = client.CustomObjectsApi(api)
    assert custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", f"{cluster.name}-cpu")


def _exists(core: Any, name: str, namespace: str) -> bool:
    try:
        core.read_namespaced_service(name, namespace)
        return True
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return False
        raise
