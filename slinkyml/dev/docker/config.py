"""The Docker cluster's specification and the files rendered from it (pure: nothing here touches Docker).

The cluster is the netns cluster's (munge, MariaDB, slurmdbd, slurmctld, N slurmd, slurmrestd; the same
accounts, partitions and job-credential lifetime), one container per daemon on a network of its own,
from the Slurm 26.05 images the Kubernetes pods run (``dev/images/slurm_images.py``). Names resolve by
Docker's embedded DNS: each container answers to its role (``slurmctld``, ``slurmdbd``, ``mariadb``) or
its node name on the cluster's network.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slinkyml.config import dev_state_dir
from slinkyml.dev.slurm.config import CRED_EXPIRE_S, DEFAULT_ACCOUNTS, check_subnet
from slinkyml.errors import SpecError
from slinkyml.slurm.conf import SlurmConfBuilder

#: the Slurm release the images hold (the only one built as images: slurm_images.py)
RELEASE = "26.05"
#: the file that marks a state dir as a Docker cluster's (``dev down``/``env``/``status`` find it)
MARKER = "docker-cluster.json"
LABEL = "io.slinkyml.docker-cluster"
SLURMCTLD_PORT, SLURMD_PORT, SLURMDBD_PORT, RESTD_PORT, MARIADB_PORT = 6817, 6818, 6819, 6820, 3306
#: ``SLINKYML_DOCKER_*`` variable -> DockerClusterSpec field
ENV_OPTIONS = {"SLINKYML_DOCKER_NAME": "name", "SLINKYML_DOCKER_SUBNET": "subnet",
               "SLINKYML_DOCKER_BRIDGE": "bridge", "SLINKYML_DOCKER_RESTD_PORT": "restd_port",
               "SLINKYML_DOCKER_SHARES": "shares"}
MAX_NODES = 64
#: role -> its address's offset on the cluster's subnet (nodes from .11)
ROLE_ADDRESSES = {"munge": 2, "mariadb": 3, "login": 4, "slurmdbd": 5, "slurmctld": 6, "slurmrestd": 7}
#: what a ``down`` keeps, as the netns cluster does: role -> (folder under the state dir's ``data/``, where
#: the container has it): slurmctld's StateSaveLocation (jobs, the next job id, its accounting queue) and
#: MariaDB's data folder (the accounting database; the mariadb image's own path)
KEPT = {"slurmctld": ("slurmctld", "/var/spool/slurmctld"), "mariadb": ("mariadb", "/var/lib/mariadb")}


def default_state_dir() -> Path:
    """``$SLINKYML_DOCKER_STATE_DIR``; for root ``/var/lib/slinkyml/dev-docker``, else
    ``~/.local/state/slinkyml/dev-docker``: never the netns cluster's."""
    return dev_state_dir("SLINKYML_DOCKER_STATE_DIR", "dev-docker")


def default_shares() -> tuple[str, ...]:
    """Folders mounted at their own paths in the login and slurmd containers: the home folder and the
    temporary folder (where jobs' files are written and read back)."""
    import tempfile  # lazy: its imports cost every command that never builds a spec

    found = {os.path.realpath(os.path.expanduser("~")), os.path.realpath(tempfile.gettempdir())}
    # a folder that is not there is left out: Docker would make it, as root, to mount it
    return tuple(sorted(f for f in found if os.path.isdir(f)))


