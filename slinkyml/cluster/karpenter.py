"""Karpenter v1 ``NodePool`` + ``EC2NodeClass`` for each node set.

One instance type per pool, one zone with EFA, on-demand by default (a spot reclaim kills a
multi-node job); accelerator pools carry only the device's own taint (the stock plugins tolerate
it); ``limits`` leave room for spare nodes; ``WhenEmpty`` consolidation and ``do-not-disrupt`` so
Karpenter never takes away a node running training.
"""

from __future__ import annotations

from typing import Any

from slinkyml.cluster import addons, names
from slinkyml.cluster.spec import SlurmCluster, SlurmNodeSet
from slinkyml.instances import get_instance_type

NODEPOOL_API = "karpenter.sh/v1"
NODECLASS_API = "karpenter.k8s.aws/v1"


#: the EC2NodeClass's annotation naming the interruption queue Karpenter must be installed with
ANNOTATION_QUEUE = "slinkyml.io/interruption-queue"


def node_role(c: SlurmCluster) -> str:
    """The nodes' IAM role: the spec's, or the one Karpenter's getting-started stack creates."""
    return c.aws.node_role or f"KarpenterNodeRole-{c.aws.eks_cluster}"


def interruption_queue(c: SlurmCluster) -> str:
    """The SQS interruption queue: the spec's, or the one that stack creates (named after the cluster)."""
    return c.aws.interruption_queue or c.aws.eks_cluster


def taints(ns: SlurmNodeSet) -> list[dict[str, str]]:
    """The NodePool's taints: the accelerator's own, or the slinkyml worker taint (see module doc)."""
    itype = get_instance_type(ns.instance_type)
    if itype.accelerator is not None:
        return [{"key": itype.accelerator.resource, "value": "true", "effect": "NoSchedule"}]
    return [{"key": names.WORKER_TAINT, "value": "true", "effect": "NoSchedule"}]


def node_labels(c: SlurmCluster, ns: SlurmNodeSet) -> dict[str, str]:
    """Labels of the pool's nodes: ours, plus what the device plugin's chart needs to run there
    (NVIDIA: ``nvidia.com/gpu.present=true``, as no Node Feature Discovery is installed)."""
    labels = {names.LABEL_CLUSTER: c.name, names.LABEL_NODESET: ns.name}
    acc = get_instance_type(ns.instance_type).accelerator
    plugin = addons.plugin_for_resource(acc.resource) if acc is not None else None
    if plugin is not None:
        labels.update(addons.device_plugins()[plugin].get("node_labels") or {})
    return labels


def ami_variant(ns: SlurmNodeSet) -> str:
    acc = get_instance_type(ns.instance_type).accelerator
    return "standard" if acc is None else acc.kind  # nvidia | neuron


def render_node_class(c: SlurmCluster, ns: SlurmNodeSet) -> dict[str, Any]:
    discovery = {"karpenter.sh/discovery": c.aws.eks_cluster}
    meta = {"name": names.nodepool(c, ns), "labels": names.labels(c, "nodeclass"),
            "annotations": {"slinkyml.io/ami-variant": f"{c.aws.ami_alias} ({ami_variant(ns)})",
                            ANNOTATION_QUEUE: interruption_queue(c)}}
    spec = {
        "role": node_role(c),
        "amiSelectorTerms": [{"alias": c.aws.ami_alias}],
        "subnetSelectorTerms": [{"tags": discovery}],
        "securityGroupSelectorTerms": [{"tags": discovery}],
        "blockDeviceMappings": [{
            "deviceName": "/dev/xvda",
            "ebs": {"volumeSize": f"{ns.root_volume_gib}Gi", "volumeType": "gp3", "encrypted": True,
                    "deleteOnTermination": True},
        }],
        "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required",
                            "httpPutResponseHopLimit": 1},
        "tags": {names.LABEL_CLUSTER: c.name, names.LABEL_NODESET: ns.name},
    }
    return {"apiVersion": NODECLASS_API, "kind": "EC2NodeClass", "metadata": meta, "spec": spec}


def render_node_pool(c: SlurmCluster, ns: SlurmNodeSet) -> dict[str, Any]:
    itype = get_instance_type(ns.instance_type)
    requirements = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [ns.instance_type]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ns.capacity_type]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": [itype.kubernetes_arch]},
    ]
    if ns.zone:
        requirements.append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ns.zone]})
    nodes = max(ns.count, 1) + ns.spare_nodes
    spec = {
        "template": {
            "metadata": {"labels": node_labels(c, ns)},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                 "name": names.nodepool(c, ns)},
                "requirements": requirements,
                "taints": taints(ns),
                "expireAfter": "Never",
            },
        },
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "30m",
            "budgets": [
                {"nodes": "0", "reasons": ["Drifted", "Underutilized"]},
                {"nodes": "1", "reasons": ["Empty"]},
            ],
        },
        "limits": {"cpu": str(itype.vcpus * nodes), "memory": f"{int(itype.memory_gib) * nodes}Gi"},
    }
    return {"apiVersion": NODEPOOL_API, "kind": "NodePool",
            "metadata": {"name": names.nodepool(c, ns), "labels": names.labels(c, "nodepool")}, "spec": spec}


def render_node_class_and_pool(c: SlurmCluster, ns: SlurmNodeSet) -> list[dict[str, Any]]:
    return [render_node_class(c, ns), render_node_pool(c, ns)]
