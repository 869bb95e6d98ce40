"""Apply against a real API server: k3s in Docker via testcontainers (CRDs first), else skipped."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.crds import crd_files
from slinkyml.cluster.render import render


def _docker_reason() -> str | None:
    if shutil.which("docker") is None:
        try:
            import docker

            docker.from_env().ping()
            return None
        except Exception:  # noqa: BLE001 - any failure means: no engine to use
            return "no Docker engine reachable (no docker CLI and the Docker API did not answer)"
    proc = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    return None if proc.returncode == 0 else "no Docker engine reachable (docker info failed)"


DOCKER_SKIP = _docker_reason()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
def test_server_side_apply_on_k3s(tmp_path: Path) -> None:
    import yaml
    from kubernetes import client, config
    try:
        from testcontainers.community.k3s import K3SContainer
    except ImportError:  # older testcontainers
        from testcontainers.k3s import K3SContainer

    from slinkyml.cluster.apply import apply_objects, diff_objects, ensure_secrets, nodeset_status

    cluster = load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
    objs = render(cluster).objects
    with K3SContainer() as k3s:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(k3s.config_yaml())
        api = config.new_client_from_config(config_file=str(kubeconfig))
        ext = client.ApiextensionsV1Api(api)
        for f in crd_files():
            ext.create_custom_resource_definition(yaml.safe_load(f.read_text()))
        import time

        time.sleep(5)  # let the API server start serving the new groups
        logs: list[str] = []
        apply_objects(objs[:1], api, log=logs.append)
        created = ensure_secrets(cluster, api, log=logs.append)
        assert sorted(created) == ["cpu-small-jwt-key", "cpu-small-slurm-key"]
        result = apply_objects(objs[1:], api, skip_missing_kinds=True, log=logs.append)
        assert "NodeSet slurm/cpu-small-cpu" in result["applied"]
        assert any(s.startswith("NodePool") for s in result["skipped"])  # no Karpenter CRDs in k3s
        again = apply_objects(objs[1:], api, skip_missing_kinds=True, log=logs.append)  # idempotent
        assert again["applied"] == result["applied"]
        assert ensure_secrets(cluster, api, log=logs.append) == []  # never overwritten
        rows = nodeset_status(api, "slurm", "cpu-small")
        assert [r["name"] for r in rows] == ["cpu-small-cpu"] and rows[0]["desired"] == 2
        secret = client.CoreV1Api(api).read_namespaced_secret("cpu-small-slurm-key", "slurm")
        assert all(secret.data["slurm.key"] not in line for line in logs)

        # diff: nothing after apply (server defaults, managedFields, status are not differences)
        skipped_kinds = {s.split()[0] for s in result["skipped"]}
        served = [o for o in objs if o["kind"] not in skipped_kinds]
        assert diff_objects(served, api) == ""
        bigger = copy.deepcopy(cluster)
        bigger.node_sets[0].count = 3
        changed = [o for o in render(bigger).objects if o["kind"] not in skipped_kinds]
        diff = diff_objects(changed, api)
        assert "--- live/NodeSet/slurm/cpu-small-cpu\n+++ rendered/NodeSet/slurm/cpu-small-cpu\n" in diff
        assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
            "-  replicas: 2", "+  replicas: 3"]
