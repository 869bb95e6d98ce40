"""`slinkyml cluster diff`: the pure live-vs-rendered comparison and the offline `--against` mode.

The live objects below are written out the way an API server returns them: server-set metadata
(uid, resourceVersion, generation, creationTimestamp, managedFields), status, schema defaults
and labels/annotations added by others.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.diff import HIDDEN, diff_manifests, diff_object, load_manifests, project_live
from slinkyml.cluster.render import render
from slinkyml.errors import SlinkyError

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _rendered(name: str, kind: str, obj_name: str | None = None) -> dict:
    for obj in render(load_spec(EXAMPLES_DIR / name / "cluster.yaml")).objects:
        if obj["kind"] == kind and obj_name in (None, obj["metadata"]["name"]):
            return obj
    raise AssertionError(f"{name}: no {kind} {obj_name}")


def _sections(diff: str) -> dict[tuple[str, str], list[str]]:
    """(from, to) file labels -> the +/- content lines of that object's diff."""
    out: dict[tuple[str, str], list[str]] = {}
    lines = diff.splitlines()
    current: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = out.setdefault((line[4:], lines[i + 1][4:]), [])
        elif line[:1] in "+-" and not line.startswith("+++ "):
            current.append(line)
    return out


def _changes(diff: str) -> list[str]:
    """The +/- content lines of a unified diff (no ---/+++ headers)."""
    return [line.rstrip("\n") for line in diff.splitlines(True)
            if line[:1] in "+-" and not line.startswith(("---", "+++"))]


# --- live objects as the API server returns them ---------------------------------------------------

def live_nodeset() -> dict:
    """manifests/cpu-small's NodeSet after `slinkyml cluster apply` and a while of the operator."""
    return {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "metadata": {
            "creationTimestamp": "2025-06-02T09:14:27Z",
            "finalizers": ["slinky.slurm.net/finalizer"],
            "generation": 4,
            "labels": {
                "app.kubernetes.io/component": "worker",
                "app.kubernetes.io/managed-by": "slinkyml",
                "app.kubernetes.io/part-of": "cpu-small",
                "slinkyml.io/cluster": "cpu-small",
                "slinkyml.io/nodeset": "cpu",
                "team.example.com/cost-center": "ml-42",  # added by someone else: not ours
            },
            "managedFields": [
                {
                    "apiVersion": "slinky.slurm.net/v1beta1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {
                            "f:app.kubernetes.io/component": {}, "f:app.kubernetes.io/managed-by": {},
                            "f:app.kubernetes.io/part-of": {}, "f:slinkyml.io/cluster": {},
                            "f:slinkyml.io/nodeset": {}}},
                        "f:spec": {
                            "f:controllerRef": {"f:name": {}},
                            "f:extraConf": {},
                            "f:partition": {"f:enabled": {}},
                            "f:replicas": {},
                            "f:scalingMode": {},
                            "f:slurmd": {"f:image": {}, "f:resources": {
                                "f:limits": {"f:cpu": {}, "f:memory": {}}, "f:requests": {"f:cpu": {}, "f:memory": {}}}},
                            "f:logfile": {"f:image": {}},
                            "f:template": {
                                "f:metadata": {
                                    "f:annotations": {"f:karpenter.sh/do-not-disrupt": {}},
                                    "f:labels": {"f:app.kubernetes.io/component": {},
                                                 "f:app.kubernetes.io/managed-by": {},
                                                 "f:app.kubernetes.io/part-of": {}, "f:slinkyml.io/cluster": {},
                                                 "f:slinkyml.io/nodeset": {}}},
                                "f:spec": {"f:nodeSelector": {"f:karpenter.sh/nodepool": {},
                                                              "f:node.kubernetes.io/instance-type": {}},
                                           "f:tolerations": {}}},
                            "f:updateStrategy": {"f:type": {}},
                            "f:workloadDisruptionProtection": {},
                        },
                    },
                    "manager": "slinkyml",
                    "operation": "Apply",
                    "time": "2025-06-02T10:01:55Z",
                },
                {
                    "apiVersion": "slinky.slurm.net/v1beta1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, 'v:"slinky.slurm.net/finalizer"': {}}}},
                    "manager": "slurm-operator",
                    "operation": "Update",
                    "time": "2025-06-02T09:14:27Z",
                },
                {
                    "apiVersion": "slinky.slurm.net/v1beta1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {".": {}, "f:readyReplicas": {}, "f:replicas": {},
                                              "f:slurmIdle": {}, "f:selector": {}}},
                    "manager": "slurm-operator",
                    "operation": "Update",
                    "subresource": "status",
                    "time": "2025-06-02T10:02:11Z",
                },
            ],
            "name": "cpu-small-cpu",
            "namespace": "slurm",
            "resourceVersion": "918273",
            "uid": "3f0c3c52-8d7e-4d0b-9a39-0f7f2f1b6a11",
        },
        "spec": {
            "controllerRef": {"name": "cpu-small"},
            "extraConf": "Features=cpu,m7i_8xlarge",
            "ordinalPadding": 0,  # CRD defaults from here on, where we set nothing
            "oversubscribeNode": False,
            "partition": {"enabled": False},
            "pinToNode": False,
            "pruneSlurmNodeRecords": "Never",
            "replicas": 2,
            "revisionHistoryLimit": 0,
            "scalingMode": "StatefulSet",
            "slurmd": {
                "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/slinkyml/worker:26.05",
                "resources": {"limits": {"cpu": "31", "memory": "117288Mi"}, "requests": {"cpu": "31", "memory": "117288Mi"}},
            },
            "logfile": {"image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/slinkyml/worker:26.05"},
            "template": {
                "metadata": {
                    "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                    "labels": {
                        "app.kubernetes.io/component": "worker",
                        "app.kubernetes.io/managed-by": "slinkyml",
                        "app.kubernetes.io/part-of": "cpu-small",
                        "slinkyml.io/cluster": "cpu-small",
                        "slinkyml.io/nodeset": "cpu",
                    },
                },
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "cpu-small-cpu",
                                     "node.kubernetes.io/instance-type": "m7i.8xlarge"},
                    "tolerations": [{"effect": "NoSchedule", "key": "slinkyml.io/slurm-worker",
                                     "operator": "Exists"}],
                },
            },
            "updateStrategy": {"type": "OnDelete"},
            "workloadDisruptionProtection": True,
        },
        "status": {"readyReplicas": 2, "replicas": 2, "selector": "app.kubernetes.io/instance=cpu-small-cpu",
                   "slurmIdle": 2},
    }


