"""``cluster validate`` against the API server and the slurm-operator's webhooks, over a corpus of
mutated specs and manifests (slinkyml/cluster/corpus.py, a fixed seed).

The offline half runs everywhere: the corpus is deterministic, each admission rule mirrored
offline (Kubernetes' own validation, the operator's webhooks) refuses with the upstream words.
"""

from __future__ import annotations

import copy
import secrets
from pathlib import Path
from typing import Any

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.agreement import (
    OFFLINE_ONLY,
    README_TABLE_BEGIN,
    README_TABLE_END,
    confusion,
    confusion_by_kind,
    offline,
    run,
    with_readme_table,
)
from slinkyml.cluster.corpus import SERVED, bases, cases
from slinkyml.cluster.render import render
from slinkyml.cluster.validate import (
    core_issues,
    go_duration_error,
    go_duration_seconds,
    label_problems,
    pvc_as_created,
    webhook_issues,
    webhook_release,
)
from slinkyml.errors import SlinkyError


@pytest.fixture(scope="module")
def corpus() -> list[Any]:
    return cases()


def test_corpus_is_large_deterministic_and_mixed(corpus: list[Any]) -> None:
    assert len(corpus) >= 200
    assert [c.name for c in corpus] == [c.name for c in cases()]
    origins = {c.origin for c in corpus}
    assert origins == {"target", "random", "spec"}
    rejected = sum(offline(c.objects, c.plugin_values).rejected for c in corpus)
    assert 0.3 * len(corpus) < rejected < 0.8 * len(corpus), rejected  # both outcomes well represented


def test_only_served_kinds_are_mutated(corpus: list[Any]) -> None:
    for c in corpus:
        if c.origin != "spec":
            assert c.name.split(": ")[1].split()[0] in SERVED, c.name


@pytest.fixture(scope="module")
def h100() -> Any:
    return render(load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml"))


def _one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind)


@pytest.mark.parametrize(("kind", "patch", "expected"), [
    ("Controller", lambda o: o["spec"].__setitem__("clusterName", "c" * 41),
     "spec.clusterName: ClusterName exceeds 40 characters (41)"),
    ("NodeSet", lambda o: o["spec"].__setitem__("extraConf", "Features=a Weight"),
     "spec.extraConf: invalid extraConf: malformed --conf item 'Weight': expected Key=Value"),
    ("NodeSet", lambda o: o["spec"]["controllerRef"].__setitem__("name", ""),
     "spec.controllerRef.name: controllerRef.name must not be empty"),
    ("NodeSet", lambda o: o["spec"].__setitem__("updateStrategy", {"rollingUpdate": {"maxUnavailable": 0}}),
     "maxUnavailable must be > 0, got 0"),
    ("NodeSet", lambda o: o["spec"].__setitem__("updateStrategy", {"scheduledUpdate": {"duration": "59s"}}),
     "UpdateStrategy.ScheduledUpdate.Duration must be at least 1 minute"),
    ("NodeSet", lambda o: o["spec"]["template"]["spec"].__setitem__("hostname", "Bad_Host"),
     "spec.template.spec.hostname: template.spec.hostname: 'Bad_Host': a lowercase RFC 1123 subdomain"),
    ("LoginSet", lambda o: o["spec"]["sssdConfRef"].__setitem__("name", ""), "sssdConfRef.name must not be empty"),
    ("ConfigMap", lambda o: o["data"].__setitem__("slurmdbd.conf", "x"),
     "spec.configFileRefs[0]: the configFile is reserved for slurm-operator use: slurmdbd.conf"),
])
def test_webhook_rules_offline(h100: Any, kind: str, patch: Any, expected: str) -> None:
    objs = copy.deepcopy(h100.objects)
    patch(_one(objs, kind))
    found = [str(i) for i in webhook_issues(objs)]
    assert len(found) == 1 and expected in found[0], found
    assert webhook_issues(h100.objects) == []


@pytest.mark.parametrize(("version", "release"), [
    (None, "1.3"), ("v1.0.1", "1.0"), ("v1.2.1", "1.2"), ("1.2.0", "1.2"), ("f2ed3fc", "1.3"),
    # the module pseudo-version of the CRDs' revision: its base (v1.1.0-rc1) is not its rule set
    ("v1.1.0-rc1.0.20260820211339-f2ed3fc53252", "1.3"), ("v1.1.0", "1.0")])
def test_webhook_rule_set_of_each_operator_version(version: str | None, release: str) -> None:
    assert webhook_release(version) == release


def test_webhook_rules_of_v1_2_skip_only_the_extra_conf_parse(h100: Any) -> None:
    """v1.2.1's NodeSet webhook has every f2ed3fc rule but workerbuilder.ParseExtraConf (read at both)."""
    objs = copy.deepcopy(h100.objects)
    _one(objs, "NodeSet")["spec"]["extraConf"] = "Features=a Weight"
    assert webhook_issues(objs, "1.2") == [] and len(webhook_issues(objs, "1.3")) == 1


def test_kubernetes_rules_offline() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "not base64!", "a/b": "eA=="}}
    assert [i.path for i in core_issues(secret)] == ["data[k]", "data[a/b]"]
    sc = {"kind": "StorageClass", "metadata": {"name": "x"}, "reclaimPolicy": "Keep", "volumeBindingMode": "Later"}
    assert [i.path for i in core_issues(sc)] == ["reclaimPolicy", "volumeBindingMode"]
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "p"},
           "spec": {"accessModes": ["ReadWriteSometimes"], "resources": {"requests": {"storage": "lots"}}}}
    assert [i.path for i in core_issues(pvc)] == ["spec.accessModes", "spec.resources.requests.storage"]
    assert label_problems("ok", "fine", True) == [] and label_problems("example.com/k", "", True) == []
    assert len(label_problems("bad key!", "v", True)) == 1 and len(label_problems("k", "a b", True)) == 1
    assert len(label_problems("k", "v" * 64, True)) == 1 and label_problems("k", "v" * 64, False) == []
    assert [go_duration_seconds(d) for d in ("30s", "1h30m", "1.5m", "0", "x", "")] == [30, 5400, 90, 0, None, None]


