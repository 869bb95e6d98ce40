"""The corpus generated from the schemas (slinkyml/cluster/schemacorpus.py): large, deterministic,
over every kind the examples render and every create-time CEL rule; its offline verdicts equal the
recorded ones (tests/data/schema_corpus_verdicts.json, written by `benchmarks/cluster_agreement.py
--offline-verdicts`); live, a sample of it judged by the API server with no misses.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.agreement import confusion, confusion_by_kind, kind_of, offline, run, verdict_text
from slinkyml.cluster.corpus import EXAMPLES
from slinkyml.cluster.render import render
from slinkyml.cluster.schemacorpus import cases, unbuildable_rules

RECORDED = Path(__file__).parent / "data" / "schema_corpus_verdicts.json"
#: every Nth case in the default tier (the full comparison is the slow one)
SAMPLE = 7
LIVE_SAMPLE = 40


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
    assert {c.origin for c in corpus} == {"schema", "cel", "meta"}


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
    """A spread sample (every len/40th case) on the live API server (and the operator's webhooks
    where the plane runs them): 0 misses."""
    sample = corpus[::max(1, len(corpus) // LIVE_SAMPLE)]
    rows = run(kube_plane.api(), sample, prefix=f"gen-{secrets.token_hex(3)}",
               operator_version=kube_plane.versions().get("slurm-operator"))
    print(confusion(rows) + "\n\n" + confusion_by_kind(rows))
    misses = [f"{r.case.name}: {r.verdicts[0][0]}: {r.verdicts[0][1].message}" for r in rows if r.miss]
    assert misses == [], "\n".join(misses)
    assert sum(r.server_rejected for r in rows) >= len(rows) // 3
