"""Run-time rules: each one breaks on a manifest that violates it; the shipped manifests pass them all.

The rules mirror the slurm-operator, Karpenter, the device-plugin charts and the FSx CSI driver
(see slinkyml/cluster/runtime_checks.py for the upstream file behind each).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.addons import (
    README_BEGIN,
    README_END,
    addons,
    karpenter_allocatable,
    node_affinity_matches,
    requirements_markdown,
)
from slinkyml.cluster.install import install_steps
from slinkyml.cluster.render import render
from slinkyml.cluster.runtime_checks import (
    chart_values_issues,
    hostlist_matches,
    pool_node_labels,
    runtime_issues,
)
from slinkyml.cluster.validate import validate_objects
from slinkyml.instances import load_instance_types

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
REQUIREMENTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "cluster-and-eks.md"

#: Karpenter's published allocatable memory (MiB) and pods per instance type: the "Resources" tables
#: of aws/karpenter-provider-aws website/content/en/preview/reference/instance-types.md @ 1d927085.
PUBLISHED = {
    "p4d.24xlarge": (1082712, 737), "p4de.24xlarge": (1082712, 737), "p5.48xlarge": (1938410, 100),
    "p5e.48xlarge": (1938410, 100), "p5en.48xlarge": (1937332, 198), "g5.48xlarge": (723299, 345),
    "g6e.48xlarge": (1449132, 492), "trn1.32xlarge": (481894, 247), "trn2.48xlarge": (1938410, 100),
    "m7i.8xlarge": (118312, 234), "c7i.4xlarge": (27381, 234),
}


@pytest.fixture(scope="module")
def h100() -> Any:
    return render(load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml"))


@pytest.fixture(scope="module")
def trn1() -> Any:
    return render(load_spec(EXAMPLES_DIR / "trn1" / "cluster.yaml"))


def _broken(rendered: Any, kind: str, name: str, fn: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    objs = copy.deepcopy(rendered.objects)
    fn(next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name))
    return objs


def _errors(objs: list[dict[str, Any]], plugin_values: dict[str, Any] | None) -> list[str]:
    return [str(i) for i in runtime_issues(objs, plugin_values)]


@pytest.mark.parametrize("name", EXAMPLES)
def test_shipped_manifests_pass_every_runtime_rule(name: str) -> None:
    rendered = render(load_spec(EXAMPLES_DIR / name / "cluster.yaml"))
    assert _errors(rendered.objects, rendered.plugin_values) == []
    helm = yaml.safe_load((EXAMPLES_DIR / name / "helm" / "values.yaml").read_text())
    assert chart_values_issues("values.yaml", helm) == []


def test_karpenter_model_matches_published_allocatable() -> None:
    types = load_instance_types()
    assert set(PUBLISHED) == set(types)
    for name, (memory_mib, pods) in PUBLISHED.items():
        alloc = karpenter_allocatable(types[name])
        assert (alloc.memory_mib, alloc.max_pods) == (memory_mib, pods), name
    # the issue's worked example: 32,768 MiB x (1 - 0.075) - (11 x 234 + 255) - 100
    assert karpenter_allocatable(types["c7i.4xlarge"]).memory_mib == 32768 - 2458 - (11 * 234 + 255) - 100


@pytest.mark.parametrize(("kind", "name", "fn", "expected"), [
    ("Controller", "llm", lambda o: o["spec"].pop("logfile"),
     "Controller slurm/llm: spec.logfile.image: required at run time"),
    ("NodeSet", "llm-cpu", lambda o: o["spec"]["logfile"].pop("image"),
     "NodeSet slurm/llm-cpu: spec.logfile.image: required at run time"),
    ("LoginSet", "llm-login", lambda o: o["spec"].pop("initconf"),
     "LoginSet slurm/llm-login: spec.initconf.image: required at run time"),
    ("Controller", "llm", lambda o: o["spec"].__setitem__("inplaceReconfigure", True),
     "Controller slurm/llm: spec.reconfigure.image: required when inplaceReconfigure is on"),
], ids=["controller-logfile", "nodeset-logfile", "loginset-initconf", "reconfigure"])
def test_missing_sidecar_image(h100: Any, kind: str, name: str, fn: Any, expected: str) -> None:
    errors = _errors(_broken(h100, kind, name, fn), h100.plugin_values)
    assert any(e.startswith(expected) for e in errors), errors


def test_hugepages_are_not_modelled_by_karpenter(h100: Any) -> None:
    def hugepages(o: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            o["spec"]["slurmd"]["resources"][part]["hugepages-2Mi"] = "5120Mi"
    errors = _errors(_broken(h100, "NodeSet", "llm-h100", hugepages), h100.plugin_values)
    assert errors == [
        f"NodeSet slurm/llm-h100: spec.slurmd.resources.{part}.hugepages-2Mi: Karpenter does not model this "
        "resource on any instance type, so the pod never gets a node" for part in ("requests", "limits")]


def test_memory_request_above_modelled_allocatable(h100: Any) -> None:
    def old_rule(o: dict[str, Any]) -> None:  # what 0.85 x memory gave on c7i.4xlarge
        o["spec"]["slurmd"]["resources"]["requests"].update(cpu="14", memory="27Gi")
    errors = _errors(_broken(h100, "NodeSet", "llm-cpu", old_rule), h100.plugin_values)
    assert errors == ["NodeSet slurm/llm-cpu: spec.slurmd.resources.requests: asks 14 CPU / 27648 MiB but "
                      "Karpenter models c7i.4xlarge as 15.89 CPU / 27381 MiB allocatable, less 0.5 CPU / "
                      "1024 MiB for DaemonSets"]


def test_pool_taint_the_slurmd_pod_does_not_tolerate(h100: Any) -> None:
    def extra_taint(o: dict[str, Any]) -> None:
        o["spec"]["template"]["spec"]["taints"].append({"key": "team", "value": "a", "effect": "NoExecute"})
    errors = _errors(_broken(h100, "NodePool", "llm-cpu", extra_taint), h100.plugin_values)
    assert errors == ["NodeSet slurm/llm-cpu: spec.template.spec.tolerations: does not tolerate taint "
                      "team:NoExecute of NodePool llm-cpu"]


def test_device_plugin_kept_off_by_a_taint(h100: Any, trn1: Any) -> None:
    # with the stock EFA chart values (no rendered values), the GPU taint keeps the EFA plugin off
    assert _errors(h100.objects, None) == [
        "NodePool llm-h100: spec.template.spec.taints: taint nvidia.com/gpu:NoSchedule keeps the efa device "
        "plugin off the nodes (the chart's default values do not tolerate it), so they never advertise "
        "vpc.amazonaws.com/efa and NodeSet slurm/llm-h100 stays Pending"]

    def custom_taint(o: dict[str, Any]) -> None:  # the old render: a custom taint on the GPU pool
        o["spec"]["template"]["spec"]["taints"].insert(0, {"key": "slinkyml.io/slurm-worker", "value": "true",
                                                           "effect": "NoSchedule"})
    objs = _broken(trn1, "NodePool", "trn1-trn1", custom_taint)
    for o in objs:
        if o["kind"] == "NodeSet":
            o["spec"]["template"]["spec"]["tolerations"].append(
                {"key": "slinkyml.io/slurm-worker", "operator": "Exists", "effect": "NoSchedule"})
    errors = _errors(objs, trn1.plugin_values)
    assert [e.split(" keeps the ")[1].split(" device")[0] for e in errors] == ["neuron", "efa"], errors
    assert all("its values in helm/device-plugins/" in e for e in errors)


def test_gres_node_names_follow_each_path_and_scale(trn1: Any) -> None:
    gres = next(o for o in trn1.objects if o["kind"] == "ConfigMap")["data"]["gres.conf"]
    assert "NodeName=trn1-trn1-[0-9999] Name=neuron" in gres
    assert trn1.helm_values["configFiles"]["gres.conf"].splitlines()[1].startswith("NodeName=trn1-[0-9999] ")

    def old_range(o: dict[str, Any]) -> None:  # the hard-coded range of the replicas
        o["data"]["gres.conf"] = o["data"]["gres.conf"].replace("[0-9999]", "[0-1]")
    errors = _errors(_broken(trn1, "ConfigMap", "trn1-slurm-config", old_range), trn1.plugin_values)
    assert errors == ["ConfigMap slurm-trn/trn1-slurm-config: gres.conf: no Name=neuron line names trn1-trn1-2 "
                      "(NodeSet slurm-trn/trn1-trn1's next hostname)"]

    helm = copy.deepcopy(trn1.helm_values)  # the operator path's names given to the chart
    helm["configFiles"]["gres.conf"] = helm["configFiles"]["gres.conf"].replace("NodeName=trn1-", "NodeName=trn1-trn1-")
    assert [str(i) for i in chart_values_issues("values.yaml", helm)] == [
        "values.yaml: configFiles: gres.conf: no Name=neuron line names trn1-0 (nodesets.trn1's pod hostname)"]

    def hostname(o: dict[str, Any]) -> None:  # a template hostname changes the operator's names too
        o["spec"]["template"]["spec"]["hostname"] = "trn-"
    errors = _errors(_broken(trn1, "NodeSet", "trn1-trn1", hostname), trn1.plugin_values)
    assert errors and "trn-0" in errors[0]


def test_spare_nodes_set_the_nodepool_headroom() -> None:
    spec = load_spec(EXAMPLES_DIR / "trn1" / "cluster.yaml")
    for spare, nodes in ((0, 2), (1, 3), (3, 5)):
        spec.node_sets[0].spare_nodes = spare
        pool = next(o for o in render(spec.check()).objects if o["kind"] == "NodePool")
        assert pool["spec"]["limits"] == {"cpu": str(128 * nodes), "memory": f"{512 * nodes}Gi"}


def test_toleration_semantics_follow_kubernetes() -> None:
    from slinkyml.cluster.addons import tolerates

    gpu = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    assert tolerates({"operator": "Exists"}, gpu)  # empty key + Exists: every taint (FSx CSI node)
    assert tolerates({"key": "nvidia.com/gpu", "operator": "Exists"}, gpu)  # no effect: all effects
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, gpu)
    assert tolerates({"key": "nvidia.com/gpu", "value": "true"}, gpu)  # operator defaults to Equal
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Equal", "value": "yes"}, gpu)
    assert not tolerates({"key": "CriticalAddonsOnly", "operator": "Exists"}, gpu)


def test_hostlist_matching() -> None:
    assert hostlist_matches("a-[0-9999]", "a-1234") and not hostlist_matches("a-[0-9]", "a-10")
    assert hostlist_matches("x1,y-[2,4-5]", "y-4") and not hostlist_matches("x1,y-[2,4-5]", "y-3")
    assert hostlist_matches("n[01-10]", "n07") and not hostlist_matches("n[01-10]", "n7")
    assert hostlist_matches("solo", "solo") and not hostlist_matches("a-[0-3]", "b-1")


@pytest.mark.parametrize(("param", "value", "expected"), [
    ("perUnitStorageThroughput", "200", "parameters.perUnitStorageThroughput: '200': PERSISTENT_2 takes"),
    ("perUnitStorageThroughput", "fast", "parameters.perUnitStorageThroughput: 'fast': must be an integer"),
    ("deploymentType", "PERSISTENT_3", "parameters.deploymentType: 'PERSISTENT_3': not one of"),
    ("dataCompressionType", "ZSTD", "parameters.dataCompressionType: 'ZSTD': not one of NONE, LZ4"),
    ("fileSystemTypeVersion", "2.16", "parameters.fileSystemTypeVersion: '2.16': not one of"),
    ("efaEnabled", "yes", "parameters.efaEnabled: 'yes': must be true or false"),
    ("subnetId", "subnet-0a1b2c3d4e5f60718,subnet-0a1b2c3d4e5f60719", "parameters.subnetId: one subnet id"),
    ("securityGroupIds", "sg-0123456789abcdef0 sg-1", "parameters.securityGroupIds: a comma-separated list"),
    ("perUnitThroughput", "250", "parameters.perUnitThroughput: not a parameter of the FSx CSI driver"),
])
def test_fsx_parameter_values(h100: Any, param: str, value: str, expected: str) -> None:
    objs = _broken(h100, "StorageClass", "llm-fsx-lustre", lambda o: o["parameters"].__setitem__(param, value))
    errors = _errors(objs, h100.plugin_values)
    assert len(errors) == 1 and errors[0].startswith(f"StorageClass llm-fsx-lustre: {expected}"), errors


def test_rules_survive_malformed_objects(h100: Any) -> None:
    objs = copy.deepcopy(h100.objects)
    for o in objs:
        spec = o.get("spec")
        if isinstance(spec, dict):
            for key in list(spec):
                spec[key] = "garbage"
        if o["kind"] == "StorageClass":
            o["parameters"] = ["x"]
    runtime_issues(objs, {"efa": {"tolerations": "all"}})  # no exception: the schema reports these
    assert chart_values_issues("v", {"nodesets": "x", "controller": {}, "configFiles": {"gres.conf": 1}}) == []


def test_validate_cli_prints_the_fit_table_and_fails_on_a_broken_folder(tmp_path: Path, h100: Any) -> None:
    def run(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "validate", str(path)],
                              capture_output=True, text=True, timeout=300)

    ok = run(EXAMPLES_DIR / "h100-efa")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "slurmd requests vs Karpenter's modelled allocatable" in ok.stdout
    row = next(line for line in ok.stdout.splitlines() if line.startswith("NodeSet slurm/llm-cpu"))
    assert row.split()[2:] == ["c7i.4xlarge", "15.89", "27381", "234", "15", "26357", "0.89", "1024", "ok"]

    # all examples at once: one EFA plugin install must tolerate the GPU and the Trainium taints
    every = run(EXAMPLES_DIR)
    assert every.returncode == 0, every.stdout

    (tmp_path / "rendered").mkdir()
    for i, o in enumerate(h100.objects):  # the render without helm/device-plugins: EFA plugin kept off
        (tmp_path / "rendered" / f"{i:02d}.yaml").write_text(yaml.safe_dump(o))
    bad = run(tmp_path)
    assert bad.returncode == 1 and "keeps the efa device plugin off the nodes" in bad.stdout, bad.stdout
    (tmp_path / "device-plugins").mkdir()
    (tmp_path / "device-plugins" / "efa.yaml").write_text(yaml.safe_dump(h100.plugin_values["efa"]))
    assert run(tmp_path).returncode == 0


def test_docs_requirements_section_is_generated_from_the_data() -> None:
    text = REQUIREMENTS_PAGE.read_text()
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END) + 1
    assert text[start:end] == requirements_markdown(), (
        "docs/cluster-and-eks.md's 'What you need in the cluster' is stale: regenerate it with "
        "`python -c 'from slinkyml.cluster.addons import requirements_markdown as r; print(r(), end=\"\")'`")


def test_validate_objects_runs_the_runtime_rules(h100: Any) -> None:
    objs = _broken(h100, "Controller", "llm", lambda o: o["spec"].pop("logfile"))
    assert any("spec.logfile.image" in str(i) for i in validate_objects(objs, plugin_values=h100.plugin_values))


def test_nvidia_plugin_needs_a_gpu_label_on_the_pool(h100: Any) -> None:
    """The chart's default nodeAffinity wants NFD's PCI label or nvidia.com/gpu.present=true: a pool
    without the label never gets the plugin, so nvidia.com/gpu is never advertised (the review's find)."""
    pool = next(o for o in h100.objects if o["kind"] == "NodePool" and o["metadata"]["name"] == "llm-h100")
    assert pool["spec"]["template"]["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    objs = _broken(h100, "NodePool", "llm-h100",
                   lambda o: o["spec"]["template"]["metadata"]["labels"].pop("nvidia.com/gpu.present"))
    errors = _errors(objs, h100.plugin_values)
    assert errors == [
        "NodePool llm-h100: spec.template.metadata.labels: no node of this pool matches the nvidia device plugin's "
        "node affinity (its values in helm/device-plugins/: feature.node.kubernetes.io/pci-10de.present In (true) or "
        "feature.node.kubernetes.io/cpu-model.vendor_id In (NVIDIA) or nvidia.com/gpu.present In (true)), so its "
        "DaemonSet never runs there, the nodes never advertise nvidia.com/gpu and NodeSet slurm/llm-h100 stays "
        "Pending"]
    # values that replace the affinity with one of their own are judged instead of the chart's
    nfd_only = {**h100.plugin_values["nvidia"], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnored"
                "DuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}]}]}}}}
    errors = _errors(h100.objects, {**h100.plugin_values, "nvidia": nfd_only})
    assert len(errors) == 1 and "nvidia device plugin's node affinity" in errors[0]


def test_efa_and_neuron_plugins_run_only_on_their_instance_types(h100: Any, trn1: Any) -> None:
    narrow = {**h100.plugin_values["efa"], "supportedInstanceLabels": {"values": ["c5n.18xlarge"]}}
    errors = _errors(h100.objects, {**h100.plugin_values, "efa": narrow})
    assert len(errors) == 1 and errors[0].startswith(
        "NodePool llm-h100: spec.template.metadata.labels: no node of this pool matches the efa device plugin's node "
        "affinity (its values in helm/device-plugins/: node.kubernetes.io/instance-type In (c5n.18xlarge))"), errors
    inf_only = {**trn1.plugin_values["neuron"], "neuronInstances": ["inf2.48xlarge"]}
    errors = _errors(trn1.objects, {**trn1.plugin_values, "neuron": inf_only})
    assert len(errors) == 1 and "neuron device plugin's node affinity" in errors[0] \
        and "and eks.amazonaws.com/compute-type NotIn (fargate, hybrid, auto)" in errors[0], errors
    # every instance type the model knows with EFA or an accelerator gets its plugin by default
    efa_types = set(addons()["device_plugins"]["efa"]["supported_instance_labels"]["values"])
    neuron_types = set(addons()["device_plugins"]["neuron"]["instances"])
    for itype in load_instance_types().values():
        assert not itype.efa or itype.name in efa_types, itype.name
        if itype.accelerator is not None and itype.accelerator.kind == "neuron":
            assert itype.name in neuron_types, itype.name


def test_node_affinity_semantics() -> None:
    labels = {"zone": frozenset({"a", "b"}), "type": frozenset({"p5"}), "open": frozenset()}
    term = lambda *exprs: [{"matchExpressions": list(exprs)}]  # noqa: E731
    assert node_affinity_matches(term({"key": "zone", "operator": "In", "values": ["a", "b", "c"]}), {}, labels)
    assert not node_affinity_matches(term({"key": "zone", "operator": "In", "values": ["a"]}), {}, labels)
    assert node_affinity_matches(term({"key": "gone", "operator": "NotIn", "values": ["x"]}), {}, labels)
    assert node_affinity_matches(term({"key": "open", "operator": "Exists"}), {}, labels)
    assert not node_affinity_matches(term({"key": "open", "operator": "In", "values": ["x"]}), {}, labels)
    assert node_affinity_matches([], {"type": "p5"}, labels) and not node_affinity_matches([], {"zone": "a"}, labels)
    assert node_affinity_matches([{"matchExpressions": []}, *term({"key": "type", "operator": "Exists"})], {}, labels)
    pool = {"metadata": {"name": "p"}, "spec": {"template": {"metadata": {"labels": {"x": "1"}}, "spec": {
        "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}}}}
    got = pool_node_labels(pool)
    assert got["x"] == {"1"} and got["karpenter.sh/nodepool"] == {"p"} and got["kubernetes.io/os"] == {"linux"}
    assert got["topology.kubernetes.io/zone"] == {"us-east-1a"} and got["node.kubernetes.io/instance-type"] == set()


@pytest.mark.parametrize(("image", "expected"), [
    ("ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04", "not a published tag"),
    ("ghcr.io/slinkyproject/slurmd:26.05-debian13", "not a published tag"),
    ("ghcr.io/slinkyproject/worker:26.05-ubuntu24.04", "Slinky publishes no image 'worker'"),
    ("123456789012.dkr.ecr.us-west-2.amazonaws.com/slinkyml/worker-rocm:26.05",
     "slinkyml builds no image 'worker-rocm' (containers/: login, nccl-tests, worker, worker-neuron)"),
])
def test_images_that_do_not_exist_or_are_too_old(h100: Any, image: str, expected: str) -> None:
    objs = _broken(h100, "NodeSet", "llm-cpu", lambda o: o["spec"]["slurmd"].__setitem__("image", image))
    errors = _errors(objs, h100.plugin_values)
    assert len(errors) == 1 and errors[0].startswith(f"NodeSet slurm/llm-cpu: spec.slurmd.image: {image!r}: {expected}"), \
        errors
    for ok in ("ghcr.io/slinkyproject/slurmd:26.05.1-rockylinux9", "ghcr.io/slinkyproject/slurmd:25.11-ubuntu24.04", "registry:5000/team/slurmd:26.05",
               "123456789012.dkr.ecr.us-east-1.amazonaws.com/slinkyml/worker:26.05"):
        objs = _broken(h100, "NodeSet", "llm-cpu", lambda o, i=ok: o["spec"]["slurmd"].__setitem__("image", i))
        assert _errors(objs, h100.plugin_values) == [], ok


def test_project_images_are_the_containers_folders() -> None:
    folders = sorted(p.parent.name for p in (EXAMPLES_DIR.parent / "containers").glob("*/Dockerfile"))
    assert addons()["project_images"] == folders


def test_install_sequence_per_example(h100: Any, trn1: Any) -> None:
    small = render(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml"))
    whats = {name: [s.what for s in install_steps(r.objects, r.plugin_values)]
             for name, r in (("cpu-small", small), ("h100-efa", h100), ("trn1", trn1))}
    head = ["cert-manager", "slurm-operator-crds 1.2.1", "slurm-operator 1.2.1",
            "Karpenter's AWS prerequisites (AWS only)", "Karpenter 1.14.1"]
    assert whats["cpu-small"] == [*head, "a default StorageClass (aws-ebs-csi-driver, provisioner ebs.csi.aws.com)",
                                  "the training images", "the credential Secrets", "the cluster's objects"]
    assert whats["h100-efa"][:5] == head and whats["h100-efa"][5].startswith("a StorageClass 'gp3'")
    assert [w.split(" (")[0].split(" 1")[0] for w in whats["h100-efa"][6:]] == [
        "mariadb-operator", "aws-fsx-csi-driver", "aws-efa-k8s-device-plugin", "nvidia-device-plugin",
        "the training images", "the credential Secrets", "the cluster's objects"]
    assert "the training images" in whats["trn1"]  # worker-neuron and login
    assert "neuron-helm-chart (chart 1.1.2 or later)" in whats["trn1"]
    assert (EXAMPLES_DIR / "h100-efa" / "INSTALL.md").read_text() == h100.files["INSTALL.md"]


def test_install_text_says_what_it_installs() -> None:
    """The FSx step names the chart version its command pins; a cluster without MariaDB mentions none."""
    small = render(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")).files["INSTALL.md"]
    assert "MariaDB" not in small and "mariadb" not in small
    trn1 = render(load_spec(EXAMPLES_DIR / "trn1" / "cluster.yaml")).files["INSTALL.md"]
    step = next(block for block in trn1.split("\n\n") if block.startswith("7. **aws-fsx-csi-driver"))
    command = trn1.split(step, 1)[1].split("```")[1]
    version = command.split("--version ")[1].split()[0]
    assert f"chart {version}" in step, (step, command)