SSSD_OLD = "[sssd]\nservices = nss\ndomains = LDAP\n\n[domain/LDAP]\nldap_default_authtok = s3cr3t-bind-pw\n"


def live_secret(sssd_conf: str) -> dict:
    """manifests/cpu-small's sssd-conf Secret, once applied with `kubectl apply` (client-side:
    the last-applied annotation then holds the content in plain text) and since by slinkyml."""
    encoded = base64.b64encode(sssd_conf.encode()).decode()
    last = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cpu-small-sssd-conf",
                       "namespace": "slurm"}, "stringData": {"sssd.conf": sssd_conf}, "type": "Opaque"})
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "data": {"sssd.conf": encoded},
        "metadata": {
            "annotations": {LAST_APPLIED: last},
            "creationTimestamp": "2025-06-01T17:40:03Z",
            "labels": {"app.kubernetes.io/component": "login", "app.kubernetes.io/managed-by": "slinkyml",
                       "app.kubernetes.io/part-of": "cpu-small", "slinkyml.io/cluster": "cpu-small"},
            "managedFields": [
                {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubectl-client-side-apply",
                 "operation": "Update", "time": "2025-06-01T17:40:03Z",
                 "fieldsV1": {"f:data": {".": {}, "f:sssd.conf": {}}, "f:metadata": {"f:annotations": {
                     ".": {}, f"f:{LAST_APPLIED}": {}}}, "f:type": {}}},
                {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "slinkyml", "operation": "Apply",
                 "time": "2025-06-02T10:01:55Z",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:app.kubernetes.io/component": {},
                                                          "f:app.kubernetes.io/managed-by": {},
                                                          "f:app.kubernetes.io/part-of": {},
                                                          "f:slinkyml.io/cluster": {}}},
                              "f:stringData": {"f:sssd.conf": {}}, "f:type": {}}},
            ],
            "name": "cpu-small-sssd-conf",
            "namespace": "slurm",
            "resourceVersion": "917001",
            "uid": "b5d0f0a4-1c1e-4a41-8c55-6cde2a0f2e90",
        },
        "type": "Opaque",
    }


