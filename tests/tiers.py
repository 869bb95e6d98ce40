"""Test tiers by what a test needs, set from the fixtures it uses (conftest's collection hook).

A fixture that brings up something a test depends on is decorated with ``@needs(TIER)``; every test
then gets exactly one tier mark, the most demanding of its fixtures' (and ``offline`` when none), so
``-m offline`` is the fast tier and the live tiers can run side by side (tests/run_tiers.py).
A test with a plain ``@pytest.mark.slurm`` and no tiered fixture (Slurm commands of the session's
cluster through ``SLURM_CONF``) is in the ``slurm`` tier too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

#: tier -> what its tests need; in the order of precedence (a test in two is in the later one)
TIERS = {
    "offline": "no daemon: runs anywhere, in parallel (make check)",
    "slurm": "the session's local Slurm cluster (make test starts it; tests share it, one at a time)",
    "own_cluster": "a Slurm cluster of its module's own (tests/private_cluster.py), beside the session's",
    "kube": "the local Kubernetes control plane of `slinkyml dev kube` (the Go builds of make kube)",
    "kubelet": "a control plane with a kubelet node of its module's own (containerd, runc, pods)",
    "disruptive": "stops or restarts the session cluster's daemons: never beside another slurm-tier test",
}

F = TypeVar("F", bound=Callable[..., object])


def needs(tier: str) -> Callable[[F], F]:
    """Mark a fixture function: every test that uses it (directly or through other fixtures) is in ``tier``."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}: one of {', '.join(TIERS)}")

    def mark(func: F) -> F:
        func._slinkyml_tier = tier  # type: ignore[attr-defined]
        return func

    return mark


def tier_of(fixture_funcs: list[Callable[..., object]], marked_slurm: bool) -> str:
    """The tier of a test whose fixtures' functions are ``fixture_funcs``."""
    found = {getattr(func, "_slinkyml_tier", None) for func in fixture_funcs}
    if marked_slurm:
        found.add("slurm")
    ranked = [tier for tier in TIERS if tier in found]
    return ranked[-1] if ranked else "offline"


def exclusive(tier: str) -> str:
    """A ``-m`` expression for the tests of ``tier`` alone: the legacy ``slurm`` mark also sits on tests of
    the higher tiers (own_cluster modules say ``pytestmark = pytest.mark.slurm``)."""
    higher = list(TIERS)[list(TIERS).index(tier) + 1:]
    return " and ".join([tier, *(f"not {other}" for other in higher)])
