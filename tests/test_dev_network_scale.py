"""What a cluster of hundreds of emulated nodes needs from the machine, without starting one.

The live 512/1,024-node runs are in benchmarks/scale.py (``--only bringup``); these pin the
pieces they depend on: bridges chained past a bridge's 1,023 ports, kernel limits raised (never
lowered) to fit the node count, the timeouts and munged settings of large clusters.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from slinkyml.dev.slurm import network
from slinkyml.dev.slurm.cluster import LocalCluster
from slinkyml.dev.slurm.config import DevClusterSpec, render_slurm_conf
from slinkyml.errors import SlinkyError
from slinkyml.slurm.version import SlurmVersion


def spec(nodes: int) -> DevClusterSpec:
    return DevClusterSpec(Path("/var/tmp/slinkyml-netscale"), nodes=nodes, bridge="slkns0", node_prefix="ns",
                          subnet="10.240.0.0/21")


def test_nodes_past_a_thousand_hang_on_a_chained_bridge():
    assert network.extra_bridges(spec(1000)) == []
    big = spec(1024)
    assert network.extra_bridges(big) == [("slkns0-1", "slkns0r1", "slkns0l1")]
    assert [network.node_bridge(big, i) for i in (1, 1000, 1001, 1024)] == ["slkns0", "slkns0", "slkns0-1",
                                                                           "slkns0-1"]
    # every name stays a valid interface name (≤ 15 characters) for the longest bridge allowed
    longest = DevClusterSpec(Path("/var/tmp/x"), nodes=1024, bridge="b" * 12, subnet="10.240.0.0/21")
    assert all(len(name) <= 15 for triple in network.extra_bridges(longest) for name in triple)


def _sysctl_tree(tmp_path: Path, values: dict[str, int]) -> Path:
    for name, value in values.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"{value}\n")
    return tmp_path


def test_kernel_limits_are_raised_to_fit_and_never_lowered(tmp_path):
    root = _sysctl_tree(tmp_path, {"net/ipv4/neigh/default/gc_thresh2": 512,
                                   "net/ipv4/neigh/default/gc_thresh3": 1024,
                                   "net/core/netdev_max_backlog": 100_000})
    network.ensure_kernel_room(1024, proc_sys=root)
    read = {name: int((root / name).read_text()) for name in network.kernel_limits(1024)}
    assert read == {"net/ipv4/neigh/default/gc_thresh2": 8192, "net/ipv4/neigh/default/gc_thresh3": 16384,
                    "net/core/netdev_max_backlog": 100_000}  # already above 64 x 1024: left alone
    network.ensure_kernel_room(4, proc_sys=root)  # a small cluster later lowers nothing
    assert int((root / "net/ipv4/neigh/default/gc_thresh3").read_text()) == 16384


def test_a_kernel_limit_that_cannot_be_read_is_one_clear_error(tmp_path):
    with pytest.raises(SlinkyError, match=r"gc_thresh2: cannot raise it to 8192 for 1024 nodes"):
        network.ensure_kernel_room(1024, proc_sys=tmp_path)


def test_large_clusters_get_longer_timeouts_and_a_stronger_munged():
    version = SlurmVersion.parse("22.05.8")
    small, large = render_slurm_conf(spec(64), version), render_slurm_conf(spec(512), version)
    assert "TCPTimeout" not in small and "MessageTimeout" not in small
    assert "TCPTimeout=30" in large and "MessageTimeout=60" in large
    def munged(nodes: int) -> list[str]:
        cluster = LocalCluster(f"/var/tmp/slinkyml-netscale-{nodes}", nodes=nodes, bridge="slkns0",
                               node_prefix="ns", subnet="10.240.0.0/21")
        cluster._version = version  # the argv does not depend on the installed release otherwise
        return next(d for d in cluster._daemons() if d.name == "munged").argv
    assert munged(4)[0] == "munged" and not any(a.startswith("--num-threads") for a in munged(4))
    assert munged(512)[:4] == ["nice", "-n", "-10", "munged"] and "--num-threads=16" in munged(512)


def test_removing_a_node_namespace_kills_what_still_runs_in_it():
    """A job step left in a node's namespace when the cluster stops dies with the namespace, not
    after it (it would run on outside any cluster); processes elsewhere are untouched."""
    name = f"slkml-killtest-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    inside = subprocess.Popen(["nsenter", f"--net=/run/netns/{name}", "sleep", "300"])
    outside = subprocess.Popen(["sleep", "300"])
    try:
        deadline = time.monotonic() + 10  # nsenter has exec'd sleep once its namespace is the node's
        while os.stat(f"/proc/{inside.pid}/ns/net").st_ino != os.stat(f"/run/netns/{name}").st_ino:
            assert time.monotonic() < deadline, "nsenter never entered the namespace"
            time.sleep(0.05)
        assert network.kill_namespace_processes([name, "slkml-no-such-namespace"]) == [inside.pid]
        assert inside.wait(timeout=10) == -signal.SIGKILL
        assert outside.poll() is None
    finally:
        outside.kill()
        inside.kill()
        subprocess.run(["ip", "netns", "del", name], check=False)