def live_storage_class() -> dict:
    """manifests/h100-efa's StorageClass (core kind: no spec, top-level fields)."""
    return {
        "allowVolumeExpansion": True,
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "annotations": {LAST_APPLIED: '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass"}'},
            "creationTimestamp": "2025-06-01T17:40:04Z",
            "labels": {"app.kubernetes.io/component": "storage", "app.kubernetes.io/managed-by": "slinkyml",
                       "app.kubernetes.io/part-of": "llm", "slinkyml.io/cluster": "llm"},
            "managedFields": [{
                "apiVersion": "storage.k8s.io/v1", "fieldsType": "FieldsV1", "manager": "slinkyml",
                "operation": "Apply", "time": "2025-06-01T17:40:04Z",
                "fieldsV1": {"f:allowVolumeExpansion": {}, "f:metadata": {"f:labels": {
                    "f:app.kubernetes.io/component": {}, "f:app.kubernetes.io/managed-by": {},
                    "f:app.kubernetes.io/part-of": {}, "f:slinkyml.io/cluster": {}}},
                    "f:mountOptions": {}, "f:parameters": {"f:dataCompressionType": {}, "f:deploymentType": {},
                                                           "f:fileSystemTypeVersion": {},
                                                           "f:perUnitStorageThroughput": {},
                                                           "f:securityGroupIds": {}, "f:subnetId": {}},
                    "f:provisioner": {}, "f:reclaimPolicy": {}, "f:volumeBindingMode": {}},
            }],
            "name": "llm-fsx-lustre",
            "resourceVersion": "917004",
            "uid": "e1a0d5f3-7b0e-46f5-a5a0-2b7e3f9d8c21",
        },
        "mountOptions": ["flock"],
        "parameters": {"dataCompressionType": "LZ4", "deploymentType": "PERSISTENT_2",
                       "fileSystemTypeVersion": "2.15", "perUnitStorageThroughput": "500",
                       "securityGroupIds": "sg-0123456789abcdef0", "subnetId": "subnet-0a1b2c3d4e5f60718"},
        "provisioner": "fsx.csi.aws.com",
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }


# --- diff_object: rendered vs live -----------------------------------------------------------------

def test_live_nodeset_with_server_fields_and_defaults_has_no_diff() -> None:
    assert diff_object(_rendered("cpu-small", "NodeSet"), live_nodeset()) == ""


def test_live_secret_and_storage_class_have_no_diff() -> None:
    from slinkyml.cluster.render import SSSD_CONF

    assert diff_object(_rendered("cpu-small", "Secret"), live_secret(SSSD_CONF)) == ""
    assert diff_object(_rendered("h100-efa", "StorageClass"), live_storage_class()) == ""


def test_changed_replicas_shows_exactly_that() -> None:
    live = live_nodeset()
    live["spec"]["replicas"] = 5  # someone scaled it by hand
    diff = diff_object(_rendered("cpu-small", "NodeSet"), live)
    assert diff.startswith("--- live/NodeSet/slurm/cpu-small-cpu\n+++ rendered/NodeSet/slurm/cpu-small-cpu\n")
    assert _changes(diff) == ["-  replicas: 5", "+  replicas: 2"]


def test_fields_we_owned_but_no_longer_render_show_as_removed() -> None:
    live = live_nodeset()
    live["metadata"]["labels"]["slinkyml.io/tier"] = "old"  # set by an earlier slinkyml apply
    live["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"]["f:slinkyml.io/tier"] = {}
    live["spec"]["minReadySeconds"] = 30
    live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:minReadySeconds"] = {}
    diff = diff_object(_rendered("cpu-small", "NodeSet"), live)
    assert _changes(diff) == ["-    slinkyml.io/tier: old", "-  minReadySeconds: 30"]
    # the same fields set by another manager: an apply keeps them, so no diff
    del live["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"]["f:slinkyml.io/tier"]
    del live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:minReadySeconds"]
    assert diff_object(_rendered("cpu-small", "NodeSet"), live) == ""


def test_missing_field_and_absent_object_show_as_added() -> None:
    live = live_nodeset()
    del live["spec"]["template"]["spec"]["tolerations"]
    assert _changes(diff_object(_rendered("cpu-small", "NodeSet"), live)) == [
        "+      tolerations:", "+      - key: slinkyml.io/slurm-worker", "+        operator: Exists",
        "+        effect: NoSchedule"]
    created = diff_object(_rendered("cpu-small", "NodeSet"), None)
    assert created.startswith("--- /dev/null\n+++ rendered/NodeSet/slurm/cpu-small-cpu\n")
    assert "+  replicas: 2\n" in created


