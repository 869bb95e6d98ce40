"""The real slurm-operator's cluster on the kubelet node of ``dev kube up --kubelet``: what this machine is
not that EKS's nodes are, given to the applied cluster, and the operator's pods as a user reaches them.

The differences, each stated in docs/local-kubernetes-cluster.md and nothing else changed: the Controller
asks 1 CPU (the node has 2 and CoreDNS asks 50m); its state claim is bound to a folder of the node's, as a
CSI driver would provision it; the node carries the labels Karpenter would give the NodeSet's pool; the
slurmd pods request nothing (an m7i.8xlarge's 31 CPUs are not here) and there is one (the operator's slurmd
pods are one per node, a required anti-affinity, and this plane has one node); cgroup.conf says
``CgroupPlugin=autodetect`` (these machines are cgroup v1: the rendered cgroup/v2 stops slurmd with
``fatal: /sys/fs/cgroup is not a valid cgroup2 mountpoint``). Used by ``slinkyml demo --kubernetes`` and
tests/test_kubelet_operator_live.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from slinkyml.cluster import names
from slinkyml.cluster.placement import controller_claim
from slinkyml.cluster.spec import SlurmCluster
from slinkyml.dev.images.slurm_images import SLURM_UID
from slinkyml.errors import SlinkyError

LOCAL_CONTROLLER_CPU = "1"
GROUP, VERSION = "slinky.slurm.net", "v1beta1"
T = TypeVar("T")


def fit_spec(cluster: SlurmCluster) -> SlurmCluster:
    """The cluster with its Controller asking what this node can give."""
    return replace(cluster, controller=replace(cluster.controller, cpu=LOCAL_CONTROLLER_CPU))


def statesave_volume(cluster: SlurmCluster, path: Path) -> dict[str, Any]:
    """The Controller's state-save PersistentVolume, reserved for its claim: a folder of the node's, owned by
    SlurmUser beforehand (a hostPath volume is not chowned to the pod's fsGroup)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, SLURM_UID, SLURM_UID)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{cluster.name}-statesave"},
            "spec": {"capacity": {"storage": cluster.controller.persistence_size},
                     "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(path), "type": "Directory"},
                     "claimRef": {"namespace": cluster.namespace, "name": controller_claim(cluster.name)}}}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1.0,
             retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """``probe()``'s first truthy answer; an error naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = probe()
        except retry_on:
            answer = None
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise SlinkyError(f"no {what} after {timeout:.0f} s (`slinkyml dev kube status` shows the plane)")
        time.sleep(every)


def is_ready(pod: Any) -> bool:
    statuses = [*(pod.status.container_statuses or []), *(pod.status.init_container_statuses or [])]
    return (pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None and bool(statuses)
            and all(s.ready for s in statuses))


@dataclass
class OperatorPods:
    """The pods the operator made for one cluster, through the Kubernetes API."""

    api: Any  # kubernetes.client.ApiClient
    cluster: SlurmCluster

    def __post_init__(self) -> None:
        from kubernetes import client  # lazy: the k8s extra, only where a plane runs

        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.objects = client.CustomObjectsApi(self.api)

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    def owned(self, kind: str) -> list[Any]:
        """The pods of the operator's object of ``kind`` (NodeSet pods are its own; the others are its
        StatefulSets' and Deployments')."""
        pods = self.core.list_namespaced_pod(self.namespace).items
        if kind == "NodeSet":
            return [p for p in pods if any(r.kind == kind for r in p.metadata.owner_references or [])]
        sets = [*self.apps.list_namespaced_stateful_set(self.namespace).items,
                *self.apps.list_namespaced_deployment(self.namespace).items]
        owned = []
        for owner in sets:
            if any(ref.kind == kind for ref in owner.metadata.owner_references or []):
                selector = ",".join(f"{k}={v}" for k, v in owner.spec.selector.match_labels.items())
                owned += self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return owned

    def ready(self, kind: str) -> Any:
        return next((p for p in self.owned(kind) if is_ready(p)), None)

    def exec(self, pod: str, container: str, command: list[str], timeout: float = 120) -> str:
        """What ``kubectl exec`` prints: the command's stdout, then its stderr."""
        from kubernetes.stream import stream  # lazy: the k8s extra

        ws = stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace, container=container,
                    command=command, stderr=True, stdout=True, stdin=False, tty=False, _preload_content=False)
        try:
            ws.run_forever(timeout=timeout)
            return (ws.read_stdout() or "") + (ws.read_stderr() or "")
        finally:
            ws.close()

    def fit_nodeset(self, node_name: str, wait_s: float = 180) -> dict[str, Any]:
        """Give the first NodeSet this node (its labels), no requests, one replica and cgroup autodetect, and
        delete the pods made before (the rendered update strategy is OnDelete); the NodeSet as patched."""
        name = names.nodeset(self.cluster, self.cluster.node_sets[0])
        nodeset = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "nodesets", name)
        self.core.patch_node(node_name, {"metadata": {"labels": nodeset["spec"]["template"]["spec"]["nodeSelector"]}})
        config = self.core.read_namespaced_config_map(names.slurm_config(self.cluster), self.namespace)
        cgroup = config.data["cgroup.conf"].replace("CgroupPlugin=cgroup/v2", "CgroupPlugin=autodetect")
        self.core.patch_namespaced_config_map(config.metadata.name, self.namespace, {"data": {"cgroup.conf": cgroup}})
        ctld = wait_for("Ready controller pod", lambda: self.ready("Controller"), wait_s).metadata.name
        wait_for("cgroup.conf with autodetect in the controller pod", lambda: "autodetect" in self.exec(
            ctld, "slurmctld", ["cat", "/etc/slurm/cgroup.conf"]), wait_s)
        answer = self.exec(ctld, "slurmctld", ["scontrol", "reconfigure"])
        if "error" in answer.lower():
            raise SlinkyError(f"scontrol reconfigure in {ctld}: {answer.strip()}")
        patched: dict[str, Any] = self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "nodesets", name, {"spec": {"replicas": 1, "slurmd": {"resources": None}}})
        for pod in self.owned("NodeSet"):
            self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
        return patched

    def registered_workers(self, replicas: int) -> list[Any]:
        """The NodeSet's pods once there are ``replicas`` of the fitted template, all Ready and idle in
        ``sinfo`` of a Ready login pod; else an empty list."""
        pods = self.owned("NodeSet")
        fresh = [p for p in pods if p.spec.containers[0].resources.requests is None]
        login = self.ready("LoginSet")
        if not (login and len(fresh) == len(pods) == replicas and all(map(is_ready, pods))):
            return []
        out = self.exec(login.metadata.name, "login", ["sinfo", "-h", "-N", "-o", "%N %t"])
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        idle = sorted(n for n, s in states.items() if s == "idle")
        return fresh if idle == sorted(p.metadata.name for p in fresh) else []
