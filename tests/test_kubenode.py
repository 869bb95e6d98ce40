"""``slinkyml.dev.kubernetes.kubenode`` offline: the configuration files the node's daemons read (containerd's TOML,
the CNI list, the kubelet's), the node's settings and their one-line errors. The live node is
``tests/test_kubelet_live.py``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from slinkyml.dev.kubernetes.kube import KubeControlPlane, Ports
from slinkyml.dev.kubernetes.kubenode import PAUSE_IMAGE, KubeNode, NodeSettings, _toml
from slinkyml.errors import SlinkyError


@pytest.fixture()
def node(tmp_path: Path) -> KubeNode:
    plane = KubeControlPlane(tmp_path / "kube", ports=Ports.from_base(18200),
                             node=NodeSettings("n1", "slkkx0", "10.250.0.0/24"))
    return plane.node()


def test_containerd_config_is_toml_with_everything_under_the_state_dir(node: KubeNode) -> None:
    config = tomllib.loads(node.containerd_config())
    assert config["version"] == 2
    for path in (config["root"], config["state"], config["grpc"]["address"], config["ttrpc"]["address"]):
        assert path.startswith(f"{node.dir}/"), path
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False and runc["Root"].startswith(f"{node.dir}/")
    assert cri["cni"]["conf_dir"].startswith(f"{node.dir}/")


def test_cni_and_kubelet_config(node: KubeNode) -> None:
    cni = node.cni_config()
    bridge = cni["plugins"][0]
    assert (bridge["type"], bridge["bridge"], bridge["ipMasq"]) == ("bridge", "slkkx0", False)
    # the last /30 is the veth pair to the machine (10.250.0.253 the machine's end, .254 the node's)
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.250.0.0/24", "gateway": "10.250.0.1",
                                          "rangeEnd": "10.250.0.251"}]]
    assert {"dst": "10.250.0.253/32", "gw": "10.250.0.1"} in bridge["ipam"]["routes"]
    net = node.settings.network
    assert (net.netns, net.host_ip, net.link_ip) == ("kube-slkkx0", "10.250.0.253", "10.250.0.254")
    assert net.enter(["x"]) == ["nsenter", "--net=/run/netns/kube-slkkx0", "--", "x"]
    kubelet = node.kubelet_config()
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["cgroupRoot"] == "/kubelet-n1"
    assert (kubelet["address"], kubelet["port"], kubelet["healthzPort"]) == ("10.250.0.1", 18250, 18248)
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["authorization"]["mode"] == "Webhook"
    assert (kubelet["clusterDNS"], kubelet["clusterDomain"], kubelet["resolvConf"]) == (["10.96.0.10"],
                                                                                       "cluster.local", "")
    proxy = net.kube_proxy_config("n1", Path("/k"))
    assert (proxy["mode"], proxy["clusterCIDR"], proxy["conntrack"]["maxPerCore"]) == ("iptables", "10.250.0.0/24", 0)
    assert node.identity.user == "system:node:n1" and node.identity.groups == ("system:nodes",)


def test_toml_writer_quotes_dotted_keys() -> None:
    text = _toml({"a": 1, "plugins": {"x.y": {"s": "q\"uote", "b": True, "l": ["p", "q"]}}})
    assert tomllib.loads(text) == {"a": 1, "plugins": {"x.y": {"s": "q\"uote", "b": True, "l": ["p", "q"]}}}


@pytest.mark.parametrize(("env", "value", "words"), [
    ("SLINKYML_KUBE_POD_SUBNET", "bad", "not an IPv4 network"),
    ("SLINKYML_KUBE_POD_SUBNET", "10.0.0.0/30", "/28 or larger"),
    ("SLINKYML_KUBE_BRIDGE", "a-name-far-too-long", "not an interface name"),
])
def test_bad_settings_are_one_line(monkeypatch: pytest.MonkeyPatch, env: str, value: str, words: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(SlinkyError, match=words) as err:
        NodeSettings.from_env()
    assert env in str(err.value) and "\n" not in str(err.value)


def test_down_keeps_the_settings_up_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``down`` cleans the bridge and subnet the last ``up`` used, whatever the environment says now."""
    plane = KubeControlPlane(tmp_path / "kube", ports=Ports.from_base(18200))
    (plane.state_dir / "node").mkdir(parents=True)
    (plane.state_dir / "node" / "node.json").write_text(
        '{"name": "n1", "bridge": "slkkx0", "subnet": "10.250.0.0/24"}')
    monkeypatch.setenv("SLINKYML_KUBE_BRIDGE", "other0")
    assert plane.node().settings == NodeSettings("n1", "slkkx0", "10.250.0.0/24")
