"""Placement: Node objects shaped like each rendered NodePool, the device plugins' DaemonSets as
their charts render them, and one breaking case per scheduling rule (slinkyml/cluster/placement.py).

The offline half: the nodes carry what Karpenter and the device plugins would give them, and each
breaking case is exactly one ``cluster validate`` finding.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from slinkyml.cluster import addons
from slinkyml.cluster.placement import (
    BREAKS,
    PLUGINS,
    advertised,
    break_scenario,
    example_scenarios,
    expected_pods,
    place,
    plugin_daemonset,
    pool_nodes,
    scheduling_table,
    storage_objects,
)
from slinkyml.cluster.validate import validate_objects


def _labels(node: dict[str, Any]) -> dict[str, frozenset[str]]:
    return {k: frozenset({v}) for k, v in node["metadata"]["labels"].items()}


@pytest.mark.parametrize("scenario", example_scenarios("t-"), ids=lambda s: s.name)
def test_nodes_take_every_nodeset_pod_and_its_device_plugins(scenario: Any) -> None:
    pools = {o["metadata"]["name"]: o for o in scenario.objects if o["kind"] == "NodePool"}
    for ns in (o for o in scenario.objects if o["kind"] == "NodeSet"):
        pod = ns["spec"]["template"]["spec"]
        pool = pools[pod["nodeSelector"]["karpenter.sh/nodepool"]]
        node = pool_nodes(pool, 1, prefix="t-", default_zone=scenario.default_zone)[0]
        assert all(node["metadata"]["labels"].get(k) == v for k, v in pod["nodeSelector"].items())
        assert addons.untolerated(node["spec"].get("taints", []), pod["tolerations"]) == []
        requests = ns["spec"]["slurmd"]["resources"]["requests"]
        alloc = node["status"]["allocatable"]
        assert int(alloc["cpu"].rstrip("m")) >= int(requests["cpu"].rstrip("m"))
        assert int(alloc["memory"].rstrip("Mi")) >= int(requests["memory"].rstrip("Mi"))
        for resource, count in requests.items():
            plugin = addons.plugin_for_resource(resource)
            if plugin is None:
                continue
            ds = plugin_daemonset(plugin, scenario.plugin_values.get(plugin))["spec"]["template"]["spec"]
            terms = ds["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert addons.node_affinity_matches(terms, ds.get("nodeSelector", {}), _labels(node)), plugin
            assert addons.untolerated(node["spec"].get("taints", []), ds["tolerations"]) == [], plugin
            have = advertised(plugin, node["metadata"]["labels"]["node.kubernetes.io/instance-type"])
            assert int(have[resource]) >= int(count)


def test_storage_stands_in_for_the_csi_drivers() -> None:
    scenarios = example_scenarios("t-")
    objs = storage_objects(scenarios, "t-")
    classes = {o["metadata"]["name"] for o in objs if o["kind"] == "StorageClass"}
    assert classes == {"gp3", "t-default"}  # h100-efa names gp3; cpu-small and trn1 use the default
    volumes = [o for o in objs if o["kind"] == "PersistentVolume"]
    assert len(volumes) == 5  # three Controllers' state, two FSx claims
    assert sum("csi" in v["spec"] for v in volumes) == 2
    # each volume is reserved for its claim: a claim another test left pending cannot take it
    refs = sorted((v["spec"]["claimRef"]["namespace"], v["spec"]["claimRef"]["name"]) for v in volumes)
    assert all(ns and name for ns, name in refs) and len(set(refs)) == 5, refs
    assert sorted(n for _, n in refs if n.startswith("statesave-")) == [
        "statesave-t-cpu-small-controller-0", "statesave-t-llm-controller-0", "statesave-t-trn1-controller-0"]


@pytest.mark.parametrize("rule", BREAKS, ids=lambda b: b.rule)
def test_each_breaking_case_is_one_offline_finding(rule: Any) -> None:
    s = break_scenario(rule, "t-")
    issues = [str(i) for i in validate_objects(s.objects, plugin_values=s.plugin_values)]
    assert len(issues) == 1 and rule.validate_says in issues[0], issues


# ---------------------------------------------------------------- live: kube-scheduler places the pods


@pytest.mark.slow
def test_scheduler_places_every_example_and_refuses_each_break(kube_plane: Any) -> None:
    prefix = f"sched-{secrets.token_hex(2)}-"
    scenarios = [*example_scenarios(prefix), *(break_scenario(b, prefix) for b in BREAKS)]
    rows = place(kube_plane.api(), scenarios, prefix)
    print(scheduling_table(rows))
    by = {s.name: [r for r in rows if r.scenario == s.name] for s in scenarios}
    plugins = {(r.owner.split("-", 2)[-1].split("-")[0], r.node) for r in rows if r.scenario == PLUGINS}
    # the charts' affinity and tolerations with our values put each plugin on its pools' nodes only
    gpu = {n for _, n in plugins if n and "-h100-" in n}
    assert {n for p, n in plugins if p == "nvdp"} == gpu - {n for n in gpu if "affinity-h100" in n}, plugins
    assert {n for p, n in plugins if p == "neuron"} == {n for _, n in plugins if n and "-trn1-" in n}, plugins
    assert all("-cpu-" not in n and "system" not in n for _, n in plugins if n), plugins
    for s in scenarios[:3]:
        assert len(by[s.name]) == expected_pods(s.objects) and all(r.node for r in by[s.name]), \
            scheduling_table(by[s.name])
    for b in BREAKS:
        pending = [r for r in by[f"break: {b.rule}"] if r.node is None]
        assert pending and all(b.scheduler_says in r.reason for r in pending), scheduling_table(by[f"break: {b.rule}"])
        assert all("NodeSet" in r.owner or r.owner.startswith("StatefulSet") for r in pending)
