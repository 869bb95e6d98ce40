"""The local cluster's network: a bridge, one network namespace + veth per node, /etc/hosts.

``ip`` commands, not Slurm commands, so they run here rather than in slinkyml.slurm.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slinkyml.dev.slurm import ownership
from slinkyml.dev.slurm.config import HOSTS_BEGIN, HOSTS_END, MAX_NODES, DevClusterSpec, render_hosts_block
from slinkyml.errors import SlinkyError
from slinkyml.process import exclusive_lock

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


#: nodes per bridge: a Linux bridge takes at most 1023 ports (BR_MAX_PORTS 1024, port 0 reserved),
#: so a larger cluster chains extra bridges to the first one, each by a veth pair.
NODES_PER_BRIDGE = 1000
#: ``ip -n NS -batch`` processes run at once while the nodes' namespaces are configured.
PARALLEL_IP = 8


#: Machine-wide kernel limits a few hundred nodes on one bridge outgrow (raised, never lowered): the
#: shared ARP table (``gc_thresh3``) and the per-CPU backlog ARP broadcasts go through
#: (``netdev_max_backlog``); past them large sruns fail with "No route to host".
ARP_ENTRIES_PER_NODE = 16
BACKLOG_PER_NODE = 64
#: ARP requests a node sends before giving up (Linux: 3, one a second); a dropped one is retried.
ARP_PROBES = 10
PROC_SYS = Path("/proc/sys")


def kernel_limits(nodes: int) -> dict[str, int]:
    """The machine-wide limits ``nodes`` nodes need (sysctl paths under /proc/sys)."""
    arp = max(1024, ARP_ENTRIES_PER_NODE * nodes)
    return {"net/ipv4/neigh/default/gc_thresh2": arp // 2, "net/ipv4/neigh/default/gc_thresh3": arp,
            "net/core/netdev_max_backlog": max(1000, BACKLOG_PER_NODE * nodes)}


def ensure_kernel_room(nodes: int, proc_sys: Path = PROC_SYS) -> None:
    """Raise each of :func:`kernel_limits` that is lower."""
    for name, wanted in kernel_limits(nodes).items():
        path = proc_sys / name
        try:
            if int(path.read_text()) < wanted:
                path.write_text(f"{wanted}\n")
        except (OSError, ValueError) as exc:
            raise SlinkyError(f"{path}: cannot raise it to {wanted} for {nodes} nodes ({exc})") from None


def _ip_batch(lines: list[str], netns: str | None = None, *, check: bool = True) -> None:
    """Run ``lines`` through one ``ip -batch`` (in ``netns`` if given); with ``check``, any failure
    is reported (``-force`` runs every line regardless)."""
    if not lines:
        return
    argv = ["ip", *(["-n", netns] if netns else []), "-force", "-batch", "-"]
    proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        where = f" in {netns}" if netns else ""
        raise SlinkyError(f"ip -batch{where}: {proc.stderr.strip() or proc.returncode}")


def extra_bridges(spec: DevClusterSpec, nodes: int | None = None) -> list[tuple[str, str, str]]:
    """``(bridge, its veth end, the first bridge's veth end)`` for each bridge past the first that
    ``nodes`` (default: the spec's) need."""
    count = ((spec.nodes if nodes is None else nodes) - 1) // NODES_PER_BRIDGE
    return [(f"{spec.bridge}-{k}", f"{spec.bridge}r{k}", f"{spec.bridge}l{k}") for k in range(1, count + 1)]


def node_bridge(spec: DevClusterSpec, index: int) -> str:
    """The bridge node ``index`` (1-based) hangs on."""
    k = (index - 1) // NODES_PER_BRIDGE
    return spec.bridge if k == 0 else f"{spec.bridge}-{k}"


def ensure_network(spec: DevClusterSpec) -> None:
    """Create (or keep) the bridge(s) and every node's namespace; idempotent. One ``ip -batch`` for
    the machine's side and one per node namespace (nine ``ip`` calls per node take minutes at 1,024)."""
    ensure_kernel_room(spec.nodes)
    lines = [] if link_exists(spec.bridge) else [f"link add {spec.bridge} type bridge"]
    lines.append(f"link set {spec.bridge} up")
    for bridge, far, near in extra_bridges(spec):
        if not link_exists(bridge):
            lines.append(f"link add {bridge} type bridge")
        if not link_exists(near):
            lines.append(f"link add {near} type veth peer name {far}")
        lines += [f"link set {bridge} up", f"link set {far} master {bridge} up",
                  f"link set {near} master {spec.bridge} up"]
    _ip_batch(lines)
    cidr = f"{spec.controller_addr}/{spec.prefix_len}"
    if cidr not in _ip("-4", "addr", "show", "dev", spec.bridge).stdout:
        _ip("addr", "add", cidr, "dev", spec.bridge)
    lines = []
    for index, node in enumerate(spec.node_names, start=1):
        ns, veth = spec.netns(node), spec.veth(node)
        if not netns_exists(ns):
            lines.append(f"netns add {ns}")
        if not link_exists(veth):
            lines.append(f"link add {veth} type veth peer name eth0 netns {ns}")
        lines.append(f"link set {veth} master {node_bridge(spec, index)} up")
    _ip_batch(lines)
    inside = [f"route replace prohibit {server}/32" for server in nameservers()]

    def configure(index: int, node: str) -> None:
        addr = spec.node_addr(index)
        _ip_batch([f"addr replace {addr}/{spec.prefix_len} dev eth0", "link set eth0 up",
                   "link set lo up", f"route replace default via {spec.controller_addr}",
                   f"ntable change name arp_cache dev eth0 mcast_probes {ARP_PROBES}", *inside],
                  netns=spec.netns(node))
        if spec.node_addresses and node_addresses(spec, node) != [addr]:  # no address of an earlier life
            move_node(spec, node, addr)

    with ThreadPoolExecutor(PARALLEL_IP) as pool:
        for future in [pool.submit(configure, i, n) for i, n in enumerate(spec.node_names, start=1)]:
            future.result()


def node_addresses(spec: DevClusterSpec, node: str) -> list[str]:
    """The IPv4 addresses the node's namespace has on eth0 (none when it has no namespace)."""
    if not netns_exists(spec.netns(node)):
        return []
    out = _ip("-n", spec.netns(node), "-4", "-o", "addr", "show", "dev", "eth0", check=False).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


def move_node(spec: DevClusterSpec, node: str, new: str) -> None:
    """Give the node's namespace ``new`` as its only address, as a rescheduled pod comes back with
    another IP. The old ones go first: deleting a primary address deletes its secondaries."""
    old = [addr for addr in node_addresses(spec, node) if addr != new]
    _ip_batch([*(f"addr del {a}/{spec.prefix_len} dev eth0" for a in old), f"addr replace {new}/{spec.prefix_len} dev eth0",
               f"route replace default via {spec.controller_addr}"], netns=spec.netns(node))


def nameservers(resolv_conf: Path = RESOLV_CONF) -> list[str]:
    """The machine's IPv4 nameservers, which node namespaces cannot reach.

    A ``prohibit`` route per nameserver makes lookups fail at once instead of waiting 10 s (c10d's
    TCPStore reverse-resolves each client).
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


def kill_namespace_processes(names: list[str], proc: Path = Path("/proc")) -> list[int]:
    """SIGKILL every process inside these network namespaces (matched by the namespace's inode).

    A stopped node's job steps and tasks would otherwise run on outside any cluster, holding memory
    and keeping the namespace alive after its name is deleted.
    """
    wanted = set()
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(f"/run/netns/{name}")
            wanted.add((st.st_dev, st.st_ino))
    killed: list[int] = []
    if not wanted:
        return killed
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(entry / "ns" / "net")
            if (st.st_dev, st.st_ino) in wanted:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return killed


def remove_network(spec: DevClusterSpec, node_names: list[str] | None = None, *, bridge: bool = True) -> None:
    """Delete these nodes' veths and namespaces (killing what still runs in them), and the bridge(s)
    unless ``bridge`` is False."""
    nodes = spec.node_names if node_names is None else node_names
    kill_namespace_processes([spec.netns(node) for node in nodes])
    lines = []
    for node in nodes:
        # the veth explicitly: a namespace outlives its name while a process (a job's task) is in it
        if link_exists(spec.veth(node)):
            lines.append(f"link del {spec.veth(node)}")
        if netns_exists(spec.netns(node)):
            lines.append(f"netns del {spec.netns(node)}")
    if bridge:
        for extra, _far, near in extra_bridges(spec, MAX_NODES):  # what any earlier up made
            lines += [f"link del {name}" for name in (near, extra) if link_exists(name)]
        if link_exists(spec.bridge):
            lines.append(f"link del {spec.bridge}")
    _ip_batch(lines, check=False)  # best effort: what is already gone is no failure


def claims(hosts_file: Path = HOSTS_FILE) -> list[ownership.Claim]:
    """Every cluster's claim in /etc/hosts (see :mod:`slinkyml.dev.slurm.ownership`)."""
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
