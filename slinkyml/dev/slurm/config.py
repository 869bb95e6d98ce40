"""The local cluster's specification and pure functions rendering its config files (previewable and
unit-tested: nothing here touches the machine)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slinkyml.errors import SpecError
from slinkyml.slurm import roots
from slinkyml.slurm.conf import SlurmConfBuilder
from slinkyml.slurm.version import SlurmVersion

MAX_NODES = 1024
#: beyond this many nodes, partitions list them as one range (``n[1-1024]``) instead of by name
LISTED_NODES = 64
#: connect and message timeouts of clusters larger than LISTED_NODES (see render_slurm_conf)
LARGE_TCP_TIMEOUT_S = 30
LARGE_MESSAGE_TIMEOUT_S = 60
#: what ``--emulated-nodes`` declares per node unless told otherwise: a p5.48xlarge (192 vCPUs,
#: 2 TiB, 8 H100, EFA) — see slinkyml/data/instance_types.yaml
EMULATED_NODE = {"cpus_per_node": 192, "memory_mb_per_node": 2_097_152, "node_gres": "gpu:h100:8",
                 "node_features": ("p5.48xlarge", "h100", "efa")}
#: what ``--slurm-version`` accepts: the machine's Slurm, or a release from a Debian root
SLURM_VERSIONS = roots.valid_choices()
#: munge's own default socket, where plain ``munge``/``unmunge`` and every Slurm client look first.
SYSTEM_MUNGE_SOCKET = "/run/munge/munge.socket.2"

#: The account tree created in slurmdbd: (account, parent, fairshare, users).
DEFAULT_ACCOUNTS: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("science", "root", 60, ()),
    ("physics", "science", 40, ("alice", "bob")),
    ("bio", "science", 60, ("carol",)),
    ("ml", "root", 40, ("dave", "root")),
)


def check_subnet(field: str, subnet: str, nodes: int) -> None:
    """A local cluster's subnet: IPv4, with room for ``nodes`` and the daemons' addresses (SpecError
    naming ``field``, the flag or variable that set it)."""
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError:
        raise SpecError(field, f"not an IPv4 network: {subnet!r}") from None
    if net.version != 4 or net.num_addresses < nodes + 16:
        raise SpecError(field, f"{subnet} is too small for {nodes} nodes")


@dataclass(frozen=True)
class DevClusterSpec:
    """What ``slinkyml dev up`` builds. Every field has a default that works on a fresh machine.

    A second cluster on the machine needs its own bridge, subnet, node names and ports (they are
    global, see :mod:`slinkyml.dev.slurm.ownership`) and gets its own munge socket.
    """

    state_dir: Path
    nodes: int = 4
    cpus_per_node: int = 4
    memory_mb_per_node: int = 4096
    cluster_name: str = "slinkyml"
    subnet: str = "10.213.0.0/24"
    bridge: str = "slkml0"
    node_prefix: str = "n"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    slurmdbd_port: int = 6819
    slurmrestd_port: int = 6820
    mariadb_port: int = 13306
    gpus: int = 0  # detected GPUs on the machine (nvidia-smi -L); 0 = none
    accounts: tuple[tuple[str, str, int, tuple[str, ...]], ...] = DEFAULT_ACCOUNTS
    extra_slurm_conf: str = ""
    #: SPANK plugins for plugstack.conf, each "PATH [ARG ...]" (loaded ``required``), e.g. pyxis.
    spank_plugins: tuple[str, ...] = ()
    #: "" = :func:`default_munge_socket` of ``state_dir``
    munge_socket_path: str = ""
    controller_host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    #: "system" (the machine's Slurm) or a release built in a Debian root (see slinkyml.slurm.roots)
    slurm_version: str = "system"
    #: GRES every node declares without devices behind it (``gpu:h100:8``; emulated nodes): the
    #: scheduler and accounting see them, no process can open one. Not with real GPUs (``gpus``).
    node_gres: str = ""
    #: node features (``Feature=``), e.g. the instance type, for ``--constraint``
    node_features: tuple[str, ...] = ()
    #: > 0: real Slurm preemption (:data:`PREEMPTIBLE_PARTITION` with this GraceTime, preempted
    #: by jobs of :data:`URGENT_PARTITION` on the same nodes); 0: no preemption
    preempt_grace_s: int = 0
    #: cgroups as a production slurmd (Slinky's pods included) runs them: task/cgroup confines each
    #: job to its ``--mem`` (ConstrainRAMSpace) and its CPUs (ConstrainCores), proctrack/cgroup ends
    #: every process of a step, re-parented or not (cgroup v1, one ``/slurm_<node>`` tree per slurmd).
    #: ``dev up`` turns it off, saying so in one line, where the hierarchies are not writable
    #: (:func:`cgroups_unusable`)
    cgroups: bool = True
    #: ``(node, address)`` for nodes moved off their first address (``dev node readdress``, as a
    #: rescheduled slurmd pod comes back with a new IP); kept in :data:`NODE_ADDRESSES_FILE`
    node_addresses: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, int) or not 1 <= self.nodes <= MAX_NODES:
            raise SpecError("--nodes", f"must be an integer from 1 to {MAX_NODES}, got {self.nodes!r}")
        if self.cpus_per_node < 1:
            raise SpecError("--cpus-per-node", f"must be ≥ 1, got {self.cpus_per_node}")
        if self.memory_mb_per_node < 256:
            raise SpecError("--memory-mb", f"must be ≥ 256, got {self.memory_mb_per_node}")
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", self.cluster_name):
            raise SpecError("--cluster-name", f"must be lowercase letters, digits or _, got {self.cluster_name!r}")
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,9}", self.node_prefix):
            raise SpecError("--node-prefix", f"must be a short lowercase name, got {self.node_prefix!r}")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,12}", self.bridge):
            raise SpecError("--bridge", f"must be a valid interface name (≤ 12 chars), got {self.bridge!r}")
        check_subnet("--subnet", self.subnet, self.nodes)
        for name in ("slurmctld_port", "slurmd_port", "slurmdbd_port", "slurmrestd_port", "mariadb_port"):
            port = getattr(self, name)
            if not 1024 <= port <= 65535:
                raise SpecError(f"--{name.replace('_', '-')}", f"must be 1024-65535, got {port}")
        plugins = (self.spank_plugins,) if isinstance(self.spank_plugins, str) else tuple(self.spank_plugins)
        for plugin in plugins:
            if not isinstance(plugin, str) or "\n" in plugin or not plugin.strip().startswith("/"):
                raise SpecError("--spank-plugin", f"expected an absolute plugin path and its arguments "
                                f"on one line, got {plugin!r}")
        object.__setattr__(self, "spank_plugins", tuple(" ".join(p.split()) for p in plugins))
        if self.slurm_version not in SLURM_VERSIONS:
            raise SpecError("--slurm-version", f"expected one of {', '.join(SLURM_VERSIONS)}, "
                            f"got {self.slurm_version!r}")
        if self.node_gres and not re.fullmatch(r"gpu(:[a-z0-9_.-]+)?:[1-9][0-9]{0,2}", self.node_gres):
            raise SpecError("--emulated-gres", f"expected gpu:COUNT or gpu:TYPE:COUNT, got {self.node_gres!r}")
        if self.node_gres and self.gpus:
            raise SpecError("--emulated-gres", "this machine has GPUs: its nodes declare those, not emulated ones")
        features = (self.node_features,) if isinstance(self.node_features, str) else tuple(self.node_features)
        for feature in features:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", str(feature)):
                raise SpecError("--emulated-features", f"not a node feature name: {feature!r}")
        object.__setattr__(self, "node_features", features)
        if not isinstance(self.preempt_grace_s, int) or not 0 <= self.preempt_grace_s <= 3600:
            raise SpecError("--preempt-grace", f"must be seconds from 0 (no preemption) to 3600, "
                            f"got {self.preempt_grace_s!r}")
        if not self.munge_socket_path:
            object.__setattr__(self, "munge_socket_path", default_munge_socket(self.state_dir))
        moved = dict(self.node_addresses)
        for node, addr in moved.items():
            problem = self.address_problem(addr, node)
            if problem:
                raise SpecError(f"node_addresses.{node}", problem)
        if len(set(moved.values())) != len(moved):
            raise SpecError("node_addresses", f"two nodes at one address: {moved}")
        object.__setattr__(self, "node_addresses", tuple(sorted(moved.items())))

    def address_problem(self, addr: str, node: str) -> str:
        """Why ``addr`` cannot be node ``node``'s address on this cluster's subnet ("" if it can)."""
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return f"not an IPv4 address: {addr!r}"
        net = self.network
        if ip not in net or ip in (net.network_address, net.broadcast_address):
            return f"{addr} is not a host address of the cluster's subnet {self.subnet}"
        if str(ip) == self.controller_addr:
            return f"{addr} is the controller's address on the bridge"
        return ""

    # -- derived names and addresses ---------------------------------------------------
    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(self.subnet)  # type: ignore[return-value]

    @property
    def controller_addr(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def prefix_len(self) -> int:
        return self.network.prefixlen

    @property
    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}{i}" for i in range(1, self.nodes + 1)]

    def node_addr(self, index: int) -> str:
        """Address of node ``index`` (1-based): its first one unless it was moved."""
        if self.node_addresses:
            moved = dict(self.node_addresses).get(f"{self.node_prefix}{index}")
            if moved:
                return moved
        return self.first_node_addr(index)

    def first_node_addr(self, index: int) -> str:
        """The address node ``index`` gets when it is first created."""
        return str(self.network.network_address + 10 + index)

    def free_node_addr(self) -> str:
        """The lowest address past the nodes' first ones that no node has: where a moved node goes."""
        taken = {self.node_addr(i) for i in range(1, self.nodes + 1)} | {addr for _n, addr in self.node_addresses}
        for candidate in self.network.hosts():
            if candidate > self.network.network_address + 10 + self.nodes and str(candidate) not in taken:
                return str(candidate)
        raise SpecError("--address", f"no free address left in {self.subnet}")

    @property
    def node_addresses_file(self) -> Path:
        return self.state_dir / NODE_ADDRESSES_FILE

    @property
    def controller_alias(self) -> str:
        """A name for the controller's bridge address, so reverse lookups of it never leave /etc/hosts."""
        return f"{self.controller_host}-{self.bridge}".lower()

    def netns(self, node: str) -> str:
        return f"slkml-{node}"

    def veth(self, node: str) -> str:
        return f"vslk{node}"[:15]

    # -- paths ---------------------------------------------------------------------------
    @property
    def etc(self) -> Path:
        return self.state_dir / "etc"

    @property
    def run(self) -> Path:
        return self.state_dir / "run"

    @property
    def log(self) -> Path:
        return self.state_dir / "log"

    @property
    def spool(self) -> Path:
        return self.state_dir / "spool"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def plugstack_conf(self) -> Path:
        return self.etc / "plugstack.conf"

    @property
    def spank_plugin_paths(self) -> list[Path]:
        """The plugin files of :attr:`spank_plugins` (their first words)."""
        return [Path(p.split()[0]) for p in self.spank_plugins]

    @property
    def munge_socket(self) -> Path:
        """This cluster's munged (see :func:`default_munge_socket`)."""
        return Path(self.munge_socket_path)

    @property
    def mariadb_socket(self) -> Path:
        return self.run / "mariadb.sock"

    @property
    def mariadb_tmp(self) -> Path:
        return self.run / "mariadb-tmp"

    @property
    def restd_socket(self) -> Path:
        return self.run / "slurmrestd.sock"

    @property
    def bin_dir(self) -> Path:
        """Client commands of a non-system Slurm (links into its root); first on PATH in ``dev env``."""
        return self.state_dir / "bin"

    @property
    def jwt_key(self) -> Path:
        return self.etc / "jwt_hs256.key"

    @property
    def restd_url(self) -> str:
        return f"http://127.0.0.1:{self.slurmrestd_port}"

    @property
    def users(self) -> list[str]:
        seen: list[str] = []
        for _account, _parent, _share, users in self.accounts:
            seen += [u for u in users if u not in seen]
        return seen