def test_offline_only_findings_are_tagged_with_a_reason(h100: Any) -> None:
    objs = copy.deepcopy(h100.objects)
    nodeset = next(o for o in objs if o["kind"] == "NodeSet")
    nodeset["spec"]["slurmd"]["resources"]["requests"]["cpu"] = "two"  # the CRD keeps the container open
    nodeset["spec"]["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] = "us-east-1b"
    stages = offline(objs, h100.plugin_values).offline_only()
    assert stages == {"embedded", "runtime"} and stages <= set(OFFLINE_ONLY)


# ---------------------------------------------------------------- live: the API server and the webhooks


@pytest.mark.slow
def test_server_rejects_nothing_that_validate_accepts(kube_plane: Any, corpus: list[Any]) -> None:
    """0 misses; every server rejection shares its field or words with ours; every finding only
    offline has a run-time reason. Prints the confusion table (benchmarks/cluster_agreement.py too)."""
    rows = run(kube_plane.api(), corpus, prefix=f"agree-{secrets.token_hex(3)}",
               operator_version=kube_plane.versions().get("slurm-operator"), bases=bases())
    print(confusion(rows))
    misses = [f"{r.case.name}: {r.verdicts[0][0]}: {r.verdicts[0][1].message}" for r in rows if r.miss]
    assert misses == [], "\n".join(misses)
    unshared = [f"{r.case.name}: server: {r.verdicts[0][1].message} | ours: {r.offline.issues[0][1]}"
                for r in rows if r.server_rejected and not r.reason_shared()]
    assert unshared == [], "\n".join(unshared)
    unexplained = [f"{r.case.name}: {[str(i) for s, i in r.offline.issues if s == 'admission']}"
                   for r in rows if r.unexplained]
    assert unexplained == [], "\n".join(unexplained)
    assert sum(r.server_rejected for r in rows) > 60  # the server had plenty to refuse


def test_go_duration_errors_in_go_words() -> None:
    """What the webhooks answer when metav1.Duration cannot decode (time.ParseDuration's errors)."""
    assert go_duration_error("1d") == 'time: unknown unit "d" in duration "1d"'
    assert go_duration_error("1") == 'time: missing unit in duration "1"'
    assert go_duration_error("x") == 'time: invalid duration "x"'
    assert [go_duration_error(d) for d in ("0", "90m", "1h30m", "-5m", "1.5s")] == [None] * 5


def test_learnt_from_the_live_plane(h100: Any) -> None:
    """Cases the webhook-on plane sorted: a finalizer without a domain is only a warning in a
    custom resource's metadata (an error in a Kubernetes kind's, and in a Namespace's spec); a PVC data source the server drops on create is
    "dropped", not an admission error; an owner that is not among the objects is a reference."""
    objs = copy.deepcopy(h100.objects)
    _one(objs, "Controller")["metadata"]["finalizers"] = ["cleanup"]
    namespace = _one(objs, "Namespace")
    namespace["spec"] = {"finalizers": ["cleanup"]}
    pvc = _one(objs, "PersistentVolumeClaim")
    pvc["spec"]["dataSource"] = {"kind": "Foo", "name": ""}
    _one(objs, "ConfigMap")["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
                                                              "uid": "0b4f4c0e-1"}]
    _one(objs, "Secret")["metadata"]["finalizers"] = ["cleanup"]
    found = {(stage, i.path) for stage, i in offline(objs, h100.plugin_values).issues}
    assert found == {("admission", "spec.finalizers[0]"), ("admission", "metadata.finalizers[0]"),
                     ("dropped", "spec.dataSource"),
                     ("references", "metadata.ownerReferences[0]")}, found
    assert pvc_as_created(_one(h100.objects, "PersistentVolumeClaim"))[1] == []


def test_the_readme_holds_the_per_kind_table_the_benchmark_writes() -> None:
    """README.md's agreement block is a table confusion_by_kind can have written (its header, a row per kind,
    the total row adding them up, no misses); with_readme_table replaces only that block, and refuses a text
    without it in one line."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = text[text.index(README_TABLE_BEGIN) + len(README_TABLE_BEGIN) + 1:text.index(README_TABLE_END)]
    header, rule, *rows = block.strip().splitlines()
    assert header == confusion_by_kind([]).splitlines()[0] and rule.startswith("| --- |")
    cells = {r.split(" | ")[0].strip("| "): [int(c) for c in r.strip("| ").split(" | ")[1:]] for r in rows}
    total = cells.pop("all")
    assert set(cells) == SERVED  # every kind the plane serves, which is every kind we render
    assert total == [sum(column) for column in zip(*cells.values(), strict=True)] and total[2] == 0
    assert all(row[0] == sum(row[1:]) for row in [*cells.values(), total]) and total[0] >= 2000
    table = confusion_by_kind([])
    assert with_readme_table(f"a\n{README_TABLE_BEGIN}\nold\n{README_TABLE_END}\nb\n", table) == \
        f"a\n{README_TABLE_BEGIN}\n{table}\n{README_TABLE_END}\nb\n"
    with pytest.raises(SlinkyError, match="^README.md: no "):
        with_readme_table("no block here", table)
