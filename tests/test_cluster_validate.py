"""Validation: mutated objects are rejected with the right object, field path and reason."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.crds import PACKAGED_DIR, REPO_SHARED_DIR, crd_dir, crd_files
from slinkyml.cluster.render import render
from slinkyml.cluster.validate import validate_objects

SHARED = REPO_SHARED_DIR.resolve()
#: the device-plugin Helm values rendered with the example (their tolerations count at run time)
PLUGINS = render(load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml")).plugin_values


@pytest.fixture(scope="module")
def objs() -> list[dict[str, Any]]:
    return render(load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml")).objects


def _mutate(objs: list[dict[str, Any]], kind: str, name: str, fn: Callable[[dict[str, Any]], None]) -> list[str]:
    objs = copy.deepcopy(objs)
    fn(next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name))
    return [str(i) for i in validate_objects(objs, plugin_values=PLUGINS)]


CASES = [
    # (kind, name, mutation, expected error line)
    ("NodeSet", "llm-h100", lambda o: o["spec"].__setitem__("replicas", "four"),
     "NodeSet slurm/llm-h100: spec.replicas: expected integer, got string 'four'"),
    ("NodeSet", "llm-h100", lambda o: o["spec"].__setitem__("replica", 4),
     "NodeSet slurm/llm-h100: spec.replica: unknown field"),
    ("NodeSet", "llm-h100", lambda o: o["spec"].pop("controllerRef"),
     "NodeSet slurm/llm-h100: spec.controllerRef: required field missing"),
    # (partition.enabled is required but defaulted, so the server takes it missing; sssdConfRef has no default)
    ("NodeSet", "llm-h100", lambda o: o["spec"].__setitem__("ssh", {"enabled": False}),
     "NodeSet slurm/llm-h100: spec.ssh.sssdConfRef: required field missing"),
    ("NodeSet", "llm-h100", lambda o: o["spec"].__setitem__("scalingMode", "Deployment"),
     "NodeSet slurm/llm-h100: spec.scalingMode: 'Deployment' is not one of DaemonSet, StatefulSet"),
    ("NodeSet", "llm-h100", lambda o: o["spec"]["slurmd"].__setitem__("imagePullPolicyy", "Always"),
     "NodeSet slurm/llm-h100: spec.slurmd.imagePullPolicyy: unknown field"),
    ("NodeSet", "llm-h100", lambda o: o["spec"]["template"]["spec"].__setitem__("tolerations", "all"),
     "NodeSet slurm/llm-h100: spec.template.spec.tolerations: expected array, got string 'all'"),
    ("NodeSet", "llm-h100", lambda o: o["spec"]["updateStrategy"].__setitem__("type", "ScheduledUpdate"),
     "NodeSet slurm/llm-h100: spec.updateStrategy: scheduledUpdate.startTime and scheduledUpdate.duration "
     "are required when type is ScheduledUpdate (no such key: scheduledUpdate)"),
    ("Controller", "llm", lambda o: o["spec"].pop("jwtKeyRef"),
     "Controller slurm/llm: spec: jwtKeyRef or jwtHs256KeyRef must be set when external is false"),
    ("Controller", "llm", lambda o: o["spec"]["persistence"].__setitem__("enabled", "yes"),
     "Controller slurm/llm: spec.persistence.enabled: expected boolean, got string 'yes'"),
    ("LoginSet", "llm-login", lambda o: o["spec"].pop("sssdConfRef"),
     "LoginSet slurm/llm-login: spec.sssdConfRef: required field missing"),
    ("Token", "llm-slurm", lambda o: o["spec"].pop("username"),
     "Token slurm/llm-slurm: spec.username: required field missing"),
    ("Accounting", "llm", lambda o: o["spec"]["storageConfig"].__setitem__("port", "3306"),
     "Accounting slurm/llm: spec.storageConfig.port: expected integer, got string '3306'"),
    ("Secret", "llm-sssd-conf", lambda o: o.__setitem__("stringdata", {}),
     "Secret slurm/llm-sssd-conf: stringdata: unknown field"),
    ("PersistentVolumeClaim", "llm-fsx", lambda o: o["spec"].pop("accessModes") and o["spec"].__setitem__(
        "accessModes", "ReadWriteMany"),
     "PersistentVolumeClaim slurm/llm-fsx: spec.accessModes: expected array, got string 'ReadWriteMany'"),
    ("StorageClass", "llm-fsx-lustre", lambda o: o.pop("provisioner"),
     "StorageClass llm-fsx-lustre: provisioner: required field missing"),
    ("NodePool", "llm-h100", lambda o: o["spec"]["disruption"].__setitem__("consolidationPolicy", "Never"),
     "NodePool llm-h100: spec.disruption.consolidationPolicy: 'Never' is not one of WhenEmpty, "
     "WhenEmptyOrUnderutilized, Balanced"),
    ("NodePool", "llm-h100", lambda o: o["spec"]["template"]["spec"].pop("nodeClassRef"),
     "NodePool llm-h100: spec.template.spec.nodeClassRef: required field missing"),
    ("EC2NodeClass", "llm-h100", lambda o: o["spec"].__setitem__("amiSelectorTerms", [{"alias": "ubuntu@latest"}]),
     "EC2NodeClass llm-h100: spec.amiSelectorTerms[0].alias: family is not supported, must be one of the "
     "following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"),
    ("MariaDB", "llm-mariadb", lambda o: o["spec"]["passwordSecretKeyRef"].__setitem__("value", "hunter2"),
     "MariaDB slurm/llm-mariadb: spec.passwordSecretKeyRef.value: unknown field"),
    ("Controller", "llm", lambda o: o["metadata"].__setitem__("name", "LLM_cluster"),
     "Controller slurm/LLM_cluster: metadata.name: 'LLM_cluster' is not a DNS-1123 label (lower-case "
     "alphanumerics and '-', at most 63 characters)"),
]


@pytest.mark.parametrize(("kind", "name", "fn", "expected"), CASES, ids=[c[3].split(":")[1].strip() for c in CASES])
def test_mutation_rejected_with_path(objs: list[dict[str, Any]], kind: str, name: str, fn: Any, expected: str) -> None:
    errors = _mutate(objs, kind, name, fn)
    assert expected in errors, errors


def test_cross_object_checks(objs: list[dict[str, Any]]) -> None:
    def no_controller(o: dict[str, Any]) -> None:
        o["spec"]["controllerRef"]["name"] = "other"
    assert _mutate(objs, "NodeSet", "llm-cpu", no_controller) == [
        "NodeSet slurm/llm-cpu: spec.controllerRef.name: no Controller 'other' in namespace slurm"]

    def too_many_gpus(o: dict[str, Any]) -> None:
        o["spec"]["slurmd"]["resources"]["requests"]["nvidia.com/gpu"] = 16
    assert _mutate(objs, "NodeSet", "llm-h100", too_many_gpus) == [
        "NodeSet slurm/llm-h100: spec.slurmd.resources.requests.nvidia.com/gpu: 16 requested but p5.48xlarge has 8"]

    def dup_partition(o: dict[str, Any]) -> None:
        o["spec"]["extraConf"] += "PartitionName=gpu Nodes=llm-cpu\n"
    assert _mutate(objs, "Controller", "llm", dup_partition) == [
        "Controller slurm/llm: spec.extraConf: Slurm partition 'gpu' is defined more than once in cluster "
        "'llm' (first by Controller slurm/llm)"]

    unpinned = copy.deepcopy(objs)
    for o in unpinned:
        if o["kind"] == "NodeSet" and o["metadata"]["name"] == "llm-h100":
            del o["spec"]["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"]
        if o["kind"] == "NodePool" and o["metadata"]["name"] == "llm-h100":
            reqs = o["spec"]["template"]["spec"]["requirements"]
            o["spec"]["template"]["spec"]["requirements"] = [r for r in reqs if r["key"] != "topology.kubernetes.io/zone"]
    assert [str(i) for i in validate_objects(unpinned, plugin_values=PLUGINS)] == [
        "NodeSet slurm/llm-h100: spec.template.spec.nodeSelector: EFA requested but the node set is not pinned "
        "to exactly one availability zone (topology.kubernetes.io/zone)"]

    missing_pvc = [o for o in objs if o["kind"] != "PersistentVolumeClaim"]
    errors = [str(i) for i in validate_objects(missing_pvc, plugin_values=PLUGINS)]
    assert "LoginSet slurm/llm-login: spec.template.spec.volumes[0].persistentVolumeClaim.claimName: no " \
           "PersistentVolumeClaim 'llm-fsx' in namespace slurm" in errors


def test_unknown_kind_is_reported(objs: list[dict[str, Any]]) -> None:
    errors = [str(i) for i in validate_objects([{"apiVersion": "example.com/v1", "kind": "Widget",
                                                  "metadata": {"name": "w"}}])]
    assert errors == ["Widget w: kind: no schema for example.com/v1 Widget: cannot validate it offline"]


def test_crd_location_env_then_shared_then_packaged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLINKYML_CRD_DIR", str(tmp_path))
    assert crd_dir() == tmp_path
    monkeypatch.delenv("SLINKYML_CRD_DIR")
    assert crd_dir() in (SHARED, PACKAGED_DIR)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared/slinky-crds is not present (installed package)")
def test_vendored_crds_equal_shared_copies() -> None:
    for f in sorted(PACKAGED_DIR.glob("slinky.slurm.net_*.yaml")):
        assert f.read_bytes() == (SHARED / f.name).read_bytes(), f.name
    assert sorted(p.name for p in PACKAGED_DIR.glob("*.yaml")) == sorted(p.name for p in SHARED.glob("*.yaml"))
    helm = PACKAGED_DIR.parent / "helm" / "slurm-values.yaml"
    assert helm.read_bytes() == (SHARED / "helm-values" / "slurm-values.yaml").read_bytes()


@pytest.mark.skipif(not (SHARED / "legacy").is_dir(), reason="shared/slinky-crds/legacy is not present")
def test_legacy_operator_version_rejects_v1beta1(objs: list[dict[str, Any]]) -> None:
    assert crd_files("0.4.1")[0].parent.name.startswith("v0.4.1")
    errors = [str(i) for i in validate_objects(objs, operator_version="0.4.1")]
    assert any(e.startswith("Controller slurm/llm: apiVersion: no CRD for slinky.slurm.net/v1beta1 Controller")
               for e in errors)


def test_packaged_crds_work_without_shared(monkeypatch: pytest.MonkeyPatch, objs: list[dict[str, Any]]) -> None:
    from slinkyml.cluster import crds, schemas

    monkeypatch.setattr(crds, "REPO_SHARED_DIR", Path("/nonexistent/shared/slinky-crds"))
    crds.crd_documents.cache_clear()
    schemas.slinky_kinds.cache_clear()
    try:
        assert crds.crd_dir() == PACKAGED_DIR
        assert validate_objects(objs, plugin_values=PLUGINS) == []
    finally:
        crds.crd_documents.cache_clear()
        schemas.slinky_kinds.cache_clear()