@dataclass(frozen=True)
class DockerClusterSpec:
    """What ``dev up --docker`` builds; every default works beside CI's clusters (network 10.233.0.0/24,
    bridge ``slkdock0``, slurmrestd on 127.0.0.1:16820)."""

    state_dir: Path
    nodes: int = 4
    cpus_per_node: int = 4
    memory_mb_per_node: int = 4096
    cluster_name: str = "slinkyml"
    #: prefix of the containers', network's and volume's names
    name: str = "slinkyml-dev"
    subnet: str = "10.233.0.0/24"
    bridge: str = "slkdock0"
    restd_port: int = 16820
    node_prefix: str = "d"
    shares: tuple[str, ...] = ()
    accounts: tuple[tuple[str, str, int, tuple[str, ...]], ...] = DEFAULT_ACCOUNTS

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, int) or not 1 <= self.nodes <= MAX_NODES:
            raise SpecError("--nodes", f"must be an integer from 1 to {MAX_NODES}, got {self.nodes!r}")
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", self.name):
            raise SpecError("SLINKYML_DOCKER_NAME", f"lowercase letters, digits and '-', got {self.name!r}")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,15}", self.bridge):
            raise SpecError("SLINKYML_DOCKER_BRIDGE", f"an interface name (≤ 15 chars), got {self.bridge!r}")
        check_subnet("SLINKYML_DOCKER_SUBNET", self.subnet, self.nodes)
        if not 1024 <= self.restd_port <= 65535:
            raise SpecError("SLINKYML_DOCKER_RESTD_PORT", f"must be 1024-65535, got {self.restd_port}")
        shares = tuple(self.shares) or default_shares()
        for share in shares:
            if not os.path.isabs(share):
                raise SpecError("SLINKYML_DOCKER_SHARES", f"an absolute folder, got {share!r}")
        object.__setattr__(self, "shares", tuple(sorted({os.path.realpath(s) for s in shares})))

    # -- names -----------------------------------------------------------------------
    def container(self, role: str) -> str:
        return f"{self.name}-{role}"

    @property
    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}{i}" for i in range(1, self.nodes + 1)]

    def address(self, host: str) -> str:
        """A role's or node's fixed address on the network (the gateway is .1): every container lists all
        of them in /etc/hosts, so no name waits on DNS (Docker's resolver forwards an unknown name upstream,
        and a slurmctld that resolved its nodes before their containers ran waited 10 s a name)."""
        base = ipaddress.ip_network(self.subnet).network_address
        if host in ROLE_ADDRESSES:
            return str(base + ROLE_ADDRESSES[host])
        return str(base + 10 + self.node_names.index(host) + 1)

    @property
    def hosts(self) -> dict[str, str]:
        return {host: self.address(host) for host in (*ROLE_ADDRESSES, *self.node_names)}

    @property
    def network(self) -> str:
        return self.name

    @property
    def munge_volume(self) -> str:
        return f"{self.name}-munge"

    @property
    def label(self) -> str:
        """The value of :data:`LABEL` on everything this cluster makes in Docker: its state dir."""
        return str(self.state_dir)

    # -- the netns cluster's names for the same things (tests and callers read either spec) --------
    @property
    def slurmctld_port(self) -> int:
        return SLURMCTLD_PORT

    @property
    def slurmd_port(self) -> int:
        return SLURMD_PORT

    @property
    def slurmdbd_port(self) -> int:
        return SLURMDBD_PORT

    @property
    def slurmrestd_port(self) -> int:
        return self.restd_port

    # -- paths -----------------------------------------------------------------------
    @property
    def etc(self) -> Path:
        return self.state_dir / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def slurm_conf_in_jobs(self) -> str:
        """The slurm.conf a job's tasks see (``SLURM_CONF``): the containers' copy."""
        return "/etc/slurm/slurm.conf"

    @property
    def data_dir(self) -> Path:
        """What ``down`` keeps and ``reset`` wipes (:data:`KEPT`), bind-mounted into its containers."""
        return self.state_dir / "data"

    def kept(self, role: str) -> tuple[Path, str] | None:
        """``role``'s kept folder on this machine and in its container; ``None`` for a role with none."""
        if role not in KEPT:
            return None
        folder, inside = KEPT[role]
        return self.data_dir / folder, inside

    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def engine_dir(self) -> Path:
        return self.state_dir / "engine"

    @property
    def restd_url(self) -> str:
        return f"http://127.0.0.1:{self.restd_port}"

    @property
    def restd_socket(self) -> Path:
        """No unix-socket slurmrestd here (26.05 refuses root): a path that never exists, for callers
        that test for one."""
        return self.state_dir / "no-slurmrestd.sock"

    @property
    def users(self) -> list[str]:
        seen: list[str] = []
        for _account, _parent, _share, users in self.accounts:
            seen += [u for u in users if u not in seen]
        return seen


def options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """DockerClusterSpec keyword arguments from the ``SLINKYML_DOCKER_*`` variables that are set."""
    env = os.environ if environ is None else environ
    options: dict[str, object] = {}
    for var, name in ENV_OPTIONS.items():
        value = env.get(var, "").strip()
        if not value:
            continue
        if name == "restd_port":
            if not value.isdigit():
                raise SpecError(var, f"a port number, got {value!r}")
            options[name] = int(value)
        elif name == "shares":
            options[name] = tuple(p for p in value.split(":") if p)
        else:
            options[name] = value
    return options


#: fields saved in the marker, so that ``down`` finds the cluster whatever the environment says then
IDENTITY_FIELDS = ("nodes", "cpus_per_node", "memory_mb_per_node", "name", "subnet", "bridge", "restd_port",
                   "node_prefix", "shares")


def render_identity(spec: DockerClusterSpec, docker_host: str, engine_started: bool) -> str:
    data = {name: getattr(spec, name) for name in IDENTITY_FIELDS}
    return json.dumps({**data, "shares": list(spec.shares), "docker_host": docker_host,
                       "engine_started": engine_started}, indent=1) + "\n"