def test_secret_value_change_never_prints_a_value() -> None:
    from slinkyml.cluster.render import SSSD_CONF

    live = live_secret(SSSD_OLD)
    diff = diff_object(_rendered("cpu-small", "Secret"), live)
    assert _changes(diff) == ["-  sssd.conf: '*** (hidden, before)'", "+  sssd.conf: '*** (hidden, after)'"]
    for value in (SSSD_OLD, SSSD_CONF):
        encoded = base64.b64encode(value.encode()).decode()
        assert encoded not in diff
        for line in value.splitlines():
            assert not line.strip() or line not in diff, line
    assert "s3cr3t" not in diff and LAST_APPLIED not in diff


def test_list_items_with_server_defaults_are_compared_item_by_item() -> None:
    rendered = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "slurm"},
        "spec": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080}],
                            "resources": {"requests": {"cpu": "500m", "memory": "0.5Gi"}}}],
            "tolerations": [{"key": "slinkyml.io/slurm-worker", "operator": "Exists", "effect": "NoSchedule"}],
        }}},
    }
    container_fields = {
        "f:image": {}, "f:name": {}, "f:ports": {'k:{"containerPort":8080,"protocol":"TCP"}': {
            ".": {}, "f:containerPort": {}}},
        "f:resources": {"f:requests": {"f:cpu": {}, "f:memory": {}}}}
    live = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "slurm", "uid": "0b0e...", "resourceVersion": "77",
                     "generation": 1, "creationTimestamp": "2025-06-02T09:00:00Z",
                     "annotations": {"deployment.kubernetes.io/revision": "1"},
                     "managedFields": [{"manager": "slinkyml", "operation": "Apply", "apiVersion": "apps/v1",
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {
                                            "f:replicas": {}, "f:template": {"f:spec": {
                                                "f:containers": {'k:{"name":"app"}': {
                                                    ".": {}, **container_fields}},
                                                "f:tolerations": {}}}}}}]},
        "spec": {"replicas": 1, "progressDeadlineSeconds": 600, "revisionHistoryLimit": 10,
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": {"metadata": {"creationTimestamp": None}, "spec": {
                     "containers": [
                         {"name": "app", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                          "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                          "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},  # canonical form
                          "terminationMessagePath": "/dev/termination-log",
                          "terminationMessagePolicy": "File"},
                         {"name": "istio-proxy", "image": "istio/proxyv2:1.22.0"},  # injected by a webhook
                     ],
                     "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "securityContext": {}, "terminationGracePeriodSeconds": 30,
                     "tolerations": [{"key": "slinkyml.io/slurm-worker", "operator": "Exists",
                                      "effect": "NoSchedule"}]}}},
        "status": {"observedGeneration": 1, "replicas": 1},
    }
    assert diff_object(rendered, live) == ""
    changed = copy.deepcopy(live)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.26"
    assert _changes(diff_object(rendered, changed)) == ["-        image: nginx:1.26", "+        image: nginx:1.27"]
    # without an ownership record the injected container cannot be told apart: it shows
    unowned = copy.deepcopy(live)
    del unowned["metadata"]["managedFields"]
    assert _changes(diff_object(rendered, unowned)) == ["-      - name: istio-proxy",
                                                        "-        image: istio/proxyv2:1.22.0"]


def test_project_live_keeps_only_what_we_set() -> None:
    live = {"spec": {"replicas": 2, "scalingMode": "StatefulSet", "serverDefault": 1}, "status": {}}
    assert project_live(live, {"spec": {"replicas": 2}}) == {"spec": {"replicas": 2}}
    assert project_live({"storage": "16384Mi"}, {"storage": "16Gi"}) == {"storage": "16Gi"}
    assert project_live({"storage": "16000Mi"}, {"storage": "16Gi"}) == {"storage": "16000Mi"}


# --- offline: --against an earlier render --------------------------------------------------------

@pytest.mark.parametrize("name", EXAMPLES)
def test_checked_in_manifests_have_no_diff_against_their_spec(cli, name: str) -> None:
    folder = EXAMPLES_DIR / name
    assert cli("cluster", "diff", str(folder / "cluster.yaml"), "--against", str(folder)) == (0, "", "")
    assert cli("cluster", "diff", str(folder / "cluster.yaml"), "--against", str(folder / "rendered")) == (0, "", "")


