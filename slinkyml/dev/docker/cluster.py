"""``DockerCluster``: the local Slurm cluster as containers on a Docker network, through testcontainers.

For machines where ``dev up`` cannot run (no root, no network namespaces: a laptop's Docker Desktop, a
Linux user in group ``docker``). One container per daemon — munge, MariaDB, slurmdbd, slurmctld, one per
slurmd node, slurmrestd — and a login container where the cluster's commands run; the images are those
the Kubernetes pods run (``dev/images/slurm_images.py``, loaded with ``docker load``). munged's socket is
a volume every container mounts at ``/run/munge``; the cluster's files are copied in at
``/mnt/slurm`` and installed by ``data/docker/start.sh``. The shared folders (the home and temporary
folders by default) are mounted at their own paths in the login and slurmd containers, so a job's files
come back where it was submitted from; the Python this process runs from is mounted read-only the same
way, so jobs run the host's training stack. The host's Slurm commands are the login container's
(``bin/`` of the state dir, ``data/docker/slurm-client.sh``): see docs/docker-cluster.md.

Testcontainers' reaper (Ryuk) is off: it needs an image from a registry, and the cluster outlives the
process that starts it. ``down`` stops the containers (slurmctld first, so that it saves its state) and
removes what this cluster made in Docker (by its label), then stops an engine it started; slurmctld's
StateSaveLocation and MariaDB's data are folders of the state dir (``data/``), bind-mounted, so the next
``up`` has the jobs and the accounting database, as the netns cluster's does. ``reset`` wipes them too.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import docker
from docker.types import EndpointConfig, IPAMConfig, IPAMPool
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

import slinkyml
from slinkyml import DATA_DIR
from slinkyml.dev.docker.config import (
    CGROUP_CONF,
    KEPT,
    LABEL,
    MARKER,
    RELEASE,
    RESTD_PORT,
    DockerClusterSpec,
    default_state_dir,
    options_from_env,
    render_client_env,
    render_identity,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from slinkyml.dev.docker.engine import Engine, answers
from slinkyml.dev.images import slurm_images
from slinkyml.errors import SlinkyError
from slinkyml.secretfile import write_secret
from slinkyml.slurm import Slurm, records
from slinkyml.slurm.roots import CLIENTS
from slinkyml.slurm.version import SlurmVersion

START_SCRIPT = (DATA_DIR / "docker" / "start.sh").read_text()
CLIENT_SCRIPT = DATA_DIR / "docker" / "slurm-client.sh"
#: the roles in start order (slurmd nodes between slurmctld and slurmrestd)
ROLES = ("munge", "mariadb", "login", "slurmdbd", "slurmctld", "slurmrestd")
#: role -> image component (slurm_images.COMPONENTS); munge runs from the controller's image
IMAGE_OF = {"munge": "slurmctld", "mariadb": "mariadb", "login": "login", "slurmdbd": "slurmdbd",
            "slurmctld": "slurmctld", "slurmrestd": "slurmrestd", "slurmd": "slurmd"}
MUNGE_SOCKET_DIR = "/run/munge"
#: host folders never mounted into the containers for the Python stack (they would hide the image's own)
SYSTEM_FOLDERS = ("/", "/usr", "/usr/local", "/opt", "/bin", "/lib", "/etc", "/var")
READY_TIMEOUT_S = 90.0
#: how long ``down`` waits for a container's daemon to end on SIGTERM before Docker kills it
STOP_TIMEOUT_S = 20
#: where the images' archive is written when root builds it
IMAGES_DIR = Path("/var/lib/slinkyml/images")


class DockerClusterError(SlinkyError):
    """A container did not come up; the message ends with its last log lines."""


@dataclass
class ContainerStatus:
    name: str
    state: str  # running, exited, ... or "absent"

    @property
    def running(self) -> bool:
        return self.state == "running"


class ContainerDaemon:
    """One daemon of the Docker cluster by the netns cluster's name for it (``slurmctld``, ``slurmd-d1``...):
    its container, which tests stop as they stop the netns cluster's process; ``up`` starts it again (the
    kept folders give slurmctld its jobs back and MariaDB its database)."""

    def __init__(self, cluster: DockerCluster, name: str, container: str):
        self.cluster, self.name, self.container = cluster, name, container

    def _get(self) -> Any:
        try:
            return self.cluster.client().containers.get(self.container)
        except docker.errors.NotFound:
            return None

    @property
    def pid(self) -> int | None:
        """The daemon's PID as this machine sees it (Docker's ``State.Pid``: on Linux, the engine's kernel)."""
        found = self._get()
        pid = found.attrs["State"]["Pid"] if found is not None and found.status == "running" else 0
        return pid or None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """``docker stop`` (SIGTERM, then SIGKILL after ``timeout``); False if it was not running. A stopped
        container stays stopped (its restart policy restarts only a daemon that fails)."""
        found = self._get()
        if found is None or found.status != "running":
            return False
        found.stop(timeout=int(timeout))
        return True


