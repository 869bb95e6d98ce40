"""The kubelet node's network: a network namespace of its own, kube-proxy in it, and CoreDNS as pods.

kube-proxy's iptables chains (``KUBE-SERVICES``, ``KUBE-NODEPORTS``...) and its nftables table
(``kube-proxy``) have fixed names: two kube-proxies in one network namespace would overwrite each other's
rules. ``make test`` runs planes side by side and every developer has one, so each node lives in a network
namespace of its own (``kube-BRIDGE``), as a kind node lives in its container: containerd, the kubelet,
kube-proxy and hostNetwork pods run there (``nsenter --net``, no other namespace), the pods' bridge is
there, and the machine's own tables never get a Kubernetes rule. The namespace reaches the machine by a
veth pair named as the bridge on the machine's side, numbered from the last /30 of the pod subnet:
the machine's end (``host_ip``) is where the node and its pods reach the API server, which listens on
127.0.0.1 only: one DNAT rule of the machine's nat table, for packets that come in over this veth to
``host_ip:PORT``, sends them to ``127.0.0.1:PORT`` (``route_localnet`` on this veth alone). The machine
routes the pod subnet to the node's end, so tests and tools reach pod addresses as before.

CoreDNS runs as EKS runs it: a Deployment in ``kube-system`` behind the ``kube-dns`` Service
(``CLUSTER_DNS_IP``), from an image of the binary ``kube/build.sh`` built, reaching the API server through
the ``kubernetes`` Service (its EndpointSlice names ``host_ip``: the API server's own endpoint reconciler is
off, a loopback address being no endpoint). Its Corefile forwards nothing: a name outside the cluster
gets no answer rather than a query leaving the machine.
"""

from __future__ import annotations

import ipaddress
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slinkyml.dev.slurm.network import _ip, link_exists, netns_exists
from slinkyml.errors import SlinkyError

SERVICE_CIDR = "10.96.0.0/24"
#: the kube-dns Service's address, the kubelet's ``clusterDNS`` (as kubeadm picks it: the tenth)
CLUSTER_DNS_IP = str(ipaddress.ip_network(SERVICE_CIDR).network_address + 10)
CLUSTER_DOMAIN = "cluster.local"
NETNS_DIR = Path("/run/netns")
#: the node's end of the veth pair, inside its namespace
NODE_LINK = "eth0"
COREDNS_NAMESPACE = "kube-system"
COREDNS = "coredns"
COREFILE = f"""\
.:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    reload
    loadbalance
}}
"""


