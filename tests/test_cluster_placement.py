"""Placement: Node objects shaped like each rendered NodePool, the device plugins' DaemonSets as
their charts render them, and one breaking case per scheduling rule (slinkyml/cluster/placement.py).

The offline half: the nodes carry what Karpenter and the device plugins would give them, and each
breaking case is exactly one ``cluster validate`` finding.
"""

from __future__ import annotations

from typing import Any

import pytest

from slinkyml.cluster import addons
from slinkyml.cluster.placement import (
    BREAKS,
    advertised,
    break_scenario,
    example_scenarios,
    plugin_daemonset,
    pool_nodes,
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


@pytest.mark.parametrize("rule", BREAKS, ids=lambda b: b.rule)
def test_each_breaking_case_is_one_offline_finding(rule: Any) -> None:
    s = break_scenario(rule, "t-")
    issues = [str(i) for i in validate_objects(s.objects, plugin_values=s.plugin_values)]
    assert len(issues) == 1 and rule.validate_says in issues[0], issues
