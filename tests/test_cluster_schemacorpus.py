"""The corpus generated from the schemas (slinkyml/cluster/schemacorpus.py): large, deterministic,
over every kind the examples render and every create-time CEL rule; its offline verdicts equal the
recorded ones (tests/data/schema_corpus_verdicts.json, written by `benchmarks/cluster_agreement.py
--offline-verdicts`); live, every case judged by the API server with no misses.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.agreement import (
    OFFLINE_ONLY,
    confusion,
    confusion_by_kind,
    kind_of,
    offline,
    run,
    verdict_text,
)
from slinkyml.cluster.corpus import EXAMPLES, bases
from slinkyml.cluster.render import render
from slinkyml.cluster.schemacorpus import cases, operator_cases, unbuildable_rules

RECORDED = Path(__file__).parent / "data" / "schema_corpus_verdicts.json"
#: every Nth case in the default tier (the full comparison is the slow one)
SAMPLE = 7


@pytest.fixture(scope="module")
def corpus() -> list[Any]:
    return cases()


@pytest.fixture(scope="module")
def recorded() -> list[list[str]]:
    data: list[list[str]] = json.loads(RECORDED.read_text())
    return data


def test_corpus_is_large_deterministic_and_covers_every_kind(corpus: list[Any], recorded: list[list[str]]) -> None:
    assert len(corpus) >= 2000
    assert [c.name for c in corpus] == [name for name, _ in recorded]  # regenerate the data when this changes
    rendered = {o["kind"] for ex in EXAMPLES for o in render(load_spec(EXAMPLES_DIR / ex / "cluster.yaml")).objects}
    assert {kind_of(c) for c in corpus} == rendered
    assert {c.origin for c in corpus} == {"schema", "cel", "meta", "operator"}


def test_every_create_time_cel_rule_has_a_violating_case(corpus: list[Any]) -> None:
    assert unbuildable_rules() == []
    for c in (c for c in corpus if c.origin == "cel"):
        assert offline(c.objects, c.plugin_values).rejected, c.name


def test_offline_verdicts_equal_the_recorded_ones_sample(corpus: list[Any], recorded: list[list[str]]) -> None:
    for c, (name, verdict) in list(zip(corpus, recorded, strict=True))[::SAMPLE]:
        assert verdict_text(offline(c.objects, c.plugin_values)) == verdict, name


@pytest.mark.slow
def test_offline_verdicts_equal_the_recorded_ones(corpus: list[Any], recorded: list[list[str]]) -> None:
    changed = [f"{name}: {verdict} -> {verdict_text(offline(c.objects, c.plugin_values))}"
               for c, (name, verdict) in zip(corpus, recorded, strict=True)
               if verdict_text(offline(c.objects, c.plugin_values)) != verdict]
    assert changed == [], "\n".join(changed[:30])


@pytest.mark.slow
def test_server_rejects_nothing_the_generated_corpus_accepts(kube_plane: Any, corpus: list[Any]) -> None:
    """Every case on the live API server (and the operator's webhooks where the plane runs them), each
    beside its example's render (agreement.run with bases): 0 misses; every case only offline refuses has
    its run-time reason."""
    rows = run(kube_plane.api(), corpus, prefix=f"gen-{secrets.token_hex(3)}",
               operator_version=kube_plane.versions().get("slurm-operator"), bases=bases())
    print(confusion(rows) + "\n\n" + confusion_by_kind(rows))
    misses = [f"{r.case.name}: {r.verdicts[0][0]}: {r.verdicts[0][1].message}" for r in rows if r.miss]
    assert misses == [], "\n".join(misses)
    unexplained = [f"{r.case.name}: {[str(i) for s, i in r.offline.issues if s == 'admission']}"
                   for r in rows if r.unexplained]
    assert unexplained == [], "\n".join(unexplained)
    assert len(rows) == len(corpus) and sum(r.server_rejected for r in rows) >= len(rows) // 3


def test_a_case_beside_its_base_gets_the_verdict_of_its_own_namespace(kube_plane: Any, corpus: list[Any]) -> None:
    """The shortcut above is sound: a spread of cases of every origin, judged beside the base (only the
    changed objects dry-run) and each in a namespace of its own (everything applied), get the same
    verdicts from the server, object by object."""
    sample = corpus[::max(1, len(corpus) // 30)]
    api, version = kube_plane.api(), kube_plane.versions().get("slurm-operator")
    beside = run(api, sample, prefix=f"sb-{secrets.token_hex(3)}", operator_version=version, bases=bases())
    alone = run(api, sample, prefix=f"sa-{secrets.token_hex(3)}", operator_version=version)

    def verdicts(rows: list[Any]) -> list[tuple[str, list[str]]]:
        return [(r.case.name, sorted("Namespace" if where.startswith("Namespace ") else where  # named per run
                                     for where, _ in r.verdicts)) for r in rows]

    assert verdicts(beside) == verdicts(alone)
    assert any(r.server_rejected for r in alone) and any(not r.server_rejected for r in alone)


#: what each OPERATOR_CASES case must get offline (its stages; "" for accepted) and a word of the reason
OPERATOR_EXPECTED = {
    "replicas -1": ("operator", "Deployment"), "replicas 0": ("", ""),
    "service.port 70000": ("operator", "between 1 and 65535"),
    "service.nodePort 70000": ("operator", "between 1 and 65535"),
    "service.spec.ports[0].port 70000": ("operator", "between 1 and 65535"),
    "service.spec.ports[0].port 2222": ("", ""), "service.spec.ports[0].protocol tcp": ("operator", "SCTP, TCP, UDP"),
    "service.spec.type Loadbalancer": ("operator", "Unsupported value: 'Loadbalancer'"),
    "service.spec.type NodePort": ("", ""), "service.spec.ports a string": ("operator", "array"),
    "sssdConfRef.name Bad_Name": ("operator", "no Secret can be named so"),
    "secretRef.name Bad_Name": ("operator", "no Secret can be named so"), "secretRef.name other-name": ("", ""),
    "lifetime 1d (not a Go duration)": ("admission", "Go duration"), "lifetime 90m": ("", ""),
    "storageConfig.passwordKeyRef.name Bad_Name": ("operator", "no Secret can be named so"),
    "jwtKeyRef.name Bad_Name": ("operator", "no Secret can be named so"),
    "configFileRefs[0].name Bad_Name": ("admission,operator", "not found"),
    "slurmctld cpu request -2": ("embedded", "greater than or equal to 0"),
    "slurmctld memory limit -1Gi": ("embedded", "greater than or equal to 0"),
    "clusterName '--'": ("", ""), "clusterName of 41": ("admission", "exceeds 40 characters"),
    "clusterName of 40": ("", ""), "controllerRef.name empty": ("admission", "must not be empty"),
    "updateStrategy.scheduledUpdate.duration 59s": ("admission", "at least 1 minute"),
    "updateStrategy.scheduledUpdate.duration 1d": ("admission", "Go duration"),
    "updateStrategy.scheduledUpdate.duration 2m": ("", ""),
    "updateStrategy.rollingUpdate.maxUnavailable 0": ("admission", "must be > 0"),
    "updateStrategy.rollingUpdate.maxUnavailable 0%": ("admission", "must not be 0%"),
    "template.spec.hostname Bad_Host": ("admission", "RFC 1123 subdomain"),
    "ssh enabled without sssdConfRef": ("admission", "must not be empty when ssh is enabled"),
    "slurmd cpu request -1": ("embedded", "greater than or equal to 0"),
    "template.spec.volumes name twice": ("embedded", "Duplicate value: 'fsx'"),
    "login.volumeMounts mountPath twice": ("embedded", "Duplicate value: '/fsx'"),
}


def test_operator_cases_are_refused_offline_with_their_reason() -> None:
    """The webhook rules of v1.2.1 and what breaks the objects the operator builds (RestApi replicas
    -1, Service port 70000 or type Loadbalancer, a Secret named Bad_Name, a negative CPU request)."""
    found = operator_cases()
    assert [c.name.split(": ", 2)[2] for c in found] == list(OPERATOR_EXPECTED)
    for c in found:
        stages, word = OPERATOR_EXPECTED[c.name.split(": ", 2)[2]]
        result = offline(c.objects, c.plugin_values, "v1.2.1")
        assert ",".join(sorted(result.offline_only())) == stages, (c.name, result.issues)
        assert not stages or any(word in i.reason for _, i in result.issues), (c.name, result.issues)
        assert all(s in OFFLINE_ONLY or s == "admission" for s in result.offline_only())


def test_operator_cases_on_the_live_server_and_webhook(kube_plane: Any) -> None:
    """Each operator case judged by the live API server and the running operator's webhook: the
    webhook's refusals are refused offline too (0 misses), and every case offline refuses beyond
    the server has a run-time reason ("operator", "embedded", "references"), none "admission"."""
    found = operator_cases()
    rows = run(kube_plane.api(), found, prefix=f"op-{secrets.token_hex(3)}",
               operator_version=kube_plane.versions().get("slurm-operator"), bases=bases())
    print(confusion(rows))
    assert [r.case.name for r in rows if r.miss] == []
    assert [r.case.name for r in rows if r.unexplained] == []
    refused = {r.case.name.split(": ", 2)[2] for r in rows if r.server_rejected}
    # the webhook's own rules, live: a duration Go cannot parse, ClusterName over 40, an empty controllerRef
    assert {"lifetime 1d (not a Go duration)", "clusterName of 41", "controllerRef.name empty",
            "updateStrategy.scheduledUpdate.duration 59s"} <= refused
    assert all(r.reason_shared() for r in rows if r.server_rejected), [r.case.name for r in rows if r.server_rejected
                                                                          and not r.reason_shared()]