def test_against_a_single_rendered_file(cli, tmp_path: Path) -> None:
    spec = str(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
    code, out, _ = cli("cluster", "render", spec)
    assert code == 0
    (tmp_path / "all.yaml").write_text(out)
    assert cli("cluster", "diff", spec, "--against", str(tmp_path / "all.yaml")) == (0, "", "")


def _spec(tmp_path: Path, change) -> str:
    spec = yaml.safe_load((EXAMPLES_DIR / "cpu-small" / "cluster.yaml").read_text())
    change(spec)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def test_changed_count_and_added_node_set(cli, tmp_path: Path) -> None:
    def change(spec: dict) -> None:
        spec["node_sets"][0]["count"] = 3
        spec["node_sets"].append({"name": "big", "instance_type": "c7i.4xlarge", "count": 1})

    against = str(EXAMPLES_DIR / "cpu-small")
    code, out, err = cli("cluster", "diff", _spec(tmp_path, change), "--against", against)
    assert code == 1
    assert err == f"3 changed, 3 created, 0 removed (against {against})\n"
    sections = _sections(out)
    assert sections[("previous/NodeSet/slurm/cpu-small-cpu", "rendered/NodeSet/slurm/cpu-small-cpu")] == [
        "-  replicas: 2", "+  replicas: 3"]
    assert sections[("previous/NodePool/cpu-small-cpu", "rendered/NodePool/cpu-small-cpu")] == [
        "-    cpu: '96'", "-    memory: 384Gi", "+    cpu: '128'", "+    memory: 512Gi"]  # one spare node
    controller = sections[("previous/Controller/slurm/cpu-small", "rendered/Controller/slurm/cpu-small")]
    assert controller and all(line.startswith("+") and "big" in line for line in controller)
    for label, api_version in (("EC2NodeClass/cpu-small-big", "karpenter.k8s.aws/v1"),
                               ("NodePool/cpu-small-big", "karpenter.sh/v1"),
                               ("NodeSet/slurm/cpu-small-big", "slinky.slurm.net/v1beta1")):
        added = sections[("/dev/null", f"rendered/{label}")]
        assert added[:2] == [f"+apiVersion: {api_version}", f"+kind: {label.split('/')[0]}"]
        assert all(line.startswith("+") for line in added)
    new_nodeset = sections[("/dev/null", "rendered/NodeSet/slurm/cpu-small-big")]
    assert "+  replicas: 1" in new_nodeset
    assert len(sections) == 6


def test_removed_objects(cli, tmp_path: Path) -> None:
    spec = _spec(tmp_path, lambda s: s.update(rest_api={"enabled": False}))
    code, out, err = cli("cluster", "diff", spec, "--against", str(EXAMPLES_DIR / "cpu-small"))
    assert code == 1 and err.startswith("0 changed, 0 created, 2 removed")
    heads = [line for line in out.splitlines() if line.startswith(("---", "+++"))]
    assert heads == ["--- previous/RestApi/slurm/cpu-small", "+++ /dev/null",
                     "--- previous/Token/slurm/cpu-small-slurm", "+++ /dev/null"]
    assert all(line.startswith("-") for line in _changes(out))


def test_against_never_prints_secret_values(cli, tmp_path: Path) -> None:
    from slinkyml.cluster.render import SSSD_CONF

    previous = tmp_path / "previous"
    shutil.copytree(EXAMPLES_DIR / "cpu-small" / "rendered", previous)
    secret_file = previous / "01-secret-cpu-small-sssd-conf.yaml"
    secret = yaml.safe_load(secret_file.read_text())
    secret["stringData"]["sssd.conf"] = SSSD_OLD
    secret_file.write_text(yaml.safe_dump(secret))  # keys now sorted: key order is no difference
    code, out, _ = cli("cluster", "diff", str(EXAMPLES_DIR / "cpu-small" / "cluster.yaml"),
                       "--against", str(previous))
    assert code == 1
    assert _changes(out) == ["-  sssd.conf: '*** (hidden, before)'", "+  sssd.conf: '*** (hidden, after)'"]
    for line in (SSSD_OLD + SSSD_CONF).splitlines():
        assert not line.strip() or line not in out, line
    # a removed Secret (e.g. from --secrets-out) is masked too
    removed = diff_manifests([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k", "namespace": "n"},
                               "data": {"slurm.key": "c2VjcmV0"}}], [])
    assert removed.removed == ["Secret/n/k"] and "c2VjcmV0" not in removed.text and HIDDEN in removed.text