#: job credential lifetime (AuthInfo=cred_expire, default 120 s): slurmctld holds a requeued job that
#: long (job_mgr.c), so shorter means a quicker requeue, but not below slurmctld's 60 s retry of an RPC
#: it could not deliver: srun's step kill for a node that was down, retried once the node was back,
#: ended the requeued run's step there (30 s here made test_worker_node_loss fail at load).
CRED_EXPIRE_S = 65
#: with ``preempt_grace_s``: jobs here are preempted (GraceTime, then requeued) by jobs of URGENT
PREEMPTIBLE_PARTITION = "preemptible"
URGENT_PARTITION = "urgent"

def default_munge_socket(state_dir: Path) -> str:
    """A munge socket of the cluster's own, ``/run/munge/slinkyml-<hash of the state dir>.socket.2``.

    Each state dir has its own key, and the system socket may be the machine's own munge; Slurm
    reads it from ``AuthInfo`` and, towards slurmdbd, ``AccountingStoragePass``. Short: 107-byte limit.
    """
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:10]
    return f"/run/munge/slinkyml-{digest}.socket.2"


#: where a state dir keeps the addresses of moved nodes (JSON ``{node: address}``)
NODE_ADDRESSES_FILE = "node-addresses.json"


def saved_node_addresses(state_dir: Path) -> tuple[tuple[str, str], ...]:
    """The moved nodes' addresses saved in ``state_dir`` (none when the file is absent or unreadable)."""
    try:
        data = json.loads((state_dir / NODE_ADDRESSES_FILE).read_text())
    except (OSError, ValueError):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in data.items())) if isinstance(data, dict) else ()