class DockerCluster:
    """The Docker cluster of one state dir, with the surface the CLI and tests use of ``LocalCluster``:
    ``up``, ``down``, ``reset``, ``status``, ``spec``, ``slurm``, ``version``, ``token``."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, nodes: int | None = None,
                 keep_running: bool = False, **options: Any):
        state = Path(state_dir or default_state_dir()).absolute()
        self.saved = _read_marker(state)
        saved = {k: (tuple(v) if k == "shares" else v) for k, v in self.saved.items()
                 if k in DockerClusterSpec.__dataclass_fields__ and k != "nodes"}
        given = {k: v for k, v in options.items() if v is not None}
        merged = {**options_from_env(), **saved, **given}
        self.spec = DockerClusterSpec(state_dir=state, nodes=nodes or self.saved.get("nodes") or 4, **merged)
        self.engine = Engine(self.spec.engine_dir)
        self.keep_running = keep_running
        self.cgroup_note = ""
        self._client: docker.DockerClient | None = None
        self._version: SlurmVersion | None = None

    # -- the pieces ------------------------------------------------------------------
    @property
    def slurm(self) -> Slurm:
        """Slurm's commands of this cluster: the login container's, through ``bin/``."""
        return Slurm(self.spec.slurm_conf, bin_dir=str(self.spec.bin_dir))

    @property
    def version(self) -> SlurmVersion:
        """The images' Slurm, as the login container's ``scontrol --version`` says (what ``Slurm.version``
        finds through ``bin/``); while no cluster runs, their release alone."""
        if self._version is None:
            try:
                code, out = self._exec("login", ["scontrol", "--version"])
            except (docker.errors.DockerException, SlinkyError, OSError):
                code, out = 1, ""
            if code != 0:
                return SlurmVersion.parse(f"slurm {RELEASE}.0")
            self._version = SlurmVersion.parse(out.strip())
        return self._version

    @property
    def docker_host(self) -> str | None:
        return self.saved.get("docker_host")

    def client(self, host: str | None = None) -> docker.DockerClient:
        if self._client is None:
            host = host or self.docker_host or self.engine.find()
            if not host:
                raise SlinkyError("no Docker engine answers ($DOCKER_HOST, /var/run/docker.sock)")
            self._client = docker.DockerClient(base_url=host, timeout=120)
        return self._client

    def daemon(self, name: str) -> ContainerDaemon:
        """The daemon of the netns cluster's name ``name``: munged, mariadb, slurmdbd, slurmctld, slurmd-NODE,
        slurmrestd-jwt."""
        role = {"munged": "munge", "slurmrestd-jwt": "slurmrestd"}.get(name, name)
        if role.startswith("slurmd-") and role[len("slurmd-"):] in self.spec.node_names:
            role = role[len("slurmd-"):]
        elif role not in ROLES:
            raise KeyError(name)
        return ContainerDaemon(self, name, self.spec.container(role))

    @property
    def running(self) -> bool:
        """Whether every container of the cluster runs."""
        return bool(self.status()["running"])

    # -- lifecycle -------------------------------------------------------------------
    def up(self) -> DockerCluster:
        """Start whatever is not running; idempotent. On failure remove what was made and raise."""
        s = self.spec
        for share in s.shares:  # Docker would make a missing one, as root, to mount it
            if not os.path.isdir(share):
                raise SlinkyError(f"SLINKYML_DOCKER_SHARES: {share} is not a folder on this machine")
        host, started = self.engine.ensure()
        if self.saved.get("engine_started") and self.engine.running_here():
            started = True  # an earlier `up` started it: `down` stops it
        os.environ["DOCKER_HOST"] = host  # testcontainers' client reads it
        testcontainers_config.ryuk_disabled = True  # the reaper's image needs a registry
        client = self.client(host)
        self._check_unchanged(client)  # before the `try`: a refusal leaves the running cluster alone
        try:
            self._load_images(client)
            password = self._write_files(host, started)
            network = self._network(client)
            self._munge_volume(client)
            # containers that do not wait on each other start side by side (each start is seconds of
            # Docker's work on a loaded machine): munge, MariaDB and login; then the slurmd nodes and slurmrestd
            _together([
                lambda: self._run("munge", network, client, ready=lambda: self._exec_ok(
                    "munge", ["test", "-S", f"{MUNGE_SOCKET_DIR}/munge.socket.2"])),
                # ready when slurmdbd's own first query answers over TCP as its user (a slurmdbd that came
                # sooner failed it: "5027 Number of columns in result (=1) set exceeds maximum allowed")
                lambda: self._run("mariadb", network, client, env={"MARIADB_PASSWORD": password},
                                  ready=lambda: self._exec_ok("mariadb", [
                                      "mariadb", "-h", "127.0.0.1", "-uslurm", f"-p{password}", "-e",
                                      "select @var := concat('')"])),
                lambda: self._run("login", network, client, shared=True, ready=lambda: True)])
            self._run("slurmdbd", network, client, ready=lambda: self._exec_ok(
                "login", ["sacctmgr", "-n", "-P", "list", "cluster"]))
            self._ensure_accounts()
            self._run("slurmctld", network, client, ready=lambda: "is UP" in self._exec(
                "login", ["scontrol", "ping"])[1])
            # seccomp off for slurmrestd as in a pod (Kubernetes' default, Unconfined): it unshares namespaces
            # at start, which Docker's default profile refuses ("Unable to unshare System V namespace")
            _together([
                # CAP_SYS_PTRACE: slurmstepd's accounting reads /proc/PID/io of a job's processes, which
                # another user's are without it (a job not root's had no MaxRSS); Slinky's slurmd pods run
                # privileged
                *(lambda node=node: self._run("slurmd", network, client, node=node, shared=True,
                                              cap_add=["SYS_PTRACE"], ready=lambda: True)
                  for node in s.node_names),
                # SIGINT to stop it: slurmrestd, the container's PID 1, handles no SIGTERM (`down` waited it out)
                lambda: self._run("slurmrestd", network, client, port=(RESTD_PORT, s.restd_port),
                                  security_opt=["seccomp=unconfined"], stop_signal="SIGINT",
                                  ready=lambda: _http_answers(s.restd_port))])
            self._wait_nodes()
        except BaseException:
            if not self.keep_running:
                self.down()
            raise
        return self

    def down(self) -> list[str]:
        """Stop and remove every container, the network and the munge volume of this cluster, then stop an
        engine that its ``up`` started; what was removed. The kept folders (``data/``) stay for the next
        ``up``."""
        removed = self._remove()
        if self.saved.get("engine_started") and self.engine.stop():
            removed.append("dockerd")
        return removed

    def _remove(self) -> list[str]:
        """What this cluster made in Docker, removed: the containers stopped first, slurmctld before the
        others (on SIGTERM it writes its state and its queue of accounting records to StateSaveLocation,
        while slurmdbd still answers), MariaDB by its own shutdown (a clean database for the next ``up``)."""
        removed: list[str] = []
        host = self.docker_host or self.engine.find()
        if host and answers(host):
            client = self.client(host)
            selector = {"label": f"{LABEL}={self.spec.label}"}
            containers = client.containers.list(all=True, filters=selector)
            first = [c for c in containers if c.labels.get(f"{LABEL}.role") == "slurmctld"]
            for step in (first, [c for c in containers if c not in first]):
                _together([partial(_stop, c) for c in step if c.status != "exited"])
            for container in containers:
                container.remove(force=True, v=True)
                removed.append(container.name)
            for network in client.networks.list(filters=selector):
                network.remove()
                removed.append(f"network {network.name}")
            for volume in client.volumes.list(filters=selector):
                volume.remove(force=True)
                removed.append(f"volume {volume.name}")
            client.close()
            self._client = None
        return removed

    def reset(self) -> None:
        """``down``, and the state dir removed with what it kept (jobs, the database)."""
        self._remove()
        self._wipe_kept()
        if self.saved.get("engine_started"):
            self.engine.stop()
        shutil.rmtree(self.spec.state_dir, ignore_errors=True)
        if self.spec.state_dir.exists():
            raise SlinkyError(f"{self.spec.state_dir}: not all removed (files of the containers' users in "
                              f"{self.spec.data_dir}, and no Docker engine answers to remove them): remove it as root")

    def _wipe_kept(self) -> None:
        """Empty ``data/`` from a throw-away container: its files belong to the containers' users (MariaDB's
        to mysql), which a user of group docker cannot remove on this machine."""
        data = self.spec.data_dir
        host = self.docker_host or self.engine.find()
        if not data.is_dir() or not host or not answers(host):
            return  # root removes it with the state dir; else reset says what is left
        client = self.client(host)
        image = slurm_images.image_name(IMAGE_OF["slurmctld"], RELEASE)
        if client.images.list(name=image):
            client.containers.run(image, entrypoint=["find", "/data", "-mindepth", "1", "-delete"], remove=True,
                                  network_mode="none", labels={LABEL: self.spec.label},
                                  volumes={str(data): {"bind": "/data", "mode": "rw"}})
        client.close()
        self._client = None

    def status(self) -> dict[str, Any]:
        s = self.spec
        names = [*(s.container(r) for r in ROLES[:5]), *(s.container(n) for n in s.node_names),
                 s.container("slurmrestd")]
        host = self.docker_host or self.engine.find()
        states: dict[str, str] = dict.fromkeys(names, "absent")
        if host and answers(host):
            for container in self.client(host).containers.list(all=True, filters={"label": f"{LABEL}={s.label}"}):
                states[container.name] = container.status
        containers = [ContainerStatus(name, states[name]) for name in names]
        nodes: dict[str, str] = {}
        if all(c.running for c in containers):
            rows = records.sinfo(self.slurm, ("NodeList", "StateLong"), ["-N"], check=False, retries=0, timeout=20)
            nodes = {row["NodeList"]: row["StateLong"] for row in rows}
        return {"version": str(self.version), "state_dir": str(s.state_dir), "docker_host": host,
                "engine_started_here": self.engine.running_here(), "containers": containers, "nodes": nodes,
                "running": bool(containers) and all(c.running for c in containers)}

    def token(self, user: str = "root", lifespan: int = 3600) -> str:
        """A JWT for slurmrestd (``scontrol token`` in the login container)."""
        out = self.slurm.run("scontrol", ["token", f"username={user}", f"lifespan={lifespan}"]).stdout
        for part in out.split():
            if part.startswith("SLURM_JWT="):
                return part.split("=", 1)[1]
        raise SlinkyError("scontrol token printed no SLURM_JWT")

    def __enter__(self) -> DockerCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        if not self.keep_running:
            self.down()

    # -- steps -----------------------------------------------------------------------
    def _load_images(self, client: docker.DockerClient) -> None:
        ensure_images(client)

    def _check_unchanged(self, client: docker.DockerClient) -> None:
        """A running cluster keeps the files its containers were made with: other settings (nodes, CPUs,
        memory) take a ``down`` first, said in one line rather than half applied."""
        s = self.spec
        if not s.slurm_conf.exists() or s.slurm_conf.read_text() == render_slurm_conf(s):
            return
        if client.containers.list(all=True, filters={"label": f"{LABEL}={s.label}"}):
            raise SlinkyError(f"{s.state_dir}: the Docker cluster runs with other settings (nodes, CPUs, memory): "
                              "`slinkyml dev down --docker` first")

    def _write_files(self, docker_host: str, engine_started: bool) -> str:
        """The state dir's files; the database password."""
        s = self.spec
        s.etc.mkdir(parents=True, exist_ok=True)
        s.bin_dir.mkdir(parents=True, exist_ok=True)
        for name, size in (("munge.key", 1024), ("jwt_hs256.key", 64)):
            if not (s.etc / name).exists():
                write_secret(s.etc / name, secrets.token_bytes(size))
        password_file = s.etc / "db_password"
        if not password_file.exists():
            write_secret(password_file, secrets.token_hex(16).encode())
        password = password_file.read_text().strip()
        for folder, _inside in KEPT.values():  # made here, as the caller: Docker would make one as root
            (s.data_dir / folder).mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(s.slurm_conf, render_slurm_conf(s), 0o644)
        _write(s.etc / "slurmdbd.conf", render_slurmdbd_conf(password), 0o600)
        _write(s.etc / "cgroup.conf", CGROUP_CONF, 0o644)
        _write(s.bin_dir / "docker-cluster.env", render_client_env(s, docker_host), 0o644)
        client = s.bin_dir / "slurm-client.sh"
        _write(client, CLIENT_SCRIPT.read_text(), 0o755)
        for name in CLIENTS:
            link = s.bin_dir / name
            if not link.is_symlink():
                link.unlink(missing_ok=True)
                link.symlink_to(client.name)
        _write(s.state_dir / MARKER, render_identity(s, docker_host, engine_started), 0o644)
        self.saved = _read_marker(s.state_dir)
        return password

    def _network(self, client: docker.DockerClient) -> Network:
        """The cluster's network (testcontainers' Network, under the cluster's name): made once."""
        s = self.spec
        net = Network(docker_network_kw={
            "driver": "bridge", "labels": {LABEL: s.label},
            "ipam": IPAMConfig(pool_configs=[IPAMPool(subnet=s.subnet)]),
            "options": {"com.docker.network.bridge.name": s.bridge}})
        net.name = s.network
        existing = client.networks.list(names=[s.network])
        if existing:
            net._network = existing[0]
        else:
            net.create()
        return net

    def _munge_volume(self, client: docker.DockerClient) -> None:
        if not client.volumes.list(filters={"name": self.spec.munge_volume}):
            client.volumes.create(self.spec.munge_volume, labels={LABEL: self.spec.label})

    def _run(self, role: str, network: Network, client: docker.DockerClient, *, ready: Callable[[], bool],
             node: str | None = None, shared: bool = False, env: dict[str, str] | None = None,
             port: tuple[int, int] | None = None, security_opt: list[str] | None = None,
             cap_add: list[str] | None = None, stop_signal: str | None = None) -> None:
        """Start one container (testcontainers' DockerContainer) unless it runs; wait until ``ready``."""
        s = self.spec
        name = s.container(node or role)
        found = client.containers.list(all=True, filters={"name": f"^{name}$"})
        if found and found[0].status == "running":
            return
        for old in found:
            old.remove(force=True)
        image = slurm_images.image_name(IMAGE_OF[role], RELEASE)
        host = node or role
        endpoint = EndpointConfig(docker.__version__, aliases=[host], ipv4_address=s.address(host))
        container = (DockerContainer(image)
                     .with_name(name)
                     .with_volume_mapping(s.munge_volume, MUNGE_SOCKET_DIR, "rw")
                     .with_envs(SLINKYML_USERS=_users(s), **(env or {}))
                     # the network with the container's fixed address (testcontainers' with_network takes no
                     # address), every other container's in /etc/hosts; a daemon that exits is started again, as
                     # Kubernetes restarts a pod's container
                     .with_kwargs(hostname=host, labels={LABEL: s.label, f"{LABEL}.role": role},
                                  network=network.name, networking_config={network.name: endpoint},
                                  extra_hosts=s.hosts,
                                  restart_policy={"Name": "on-failure", "MaximumRetryCount": 5},
                                  entrypoint=["bash", "-c", START_SCRIPT, "start.sh"],
                                  **({"security_opt": security_opt} if security_opt else {}),
                                  **({"cap_add": cap_add} if cap_add else {}),
                                  **({"stop_signal": stop_signal} if stop_signal else {})))
        container.with_command([role, *([node] if node else [])])
        for file in ("slurm.conf", "slurmdbd.conf", "cgroup.conf", "jwt_hs256.key", "munge.key"):
            container.with_copy_into_container(s.etc / file, f"/mnt/slurm/{file}", 0o600)
        kept = s.kept(role)
        if kept:  # what `down` keeps (StateSaveLocation, the database): start.sh gives it to the daemon's user
            container.with_volume_mapping(str(kept[0]), kept[1], "rw")
        if port:  # on the loopback only, as the netns cluster's slurmrestd (with_bind_ports takes no address)
            container.ports[f"{port[0]}/tcp"] = ("127.0.0.1", port[1])  # type: ignore[assignment]
        if shared:
            for host_path, mode in _mounts(s):
                container.with_volume_mapping(host_path, host_path, mode)
        container.start()
        self._wait(name, ready)

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            container = self.client().containers.get(name)
            if container.status not in ("created", "running", "restarting"):
                break
            try:
                if ready():
                    return
            except (OSError, docker.errors.DockerException):
                pass
            time.sleep(0.3)
        container = self.client().containers.get(name)
        tail = container.logs(tail=12).decode(errors="replace").rstrip()
        why = f"exited ({container.status})" if container.status != "running" else f"not ready after {timeout:g} s"
        raise DockerClusterError(f"container {name} {why}; its last log lines:\n{tail}")

    def _exec(self, role: str, argv: list[str]) -> tuple[int, str]:
        code, out = self.client().containers.get(self.spec.container(role)).exec_run(argv, demux=False)
        return code, (out or b"").decode(errors="replace")

    def _exec_ok(self, role: str, argv: list[str]) -> bool:
        return self._exec(role, argv)[0] == 0

    def _sacctmgr_add(self, *args: str) -> None:
        code, out = self._exec("login", ["sacctmgr", "-i", "add", *args])
        if code != 0 and not any(m in out for m in ("Nothing new added", "Nothing added", "Already existing", "already exists")):
            raise DockerClusterError(f"sacctmgr add {' '.join(args)}: {out.strip()}")

    def _ensure_accounts(self) -> None:
        """The netns cluster's account tree, and the host user who runs ``up`` in account ml."""
        s = self.spec
        self._sacctmgr_add("cluster", s.cluster_name)
        for account, parent, share, _users in s.accounts:
            self._sacctmgr_add("account", account, f"cluster={s.cluster_name}", f"parent={parent}",
                               f"fairshare={share}", f"description={account}", f"organization={account}")
        me = pwd.getpwuid(os.getuid()).pw_name
        for account, _parent, _share, users in s.accounts:
            for user in users:
                self._sacctmgr_add("user", user, f"account={account}", f"cluster={s.cluster_name}")
        if me not in s.users:
            self._sacctmgr_add("user", me, "account=ml", f"cluster={s.cluster_name}")

    def _wait_nodes(self, timeout: float = READY_TIMEOUT_S) -> None:
        wanted = set(self.spec.node_names)
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            code, out = self._exec("login", ["sinfo", "-h", "-N", "-o", "%N %T"])
            states = dict(line.split(None, 1) for line in out.splitlines() if len(line.split()) == 2)
            if code == 0 and wanted <= {n for n, st in states.items()
                                        if st.rstrip("*~#") in ("idle", "mixed", "allocated") and "*" not in st}:
                return
            time.sleep(0.3)
        raise DockerClusterError(f"slurmd nodes not ready after {timeout:g} s: {states}")


