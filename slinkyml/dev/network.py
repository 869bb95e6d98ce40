"""The local cluster's network: a bridge, one network namespace + veth per node, /etc/hosts.

Each slurmd runs in its own network namespace (and UTS namespace, for its hostname) so that
``srun -N2 hostname`` prints two hosts and torch.distributed crosses a real (virtual) network.
These are ``ip`` commands, not Slurm commands, so they run here rather than in slinkyml.slurm.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
from pathlib import Path

from slinkyml.dev import ownership
from slinkyml.dev.config import HOSTS_BEGIN, HOSTS_END, DevClusterSpec, render_hosts_block
from slinkyml.dev.process import exclusive_lock
from slinkyml.errors import SlinkyError

HOSTS_FILE = Path("/etc/hosts")
RESOLV_CONF = Path("/etc/resolv.conf")
#: held while a cluster checks and writes its claim, so two ``up`` cannot both take a name.
LOCK_FILE = Path("/run/slinkyml-dev.lock")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise SlinkyError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists() or _ip("link", "show", name, check=False).returncode == 0


def netns_exists(name: str) -> bool:
    return Path(f"/run/netns/{name}").exists()


def ensure_network(spec: DevClusterSpec) -> None:
    """Create (or keep) the bridge and every node's namespace; idempotent."""
    if not link_exists(spec.bridge):
        _ip("link", "add", spec.bridge, "type", "bridge")
    cidr = f"{spec.controller_addr}/{spec.prefix_len}"
    if cidr not in _ip("-4", "addr", "show", "dev", spec.bridge).stdout:
        _ip("addr", "add", cidr, "dev", spec.bridge)
    _ip("link", "set", spec.bridge, "up")
    for index, node in enumerate(spec.node_names, start=1):
        ns, veth = spec.netns(node), spec.veth(node)
        if not netns_exists(ns):
            _ip("netns", "add", ns)
        if not link_exists(veth):
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", spec.bridge, "up")
        addr = f"{spec.node_addr(index)}/{spec.prefix_len}"
        if addr not in _ip("-n", ns, "-4", "addr", "show", "dev", "eth0").stdout:
            _ip("-n", ns, "addr", "add", addr, "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "replace", "default", "via", spec.controller_addr, check=False)
        for server in nameservers():
            _ip("-n", ns, "route", "replace", "prohibit", f"{server}/32", check=False)


def nameservers(resolv_conf: Path = RESOLV_CONF) -> list[str]:
    """The IPv4 nameservers of the machine, which node namespaces cannot reach.

    Packets to them from a node's namespace are silently dropped, so every DNS query there waits
    out the resolver's timeout (10 s) — and PyTorch's c10d TCPStore reverse-resolves each client
    address (IPv4-mapped, so /etc/hosts does not answer), which stalled rendezvous by 10 s at
    random. A ``prohibit`` route per nameserver makes such lookups fail at once.
    """
    try:
        text = resolv_conf.read_text()
    except OSError:
        return []
    servers = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", parts[1]) \
                and not parts[1].startswith("127."):
            servers.append(parts[1])
    return servers


def remove_network(spec: DevClusterSpec, node_names: list[str] | None = None, *, bridge: bool = True) -> None:
    """Delete these nodes' veths and namespaces, and the bridge unless ``bridge`` is False."""
    for node in spec.node_names if node_names is None else node_names:
        if link_exists(spec.veth(node)):
            _ip("link", "del", spec.veth(node), check=False)
        if netns_exists(spec.netns(node)):
            _ip("netns", "del", spec.netns(node), check=False)
    if bridge and link_exists(spec.bridge):
        _ip("link", "del", spec.bridge, check=False)


def claims(hosts_file: Path = HOSTS_FILE) -> list[ownership.Claim]:
    """Every cluster's claim in /etc/hosts (see :mod:`slinkyml.dev.ownership`)."""
    try:
        text = hosts_file.read_text()
    except OSError:
        return []
    return ownership.read_claims(text, socket.gethostname())


def claim_lock(lock_file: Path = LOCK_FILE) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock around "check the claims, then write ours"."""
    return exclusive_lock(lock_file)


def node_command(spec: DevClusterSpec, node: str, argv: list[str]) -> list[str]:
    """argv that runs ``argv`` as node ``node``: its network namespace and its own hostname.

    ``ip netns exec`` is not used: it remounts /sys, and slurmd then finds no cgroup mount.
    """
    return ["nsenter", f"--net=/run/netns/{spec.netns(node)}", "unshare", "--uts", "sh", "-c",
            'hostname "$0" && exec "$@"', node, *argv]


def install_hosts(spec: DevClusterSpec, hosts_file: Path = HOSTS_FILE) -> None:
    """Add (or refresh) our marked block in /etc/hosts; other lines are left alone."""
    text = hosts_file.read_text() if hosts_file.exists() else ""
    kept = strip_hosts_block(text, spec)
    new = kept.rstrip("\n") + "\n" + render_hosts_block(spec)
    if new != text:
        hosts_file.write_text(new)


def remove_hosts(spec: DevClusterSpec, hosts_file: Path = HOSTS_FILE) -> None:
    if hosts_file.exists():
        text = hosts_file.read_text()
        kept = strip_hosts_block(text, spec)
        if kept != text:
            hosts_file.write_text(kept)


def strip_hosts_block(text: str, spec: DevClusterSpec) -> str:
    """``text`` without this state dir's block (exactly its own: ``/x/dev`` leaves ``/x/dev2``'s)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.rstrip("\n") == f"{HOSTS_BEGIN} {spec.state_dir}":
            skipping = True
            continue
        if skipping and line.rstrip("\n") == f"{HOSTS_END} {spec.state_dir}":
            skipping = False
            continue
        if not skipping:
            out.append(line)
    return "".join(out)