def render_node_addresses(spec: DevClusterSpec) -> str:
    return json.dumps(dict(spec.node_addresses), indent=1, sort_keys=True) + "\n"


#: DevClusterSpec fields that make up a cluster's footprint on the machine (saved at ``up``).
IDENTITY_FIELDS = ("bridge", "node_prefix", "subnet", "slurmctld_port", "slurmd_port", "slurmdbd_port",
                   "slurmrestd_port", "mariadb_port", "munge_socket_path", "slurm_version", "node_gres",
                   "node_features", "cpus_per_node", "memory_mb_per_node")
IDENTITY_LINE = "# identity "


def identity(spec: DevClusterSpec) -> dict:
    """What ``down``/``status``/``reset`` need to find this cluster again, whatever the env says then."""
    return {**{name: getattr(spec, name) for name in IDENTITY_FIELDS},
            "nodes": spec.nodes, "node_names": spec.node_names}


def render_identity(spec: DevClusterSpec) -> str:
    """``cluster.json`` in the state dir."""
    return json.dumps(identity(spec), indent=1) + "\n"


#: Environment variables that change :class:`~slinkyml.dev.LocalCluster`'s defaults (explicit
#: arguments still win). ``SLINKYML_STATE_DIR`` (see :func:`slinkyml.config.default_state_dir`) picks the state.
ENV_OPTIONS: dict[str, str] = {
    "SLINKYML_DEV_SUBNET": "subnet",            # e.g. 10.215.0.0/24
    "SLINKYML_DEV_BRIDGE": "bridge",            # e.g. slkml24
    "SLINKYML_DEV_NODE_PREFIX": "node_prefix",  # e.g. t → nodes t1.., netns slkml-t1..
    "SLINKYML_DEV_PORT_BASE": "",               # e.g. 7817 → slurmctld 7817, slurmd 7818, slurmdbd 7819, slurmrestd 7820
    "SLINKYML_DEV_MARIADB_PORT": "mariadb_port",  # e.g. 14306
    "SLINKYML_DEV_SPANK_PLUGINS": "spank_plugins",  # e.g. /usr/local/lib/slurm/spank_pyxis.so (";" between)
    "SLINKYML_DEV_SLURM_VERSION": "slurm_version",  # system (default) or 26.05
}
_PORT_LAYOUT = ("slurmctld_port", "slurmd_port", "slurmdbd_port", "slurmrestd_port")


