"""Render: examples regenerate byte-for-byte, validate, and keep credentials out of manifests."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec, output_files
from slinkyml.cluster.helm import check_key_paths
from slinkyml.cluster.render import render
from slinkyml.cluster.secrets import render_secrets
from slinkyml.cluster.validate import validate_objects

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]


def secret_values(objs: list[dict]) -> list[str]:
    """Every credential value (decoded and encoded) in Secrets, to check it leaks nowhere."""
    out = []
    for obj in objs:
        if obj.get("kind") != "Secret":
            continue
        for v in (obj.get("data") or {}).values():
            out.append(v)
            raw = base64.b64decode(v)
            try:
                out.append(raw.decode())
            except UnicodeDecodeError:
                pass
        out += list((obj.get("stringData") or {}).values())
    return out


def _rendered(name: str):
    return render(load_spec(EXAMPLES_DIR / name / "cluster.yaml"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_checked_in_manifests_are_up_to_date(name: str) -> None:
    folder = EXAMPLES_DIR / name
    want = output_files(_rendered(name))
    have = {str(p.relative_to(folder)): p.read_text()
            for sub in ("rendered", "helm", "aws") for p in sorted((folder / sub).rglob("*")) if p.is_file()}
    for top in ("INSTALL.md", "secrets.sh", "install.sh"):
        have[top] = (folder / top).read_text() if (folder / top).is_file() else ""
    assert sorted(have) == sorted(want), "stale files: run `slinkyml cluster render cluster.yaml -o .`"
    for rel, text in want.items():
        assert have[rel] == text, f"{name}/{rel} differs from a fresh render"


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_validate_against_real_schemas(name: str) -> None:
    rendered = _rendered(name)
    objs = rendered.objects
    notes: list[str] = []
    assert validate_objects(objs, notes=notes, plugin_values=rendered.plugin_values) == []
    assert notes == [], "every CEL rule of the v1beta1 CRDs should be evaluated"
    kinds = {o["kind"] for o in objs}
    assert {"Controller", "NodeSet", "LoginSet", "RestApi", "Token", "NodePool", "EC2NodeClass"} <= kinds


@pytest.mark.parametrize("name", EXAMPLES)
def test_helm_values_key_paths_exist_in_chart(name: str) -> None:
    values = _rendered(name).helm_values
    assert check_key_paths(values) == []


def test_helm_key_check_rejects_unknown_paths() -> None:
    values = copy.deepcopy(_rendered("cpu-small").helm_values)
    values["controller"]["slurmctld"]["imagePullPolicyy"] = "Always"
    values["nodesets"]["cpu"]["replica"] = 3
    values["bogusTop"] = {"x": 1}
    values["configFiles"] = {"anything.conf": "free-form map: allowed"}
    assert sorted(check_key_paths(values)) == ["bogusTop.x", "controller.slurmctld.imagePullPolicyy",
                                                "nodesets.cpu.replica"]


def test_render_is_deterministic() -> None:
    assert output_files(_rendered("h100-efa")) == output_files(_rendered("h100-efa"))


def test_h100_example_has_efa_fsx_accounting_and_gpu_details() -> None:
    r = _rendered("h100-efa")
    by = {(o["kind"], o["metadata"]["name"]): o for o in r.objects}
    ns = by[("NodeSet", "llm-h100")]["spec"]
    req = ns["slurmd"]["resources"]["requests"]
    assert req["nvidia.com/gpu"] == 8 and req["vpc.amazonaws.com/efa"] == 32
    assert not any(k.startswith("hugepages-") for k in req)  # Karpenter models no hugepages
    assert ns["extraConf"].startswith("Gres=gpu:h100:8 Features=h100,nvlink")
    assert ns["slurmd"]["volumeMounts"] == [{"name": "fsx", "mountPath": "/fsx"}]
    login = by[("LoginSet", "llm-login")]["spec"]
    assert login["login"]["volumeMounts"] == [{"name": "fsx", "mountPath": "/fsx"}]
    assert by[("ConfigMap", "llm-slurm-config")]["data"]["gres.conf"].splitlines()[1] == "AutoDetect=nvidia"
    sc = by[("StorageClass", "llm-fsx-lustre")]
    assert sc["parameters"]["deploymentType"] == "PERSISTENT_2" and sc["parameters"]["perUnitStorageThroughput"] == "500"
    assert by[("PersistentVolumeClaim", "llm-fsx")]["spec"]["accessModes"] == ["ReadWriteMany"]
    pool = by[("NodePool", "llm-h100")]["spec"]
    reqs = {q["key"]: q["values"] for q in pool["template"]["spec"]["requirements"]}
    assert reqs["topology.kubernetes.io/zone"] == ["us-east-1a"]
    assert reqs["karpenter.sh/capacity-type"] == ["on-demand"]
    assert {"nodes": "0", "reasons": ["Drifted", "Underutilized"]} in pool["disruption"]["budgets"]
    assert pool["template"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert pool["limits"] == {"cpu": str(192 * 5), "memory": f"{2048 * 5}Gi"}  # 4 nodes + 1 spare
    assert ns["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert by[("EC2NodeClass", "llm-h100")]["spec"]["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert by[("MariaDB", "llm-mariadb")]["spec"]["passwordSecretKeyRef"]["name"] == "llm-mariadb-password"
    assert "aws/fsx-data-repository-association.json" in r.files


def test_no_secret_value_in_rendered_output_annotations_or_logs(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml")
    secrets = render_secrets(cluster)
    assert {s["metadata"]["name"] for s in secrets} == {"llm-slurm-key", "llm-jwt-key", "llm-mariadb-password",
                                                        "llm-mariadb-root"}
    values = [v for v in secret_values(secrets) if len(v) >= 16]
    assert len(values) >= 6  # 4 encoded + the 2 printable passwords decoded
    rendered = render(cluster)
    blob = "\n".join(output_files(rendered).values())
    for v in values:
        assert v not in blob
    for obj in rendered.objects:
        assert obj["kind"] != "Secret" or obj["metadata"]["name"].endswith("-sssd-conf")
        annotations = str(obj["metadata"].get("annotations", {}))
        for v in values:
            assert v not in annotations
        if obj["kind"] == "ConfigMap":
            for v in values:
                assert v not in str(obj.get("data"))
    # two generations never repeat (random), and secrets carry no value in annotations
    again = secret_values(render_secrets(cluster))
    assert not set(values) & set(again)
    for s in secrets:
        assert all(v not in str(s["metadata"]) for v in values)
    from slinkyml.cli import main

    main(["cluster", "render", str(EXAMPLES_DIR / "h100-efa" / "cluster.yaml")])
    out = capsys.readouterr()
    assert "slurm.key" in out.out  # references are there...
    assert all(v not in out.out + out.err for v in values)  # ...values are not


def test_secrets_out_file_is_private_and_separate(tmp_path: Path) -> None:
    from slinkyml.cli import main

    target = tmp_path / "secrets.yaml"
    assert main(["cluster", "render", str(EXAMPLES_DIR / "cpu-small" / "cluster.yaml"), "-o",
                 str(tmp_path / "out"), "--secrets-out", str(target)]) == 0
    assert target.stat().st_mode & 0o777 == 0o600
    import yaml

    docs = [d for d in yaml.safe_load_all(target.read_text()) if d]
    assert {d["metadata"]["name"] for d in docs} == {"cpu-small-slurm-key", "cpu-small-jwt-key"}
    assert len(base64.b64decode(docs[0]["data"]["slurm.key"])) == 1024
    rendered_text = "".join(p.read_text() for p in (tmp_path / "out").rglob("*.yaml"))
    assert docs[0]["data"]["slurm.key"] not in rendered_text


def test_user_named_secrets_are_referenced_not_generated() -> None:
    from slinkyml.cluster.spec import from_dict

    c = from_dict({"name": "c", "secrets": {"slurm_key": "vault-slurm:key"},
                   "node_sets": [{"name": "cpu", "instance_type": "c7i.4xlarge"}]})
    ctrl = next(o for o in render(c).objects if o["kind"] == "Controller")
    assert ctrl["spec"]["slurmKeyRef"] == {"name": "vault-slurm", "key": "key"}
    assert [s["metadata"]["name"] for s in render_secrets(c)] == ["c-jwt-key"]


def test_render_and_validate_example_summary() -> None:
    from slinkyml.demo import cluster_example  # the demo package pulls in dev/, dispatch/, accounting/

    text = cluster_example("cpu-small")
    assert "cpu-small" in text and "valid" in text and "m7i.8xlarge" in text