def test_against_a_kubectl_export_compares_like_a_live_object(tmp_path: Path) -> None:
    export = tmp_path / "live.yaml"  # what `kubectl get nodeset -o yaml` writes
    export.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [live_nodeset()],
                                      "metadata": {"resourceVersion": ""}}))
    previous = load_manifests(export)
    assert [p["kind"] for p in previous] == ["NodeSet"]
    rendered = _rendered("cpu-small", "NodeSet")
    assert diff_manifests(previous, [rendered]).text == ""
    previous[0]["spec"]["replicas"] = 4
    result = diff_manifests(previous, [rendered])
    assert result.changed == ["NodeSet/slurm/cpu-small-cpu"]
    assert _changes(result.text) == ["-  replicas: 4", "+  replicas: 2"]


def test_bad_against_path_is_a_one_line_error(cli, tmp_path: Path) -> None:
    spec = str(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
    missing = tmp_path / "nope"
    assert cli("cluster", "diff", spec, "--against", str(missing)) == (
        2, "", f"slinkyml: error: --against {missing}: cannot read: No such file or directory\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: [unclosed\n")
    code, out, err = cli("cluster", "diff", spec, "--against", str(bad))
    assert (code, out) == (2, "") and err.startswith(f"slinkyml: error: --against {bad}:") and err.count("\n") == 1
    code, out, err = cli("cluster", "diff", spec, "--against", spec)
    assert (code, out) == (2, "") and "no Kubernetes objects found (that is a cluster spec" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli("cluster", "diff", spec, "--against", str(empty))
    assert code == 2 and err == f"slinkyml: error: --against {empty}: no Kubernetes objects found\n"


def test_load_manifests_rejects_conflicting_duplicates(tmp_path: Path) -> None:
    one = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "slurm"}}
    two = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "slurm", "labels": {"a": "b"}}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([one, one]))
    assert load_manifests(tmp_path) == [one]
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(two))
    with pytest.raises(SlinkyError, match="Namespace/slurm appears twice with different content"):
        load_manifests(tmp_path)


def test_diff_objects_fetches_and_compares(monkeypatch) -> None:
    """diff_objects with a stand-in for the dynamic client: served, missing and unserved kinds."""
    from kubernetes.client.exceptions import ApiException

    from slinkyml.cluster import apply
    from slinkyml.cluster.render import SSSD_CONF

    live = {("NodeSet", "cpu-small-cpu"): live_nodeset(), ("Secret", "cpu-small-sssd-conf"): live_secret(SSSD_CONF)}
    live[("NodeSet", "cpu-small-cpu")]["spec"]["replicas"] = 1

    class Found:
        def __init__(self, obj: dict) -> None:
            self.obj = obj

        def to_dict(self) -> dict:
            return copy.deepcopy(self.obj)

    class Dyn:
        def get(self, res: str, name: str, namespace: str | None = None) -> Found:
            if (res, name) not in live:
                raise ApiException(status=404, reason="Not Found")
            return Found(live[(res, name)])

    monkeypatch.setattr(apply, "_dynamic", lambda api: Dyn())
    monkeypatch.setattr(apply, "_resource", lambda dyn, obj: None if obj["kind"] == "NodePool" else obj["kind"])
    objs = [o for o in render(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")).objects
            if o["kind"] in ("Secret", "NodePool", "Token", "NodeSet")]
    sections = _sections(apply.diff_objects(objs, api=None))
    assert list(sections) == [("/dev/null", "rendered/Token/slurm/cpu-small-slurm"),
                              ("live/NodeSet/slurm/cpu-small-cpu", "rendered/NodeSet/slurm/cpu-small-cpu")]
    assert sections[("live/NodeSet/slurm/cpu-small-cpu", "rendered/NodeSet/slurm/cpu-small-cpu")] == [
        "-  replicas: 1", "+  replicas: 2"]
    assert apply.diff_objects(objs, api=None).startswith(
        "? NodePool/cpu-small-cpu: karpenter.sh/v1 not served by this API server\n")