def options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """DevClusterSpec keyword arguments from the ``SLINKYML_DEV_*`` variables that are set
    (``SLINKYML_DEV_PORT_BASE=B``: the four Slurm ports B..B+3); bad values raise :class:`SpecError`."""
    env = os.environ if environ is None else environ
    options: dict[str, object] = {}
    for var, name in ENV_OPTIONS.items():
        value = env.get(var, "").strip()
        if not value:
            continue
        if var == "SLINKYML_DEV_PORT_BASE":
            base = _env_port(var, value, span=len(_PORT_LAYOUT))
            options.update({port: base + i for i, port in enumerate(_PORT_LAYOUT)})
        elif name.endswith("_port"):
            options[name] = _env_port(var, value)
        elif name == "spank_plugins":
            options[name] = tuple(p.strip() for p in value.split(";") if p.strip())
        else:
            options[name] = value
    return options


def _env_port(var: str, value: str, span: int = 1) -> int:
    if not value.isdigit() or not 1024 <= int(value) <= 65536 - span:
        raise SpecError(var, f"must be a port number from 1024 to {65536 - span}, got {value!r}")
    return int(value)


def render_slurm_conf(spec: DevClusterSpec, version: SlurmVersion, plugin_dir: Path | None = None) -> str:
    """slurm.conf for the local cluster: every daemon as root, state under ``spec.state_dir``.

    ``plugin_dir``: a non-system Slurm's plugins (its compiled-in default is the machine's Slurm's).
    """
    conf = SlurmConfBuilder().comment("Written by `slinkyml dev up` — the local development cluster. "
                                      "Regenerated on every start.")
    conf.set_all([
        ("ClusterName", spec.cluster_name),
        ("SlurmctldHost", f"{spec.controller_host}({spec.controller_addr})"),
        ("SlurmctldPort", spec.slurmctld_port), ("SlurmdPort", spec.slurmd_port),
        ("SlurmUser", "root"), ("SlurmdUser", "root"), ("AuthType", "auth/munge"),
        # connections to slurmdbd take the socket from AccountingStoragePass, not AuthInfo (slurm.conf(5));
        # cred_expire is also how long slurmctld holds a requeued job (BeginTime = now + cred_expire + 1)
        ("AuthInfo", f"socket={spec.munge_socket},cred_expire={CRED_EXPIRE_S}"),
        ("AccountingStoragePass", spec.munge_socket),
        ("AuthAltTypes", "auth/jwt"), ("AuthAltParameters", f"jwt_key={spec.jwt_key}"),
    ])
    if plugin_dir:
        conf.set("PluginDir", plugin_dir)
    conf.set_all([
        ("StateSaveLocation", f"{spec.spool}/slurmctld"), ("SlurmdSpoolDir", f"{spec.spool}/slurmd-%n"),
        ("SlurmctldPidFile", f"{spec.run}/slurmctld.pid"), ("SlurmdPidFile", f"{spec.run}/slurmd-%n.pid"),
        ("SlurmctldLogFile", f"{spec.log}/slurmctld.log"), ("SlurmdLogFile", f"{spec.log}/slurmd-%n.log"),
        ("SlurmctldDebug", "info"), ("SlurmdDebug", "info"), ("SlurmdParameters", "config_overrides"),
        ("ProctrackType", "proctrack/cgroup" if spec.cgroups else "proctrack/linuxproc"),
        ("TaskPlugin", "task/cgroup" if spec.cgroups else "task/none"), ("MpiDefault", "none"),
        ("SelectType", "select/cons_tres"), ("SelectTypeParameters", "CR_Core_Memory"), ("DefMemPerCPU", 512),
        ("PriorityType", "priority/multifactor"), ("PriorityWeightFairshare", 10000),
        ("PriorityWeightAge", 1000), ("PriorityWeightJobSize", 0), ("PriorityDecayHalfLife", "7-0"),
        ("PriorityCalcPeriod", 1), ("JobAcctGatherType", "jobacct_gather/linux"),
        ("JobAcctGatherFrequency", "task=1"), ("AccountingStorageType", "accounting_storage/slurmdbd"),
        ("AccountingStorageHost", spec.controller_addr), ("AccountingStoragePort", spec.slurmdbd_port),
        ("AccountingStorageEnforce", "associations,limits,qos"),
    ])
    node_gres: list[tuple[str, object]] = []
    if spec.gpus or spec.node_gres:
        conf.set("GresTypes", "gpu").set("AccountingStorageTRES", "gres/gpu")
        node_gres = [("Gres", spec.node_gres or f"gpu:{gpus_per_node(spec)}")]
    if spec.node_features:
        node_gres.append(("Feature", ",".join(spec.node_features)))
    if spec.spank_plugins:
        conf.set("PlugStackConfig", spec.plugstack_conf)
    conf.set_all([
        ("JobCompType", "jobcomp/none"), ("SchedulerParameters", "batch_sched_delay=0"), ("ReturnToService", 2),
        ("SlurmdTimeout", 60), ("KillWait", 10), ("InactiveLimit", 0), ("MinJobAge", 300), ("MaxArraySize", 1001),
    ])
    if spec.nodes > LISTED_NODES:
        # hundreds of slurmstepds starting on a few cores accept late: 2 s connects fail large sruns
        conf.set_all([("TCPTimeout", LARGE_TCP_TIMEOUT_S), ("MessageTimeout", LARGE_MESSAGE_TIMEOUT_S)])
    for i, name in enumerate(spec.node_names, start=1):
        conf.node(name, [("NodeAddr", spec.node_addr(i)), ("NodeHostname", name), ("CPUs", spec.cpus_per_node),
                         ("RealMemory", spec.memory_mb_per_node), *node_gres, ("State", "UNKNOWN")])
    node_list = ",".join(spec.node_names) if spec.nodes <= LISTED_NODES else f"{spec.node_prefix}[1-{spec.nodes}]"
    conf.partition("debug", [("Nodes", node_list), ("Default", "YES"), ("MaxTime", "INFINITE"), ("State", "UP")])
    conf.partition("short", [("Nodes", node_list), ("MaxTime", "00:30:00"), ("State", "UP")])
    if spec.preempt_grace_s:
        _add_preemption(conf, node_list, spec.preempt_grace_s)
    if spec.extra_slurm_conf:
        conf.comment("extra configuration").extra(spec.extra_slurm_conf.rstrip())
    return conf.build().text()