@dataclass(frozen=True)
class NodeNetwork:
    """The node's namespace, bridge, veth pair and the one DNAT rule of the machine, from its bridge's
    name and the pod subnet."""

    bridge: str
    subnet: str

    @property
    def netns(self) -> str:
        return f"kube-{self.bridge}"

    @property
    def _net(self) -> ipaddress.IPv4Network:
        net = ipaddress.ip_network(self.subnet)
        assert isinstance(net, ipaddress.IPv4Network)
        return net

    @property
    def node_ip(self) -> str:
        """The bridge's address: the pods' gateway and the node's InternalIP."""
        return str(self._net.network_address + 1)

    @property
    def host_ip(self) -> str:
        """The machine's end of the veth pair (the last /30's first address)."""
        return str(self._net.broadcast_address - 2)

    @property
    def link_ip(self) -> str:
        """The node's end of the veth pair."""
        return str(self._net.broadcast_address - 1)

    @property
    def pod_range_end(self) -> str:
        """The last pod address: the last /30 is the veth pair's."""
        return str(self._net.broadcast_address - 4)

    @property
    def comment(self) -> str:
        """The comment on this node's rule of the machine's nat table (how ``down`` finds it)."""
        return f"slinkyml dev kube {self.netns}: API server"

    def enter(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the node's network namespace (and no other: the mounts are the machine's)."""
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", "--", *argv]

    def _ns_ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _ip("-n", self.netns, *args, check=check)

    def up(self, apiserver_port: int) -> None:
        """The namespace, its bridge and veth pair, the routes both ways and the DNAT rule; idempotent."""
        b, prefix = self.bridge, self._net.prefixlen
        if Path(f"/sys/class/net/{b}/bridge").is_dir():
            raise SlinkyError(f"{b} is a bridge of the machine (a node an older slinkyml started): "
                              "`slinkyml dev kube down` it, then up again")
        if not netns_exists(self.netns):
            _ip("netns", "add", self.netns)
        self._ns_ip("link", "set", "lo", "up")
        if self._ns_ip("link", "show", b, check=False).returncode != 0:
            self._ns_ip("link", "add", b, "type", "bridge")
        self._ns_ip("addr", "replace", f"{self.node_ip}/{prefix}", "dev", b)
        self._ns_ip("link", "set", b, "up")
        if not link_exists(b):
            if self._ns_ip("link", "show", NODE_LINK, check=False).returncode == 0:
                self._ns_ip("link", "delete", NODE_LINK)  # its peer is gone: a half-removed pair
            _ip("link", "add", b, "type", "veth", "peer", "name", NODE_LINK, "netns", self.netns)
        self._ns_ip("addr", "replace", f"{self.link_ip}/30", "dev", NODE_LINK)
        self._ns_ip("link", "set", NODE_LINK, "up")
        self._ns_ip("route", "replace", "default", "via", self.host_ip, "dev", NODE_LINK)
        _ip("addr", "replace", f"{self.host_ip}/30", "dev", b)
        _ip("link", "set", b, "up")
        _ip("route", "replace", self.subnet, "via", self.link_ip, "dev", b)
        # packets the DNAT rule sends to 127.0.0.1 come in over this veth: allowed here, nowhere else
        Path(f"/proc/sys/net/ipv4/conf/{b}/route_localnet").write_text("1\n")
        self._run(self.enter(["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"]))
        rule = self._dnat_rule(apiserver_port)
        if self._run(["iptables", "-w", "-t", "nat", "-C", *rule], check=False).returncode != 0:
            self._run(["iptables", "-w", "-t", "nat", "-A", *rule])

    def _dnat_rule(self, port: int) -> list[str]:
        return ["PREROUTING", "-i", self.bridge, "-d", f"{self.host_ip}/32", "-p", "tcp", "--dport", str(port),
                "-m", "comment", "--comment", self.comment, "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}"]

    def down(self) -> None:
        """The DNAT rule, the veth pair and the namespace (its bridge and kube-proxy's rules go with it)."""
        listed = self._run(["iptables", "-w", "-t", "nat", "-S", "PREROUTING"], check=False).stdout
        for line in listed.splitlines():
            if self.comment in line and line.startswith("-A "):
                self._run(["iptables", "-w", "-t", "nat", "-D", *shlex.split(line)[1:]], check=False)
        if link_exists(self.bridge):
            _ip("link", "delete", self.bridge, check=False)
        if netns_exists(self.netns):
            _ip("netns", "delete", self.netns, check=False)

    def leftovers(self) -> list[str]:
        """What of this network is still on the machine (empty after ``down``)."""
        left = [f"netns {self.netns}"] if netns_exists(self.netns) else []
        left += [f"link {self.bridge}"] if link_exists(self.bridge) else []
        nat = self._run(["iptables", "-w", "-t", "nat", "-S"], check=False).stdout
        left += [line for line in nat.splitlines() if self.comment in line]
        return left

    @staticmethod
    def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        if check and proc.returncode != 0:
            raise SlinkyError(f"{shlex.join(argv)}: {proc.stderr.strip() or proc.returncode}")
        return proc

    def kube_proxy_config(self, node_name: str, kubeconfig: Path) -> dict[str, Any]:
        """kube-proxy in iptables mode, in the node's namespace: it touches none of the machine's
        settings (conntrack's table size and timeouts are left as they are)."""
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)}, "hostnameOverride": node_name,
            "mode": "iptables", "clusterCIDR": self.subnet, "detectLocalMode": "ClusterCIDR",
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            "iptables": {"localhostNodePorts": False},
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }

    def kube_proxy_synced(self) -> bool:
        """kube-proxy has written the ``kubernetes`` Service's rules in the node's namespace."""
        out = self._run(self.enter(["iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES"]), check=False).stdout
        return "default/kubernetes:https" in out

    def apiserver_endpoint(self, port: int) -> dict[str, Any]:
        """The ``kubernetes`` Service's endpoint for pods: the machine's end of the veth pair."""
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "kubernetes",
                                        "endpointslice.kubernetes.io/managed-by": "dev-kube.slinkyml.io"}},
                "addressType": "IPv4", "endpoints": [{"addresses": [self.host_ip], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}


def coredns_objects(image: str) -> list[dict[str, Any]]:
    """CoreDNS as the kube-dns Deployment and Service of ``kube-system``, with upstream's RBAC
    (``system:coredns``: read Services, EndpointSlices, Pods and Namespaces)."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"name": COREDNS, "namespace": COREDNS_NAMESPACE, "labels": labels}
    probe = {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 5}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": COREDNS, "namespace": COREDNS_NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": COREDNS, "dnsPolicy": "Default", "priorityClassName": "system-cluster-critical",
                "terminationGracePeriodSeconds": 5,
                "volumes": [{"name": "config", "configMap": {"name": COREDNS}}],
                "containers": [{
                    "name": COREDNS, "image": image, "imagePullPolicy": "IfNotPresent",
                    "args": ["-conf", "/etc/coredns/Corefile"],
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                    "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                              {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "50m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
                    "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, **probe},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, **probe}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": COREDNS_NAMESPACE,
                                                             "labels": labels},
         "spec": {"clusterIP": CLUSTER_DNS_IP, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]