def _together(steps: list[Callable[[], None]]) -> None:
    """Run the steps side by side; the first one's error is raised once all have ended."""
    if not steps:
        return
    with ThreadPoolExecutor(max_workers=min(8, len(steps))) as pool:
        futures = [pool.submit(step) for step in steps]
    for future in futures:
        future.result()


def _stop(container: Any) -> None:
    container.stop(timeout=STOP_TIMEOUT_S)


def ensure_images(client: docker.DockerClient) -> None:
    """The images of every role in the engine: loaded (``docker load``) from the archive built from the
    Debian root once, by root (the root and its apt need it); a user finds them there."""
    wanted = {slurm_images.image_name(c, RELEASE) for c in set(IMAGE_OF.values())}
    have = {tag for image in client.images.list() for tag in image.tags}
    if wanted <= have:
        return
    if os.geteuid() != 0:
        raise SlinkyError(f"the Slurm {RELEASE} images are not in the Docker engine, and building them needs "
                          "root (a Debian root and apt): run `sudo slinkyml dev up --docker` once")
    archive, _digests = slurm_images.build(RELEASE, IMAGES_DIR, docker=True)
    with open(archive, "rb") as data:
        client.images.load(data)
    missing = wanted - {tag for image in client.images.list() for tag in image.tags}
    if missing:
        raise SlinkyError(f"{archive}: docker load left out {', '.join(sorted(missing))}")