def _add_preemption(conf: SlurmConfBuilder, node_list: str, grace_s: int) -> None:
    """Preemption as a production cluster sets it up: a job of the higher PriorityTier partition
    that needs a lower one's nodes preempts its jobs; slurmctld sends them SIGCONT+SIGTERM
    (src/slurmctld/preempt.c), waits GraceTime, then requeues them (PreemptMode=REQUEUE)."""
    conf.comment(f"preemption: {URGENT_PARTITION} jobs requeue {PREEMPTIBLE_PARTITION} (and debug, short) "
                 f"jobs after {grace_s} s of GraceTime")
    conf.set_all([("PreemptType", "preempt/partition_prio"), ("PreemptMode", "REQUEUE")])
    conf.partition(PREEMPTIBLE_PARTITION, [("Nodes", node_list), ("PriorityTier", 1), ("GraceTime", grace_s),
                                           ("MaxTime", "INFINITE"), ("State", "UP")])
    conf.partition(URGENT_PARTITION, [("Nodes", node_list), ("PriorityTier", 10), ("PreemptMode", "OFF"),
                                      ("MaxTime", "INFINITE"), ("State", "UP")])


def render_slurmdbd_conf(spec: DevClusterSpec, db_password: str, plugin_dir: Path | None = None) -> str:
    """slurmdbd.conf (mode 600: it holds the database password)."""
    plugins = f"PluginDir={plugin_dir}\n" if plugin_dir else ""
    return f"""\
# Written by `slinkyml dev up`. Holds a secret: keep mode 600.
AuthType=auth/munge
AuthInfo=socket={spec.munge_socket}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={spec.jwt_key}
{plugins}DbdHost={spec.controller_host}
DbdAddr={spec.controller_addr}
DbdPort={spec.slurmdbd_port}
SlurmUser=root
PidFile={spec.run}/slurmdbd.pid
LogFile={spec.log}/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={spec.mariadb_port}
StorageUser=slurm
StoragePass={db_password}
StorageLoc=slurm_acct_db
"""


