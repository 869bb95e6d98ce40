"""``KubeNode``: a real kubelet node beside ``slinkyml dev kube``'s control plane.

containerd (Debian's) with runc and the bridge CNI plugins (Debian's ``containernetworking-plugins``), and
the kubelet built from ``k8s.io/kubernetes`` by ``kube/build.sh``, all with their own state, root, socket
and cgroup folders under ``STATE/node`` so that nothing clashes with a containerd, a kubelet or a Slurm dev
cluster of the machine. No registry is reachable: the pod sandbox image is our own pause program
(``kube/pause``) and the test image is Debian's static busybox, both packed here (``images.py``) and
imported into containerd, whose ``sandbox_image`` names the pause image, so nothing is ever pulled.

The node's network is a bridge this module creates (``slkk0``, ``10.244.0.0/24`` by default;
``$SLINKYML_KUBE_BRIDGE`` and ``$SLINKYML_KUBE_POD_SUBNET`` move it): its first address is the node's
InternalIP (where the API server reaches the kubelet for logs and exec) and pods get the others from
host-local IPAM. ``down`` stops everything and takes away what the pods left: their processes (by
cgroup), containerd's shims, network namespaces, mounts under the state folder, cgroups and the bridge.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from slinkyml.cluster.apply import apply_objects
from slinkyml.dev.images import slurm_images, training_images
from slinkyml.dev.images.images import Entry, ImageSpec, busybox_entries, write_oci_archive, write_oci_stream
from slinkyml.dev.kubernetes.kubenet import (
    CLUSTER_DNS_IP,
    CLUSTER_DOMAIN,
    COREDNS,
    COREDNS_NAMESPACE,
    NodeNetwork,
    coredns_objects,
)
from slinkyml.dev.kubernetes.pki import Identity
from slinkyml.dev.slurm.network import _ip
from slinkyml.errors import SlinkyError
from slinkyml.process import Daemon, cmdline, is_alive, unix_connectable

if TYPE_CHECKING:  # kube.py imports this module
    from slinkyml.dev.kubernetes.kube import KubeControlPlane

DEFAULT_NODE_NAME = "slinkyml-dev-node"
DEFAULT_BRIDGE = "slkk0"
#: clear of the Slurm dev clusters' 10.213.*, 10.226.*, 10.23x.* and the scale benchmark's 10.220.0.0/21
DEFAULT_POD_SUBNET = "10.244.0.0/24"
CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
RUNC = "/usr/sbin/runc"
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
BUSYBOX = Path("/bin/busybox")
#: image names: a registry host that is never contacted (every image is imported, none pulled)
PAUSE_IMAGE = "slinkyml.local/pause:1"
BUSYBOX_IMAGE = "slinkyml.local/busybox:1"
#: CoreDNS as kube/build.sh built it (the tag: its module version)
COREDNS_IMAGE = "slinkyml.local/coredns"
BUSYBOX_APPLETS = ("sh", "echo", "cat", "ls", "hostname", "ip", "sleep", "env", "id", "ps", "true", "false",
                   "wget", "nc", "mkdir", "rm", "grep", "date", "head", "tail", "wc", "uname", "nslookup")
#: kube-proxy's client identity: the bootstrap ClusterRoleBinding system:node-proxier names this user
KUBE_PROXY = Identity("kube-proxy", "system:kube-proxy")
#: the CRI namespace of containerd that the kubelet's pods live in
CRI_NAMESPACE = "k8s.io"
CGROUP_FS = Path("/sys/fs/cgroup")
#: fixed paths outside the state folder (see KubeNode._remove_fixed_path_files)
SHIM_SOCKET_DIR = Path("/run/containerd/s")
CNI_CACHE_DIR = Path("/var/lib/cni/results")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
#: where containerd's registry connections go: a loopback port nothing listens on (see ``daemons``)
NO_PULL_PROXY = "http://127.0.0.1:9"
NETNS_DIR = Path("/var/run/netns")
READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class NodeSettings:
    """Where the node lives: its name, bridge and pod subnet (the bridge's first address is the node's)."""

    name: str
    bridge: str
    subnet: str

    @classmethod
    def from_env(cls) -> NodeSettings:
        settings = cls(os.environ.get("SLINKYML_KUBE_NODE_NAME") or DEFAULT_NODE_NAME,
                       os.environ.get("SLINKYML_KUBE_BRIDGE") or DEFAULT_BRIDGE,
                       os.environ.get("SLINKYML_KUBE_POD_SUBNET") or DEFAULT_POD_SUBNET)
        settings.validate()
        return settings

    def validate(self) -> None:
        if not 1 <= len(self.bridge) <= 15 or "/" in self.bridge or " " in self.bridge:
            raise SlinkyError(f"SLINKYML_KUBE_BRIDGE={self.bridge}: not an interface name (1-15 characters)")
        try:
            net = ipaddress.ip_network(self.subnet)
        except ValueError:
            raise SlinkyError(f"SLINKYML_KUBE_POD_SUBNET={self.subnet}: not an IPv4 network such as "
                              f"{DEFAULT_POD_SUBNET}") from None
        if net.version != 4 or net.prefixlen > 28:
            raise SlinkyError(f"SLINKYML_KUBE_POD_SUBNET={self.subnet}: need an IPv4 network of /28 or larger")

    @property
    def node_ip(self) -> str:
        return self.network.node_ip

    @property
    def network(self) -> NodeNetwork:
        return NodeNetwork(self.bridge, self.subnet)

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen


class KubeNode:
    """The node's files, daemons and clean-up, under ``PLANE_STATE/node``."""

    def __init__(self, plane: KubeControlPlane, settings: NodeSettings | None = None):
        self.plane = plane
        self.dir = plane.state_dir / "node"
        self._given = settings
        # as given, else as the last ``up`` saved them (``down`` must clean what that one made), else the
        # environment's; ``up`` takes the given or the environment's
        self.settings = settings or self._saved_settings() or NodeSettings.from_env()

    @property
    def identity(self) -> Identity:
        """The kubelet's client certificate: the Node authorizer's user for this node."""
        return Identity("node", f"system:node:{self.settings.name}", ("system:nodes",))

    @property
    def settings_file(self) -> Path:
        return self.dir / "node.json"

    def _saved_settings(self) -> NodeSettings | None:
        try:
            saved = json.loads(self.settings_file.read_text())
            return NodeSettings(saved["name"], saved["bridge"], saved["subnet"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # -- paths -------------------------------------------------------------------------------------
    @property
    def containerd_dir(self) -> Path:
        return self.dir / "containerd"

    @property
    def socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.dir / "kubelet"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's cgroup root (pods go under ``ROOT/kubepods``): one per node name, so two
        kubelets of this machine never share QoS cgroups."""
        return f"/kubelet-{self.settings.name}"

    @property
    def kubelet_port(self) -> int:
        return self.plane.ports.apiserver + 7  # base + 50

    @property
    def kubelet_healthz_port(self) -> int:
        return self.plane.ports.apiserver + 5  # base + 48

    # -- daemons -----------------------------------------------------------------------------------
    def daemons(self) -> list[Daemon]:
        """containerd, the kubelet and kube-proxy, in start order, each in the node's network namespace."""
        run, log = self.plane.state_dir / "run", self.plane.state_dir / "log"
        net = self.settings.network
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        # Nothing is pulled: every image is imported. containerd has no switch that forbids pulls, so a pod
        # naming an image we did not import (a chart's ghcr.io/... default) would make it look the registry
        # up and connect out. It reaches registries through the proxy its environment names: one on
        # loopback where nothing listens fails such a pull at once, without a DNS query leaving the machine.
        no_pull = {"HTTP_PROXY": NO_PULL_PROXY, "HTTPS_PROXY": NO_PULL_PROXY, "NO_PROXY": ""}
        return [
            Daemon("containerd", net.enter([CONTAINERD, "--config", str(self.containerd_dir / "config.toml")]),
                   pid_file=run / "containerd.pid", log_file=log / "containerd.log", env={**env, **no_pull},
                   match=CONTAINERD),
            Daemon("kubelet", net.enter([
                str(self.plane.bin_dir / "kubelet"), f"--config={self.kubelet_dir / 'config.yaml'}",
                f"--kubeconfig={self.kubelet_dir / 'kubeconfig'}", f"--root-dir={self.kubelet_dir / 'root'}",
                f"--hostname-override={self.settings.name}", f"--node-ip={self.settings.node_ip}", "--v=1"]),
                   pid_file=run / "kubelet.pid", log_file=log / "kubelet.log", env=env,
                   match=str(self.plane.bin_dir / "kubelet")),
            Daemon("kube-proxy", net.enter([str(self.plane.bin_dir / "kube-proxy"),
                                            f"--config={self.dir / 'kube-proxy' / 'config.yaml'}"]),
                   pid_file=run / "kube-proxy.pid", log_file=log / "kube-proxy.log", env=env,
                   match=str(self.plane.bin_dir / "kube-proxy")),
        ]

    @property
    def running(self) -> bool:
        return all(d.running for d in self.daemons())

    # -- configuration -----------------------------------------------------------------------------
    def containerd_config(self) -> str:
        """containerd 1.6's configuration (version 2): every folder and socket under ours, the CRI plugin
        with the cgroupfs driver, our pause image and the CNI configuration folder we write."""
        c = self.containerd_dir
        cri = {
            "sandbox_image": PAUSE_IMAGE,
            "stream_server_address": "127.0.0.1", "stream_server_port": "0",
            # no OOM score below containerd's own: root on these machines lacks CAP_SYS_RESOURCE, so the
            # sandbox's -998 failed in runc ("failed to update /proc/self/oom_score_adj: Permission denied")
            "restrict_oom_score_adj": True,
            "containerd": {"snapshotter": "overlayfs", "default_runtime_name": "runc",
                           "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                                 # runc's state too, not /run/containerd/runc
                                                 "options": {"BinaryName": RUNC, "SystemdCgroup": False,
                                                             "Root": str(c / "runc")}}}},
            "cni": {"bin_dir": str(CNI_BIN_DIR), "conf_dir": str(self.dir / "cni" / "net.d"),
                    "max_conf_num": 1},
        }
        config = {
            "version": 2, "root": str(c / "root"), "state": str(c / "state"),
            "grpc": {"address": str(self.socket)}, "ttrpc": {"address": f"{self.socket}.ttrpc"},
            "debug": {"address": ""}, "metrics": {"address": ""},
            "plugins": {"io.containerd.grpc.v1.cri": cri,
                        "io.containerd.internal.v1.opt": {"path": str(c / "opt")}},
        }
        return _toml(config)

    def cni_config(self) -> dict[str, Any]:
        """The bridge in the node's namespace; pods' addresses short of the last /30 (the veth pair's),
        the machine's end of that pair reached through the node (it is inside the pods' subnet)."""
        s, net = self.settings, self.settings.network
        return {"cniVersion": "1.0.0", "name": f"slinkyml-{s.name}", "plugins": [
            {"type": "bridge", "bridge": s.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(self.dir / "cni" / "ipam"),
                      "ranges": [[{"subnet": s.subnet, "gateway": s.node_ip, "rangeEnd": net.pod_range_end}]],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": f"{net.host_ip}/32", "gw": s.node_ip}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}

    def kubelet_config(self) -> dict[str, Any]:
        pki = self.plane.pki
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": self.settings.node_ip, "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.kubelet_healthz_port,
            "tlsCertFile": str(pki.path("kubelet-serving.crt")),
            "tlsPrivateKeyFile": str(pki.path("kubelet-serving.key")),
            # the API server's kubelet client certificate (our CA) is checked, and what it may do is
            # asked of the API server (SubjectAccessReview), as on any production node
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki.ca_cert)}},
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root,
            # this machine runs cgroup v1, which kubelet 1.36 refuses unless told otherwise
            "failCgroupV1": False, "failSwapOn": False,
            "podLogsDir": str(self.dir / "pod-logs"),
            "staticPodPath": "", "registerNode": True,
            # cluster DNS as on EKS: pods (dnsPolicy ClusterFirst) ask the kube-dns Service; the machine's
            # resolvers are given to none (dnsPolicy Default gets none), so no query leaves the machine
            "clusterDNS": [CLUSTER_DNS_IP], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": "",
            # a shared development machine: do not evict pods or delete images because other work
            # fills the disk (the defaults act at 10-15 % free)
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "maxPods": 110,
        }

    def _write_files(self) -> None:
        s, pki = self.settings, self.plane.pki
        for sub in ("containerd/root", "containerd/state", "containerd/opt", "cni/net.d", "cni/ipam",
                    "kubelet/root", "kube-proxy", "pod-logs", "images"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.containerd_dir, 0o711)
        pki.ensure_cert(self.identity.file, self.identity.user, organizations=self.identity.groups)
        # the API server as the node reaches it: the machine's end of the veth pair, DNAT'ed to 127.0.0.1
        server = f"https://{s.network.host_ip}:{self.plane.ports.apiserver}"
        pki.kubeconfig(self.kubelet_dir / "kubeconfig", server, self.identity.file, "slinkyml-dev",
                       tls_server_name="kubernetes")
        pki.ensure_cert(KUBE_PROXY.file, KUBE_PROXY.user)
        pki.kubeconfig(self.dir / "kube-proxy" / "kubeconfig", server, KUBE_PROXY.file, "slinkyml-dev",
                       tls_server_name="kubernetes")
        pki.ensure_cert("kubelet-serving", s.name, server=True, hosts=(s.node_ip, s.name))
        saved = self._saved_settings()
        if saved and saved != s and any(d.running for d in self.daemons()):
            raise SlinkyError(f"the node of {self.plane.state_dir} runs as {saved.name} on {saved.bridge} "
                              f"({saved.subnet}): `slinkyml dev kube down` it before changing its settings")
        _write_if_changed(self.settings_file, json.dumps({"name": s.name, "bridge": s.bridge,
                                                          "subnet": s.subnet}) + "\n")
        _write_if_changed(self.containerd_dir / "config.toml", self.containerd_config())
        _write_if_changed(self.dir / "cni" / "net.d" / "10-slinkyml.conflist",
                          json.dumps(self.cni_config(), indent=2) + "\n")
        _write_if_changed(self.kubelet_dir / "config.yaml", yaml.safe_dump(self.kubelet_config(), sort_keys=False))
        _write_if_changed(self.dir / "kube-proxy" / "config.yaml", yaml.safe_dump(
            s.network.kube_proxy_config(s.name, self.dir / "kube-proxy" / "kubeconfig"), sort_keys=False))

    # -- lifecycle ---------------------------------------------------------------------------------
    def check_prerequisites(self) -> None:
        """Debian's containerd, runc and CNI plugins, and the kubelet from ``make kube``."""
        missing = [p for p in (CONTAINERD, CTR, RUNC) if not os.access(p, os.X_OK)]
        missing += [str(CNI_BIN_DIR / p) for p in CNI_PLUGINS if not (CNI_BIN_DIR / p).is_file()]
        missing += [tool for tool in ("nsenter", "iptables", "sysctl") if shutil.which(tool) is None]
        if not BUSYBOX.is_file():
            missing.append(str(BUSYBOX))
        if missing:
            raise SlinkyError(f"missing {', '.join(missing)}: apt-get install containerd runc "
                              "containernetworking-plugins busybox-static iptables procps (or `make setup`)")
        for binary in ("kubelet", "kube-proxy", "coredns", "pause"):
            if not os.access(self.plane.bin_dir / binary, os.X_OK):
                raise SlinkyError(f"not built: {self.plane.bin_dir / binary} (run `make kube`)")

    def up(self, api: Any, log: Callable[[str], None] = lambda _: None) -> None:
        """The node's network, then containerd, the kubelet and kube-proxy when not running; wait until the
        Node is Ready and CoreDNS answers; the control plane must be up (``KubeControlPlane.up`` calls this
        under its lock)."""
        self.check_prerequisites()
        self.settings = self._given or NodeSettings.from_env()
        try:
            self._write_files()
        except OSError as exc:
            raise SlinkyError(f"state dir {self.dir}: cannot write {exc.filename or ''}: "
                              f"{exc.strerror or exc}") from None
        net = self.settings.network
        net.up(self.plane.ports.apiserver)
        self._ensure_cgroup_root()
        containerd, kubelet, proxy = self.daemons()
        started: list[Daemon] = []
        try:
            if not containerd.running:
                containerd.start()
                started.append(containerd)
                containerd.wait_ready(lambda: unix_connectable(self.socket), READY_TIMEOUT_S, 0.5)
            self._import_images(log)
            if not kubelet.running:
                kubelet.start()
                started.append(kubelet)
            kubelet.wait_ready(lambda: self._node_ready(api), READY_TIMEOUT_S, 0.5)
            apply_objects([net.apiserver_endpoint(self.plane.ports.apiserver)], api, log=log)
            if not proxy.running:
                proxy.start()
                started.append(proxy)
            proxy.wait_ready(net.kube_proxy_synced, READY_TIMEOUT_S, 0.5)
            apply_objects(coredns_objects(self.coredns_image), api, log=log)
            kubelet.wait_ready(lambda: self._coredns_ready(api), READY_TIMEOUT_S, 0.5)
        except BaseException:
            for daemon in reversed(started):
                daemon.stop()
            raise

    def down(self) -> list[str]:
        """Stop the kubelet, the pods' processes, containerd's shims and containerd, then remove what
        they leave on the machine: network namespaces, mounts under the state folder, the kubelet's
        cgroups, the bridge, the pods' address leases and what goes to fixed paths outside the state
        folder (``_remove_fixed_path_files``). Images and containerd's store are kept."""
        containerd, kubelet, proxy = self.daemons()
        stopped = [d.name for d in (proxy, kubelet) if d.stop()]
        containers = self._container_ids()
        self._kill_pod_processes()
        self._kill_shims()
        if containerd.stop():
            stopped.append(containerd.name)
        self._remove_netns()
        self._unmount_all()
        self._remove_cgroups()
        self.settings.network.down()
        shutil.rmtree(self.dir / "cni" / "ipam", ignore_errors=True)
        self._remove_fixed_path_files(containers)
        return stopped

    def _container_ids(self) -> set[str]:
        """Every container and sandbox id containerd holds or ran for this node."""
        dirs = (self.containerd_dir / "state" / "io.containerd.runtime.v2.task" / CRI_NAMESPACE,
                self.containerd_dir / "root" / "io.containerd.grpc.v1.cri" / "sandboxes",
                self.containerd_dir / "root" / "io.containerd.grpc.v1.cri" / "containers")
        return {p.name for d in dirs if d.is_dir() for p in d.iterdir()}

    def _remove_fixed_path_files(self, containers: set[str]) -> None:
        """What containerd 1.6, libcni and the kubelet write to fixed paths whatever their configuration,
        for this node's containers only: each shim's socket (``/run/containerd/s/`` + sha256 of containerd's
        address, namespace and id, as containerd names it), libcni's result cache (``/var/lib/cni/results``,
        named by network and container id), the kubelet's log links (``/var/log/containers``, pointing into
        our pod logs) and, when no other kubelet runs, its device-plugin socket (a constant,
        ``/var/lib/kubelet/device-plugins/kubelet.sock``); then those folders if they are left empty."""
        for cid in containers:
            digest = hashlib.sha256(f"{self.socket}/{CRI_NAMESPACE}/{cid}".encode()).hexdigest()
            (SHIM_SOCKET_DIR / digest).unlink(missing_ok=True)
        if CNI_CACHE_DIR.is_dir():
            for f in CNI_CACHE_DIR.iterdir():
                if any(f"-{cid}-" in f.name for cid in containers):
                    f.unlink(missing_ok=True)
        logs = str(self.dir / "pod-logs") + "/"
        if CONTAINER_LOG_LINKS.is_dir():
            for link in CONTAINER_LOG_LINKS.iterdir():
                if link.is_symlink() and os.readlink(link).startswith(logs):
                    link.unlink(missing_ok=True)
        if not any(_is_kubelet(pid) for pid in _pids()):
            DEVICE_PLUGIN_SOCKET.unlink(missing_ok=True)
        for d in (SHIM_SOCKET_DIR, SHIM_SOCKET_DIR.parent / "fifo", SHIM_SOCKET_DIR.parent,
                  CNI_CACHE_DIR, CNI_CACHE_DIR.parent, CONTAINER_LOG_LINKS, DEVICE_PLUGIN_SOCKET.parent,
                  DEVICE_PLUGIN_SOCKET.parent.parent):
            try:
                d.rmdir()
            except OSError:
                pass

    def status(self) -> dict[str, Any]:
        return {"name": self.settings.name, "bridge": self.settings.bridge, "subnet": self.settings.subnet,
                "node_ip": self.settings.node_ip, "daemons": {d.name: d.pid for d in self.daemons()}}

    # -- steps -------------------------------------------------------------------------------------
    def _node_ready(self, api: Any) -> bool:
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            node = client.CoreV1Api(api).read_node(self.settings.name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def _coredns_ready(self, api: Any) -> bool:
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client

        got = client.AppsV1Api(api).read_namespaced_deployment(COREDNS, COREDNS_NAMESPACE)
        return bool(got.status.ready_replicas) and got.status.observed_generation == got.metadata.generation \
            and got.status.updated_replicas == got.spec.replicas

    def _cgroup_dirs(self) -> list[Path]:
        """The kubelet's cgroup root in every cgroup hierarchy this machine mounts: the v2 tree alone, or
        each v1 hierarchy and the hybrid ``unified`` one (runc creates the pods' cgroups there too)."""
        rel = self.cgroup_root.lstrip("/")
        if (CGROUP_FS / "cgroup.controllers").exists():
            return [CGROUP_FS / rel]
        return [h / rel for h in sorted(CGROUP_FS.iterdir())
                if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()]

    def _ensure_cgroup_root(self) -> None:
        """The kubelet checks its cgroup root exists in every hierarchy; cpuset's needs the parent's
        CPUs and memory nodes before anything can join it."""
        for d in self._cgroup_dirs():
            d.mkdir(exist_ok=True)
            if d.parent.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    if not (d / f).read_text().strip():
                        (d / f).write_text((d.parent / f).read_text())

    def _ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        """The one door to containerd's own API (``ctr``, Debian's client) in the CRI namespace."""
        proc = subprocess.run([CTR, "--address", str(self.socket), "--namespace", CRI_NAMESPACE, *args],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise SlinkyError(f"ctr {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
        return proc

    @property
    def coredns_image(self) -> str:
        version = self.plane.versions().get("coredns", "v0").lstrip("v")
        return f"{COREDNS_IMAGE}:{version}"

    def images(self) -> list[ImageSpec]:
        """The images every node has: the pod sandbox's pause program, CoreDNS and a busybox for tests."""
        pause = ImageSpec(PAUSE_IMAGE, (Entry("pause", source=self.plane.bin_dir / "pause"),),
                          entrypoint=("/pause",), labels={"io.cri-containerd.pinned": "pinned"})
        coredns = ImageSpec(self.coredns_image, (Entry("coredns", source=self.plane.bin_dir / "coredns"),),
                            entrypoint=("/coredns",), labels={"io.cri-containerd.pinned": "pinned"})
        busybox = ImageSpec(BUSYBOX_IMAGE, (*busybox_entries(BUSYBOX, BUSYBOX_APPLETS),
                                            Entry("tmp", mode=0o1777)), cmd=("sh",))
        return [pause, coredns, busybox]

    def imported(self) -> dict[str, str]:
        """Image name -> manifest digest of what containerd holds."""
        out = self._ctr("images", "list").stdout.splitlines()
        return {cols[0]: cols[2] for line in out[1:] if len(cols := line.split()) >= 3}

    def _import_images(self, log: Callable[[str], None]) -> None:
        self.import_images(self.images(), log)

    def import_images(self, specs: list[ImageSpec], log: Callable[[str], None] = lambda _: None) -> None:
        """Pack each image and import it unless containerd holds it at that digest."""
        have = self.imported()
        for spec in specs:
            archive = self.dir / "images" / f"{spec.name.rpartition('/')[2].replace(':', '_')}.tar"
            digest = write_oci_archive(spec, archive)[spec.name]
            if have.get(spec.name) != digest:
                log(f"importing {spec.name} ({digest[:19]})")
                self._ctr("images", "import", "--all-platforms", str(archive))
                if self.imported().get(spec.name) != digest:
                    raise SlinkyError(f"ctr images import {archive}: {spec.name} not imported as {digest}")

    def import_slurm_images(self, release: str, log: Callable[[str], None] = lambda _: None) -> dict[str, str]:
        """The Slurm images of ``release`` (``slurm_images.py``), built from its Debian
        root when missing and imported when containerd lacks them; name -> digest. The archive is
        deleted once imported (containerd holds the images; disk is shared with other planes)."""
        archive, digests = slurm_images.build(release, self.dir / "images", archive_needed=False)
        if any(self.imported().get(name) != digest for name, digest in digests.items()):
            archive, digests = slurm_images.build(release, self.dir / "images")
            log(f"importing {', '.join(digests)} ({archive.stat().st_size >> 20} MiB)")
            self._ctr("images", "import", "--all-platforms", str(archive), timeout=900)
            missing = [n for n, d in digests.items() if self.imported().get(n) != d]
            if missing:
                raise SlinkyError(f"ctr images import {archive}: {', '.join(missing)} not imported")
            archive.unlink()
        return digests

    def import_training_images(self, release: str, log: Callable[[str], None] = lambda _: None) -> dict[str, str]:
        """The worker and login images of ``release`` with the training stack (``training_images.py``),
        on the Slurm images; role -> image name. Imported when containerd lacks the name (the tag says
        what the image is made of), streamed into ``ctr images import -``: no archive of 6 GB on disk
        beside the cached stack layer."""
        slurm = self.import_slurm_images(release, log)
        specs = training_images.image_specs(release, slurm, log=log)
        have = self.imported()
        missing = [s for s in specs.values() if s.name not in have]
        if missing:
            log(f"importing {', '.join(s.name for s in missing)} ({missing[0].layers[0].size >> 20} MiB "
                f"training-stack layer)")
            self._ctr_import(missing)
            absent = [s.name for s in missing if s.name not in self.imported()]
            if absent:
                raise SlinkyError(f"ctr images import: {', '.join(absent)} not imported")
        return {role: spec.name for role, spec in specs.items()}

    def _ctr_import(self, specs: list[ImageSpec], timeout: float = 1800) -> None:
        """``ctr images import -`` of the images, their archive written into its standard input."""
        work = self.dir / "images"
        work.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=work, prefix=".import-") as tmp, \
                tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen([CTR, "--address", str(self.socket), "--namespace", CRI_NAMESPACE, "images",
                                     "import", "--all-platforms", "-"], stdin=subprocess.PIPE,
                                    stdout=errors, stderr=errors)
            assert proc.stdin is not None
            try:
                with proc.stdin:
                    write_oci_stream(specs, proc.stdin, Path(tmp))
            except BrokenPipeError:
                pass  # ctr stopped reading: its exit status and message say why
            finally:
                try:
                    code = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
            if code != 0:
                errors.seek(0)
                raise SlinkyError(f"ctr images import -: {errors.read().decode(errors='replace').strip() or code}")

    def _kill_pod_processes(self) -> None:
        """SIGKILL every process in the kubelet's cgroups (the pods' containers): with containerd going
        away no one else would stop them."""
        for _ in range(20):
            pids = {int(p) for d in self._cgroup_dirs() for cg in _cgroup_tree(d) for p in _read(cg / "cgroup.procs")}
            if not pids:
                return
            _sigkill(pids)
            time.sleep(0.1)

    def _kill_shims(self) -> None:
        """containerd's runc shims for this node (their command line names our containerd's socket);
        they outlive containerd by design and hold the containers' mounts."""
        needle = f"-address {self.socket} "

        def shims() -> list[int]:
            pids = (int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit())
            return [pid for pid in pids if needle in cmdline(pid, settle=0) + " " and is_alive(pid)]

        deadline = time.monotonic() + 5
        while (pids := shims()) and time.monotonic() < deadline:
            _sigkill(pids)
            time.sleep(0.1)

    def _remove_netns(self) -> None:
        """The pods' network namespaces (containerd's CRI names them ``cni-UUID``) whose interface has an
        address of our subnet; deleting one takes its veth pair along."""
        if not NETNS_DIR.is_dir():
            return
        net = ipaddress.ip_network(self.settings.subnet)
        for ns in sorted(NETNS_DIR.glob("cni-*")):
            out = _ip("-n", ns.name, "-j", "-4", "addr", "show", check=False).stdout
            try:
                addrs = [a.get("local", "") for i in json.loads(out or "[]") for a in i.get("addr_info", [])]
            except ValueError:
                continue
            if any(a and ipaddress.ip_address(a) in net for a in addrs):
                _ip("netns", "delete", ns.name, check=False)

    def _unmount_all(self) -> None:
        """Everything mounted under the node's folder (overlay root file systems, shm, the kubelet's
        volumes), deepest first."""
        prefix = str(self.dir) + "/"
        for _ in range(3):
            out = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True,
                                 check=False).stdout
            targets = sorted({t.replace("\\x20", " ") for t in out.splitlines() if t.startswith(prefix)},
                             key=len, reverse=True)
            if not targets:
                return
            for target in targets:
                subprocess.run(["umount", "-l", target], capture_output=True, check=False)

    def _remove_cgroups(self) -> None:
        for root in self._cgroup_dirs():
            for d in reversed(_cgroup_tree(root)):  # children first
                try:
                    d.rmdir()
                except OSError:
                    pass


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def _is_kubelet(pid: int) -> bool:
    argv0 = cmdline(pid, settle=0).split(" ", 1)[0]
    return os.path.basename(argv0) == "kubelet" and is_alive(pid)


def _sigkill(pids: Iterable[int]) -> None:
    """SIGKILL each of ``pids``, passing over those already gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _cgroup_tree(root: Path) -> list[Path]:
    """``root`` and every cgroup below it, parents first; cgroups that vanish while we look (runc and
    containerd remove theirs as their processes end) are skipped, not errors."""
    out = []
    for dirpath, _, _ in os.walk(root, onerror=lambda _: None):
        out.append(Path(dirpath))
    return out


def _read(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _write_if_changed(path: Path, text: str) -> None:
    if not (path.is_file() and path.read_text() == text):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def _toml(config: dict[str, Any]) -> str:
    """The small TOML subset containerd's configuration needs (tables, strings, booleans, integers).
    Python's stdlib reads TOML but does not write it; no dependency for twenty lines."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"no TOML for {type(v).__name__}")

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        if prefix and scalars:
            lines.append(f"\n[{prefix}]")
        lines.extend(f"{k} = {value(v)}" for k, v in scalars.items())
        for k, v in d.items():
            if isinstance(v, dict):
                table(f"{prefix}.{json.dumps(k) if '.' in k else k}" if prefix else
                      (json.dumps(k) if "." in k else k), v)

    table("", config)
    return "\n".join(lines).lstrip("\n") + "\n"
