"""Which state dir owns which bridge, node names, subnet, ports and munge socket on this machine.

The registry is /etc/hosts: each cluster's block carries its identity. ``up`` refuses what another
block claims; ``down`` removes only what no other claims. Pure functions over the file's text.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from slinkyml.dev.slurm.config import (
    HOSTS_BEGIN,
    HOSTS_END,
    IDENTITY_FIELDS,
    IDENTITY_LINE,
    SYSTEM_MUNGE_SOCKET,
    DevClusterSpec,
)

IDENTITY_FILE = "cluster.json"
#: the ports bound on the host (slurmd binds inside its own namespace, so its port may repeat).
HOST_PORTS = (("slurmctld_port", "--slurmctld-port", "SLINKYML_DEV_PORT_BASE"),
              ("slurmdbd_port", "--slurmdbd-port", "SLINKYML_DEV_PORT_BASE"),
              ("slurmrestd_port", "--slurmrestd-port", "SLINKYML_DEV_PORT_BASE"),
              ("mariadb_port", "--mariadb-port", "SLINKYML_DEV_MARIADB_PORT"))


def identity_options(saved: dict) -> dict:
    """DevClusterSpec keyword arguments from a saved identity (unknown keys ignored)."""
    return {name: saved[name] for name in IDENTITY_FIELDS if saved.get(name) is not None}


def read_identity(state_dir: Path) -> dict:
    """The identity saved by ``up`` in ``state_dir``; {} when there is none (or it is unreadable)."""
    try:
        saved = json.loads((Path(state_dir) / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


@dataclass(frozen=True)
class Claim:
    """One cluster's block in /etc/hosts: what it holds on the machine."""

    state_dir: str
    bridge: str | None
    node_names: tuple[str, ...]
    addresses: tuple[str, ...]
    subnet: str | None = None
    ports: dict | None = None  # field name → port; None for blocks written before the identity line
    munge_socket: str | None = None

    @property
    def netns(self) -> list[str]:
        return [f"slkml-{node}" for node in self.node_names]


def read_claims(text: str, hostname: str) -> list[Claim]:
    """Every cluster block in the hosts file's ``text``.

    A block without ``# identity`` (older slinkyml) is read from its lines, with munge's system socket.
    """
    claims: list[Claim] = []
    state_dir: str | None = None
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.startswith(HOSTS_BEGIN + " "):
            state_dir, lines = raw[len(HOSTS_BEGIN) + 1:].strip(), []
        elif state_dir is not None and raw.startswith(HOSTS_END + " "):
            claims.append(_claim(state_dir, lines, hostname))
            state_dir = None
        elif state_dir is not None:
            lines.append(raw)
    return claims


def _claim(state_dir: str, lines: list[str], hostname: str) -> Claim:
    entries = [line.split()[:2] for line in lines if line.strip() and not line.startswith("#")]
    entries = [e for e in entries if len(e) == 2]
    saved: dict = {}
    for line in lines:
        if line.startswith(IDENTITY_LINE):
            try:
                saved = json.loads(line[len(IDENTITY_LINE):])
            except ValueError:
                saved = {}
    if saved:
        return Claim(state_dir, saved.get("bridge"), tuple(saved.get("node_names", ())),
                     tuple(addr for addr, _ in entries), saved.get("subnet"),
                     {name: saved[name] for name, _, _ in HOST_PORTS if name in saved},
                     saved.get("munge_socket_path"))
    bridge = None
    if entries:
        alias = entries[0][1]
        host = hostname.split(".")[0].lower() + "-"
        bridge = alias[len(host):] if alias.startswith(host) else alias.rsplit("-", 1)[-1]
    return Claim(state_dir, bridge, tuple(name for _, name in entries[1:]), tuple(addr for addr, _ in entries),
                 munge_socket=SYSTEM_MUNGE_SOCKET)


def legacy_identity(claim: Claim) -> dict:
    """A saved-identity stand-in from a cluster's own old-style hosts block: bridge and node names."""
    names = list(claim.node_names)
    if not claim.bridge or not names or not names[0].endswith("1"):
        return {}
    prefix = names[0][:-1]
    if names != [f"{prefix}{i}" for i in range(1, len(names) + 1)]:
        return {}
    return {"bridge": claim.bridge, "node_prefix": prefix, "nodes": len(names), "node_names": names}


def others(claims: list[Claim], state_dir: Path) -> list[Claim]:
    return [c for c in claims if c.state_dir != str(state_dir)]


def conflicts(spec: DevClusterSpec, claims: list[Claim]) -> list[str]:
    """One line per resource of ``spec`` that another state dir's block holds, naming what to change.

    ``claims`` are all blocks; ``spec``'s own is skipped. Empty when ``up`` may go ahead.
    """
    problems: list[str] = []
    net = spec.network
    for claim in others(claims, spec.state_dir):
        owner = (f"the cluster in {claim.state_dir} (`slinkyml dev down --state-dir {claim.state_dir}` "
                 f"releases it)")
        if claim.bridge == spec.bridge:
            problems.append(f"--bridge: bridge {spec.bridge} belongs to {owner}; choose another bridge "
                            f"with --bridge or SLINKYML_DEV_BRIDGE")
        shared = [n for n in spec.node_names if n in claim.node_names]
        if shared:
            problems.append(f"--node-prefix: node names {', '.join(shared)} (network namespaces "
                            f"{', '.join(spec.netns(n) for n in shared)}) belong to {owner}; choose another "
                            f"prefix with --node-prefix or SLINKYML_DEV_NODE_PREFIX")
        if _overlaps(net, claim):
            problems.append(f"--subnet: {spec.subnet} overlaps the addresses of {owner}; choose another "
                            f"subnet with --subnet or SLINKYML_DEV_SUBNET")
        for name, flag, env in HOST_PORTS:
            port = getattr(spec, name)
            if claim.ports and port in claim.ports.values():
                problems.append(f"{flag}: port {port} belongs to {owner}; choose another with {flag} or {env}")
        if claim.munge_socket == spec.munge_socket_path:
            problems.append(f"munge socket {spec.munge_socket_path} belongs to {owner}, whose munged has "
                            f"another key; stop that cluster first")
    return problems


def _overlaps(net: ipaddress.IPv4Network, claim: Claim) -> bool:
    if claim.subnet:
        try:
            return net.overlaps(ipaddress.ip_network(claim.subnet))
        except ValueError:
            pass
    return any(ipaddress.ip_address(addr) in net for addr in claim.addresses if _is_ipv4(addr))


def _is_ipv4(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 4
    except ValueError:
        return False


def removable(spec: DevClusterSpec, node_names: list[str], claims: list[Claim]) -> tuple[bool, list[str]]:
    """What ``down`` may delete: (the bridge?, these nodes' veths and namespaces); anything another
    state dir's block names stays."""
    foreign = others(claims, spec.state_dir)
    bridge = not any(c.bridge == spec.bridge for c in foreign)
    held = {n for c in foreign for n in c.node_names}
    return bridge, [n for n in node_names if n not in held]