def render_cgroup_conf(version: SlurmVersion, cgroups: bool = True) -> str | None:
    """cgroup.conf: with ``cgroups``, the cgroup v1 plugin on the hierarchies already mounted
    (Debian builds Slurm with multiple-slurmd support, so each slurmd keeps its own
    ``/slurm_<node>`` tree, src/common/cgroup.c), each job held to its memory and CPUs. Without:
    Slurm ≥ 24.05 loads a cgroup plugin in slurmd unless told not to; 22.05 needs no file."""
    if cgroups:
        return ("# Written by `slinkyml dev up`: jobs held to their --mem and CPUs, as on a production node.\n"
                "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=yes\nConstrainRAMSpace=yes\n"
                "ConstrainDevices=no\n")
    if version.cgroup_plugin_can_be_disabled:
        return "# Written by `slinkyml dev up`: no cgroups in the local cluster.\nCgroupPlugin=disabled\n"
    return None


#: the cgroup v1 controllers task/cgroup and proctrack/cgroup use here
CGROUP_CONTROLLERS = ("memory", "cpuset", "freezer")


def cgroups_unusable(mounts: str, writable: Callable[[str], bool]) -> str:
    """Why this machine cannot give slurmd its cgroups (``""``: it can). ``mounts`` is
    /proc/self/mounts; ``writable`` says whether a directory may be written (``os.access``)."""
    mounted = {fields[1]: fields[2] for fields in (line.split() for line in mounts.splitlines()) if len(fields) > 2}
    for controller in CGROUP_CONTROLLERS:
        path = f"/sys/fs/cgroup/{controller}"
        if mounted.get(path) != "cgroup":
            kind = "cgroup v2 only" if mounted.get("/sys/fs/cgroup") == "cgroup2" else f"no cgroup v1 {controller}"
            return f"{kind} at /sys/fs/cgroup (the local cluster drives cgroup v1)"
        if not writable(path):
            return f"{path} is read-only (a container without its own cgroups?)"
    return ""


