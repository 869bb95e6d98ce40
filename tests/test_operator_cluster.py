"""The operator route's offline parts (``slinkyml/dev/kubernetes/operator_cluster.py``): the node's folders
as the pods mount them, and ``dev kube up --slurm-pods``'s option errors before anything starts. The live
route is tests/test_kubelet_operator_live.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from slinkyml.dev.kubernetes.operator_cluster import HostFolder, host_mounts, mounts_folders

REPO = Path(__file__).resolve().parents[1]


def test_host_folders_mount_at_their_own_paths() -> None:
    """hostPath volumes of the node's folders, each mounted at its own path; read-only unless asked."""
    folders = (HostFolder("/var/tmp/shared", read_only=False), HostFolder("/work/main/.venv"))
    volumes, mounts = host_mounts(folders)
    assert volumes == [{"name": "host-0", "hostPath": {"path": "/var/tmp/shared", "type": "Directory"}},
                       {"name": "host-1", "hostPath": {"path": "/work/main/.venv", "type": "Directory"}}]
    assert mounts == [{"name": "host-0", "mountPath": "/var/tmp/shared", "readOnly": False},
                      {"name": "host-1", "mountPath": "/work/main/.venv", "readOnly": True}]


def test_a_pod_mounts_the_folders_only_when_every_one_is_a_volume() -> None:
    """How a fitted login pod is told from the one before the LoginSet rolled."""
    def pod(*paths: str) -> SimpleNamespace:
        vols = [SimpleNamespace(host_path=SimpleNamespace(path=p)) for p in paths]
        return SimpleNamespace(spec=SimpleNamespace(volumes=[SimpleNamespace(host_path=None), *vols]))

    folders = (HostFolder("/a", read_only=False), HostFolder("/b"))
    assert mounts_folders(pod("/a", "/b", "/c"), folders)
    assert not mounts_folders(pod("/a"), folders)
    assert mounts_folders(pod(), ())


def test_slurm_pods_option_errors_are_one_line(tmp_path) -> None:
    """Each stops before anything starts, with one line."""
    env = {**os.environ, "SLINKYML_KUBE_STATE_DIR": str(tmp_path / "kube")}
    cli = [sys.executable, "-m", "slinkyml", "dev", "kube", "up"]
    spec = str(REPO / "manifests" / "cpu-small" / "cluster.yaml")
    no_kubelet = subprocess.run([*cli, "--slurm-pods", spec], capture_output=True, text=True, env=env)
    no_operator = subprocess.run([*cli, "--kubelet", "--no-operator", "--slurm-pods", spec], capture_output=True,
                                 text=True, env=env)
    missing = subprocess.run([*cli, "--kubelet", "--slurm-pods", str(tmp_path / "none.yaml")], capture_output=True,
                             text=True, env=env)
    assert (no_kubelet.returncode, no_kubelet.stderr) == (
        2, "slinkyml: error: --slurm-pods: needs --kubelet (the pods run on the node)\n")
    assert (no_operator.returncode, no_operator.stderr) == (
        2, "slinkyml: error: --slurm-pods: needs the operator (it makes the pods), not --no-operator\n")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "none.yaml: cannot read" in missing.stderr
    assert not (tmp_path / "kube").exists()  # nothing started