def render_slurm_conf(spec: DockerClusterSpec) -> str:
    """slurm.conf inside the containers: the netns cluster's settings, hosts by their names on the network,
    no cgroups (a container's /sys/fs/cgroup is not slurmd's to divide), logs to the containers' stderr."""
    conf = SlurmConfBuilder().comment("Written by `slinkyml dev up --docker`; read at /etc/slurm in the containers.")
    conf.set_all([
        ("ClusterName", spec.cluster_name), ("SlurmctldHost", "slurmctld"),
        ("SlurmctldPort", SLURMCTLD_PORT), ("SlurmdPort", SLURMD_PORT),
        ("SlurmUser", "root"), ("SlurmdUser", "root"), ("AuthType", "auth/munge"),
        ("AuthInfo", f"cred_expire={CRED_EXPIRE_S}"),
        ("AuthAltTypes", "auth/jwt"), ("AuthAltParameters", "jwt_key=/etc/slurm/jwt_hs256.key"),
        ("StateSaveLocation", KEPT["slurmctld"][1]), ("SlurmdSpoolDir", "/var/spool/slurmd"),
        ("SlurmctldPidFile", "/run/slurmctld.pid"), ("SlurmdPidFile", "/run/slurmd.pid"),
        ("SlurmctldDebug", "info"), ("SlurmdDebug", "info"), ("SlurmdParameters", "config_overrides"),
        ("ProctrackType", "proctrack/linuxproc"), ("TaskPlugin", "task/none"), ("MpiDefault", "none"),
        ("SelectType", "select/cons_tres"), ("SelectTypeParameters", "CR_Core_Memory"), ("DefMemPerCPU", 512),
        ("PriorityType", "priority/multifactor"), ("PriorityWeightFairshare", 10000),
        ("PriorityWeightAge", 1000), ("PriorityWeightJobSize", 0), ("PriorityDecayHalfLife", "7-0"),
        ("PriorityCalcPeriod", 1), ("JobAcctGatherType", "jobacct_gather/linux"),
        ("JobAcctGatherFrequency", "task=1"), ("AccountingStorageType", "accounting_storage/slurmdbd"),
        ("AccountingStorageHost", "slurmdbd"), ("AccountingStoragePort", SLURMDBD_PORT),
        ("AccountingStorageEnforce", "associations,limits,qos"),
        ("JobCompType", "jobcomp/none"), ("SchedulerParameters", "batch_sched_delay=0"), ("ReturnToService", 2),
        ("SlurmdTimeout", 60), ("KillWait", 10), ("InactiveLimit", 0), ("MinJobAge", 300),
        ("MaxArraySize", 1001),
    ])
    for name in spec.node_names:
        conf.node(name, [("NodeAddr", spec.address(name)), ("CPUs", spec.cpus_per_node), ("RealMemory", spec.memory_mb_per_node),
                         ("State", "UNKNOWN")])
    nodes = ",".join(spec.node_names)
    conf.partition("debug", [("Nodes", nodes), ("Default", "YES"), ("MaxTime", "INFINITE"), ("State", "UP")])
    conf.partition("short", [("Nodes", nodes), ("MaxTime", "00:30:00"), ("State", "UP")])
    return conf.build().text()


def render_slurmdbd_conf(db_password: str) -> str:
    """slurmdbd.conf (installed 0600 in the container: it holds the database password)."""
    return "".join(f"{k}={v}\n" for k, v in [
        ("AuthType", "auth/munge"), ("AuthAltTypes", "auth/jwt"),
        ("AuthAltParameters", "jwt_key=/etc/slurm/jwt_hs256.key"), ("DbdHost", "slurmdbd"),
        ("DbdPort", SLURMDBD_PORT), ("SlurmUser", "root"), ("PidFile", "/run/slurmdbd.pid"), ("DebugLevel", "info"),
        ("StorageType", "accounting_storage/mysql"), ("StorageHost", "mariadb"), ("StoragePort", MARIADB_PORT),
        ("StorageUser", "slurm"), ("StoragePass", db_password), ("StorageLoc", "slurm_acct_db")])


CGROUP_CONF = "# Written by `slinkyml dev up --docker`: no cgroups in the containers' cluster.\nCgroupPlugin=disabled\n"


def render_client_env(spec: DockerClusterSpec, docker_host: str) -> str:
    """``bin/docker-cluster.env``, which the client commands (``slurm-client.sh``) source."""
    return (f"LOGIN={spec.container('login')}\nDOCKER_HOST={docker_host}\n"
            f"SHARED_FOLDERS={':'.join(spec.shares)}\n")