def _users(spec: DockerClusterSpec) -> str:
    """``name:uid:gid`` of the host user running ``up`` and of the accounts' users that exist on the host."""
    found = []
    for name in dict.fromkeys([pwd.getpwuid(os.getuid()).pw_name, *spec.users]):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            found.append(f"{name}:{entry.pw_uid}:{entry.pw_gid}")
    return ",".join(found)


def _mounts(spec: DockerClusterSpec) -> list[tuple[str, str]]:
    """The shared folders (read-write) and the Python stack this process runs from (read-only), each at its
    own path; a stack folder inside a shared one or a system folder is left out."""
    mounts = [(share, "rw") for share in spec.shares]
    source = str(Path(slinkyml.__file__).resolve().parents[1])
    for path in sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), source}):
        if path in SYSTEM_FOLDERS or any(path == s or path.startswith(s.rstrip("/") + "/") for s in spec.shares):
            continue
        mounts.append((path, "ro"))
    return mounts


def _http_answers(port: int) -> bool:
    """Whether an HTTP server answers on 127.0.0.1:``port`` (the published port's proxy listens before
    slurmrestd does: an open port says nothing)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/openapi/v3")
        return conn.getresponse().status > 0
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _write(path: Path, text: str, mode: int) -> None:
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _read_marker(state_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((state_dir / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_docker_state(state_dir: Path) -> bool:
    """Whether ``state_dir`` is a Docker cluster's (its ``up`` wrote the marker)."""
    return (state_dir / MARKER).is_file()
