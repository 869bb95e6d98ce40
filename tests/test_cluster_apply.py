"""The apply layer (``slinkyml.cluster.apply``) against the real API server of ``slinkyml dev kube``:
apply is idempotent, credential Secrets are created once and never overwritten or logged, NodeSet
status is read back, and ``diff`` shows nothing after an apply and exactly a scale change after one.
(The example goes into a namespace and under a cluster name of its own; everything is deleted after.)"""

from __future__ import annotations

import copy
import secrets
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.apply import apply_objects, diff_objects, ensure_secrets, nodeset_status
from slinkyml.cluster.render import render
from slinkyml.dev.kubernetes.kube import KubeControlPlane

pytestmark = pytest.mark.slow


def test_server_side_apply_secrets_status_and_diff(kube_plane: KubeControlPlane) -> None:
    api: Any = kube_plane.api()
    example = load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
    tag = secrets.token_hex(3)
    cluster = replace(example, name=f"a{tag}-{example.name}", namespace=f"slinkyml-apply-{tag}")
    objs = render(cluster).objects
    ns, c = cluster.namespace, cluster.name
    try:
        logs: list[str] = []
        apply_objects(objs[:1], api, log=logs.append)
        created = ensure_secrets(cluster, api, log=logs.append)
        assert sorted(created) == [f"{c}-jwt-key", f"{c}-slurm-key"]
        result = apply_objects(objs[1:], api, log=logs.append)
        assert f"NodeSet {ns}/{c}-cpu" in result["applied"] and result["skipped"] == []
        again = apply_objects(objs[1:], api, log=logs.append)  # idempotent
        assert again["applied"] == result["applied"]
        assert ensure_secrets(cluster, api, log=logs.append) == []  # never overwritten
        rows = nodeset_status(api, ns, c)
        assert [r["name"] for r in rows] == [f"{c}-cpu"] and rows[0]["desired"] == 2
        secret = client.CoreV1Api(api).read_namespaced_secret(f"{c}-slurm-key", ns)
        assert all(secret.data["slurm.key"] not in line for line in logs)

        # diff: nothing after apply (server defaults, managedFields, status are not differences)
        assert diff_objects(objs, api) == ""
        bigger = copy.deepcopy(cluster)
        bigger.node_sets[0].count = 3
        diff = diff_objects(render(bigger).objects, api)
        assert f"--- live/NodeSet/{ns}/{c}-cpu\n+++ rendered/NodeSet/{ns}/{c}-cpu\n" in diff
        assert f"--- live/NodePool/{c}-cpu\n+++ rendered/NodePool/{c}-cpu\n" in diff
        changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")]
        # the NodePool's limits grow with the node count (room for spare_nodes replacements kept)
        assert changed == ["-    cpu: '96'", "-    memory: 384Gi", "+    cpu: '128'", "+    memory: 512Gi",
                           "-  replicas: 2", "+  replicas: 3"]
    finally:
        try:
            client.CoreV1Api(api).delete_namespace(ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