def gpus_per_node(spec: DevClusterSpec) -> int:
    return max(1, spec.gpus // spec.nodes) if spec.gpus else 0


def render_gres_conf(spec: DevClusterSpec) -> str | None:
    """Split the machine's GPUs over the nodes (shared round-robin when nodes outnumber GPUs); or
    the emulated GRES as counts with no device files (``node_gres``)."""
    if spec.node_gres:
        _, *kind, count = spec.node_gres.split(":")
        gres_type = f" Type={kind[0]}" if kind else ""
        # slurmd's gpu plugin counts a GPU per device file and reports 0 for a bare Count, so each
        # emulated GPU is a tty (a character device every host has): scheduled, bound in
        # CUDA_VISIBLE_DEVICES and accounted, with no GPU behind it
        files = f"/dev/tty[0-{int(count) - 1}]" if int(count) > 1 else "/dev/tty0"
        return ("# Written by `slinkyml dev up`: emulated GPUs (ttys stand in for the device files).\n"
                f"NodeName={spec.node_prefix}[1-{spec.nodes}] Name=gpu{gres_type} File={files}\n")
    if not spec.gpus:
        return None
    per = gpus_per_node(spec)
    lines = ["# Written by `slinkyml dev up`: the machine's GPUs, split over the local nodes."]
    for i, name in enumerate(spec.node_names):
        devices = [(i * per + k) % spec.gpus for k in range(per)]
        files = ",".join(f"/dev/nvidia{d}" for d in devices)
        lines.append(f"NodeName={name} Name=gpu File={files}")
    return "\n".join(lines) + "\n"


def render_plugstack_conf(spec: DevClusterSpec) -> str | None:
    """plugstack.conf for ``spec.spank_plugins`` (each ``required``); None when there are none
    (then the file must not exist: Slurm reads one next to slurm.conf).
    """
    if not spec.spank_plugins:
        return None
    lines = ["# Written by `slinkyml dev up`: SPANK plugins (--spank-plugin, SLINKYML_DEV_SPANK_PLUGINS)."]
    lines += [f"required {plugin}" for plugin in spec.spank_plugins]
    return "\n".join(lines) + "\n"


def render_hosts_block(spec: DevClusterSpec) -> str:
    """The /etc/hosts block that makes node names resolve; its ``# identity`` line is the claim.

    The controller's bridge address is listed: Slurm 24.11's auth/munge resolves each RPC's origin,
    and an unanswered DNS query in a node's namespace waits 10 s.
    """
    body = IDENTITY_LINE + json.dumps(identity(spec), separators=(",", ":")) + "\n"
    body += f"{spec.controller_addr} {spec.controller_alias}\n"
    body += "".join(f"{spec.node_addr(i)} {name}\n" for i, name in enumerate(spec.node_names, start=1))
    return f"{HOSTS_BEGIN} {spec.state_dir}\n{body}{HOSTS_END} {spec.state_dir}\n"


HOSTS_BEGIN = "# BEGIN slinkyml dev cluster"
HOSTS_END = "# END slinkyml dev cluster"
