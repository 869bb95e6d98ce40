"""The pods' cluster that stands in for the operator (``slinkyml/dev/kubernetes/kubeslurm.py``), rendered offline from
manifests/cpu-small: what the live test (tests/test_kubelet_pods_live.py) runs."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

from slinkyml.cluster import load_spec
from slinkyml.dev.kubernetes import kubeslurm
from slinkyml.slurm.conf import parse_line

REPO = Path(__file__).resolve().parents[1]


def _spec(**extra) -> kubeslurm.PodClusterSpec:
    return kubeslurm.PodClusterSpec.from_cluster(load_spec(REPO / "manifests" / "cpu-small" / "cluster.yaml"),
                                                 shared=Path("/srv/shared"), max_cpus=1, max_memory_mib=2048, **extra)


def test_the_nodeset_is_read_from_the_cluster_spec_and_capped() -> None:
    s = _spec()
    assert (s.cluster, s.namespace, s.nodeset, s.replicas) == ("cpu-small", "slurm", "cpu-small-cpu", 2)
    assert s.node_conf == "Features=cpu,m7i_8xlarge"
    assert (s.pod_cpus, s.pod_memory_mib) == (1, 2048)  # 31 CPUs and 117288Mi do not fit this machine
    big = kubeslurm.PodClusterSpec.from_cluster(load_spec(REPO / "manifests" / "cpu-small" / "cluster.yaml"),
                                                shared=Path("/x"), max_cpus=64, max_memory_mib=1 << 20)
    assert (big.pod_cpus, big.pod_memory_mib) == (31, 117288)  # the NodeSet's own (whole-CPU) requests


def test_render_objects() -> None:
    s = _spec(host_paths=("/venv",), env=(("PYTHONPATH", "/src"),))
    keys = kubeslurm.Keys()
    objs = {(o["kind"], o["metadata"]["name"]): o for o in kubeslurm.render(s, keys)}
    sts = objs[("StatefulSet", "cpu-small-cpu")]
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["serviceName"] == "cpu-small-cpu"
    slurmd = sts["spec"]["template"]["spec"]["containers"][0]
    assert slurmd["args"] == ["-Z", "--conf-server", "cpu-small-controller:6817", "--conf",
                              "'Features=cpu-small-cpu,cpu,m7i_8xlarge'"]
    assert {e["name"]: e["value"] for e in slurmd["env"]} == {"POD_CPUS": "1", "POD_MEMORY": "2048",
                                                             "PYTHONPATH": "/src"}
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in slurmd["volumeMounts"]}
    assert mounts["/venv"] and not mounts["/srv/shared"]
    assert objs[("StatefulSet", "cpu-small-controller")]["spec"]["replicas"] == 1
    # secrets only in the Secret
    config = objs[("ConfigMap", "cpu-small-slurm-config")]
    assert keys.db_password not in str(config)
    secret = objs[("Secret", "cpu-small-slurm-keys")]["data"]
    assert f"StoragePass={keys.db_password}" in base64.b64decode(secret["slurmdbd.conf"]).decode()
    conf = {line.key: line.value for line in map(parse_line, config["data"]["slurm.conf"].splitlines())
            if line.key}
    assert conf["SlurmctldHost"] == "cpu-small-controller-0"
    assert conf["AccountingStorageHost"] == "cpu-small-accounting"
    assert conf["ClusterName"] == "cpu-small"


def test_pods_find_each_other_by_cluster_dns() -> None:
    """No hosts file: every Slurm pod searches the slurmd and slurmctld headless Services' domains (a bare
    pod name resolves, as in the operator's worker and login pods); slurmdbd and MariaDB have Services."""
    s = _spec()
    objs = {(o["kind"], o["metadata"]["name"]): o for o in kubeslurm.render(s, kubeslurm.Keys())}
    searches = ["cpu-small-cpu.slurm.svc.cluster.local", "cpu-small-controller.slurm.svc.cluster.local"]
    templates = [o["spec"]["template"]["spec"] if o["kind"] == "StatefulSet" else o["spec"]
                 for o in objs.values() if o["kind"] in ("Pod", "StatefulSet")]
    assert len(templates) == 5
    for spec in templates:
        assert spec["dnsConfig"] == {"searches": searches}
        assert all(m["mountPath"] != "/etc/hosts" for c in spec["containers"] for m in c["volumeMounts"])
    for name in ("cpu-small-cpu", "cpu-small-controller"):
        svc = objs[("Service", name)]["spec"]
        assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True
    assert objs[("Service", "cpu-small-accounting")]["spec"]["ports"] == [{"name": "accounting", "port": 6819}]
    assert objs[("Service", "cpu-small-mariadb")]["spec"]["ports"] == [{"name": "database", "port": 3306}]


def test_keys_are_made_once_and_kept_0600(tmp_path) -> None:
    path = tmp_path / "keys.json"
    first = kubeslurm.saved_keys(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert kubeslurm.saved_keys(path) == first  # a second up applies the same Secret


def test_slurm_pods_option_errors_are_one_line(tmp_path) -> None:
    env = {**os.environ, "SLINKYML_KUBE_STATE_DIR": str(tmp_path / "kube")}
    cli = [sys.executable, "-m", "slinkyml", "dev", "kube", "up"]
    spec = str(REPO / "manifests" / "cpu-small" / "cluster.yaml")
    no_kubelet = subprocess.run([*cli, "--slurm-pods", spec], capture_output=True, text=True, env=env)
    missing = subprocess.run([*cli, "--kubelet", "--slurm-pods", str(tmp_path / "none.yaml")], capture_output=True,
                             text=True, env=env)
    assert (no_kubelet.returncode, no_kubelet.stderr) == (
        2, "slinkyml: error: --slurm-pods: needs --kubelet (the pods run on the node)\n")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "none.yaml: cannot read" in missing.stderr
    assert not (tmp_path / "kube").exists()  # nothing started
