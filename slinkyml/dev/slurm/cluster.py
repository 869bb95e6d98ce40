"""``LocalCluster``: a real multi-node Slurm cluster on one machine, for the demo and the tests.

Host daemons plus one slurmd per node in its own network/UTS namespace; PID files in the state dir.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import subprocess
import time
from collections.abc import Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from slinkyml import DATA_DIR
from slinkyml.config import default_state_dir
from slinkyml.dev.slurm import network, ownership, roots
from slinkyml.dev.slurm.config import (
    LISTED_NODES,
    DevClusterSpec,
    cgroups_unusable,
    options_from_env,
    render_cgroup_conf,
    render_gres_conf,
    render_identity,
    render_node_addresses,
    render_plugstack_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    saved_node_addresses,
)
from slinkyml.errors import SlinkyError
from slinkyml.process import Daemon, cmdline, is_alive, port_in_use, port_open, unix_connectable
from slinkyml.secretfile import write_secret
from slinkyml.slurm import Slurm, SlurmError, records
from slinkyml.slurm.roots import MULTIARCH, SYSTEM, SlurmInstall, find
from slinkyml.slurm.version import SlurmVersion

#: binary → Debian package that provides it: "slurm" (the system Slurm's; a root brings its own), "other"
BINARIES = json.loads((DATA_DIR / "dev_binaries.json").read_text())
SYSTEM_SLURM_CONF = Path("/etc/slurm/slurm.conf")
#: how long a port may stay taken by a daemon that was just killed before `up` calls it taken
PORT_RELEASE_S = 10.0
#: Where Slurm's plugins live (Debian multiarch, RPM and source-build layouts).
PLUGIN_DIR_GLOBS = ("/usr/lib/*/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm", "/usr/local/lib/slurm")


#: slurmd stopped at once by ``down``
STOP_THREADS = 32
#: munged worker threads on clusters larger than LISTED_NODES (its default is 2)
MUNGE_THREADS_LARGE = 16
MUNGE_NICE_LARGE = -10


def missing_plugins(globs: tuple[str, ...] = PLUGIN_DIR_GLOBS) -> list[str]:
    """Plugins the cluster needs beyond the binaries, as "what (Debian package)" strings.

    Debian 13's ``slurm-wlm`` does not pull in ``auth/jwt``, without which slurmdbd dies at start.
    """
    for pattern in globs:
        for directory in sorted(glob.glob(pattern)):
            plugins = Path(directory)
            if (plugins / "auth_munge.so").exists():
                if (plugins / "auth_jwt.so").exists():
                    return []
                return ["auth/jwt plugin (Debian package slurm-wlm-jwt-plugin)"]
    return []  # an unknown layout: the daemons will say what they miss


class ClusterStartError(SlinkyError):
    """A daemon failed to start; the message ends with the last lines of its log."""


class ClusterUnhealthy(ClusterStartError):
    """The daemons run, but Slurm cannot run jobs as asked: nodes drained for a reason of Slurm's
    own (``Duplicate jobid`` after a controller crash...) or jobs it put on hold. Nothing is stopped."""


#: drain reasons the dev cluster's own lifecycle leaves (a slurmd killed or restarted under a job):
#: ``up`` returns such nodes to service; any other drain is Slurm telling us something, and reported
LIFECYCLE_DRAIN_REASONS = ("Kill task failed", "Not responding", "Node unexpectedly rebooted", "slinkyml")


@dataclass
class DaemonStatus:
    name: str
    pid: int | None
    log: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


def detect_gpus() -> int:
    """Number of NVIDIA GPUs (``nvidia-smi -L``), 0 where there are none or no driver."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def detect_version() -> SlurmVersion:
    """The installed Slurm, from the daemon (clients need a config before they print a version)."""
    return SlurmInstall().version()


class LocalCluster:
    """The local Slurm cluster. Use as a context manager or call :meth:`up` / :meth:`down`.

    >>> with LocalCluster(nodes=2) as cluster:        # doctest: +SKIP
    ...     cluster.slurm.run("srun", ["-N2", "hostname"]).stdout
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, nodes: int | None = None,
                 keep_running: bool = False, quiet: bool = True, **options):
        """``options`` are :class:`DevClusterSpec` fields; a None value means "the default".

        Explicit arguments win, then the state dir's saved identity (so ``down`` finds that cluster
        whatever the environment says), then ``SLINKYML_DEV_*`` variables, then the defaults.
        """
        state = Path(state_dir or default_state_dir()).absolute()
        self.saved = _saved_identity(state)
        given = {k: v for k, v in options.items() if v is not None}
        # the munge socket is not a choice but the rule of default_munge_socket: a cluster saved on
        # another (munge's system socket, before per-cluster sockets) moves at its next up
        saved = {k: v for k, v in ownership.identity_options(self.saved).items() if k != "munge_socket_path"}
        options = {**options_from_env(), **saved, **given}
        options.setdefault("node_addresses", saved_node_addresses(state))
        gpus = options.pop("gpus", None)
        if nodes is None:
            nodes = self.saved.get("nodes") or 4
        self.spec = DevClusterSpec(state_dir=state, nodes=nodes, gpus=detect_gpus() if gpus is None else gpus,
                                   **options)
        self.keep_running = keep_running
        self.quiet = quiet
        self._started_here = False
        #: one line when the cluster cannot enforce memory and CPUs here (``dev up`` prints it)
        self.cgroup_note = ""

    # -- the pieces --------------------------------------------------------------------
    @property
    def slurm(self) -> Slurm:
        return Slurm(self.spec.slurm_conf, bin_dir=None if self.install.is_system else str(self.spec.bin_dir))

    @property
    def install(self) -> SlurmInstall:
        """The Slurm this cluster runs (``--slurm-version``); its root is built by :meth:`up`."""
        return find(self.spec.slurm_version)

    @property
    def version(self) -> SlurmVersion:
        if not hasattr(self, "_version"):
            self._version = self.install.version()
        return self._version

    def _daemons(self) -> list[Daemon]:
        s = self.spec
        slurm = self.install.program
        pids = s.run / "daemons"
        env_slurm = {**os.environ, "SLURM_CONF": str(s.slurm_conf), "TZ": "UTC"}
        # a large step's slurmstepds all ask munge at once: more threads (Slurm advises ≥10) and a
        # higher CPU priority, or munged refuses them and the step fails
        large = s.nodes > LISTED_NODES
        large_priority = ["nice", "-n", str(MUNGE_NICE_LARGE)] if large else []
        daemons = [
            Daemon("munged", [*large_priority, "munged", "-F", f"--socket={s.munge_socket}",
                              f"--key-file={s.etc / 'munge' / 'munge.key'}",
                              f"--pid-file={s.run / 'munge' / 'munged.pid'}",
                              f"--log-file={s.log / 'munged.log'}",
                              f"--seed-file={s.run / 'munge' / 'munged.seed'}", "--force",
                              # a fixed origin that /etc/hosts names (see render_hosts_block), not
                              # whatever the machine's hostname resolves to (or 0.0.0.0 if nothing)
                              f"--origin={s.controller_addr}",
                              *([f"--num-threads={MUNGE_THREADS_LARGE}"] if large else [])],
                   pid_file=pids / "munged.pid", log_file=s.log / "munged.out", match="munged"),
            Daemon("mariadb", ["mariadbd", "--no-defaults", f"--datadir={s.state_dir / 'mariadb'}",
                               "--user=root", f"--socket={s.mariadb_socket}", f"--port={s.mariadb_port}",
                               "--bind-address=127.0.0.1", "--skip-name-resolve", f"--tmpdir={s.mariadb_tmp}",
                               f"--pid-file={s.run / 'mariadb.pid'}", f"--log-error={s.log / 'mariadb.log'}",
                               "--innodb-buffer-pool-size=1024M", "--innodb-lock-wait-timeout=900",
                               "--innodb-log-file-size=64M", "--max-connections=200"],
                   pid_file=pids / "mariadb.pid", log_file=s.log / "mariadb.log", match="mariadbd"),
            Daemon("slurmdbd", [slurm("slurmdbd"), "-D"], env=env_slurm,
                   pid_file=pids / "slurmdbd.pid", log_file=s.log / "slurmdbd.log"),
            Daemon("slurmctld", [slurm("slurmctld"), "-D", "-i", "-f", str(s.slurm_conf)], env=env_slurm,
                   pid_file=pids / "slurmctld.pid", log_file=s.log / "slurmctld.log"),
        ]
        # a root's slurmd gets its own slurmstepd (the compiled-in path is the machine's)
        stepd = [] if self.install.is_system else ["-d", slurm("slurmstepd")]
        for node in s.node_names:
            argv = network.node_command(s, node, [slurm("slurmd"), "-D", "-N", node, "-f", str(s.slurm_conf),
                                                  *stepd])
            daemons.append(Daemon(f"slurmd-{node}", argv, env=env_slurm, pid_file=pids / f"slurmd-{node}.pid",
                                  log_file=s.log / f"slurmd-{node}.log", match="slurmd"))
        # slurmrestd as root needs disable_user_check, which 26.05 refuses (and its become_user mode
        # refuses SlurmUser, root here): there only the JWT one runs, as an unprivileged user
        # (a root's release from its name: `down` works even when its programs are gone)
        release = self.version if self.install.is_system else SlurmVersion.parse(self.install.release)
        refuses_root = release.restd_refuses_root
        restd_env = {**env_slurm, "SLURMRESTD_SECURITY": "disable_user_check"}
        if not refuses_root:
            daemons.append(Daemon("slurmrestd-unix", [slurm("slurmrestd"), "-f", str(s.slurm_conf), "-a",
                                                      "rest_auth/local", f"unix:{s.restd_socket}"], env=restd_env,
                                  pid_file=pids / "slurmrestd-unix.pid", log_file=s.log / "slurmrestd-unix.log",
                                  match="slurmrestd"))
        unprivileged = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if refuses_root else []
        daemons.append(Daemon("slurmrestd-jwt", [*unprivileged, slurm("slurmrestd"), "-f", str(s.slurm_conf), "-a",
                                                 "rest_auth/jwt", f"127.0.0.1:{s.slurmrestd_port}"],
                              env={**(env_slurm if refuses_root else restd_env), "SLURM_JWT": "daemon"},
                              pid_file=pids / "slurmrestd-jwt.pid", log_file=s.log / "slurmrestd-jwt.log",
                              match="slurmrestd"))
        return daemons

    def daemon(self, name: str) -> Daemon:
        for d in self._daemons():
            if d.name == name:
                return d
        raise KeyError(name)

    # -- lifecycle -----------------------------------------------------------------------
    def up(self) -> LocalCluster:
        """Start whatever is not running; idempotent. On failure stop everything and raise."""
        self._check_release()
        self._preflight()
        self._check_cgroups()
        daemons = {d.name: d for d in self._daemons()}
        self._check_claims(network.claims())
        self._check_munge(daemons["munged"])
        self._move_network(daemons)
        changed = self._write_files()
        self._restart_for_config(daemons, changed)
        already = {name for name, d in daemons.items() if d.running}
        self._check_ports(daemons, already)
        try:
            with network.claim_lock():
                self._check_claims(network.claims())  # again, now that no other `up` can write one
                network.install_hosts(self.spec)
            network.ensure_network(self.spec)
            self._start(daemons["munged"], lambda: unix_connectable(self.spec.munge_socket))
            self._start_mariadb(daemons["mariadb"])
            self._start(daemons["slurmdbd"], lambda: port_open(self.spec.controller_addr,
                                                                  self.spec.slurmdbd_port))
            self._ensure_accounts()
            self._start(daemons["slurmctld"], self._controller_up, timeout=60)
            fresh = {node for node in self.spec.node_names if not daemons[f"slurmd-{node}"].running}
            for node in self.spec.node_names:
                self._start(daemons[f"slurmd-{node}"], lambda: True)
            self._wait_nodes(daemons, fresh=fresh)
            if "slurmrestd-unix" in daemons:
                self._start(daemons["slurmrestd-unix"], lambda: unix_connectable(self.spec.restd_socket))
            else:  # no stale socket file for clients to pick (they try the unix socket first)
                self.spec.restd_socket.unlink(missing_ok=True)
            self._start(daemons["slurmrestd-jwt"], lambda: port_open("127.0.0.1", self.spec.slurmrestd_port))
            if self.install.is_system:  # the machine's own sbatch cannot talk to another release
                self._link_system_conf()
        except BaseException:
            self.down()
            raise
        self._started_here = not already
        self.resume_duplicate_jobid_drains()
        problems = self.address_problems() + self.health_problems()
        if problems:
            raise ClusterUnhealthy("cluster is up but not healthy: " + "; ".join(problems))
        return self

    def _check_cgroups(self) -> None:
        """Enforcement off, in one line, where slurmd cannot have its cgroups (jobs would run
        unconfined: a ``--mem`` never ends one OUT_OF_MEMORY)."""
        if not self.spec.cgroups:
            return
        why = cgroups_unusable(Path("/proc/self/mounts").read_text(), lambda path: os.access(path, os.W_OK))
        plugins = self.install.plugin_dir or Path("/usr/lib") / MULTIARCH / "slurm-wlm"
        if not why and not (plugins / "cgroup_v1.so").exists():
            why = f"Slurm {self.version} has no cgroup/v1 plugin ({plugins / 'cgroup_v1.so'})"
        if why:
            self.spec = replace(self.spec, cgroups=False)
            self.cgroup_note = f"memory and CPU limits NOT enforced: {why}"

    def health_problems(self) -> list[str]:
        """Nodes drained for a reason of Slurm's own and jobs Slurm holds after a failed launch."""
        problems = []
        nodes = records.sinfo(self.slurm, ("NodeList", "StateLong", "Reason"), ["-N", "-t", "drain,drained,draining,fail"],
                              check=False, retries=0, timeout=10)
        for name, state, reason in sorted({(n["NodeList"], n["StateLong"], n["Reason"]) for n in nodes}):
            if name in self.spec.node_names and not _lifecycle_reason(reason):
                problems.append(f"node {name} {state} ({reason}; `scontrol update NodeName={name} State=RESUME` "
                                "once its jobs are gone)")
        jobs = records.squeue(self.slurm, ("JobArrayID", "Reason"), ["-t", "PD"], check=False, retries=0, timeout=10)
        held = [job["JobArrayID"] for job in jobs if "requeued held" in job["Reason"]]
        if held:
            problems.append(f"jobs held by Slurm after a failed launch: {', '.join(held)} (`scontrol release`)")
        return problems

    def resume_duplicate_jobid_drains(self) -> list[str]:
        """Resume nodes drained "Duplicate jobid" (a restarted slurmctld reused a lost job's id) once
        no live step socket in the node's slurmd spool belongs to a job slurmctld does not place
        there: the check an operator makes before resuming. Returns their names."""
        drained = records.sinfo(self.slurm, ("NodeList", "Reason"), ["-N", "-t", "drain,drained,draining"],
                                check=False, retries=0, timeout=10)
        resumed = []
        for node, reason in sorted({(n["NodeList"], n["Reason"]) for n in drained}):
            if node not in self.spec.node_names or not reason.startswith("Duplicate jobid"):
                continue
            placed = {job["JobID"] for job in records.squeue(self.slurm, ("JobID",), ["-w", node, "-t", "R,CG,S"],
                                                              check=False, retries=0, timeout=10)}
            spool = self.spec.spool / f"slurmd-{node}"
            running = {sock.name.removeprefix(f"{node}_").split(".")[0] for sock in spool.glob(f"{node}_*.*")
                       if unix_connectable(sock)}
            if running - placed:
                continue  # the lost job still runs there: slurmctld kills it, a later `up` resumes
            self.slurm.run("scontrol", ["update", f"NodeName={node}", "State=RESUME"], check=False, retries=0)
            resumed.append(node)
        return resumed

    def readdress(self, node: str, address: str | None = None) -> tuple[str, str]:
        """Bring ``node`` back at another address, as Kubernetes brings back a rescheduled slurmd
        pod: every process in its namespace ends (slurmd, the steps and tasks on it), the namespace
        gets the new address, slurm.conf, /etc/hosts and slurmctld (``scontrol update NodeAddr=``)
        learn it, and a new slurmd registers from there. ``address``: default the lowest free one.
        Kept in the state dir for later ``up``s. Returns (old, new)."""
        s = self.spec
        if node not in s.node_names:
            raise SlinkyError(f"{node}: not a node of the cluster in {s.state_dir} (its nodes: {', '.join(s.node_names)})")
        daemons = {d.name: d for d in self._daemons()}
        if not daemons["slurmctld"].running:
            raise SlinkyError(f"the cluster in {s.state_dir} is not running: `slinkyml dev up` first")
        index = s.node_names.index(node) + 1
        old, new = s.node_addr(index), address or s.free_node_addr()
        problem = s.address_problem(new, node)
        holder = [n for i, n in enumerate(s.node_names, start=1) if s.node_addr(i) == new]
        if problem or holder:
            raise SlinkyError(f"--address: {problem or f'{new} is node {holder[0]}' + chr(39) + 's address'}")
        moved = {n: a for n, a in s.node_addresses if n != node}
        if new != s.first_node_addr(index):
            moved[node] = new
        self.spec = replace(s, node_addresses=tuple(moved.items()))
        # the pod is gone, and all it ran; its sockets closed (peers such as srun see the connections
        # end) before its address goes, as when Kubernetes deletes a pod
        gone = network.kill_namespace_processes([s.netns(node)])
        self._wait(lambda: not any(is_alive(pid) for pid in gone), 30, f"the processes of {node} to end")
        daemons[f"slurmd-{node}"].stop()
        network.move_node(self.spec, node, new)
        _write_if_changed(self.spec.node_addresses_file, render_node_addresses(self.spec), 0o644)
        # written here, not by up (a changed slurm.conf makes up restart every daemon); reconfigure
        # makes slurmctld and the other slurmds read it (else: "Node ... appears to have a
        # different slurm.conf than the slurmctld")
        _write_if_changed(self.spec.slurm_conf, render_slurm_conf(self.spec, self.version, self.install.plugin_dir),
                          0o644)
        with network.claim_lock():
            network.install_hosts(self.spec)
        self.slurm.run("scontrol", ["reconfigure"])
        self.slurm.run("scontrol", ["update", f"NodeName={node}", f"NodeAddr={new}", f"NodeHostname={node}"])
        daemons = {d.name: d for d in self._daemons()}
        self._start(daemons[f"slurmd-{node}"], lambda: True)
        self._wait_nodes(daemons, fresh={node})
        return old, new

    def address_problems(self) -> list[str]:
        """Where slurmctld's NodeAddr differs from this cluster's (slurm.conf, /etc/hosts, the node's
        namespace; e.g. an ``scontrol update NodeAddr=`` by hand) it is set back; returns the
        disagreements left: a moved node whose namespace holds another address."""
        held = {r.get("NodeName", ""): r.get("NodeAddr", "") for r in self.slurm.show("node")}
        for index, node in enumerate(self.spec.node_names, start=1):
            wanted = self.spec.node_addr(index)
            if held.get(node, wanted) != wanted:
                self.slurm.run("scontrol", ["update", f"NodeName={node}", f"NodeAddr={wanted}",
                                            f"NodeHostname={node}"], retries=1)
        moved = dict(self.spec.node_addresses)  # the others' namespaces were just set by ensure_network
        problems = []
        for index, node in enumerate(self.spec.node_names, start=1):
            if node in moved and network.node_addresses(self.spec, node) != [self.spec.node_addr(index)]:
                problems.append(f"node {node} is at {self.spec.node_addr(index)} in slurm.conf, /etc/hosts and "
                                f"slurmctld, but its namespace has {network.node_addresses(self.spec, node)}")
        return problems

    def down(self) -> list[str]:
        """Stop every daemon (by PID) in reverse order; remove the network. Returns what was stopped.
        A bridge or node another state dir's /etc/hosts block claims stays."""
        stopped = []
        ordered = list(reversed(self._daemons()))
        nodes = [d for d in ordered if d.name.startswith("slurmd-")]
        for daemon in ordered[:ordered.index(nodes[0])] if nodes else ordered:
            if daemon.stop():
                stopped.append(daemon.name)
        # the nodes' slurmd at once (one by one, 1,024 of them took almost 2 minutes)
        with ThreadPoolExecutor(STOP_THREADS) as pool:
            stopped += [d.name for d, done in zip(nodes, pool.map(Daemon.stop, nodes), strict=True) if done]
        for daemon in ordered[ordered.index(nodes[-1]) + 1:] if nodes else []:
            if daemon.stop():
                stopped.append(daemon.name)
        self._stop_orphan_slurmd()
        self._stop_leftovers()
        self._remove_node_cgroups()
        bridge, owned = ownership.removable(self.spec, self._known_nodes(), network.claims())
        network.remove_network(self.spec, owned, bridge=bridge)
        network.remove_hosts(self.spec)
        return stopped

    def reset(self) -> None:
        """Stop everything and delete the state directory (database included)."""
        self.down()
        if SYSTEM_SLURM_CONF.is_symlink() and os.readlink(SYSTEM_SLURM_CONF) == str(self.spec.slurm_conf):
            SYSTEM_SLURM_CONF.unlink()
        shutil.rmtree(self.spec.state_dir, ignore_errors=True)

    def status(self) -> dict:
        """Daemons (PID or None) and, when slurmctld answers, each node's state."""
        daemons = [DaemonStatus(d.name, d.pid, d.log_file) for d in self._daemons()]
        nodes: dict[str, str] = {}
        if any(d.name == "slurmctld" and d.running for d in daemons):
            try:
                for row in records.sinfo(self.slurm, ("NodeList", "StateLong"), ["-N"], retries=0, timeout=10):
                    nodes[row["NodeList"]] = row["StateLong"]
            except SlurmError:
                pass
        return {"state_dir": str(self.spec.state_dir), "version": str(self.version),
                "daemons": daemons, "nodes": nodes,
                "running": bool(daemons) and all(d.running for d in daemons)}

    @property
    def running(self) -> bool:
        return all(d.running for d in self._daemons())

    def __enter__(self) -> LocalCluster:
        return self.up()

    def __exit__(self, *exc) -> None:
        if self._started_here and not self.keep_running:
            self.down()

    # -- helpers -------------------------------------------------------------------------
    def _preflight(self) -> None:
        system = self.spec.slurm_version == SYSTEM
        needed = {**BINARIES["slurm"], **BINARIES["other"]} if system else BINARIES["other"]
        missing = [f"{b} (Debian package {p})" for b, p in needed.items() if not shutil.which(b)]
        missing += missing_plugins() if system else []
        if missing:
            raise SlinkyError("missing: " + ", ".join(missing) + " — run `make setup` or apt-get install them")
        if os.geteuid() != 0:
            raise SlinkyError("the local cluster needs root (network namespaces and daemons as root)")
        roots.install(self.spec.slurm_version)  # builds a release's root the first time
        absent = [str(path) for path in self.spec.spank_plugin_paths if not path.is_file()]
        if absent:
            raise SlinkyError(f"--spank-plugin: no such plugin file: {', '.join(absent)}")

    def _check_release(self) -> None:
        """A state dir keeps the Slurm release it was made with: its database and saved state are in
        that release's formats (slurmdbd converts only from the two releases before it)."""
        made_with = self.saved.get("slurm_version", SYSTEM) if self.saved else None
        if made_with and made_with != self.spec.slurm_version and (self.spec.state_dir / "mariadb").exists():
            raise SlinkyError(f"--slurm-version: the cluster in {self.spec.state_dir} runs Slurm {made_with}; "
                              f"use another --state-dir for {self.spec.slurm_version} (or `slinkyml dev reset "
                              f"--state-dir {self.spec.state_dir}` first)")

    def _check_claims(self, claims: list[ownership.Claim]) -> None:
        """Refuse a bridge, node name, subnet, port or munge socket that another state dir holds."""
        problems = ownership.conflicts(self.spec, claims)
        if problems:
            raise SlinkyError(problems[0])

    def _check_munge(self, munged: Daemon) -> None:
        """Refuse to start munged on a socket that another munged (another key) serves: a live one
        belongs to another cluster or the system's munge service."""
        if munged.running or not unix_connectable(self.spec.munge_socket):
            return
        raise SlinkyError(f"munge socket {self.spec.munge_socket} is served by a munged that is not this "
                          f"cluster's (another key); stop it, or use another --state-dir (each gets its own "
                          f"socket, see slinkyml.dev.slurm.config.default_munge_socket)")

    def _move_network(self, daemons: dict[str, Daemon]) -> None:
        """When ``up`` changes the bridge, node names or subnet saved at the last ``up``: refuse
        while the cluster runs, else remove the old network (what this state dir owns of it)."""
        saved = self.saved
        if not saved:
            return
        old = replace(self.spec, **ownership.identity_options(saved), nodes=saved.get("nodes") or self.spec.nodes)
        old_names = list(saved.get("node_names") or old.node_names)
        if (old.bridge, old_names, old.subnet) == (self.spec.bridge, self.spec.node_names, self.spec.subnet):
            return
        if old.bridge == self.spec.bridge and old.subnet == self.spec.subnet \
                and old.node_prefix == self.spec.node_prefix:
            return  # only the node count changed: up adds nodes, down removes the ones it knew
        if any(d.running for d in daemons.values()):
            raise SlinkyError(f"the cluster in {self.spec.state_dir} runs with bridge {old.bridge}, nodes "
                              f"{old.node_prefix}1.., subnet {old.subnet}; `slinkyml dev down --state-dir "
                              f"{self.spec.state_dir}` before changing them")
        bridge, nodes = ownership.removable(old, old_names, network.claims())
        network.remove_network(old, nodes, bridge=bridge)

    def _restart_for_config(self, daemons: dict[str, Daemon], changed: set[str]) -> None:
        """Stop the daemons whose config file changed under them; ``up`` then starts them again.

        Running jobs survive (slurmstepd does not depend on slurmd).
        """
        names: list[str] = []
        munged = daemons["munged"]
        if munged.pid and f"--socket={self.spec.munge_socket} " not in cmdline(munged.pid) + " ":
            names.append("munged")  # the socket moved (a state dir from before per-cluster sockets)
        if changed & {"slurm.conf", "gres.conf", "cgroup.conf", "plugstack.conf"}:
            names += ["slurmrestd-jwt", *(["slurmrestd-unix"] if "slurmrestd-unix" in daemons else []),
                      *(f"slurmd-{n}" for n in self.spec.node_names),
                      "slurmctld"]
        if "slurmdbd.conf" in changed:
            names.append("slurmdbd")
        if "munged" in names:
            names = [d.name for d in reversed(list(daemons.values())) if d.name not in ("munged", "mariadb")]
            names.append("munged")
        for name in names:
            daemons[name].stop()

    def _write_files(self) -> set[str]:
        """Write the state directory's files; returns the names of config files whose text changed."""
        s = self.spec
        for d in (s.etc, s.run, s.log, s.spool, s.run / "daemons", s.spool / "slurmctld"):
            d.mkdir(parents=True, exist_ok=True)
        for d in (s.state_dir, s.state_dir.parent, s.run, s.etc):
            _chmod_if_owned(d, 0o755)
        munge_dir = s.etc / "munge"
        munge_dir.mkdir(mode=0o700, exist_ok=True)
        for d in (s.run / "munge", s.munge_socket.parent):
            d.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(d, 0o755)
        key = munge_dir / "munge.key"
        if not key.exists():
            _write_secret(key, secrets.token_bytes(1024), mode=0o400)
        if not s.jwt_key.exists():
            _write_secret(s.jwt_key, secrets.token_bytes(64), mode=0o600)
        password_file = s.etc / "db_password"
        if not password_file.exists():
            _write_secret(password_file, secrets.token_urlsafe(24).encode(), mode=0o600)
        self._db_password = password_file.read_text().strip()
        version, install = self.version, self.install
        if not install.is_system:
            install.link_clients(s.bin_dir)
        changed = set()
        if _write_if_changed(s.slurm_conf, render_slurm_conf(s, version, install.plugin_dir), 0o644):
            changed.add("slurm.conf")
        if _write_if_changed(s.slurmdbd_conf, render_slurmdbd_conf(s, self._db_password, install.plugin_dir),
                             0o600):
            changed.add("slurmdbd.conf")
        for name, text in (("gres.conf", render_gres_conf(s)),
                           ("cgroup.conf", render_cgroup_conf(version, s.cgroups)),
                           ("plugstack.conf", render_plugstack_conf(s))):
            path = s.etc / name
            if text is None:
                if path.exists():
                    path.unlink()
                    changed.add(name)
            elif _write_if_changed(path, text, 0o644):
                changed.add(name)
        for node in s.node_names:
            (s.spool / f"slurmd-{node}").mkdir(exist_ok=True)
        (s.state_dir / "nodes").write_text("\n".join(s.node_names) + "\n")
        _write_if_changed(s.state_dir / ownership.IDENTITY_FILE, render_identity(s), 0o644)
        self.saved = ownership.read_identity(s.state_dir)
        return changed

    def _known_nodes(self) -> list[str]:
        try:
            listed = (self.spec.state_dir / "nodes").read_text().split()
        except OSError:
            listed = []
        return sorted(set(listed) | set(self.saved.get("node_names") or ()) | set(self.spec.node_names))

    def _stop_orphan_slurmd(self) -> None:
        """slurmd of nodes from an earlier, larger cluster (``--nodes`` shrank)."""
        for node in self._known_nodes():
            if node in self.spec.node_names:
                continue
            Daemon(f"slurmd-{node}", ["slurmd"], pid_file=self.spec.run / "daemons" / f"slurmd-{node}.pid",
                   log_file=self.spec.log / f"slurmd-{node}.log").stop()

    def _remove_node_cgroups(self) -> None:
        """The cgroup plugins' empty ``/slurm_<node>`` trees (one per slurmd, in each cgroup v1
        hierarchy) of this cluster's nodes; a tree still holding a process stays."""
        for node in self.spec.node_names:
            for tree in glob.glob(f"/sys/fs/cgroup/*/slurm_{node}"):
                for path in sorted((p for p in Path(tree).rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    with contextlib.suppress(OSError):
                        path.rmdir()
                with contextlib.suppress(OSError):
                    Path(tree).rmdir()

    def _stop_leftovers(self) -> None:
        """Daemons with a PID file that this cluster no longer runs (e.g. the unix-socket slurmrestd of
        a state dir brought up before its release stopped running one); checked by name, as always."""
        current = {d.name for d in self._daemons()}
        for pid_file in sorted((self.spec.run / "daemons").glob("*.pid")):
            name = pid_file.stem
            if name not in current:
                Daemon(name, [name.split("-")[0]], pid_file=pid_file, log_file=self.spec.log / f"{name}.log").stop()

    def _check_ports(self, daemons: dict[str, Daemon], already: set[str]) -> None:
        s = self.spec
        wanted = [("slurmdbd", s.slurmdbd_port, "--slurmdbd-port"),
                  ("slurmctld", s.slurmctld_port, "--slurmctld-port"),
                  ("mariadb", s.mariadb_port, "--mariadb-port"),
                  ("slurmrestd-jwt", s.slurmrestd_port, "--slurmrestd-port")]
        for name, port, flag in wanted:
            if name in already:
                continue
            # a daemon just killed (-9) can hold its port for a moment while the kernel tears it down
            deadline = time.monotonic() + PORT_RELEASE_S
            while port_in_use(port) and time.monotonic() < deadline:
                time.sleep(0.2)
            if port_in_use(port):
                raise SlinkyError(f"{flag}: port {port} (for {name}) is already in use by another process; "
                                  f"free it or choose another port with {flag}")

    def _start(self, daemon: Daemon, ready, timeout: float = 30.0) -> None:
        if daemon.running:
            return
        daemon.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if daemon.exited_early():
                break
            try:
                if ready():
                    return
            except (OSError, SlurmError):
                pass
            time.sleep(0.1)
        reason = "exited" if daemon.exited_early() else f"not ready after {timeout:g} s"
        raise ClusterStartError(f"{daemon.name} {reason}; last lines of {daemon.log_file}:\n"
                                f"{daemon.log_tail()}")

    def _start_mariadb(self, daemon: Daemon) -> None:
        datadir = self.spec.state_dir / "mariadb"
        # its own temporary directory: at a shared /tmp, two clusters set up at once lost each other's
        # bootstrap tables ("Could not remove temporary table '/tmp/#sql-temptable-…'", then Aborting)
        self.spec.mariadb_tmp.mkdir(parents=True, exist_ok=True)
        if not (datadir / "mysql").exists():
            shutil.rmtree(datadir, ignore_errors=True)
            proc = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                                   "--auth-root-authentication-method=socket", "--skip-test-db",
                                   f"--tmpdir={self.spec.mariadb_tmp}"],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise ClusterStartError(f"mariadb-install-db failed: {(proc.stderr or proc.stdout)[-800:]}")
        self._start(daemon, lambda: self._sql("SELECT 1", check=False).returncode == 0, timeout=60)
        password = self._db_password.replace("'", "''")
        self._sql(
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
            "FLUSH PRIVILEGES;")

    def _sql(self, statement: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["mariadb", "--no-defaults", f"--socket={self.spec.mariadb_socket}", "-uroot",
                               "-N", "-B"], input=statement, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise ClusterStartError(f"MariaDB: {proc.stderr.strip()}")
        return proc

    def _sacctmgr_add(self, *args: str) -> None:
        result = self.slurm.run("sacctmgr", ["-i", "add", *args], check=False, retries=2)
        if result.returncode != 0 and "Nothing new added" not in result.stdout + result.stderr:
            raise ClusterStartError(f"sacctmgr add {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")

    def _ensure_accounts(self) -> None:
        """Cluster, account tree and users in slurmdbd (and as Unix users); skipped when already done."""
        s = self.spec
        marker = s.state_dir / "accounts.done"
        wanted = repr((s.cluster_name, s.accounts))
        if marker.exists() and marker.read_text() == wanted:
            return
        for user in s.users:
            _ensure_unix_user(user)
        self._wait(lambda: self.slurm.run("sacctmgr", ["-n", "-P", "list", "cluster"], retries=0,
                                          check=False).returncode == 0, 30, "slurmdbd to answer sacctmgr")
        self._sacctmgr_add("cluster", s.cluster_name)
        for account, parent, share, _users in s.accounts:
            self._sacctmgr_add("account", account, f"cluster={s.cluster_name}", f"parent={parent}",
                               f"fairshare={share}", f"description={account}", f"organization={account}")
        for account, _parent, _share, users in s.accounts:
            for user in users:
                self._sacctmgr_add("user", user, f"account={account}", f"cluster={s.cluster_name}")
        marker.write_text(wanted)

    def _controller_up(self) -> bool:
        out = self.slurm.run("scontrol", ["ping"], check=False, retries=0, timeout=10).stdout
        return "is UP" in out

    def _wait_nodes(self, daemons: dict[str, Daemon], timeout: float | None = None,
                    fresh: Set[str] = frozenset()) -> None:
        """Until every node serves. A node whose slurmd was just started (``fresh``) must also have
        registered: before that slurmctld may list it ``idle*`` (not responding) — at 512 nodes
        slurmd processes were still starting seconds after every node read idle*, and a job
        sent to them failed with "Connection refused"."""
        wanted = set(self.spec.node_names)
        timeout = timeout or 60.0 + 0.25 * len(wanted)  # registrations queue at slurmctld
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for node in wanted:
                d = daemons[f"slurmd-{node}"]
                if not d.running:
                    raise ClusterStartError(f"{d.name} exited; last lines of {d.log_file}:\n{d.log_tail()}")
            rows = records.sinfo(self.slurm, ("NodeList", "StateLong", "Reason"), ["-N"], check=False, retries=0,
                                 timeout=10)
            states = {row["NodeList"]: row["StateLong"] for row in rows}
            reasons = {row["NodeList"]: row["Reason"] for row in rows}
            ready = {n for n, st in states.items() if st.rstrip("*~#").lower() in ("idle", "mixed", "allocated",
                                                                                    "completing")
                     and not (n in fresh and "*" in st)}
            down = {n for n, st in states.items() if n in wanted and st.rstrip("*").lower() in ("down", "drained")
                    and _lifecycle_reason(reasons.get(n, ""))}
            if down:
                # a node left DOWN by an earlier run (killed slurmd): return it to service.
                self.slurm.run("scontrol", ["update", f"NodeName={','.join(sorted(down))}", "State=RESUME"],
                               check=False, retries=0)
            if wanted <= ready | {n for n, st in states.items() if "drain" in st.lower()}:
                return  # a node drained for Slurm's own reason is reported by health_problems
            time.sleep(0.2)
        raise ClusterStartError(f"nodes not ready after {timeout:g} s: {states}")

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise ClusterStartError(f"timed out waiting for {what}")

    def _link_system_conf(self) -> None:
        """Point /etc/slurm/slurm.conf at ours when there is none, so plain ``sbatch`` works."""
        target = str(self.spec.slurm_conf)
        if SYSTEM_SLURM_CONF.is_symlink() and os.readlink(SYSTEM_SLURM_CONF) != target:
            if not Path(os.readlink(SYSTEM_SLURM_CONF)).exists():
                SYSTEM_SLURM_CONF.unlink()  # left by an earlier state dir
        if not SYSTEM_SLURM_CONF.exists() and not SYSTEM_SLURM_CONF.is_symlink():
            SYSTEM_SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
            SYSTEM_SLURM_CONF.symlink_to(target)

    # -- handy for tests and the demo --------------------------------------------------------
    def token(self, user: str = "root", lifespan: int = 3600) -> str:
        """A JWT for slurmrestd (``scontrol token``)."""
        out = self.slurm.run("scontrol", ["token", f"username={user}", f"lifespan={lifespan}"]).stdout
        for part in out.split():
            if part.startswith("SLURM_JWT="):
                return part.split("=", 1)[1]
        raise SlinkyError("scontrol token printed no SLURM_JWT")



def _lifecycle_reason(reason: str) -> bool:
    return reason in ("", "none", "(null)") or reason.startswith(LIFECYCLE_DRAIN_REASONS)


def _saved_identity(state_dir: Path) -> dict:
    """``cluster.json``; for a state dir from before it, what its own /etc/hosts block says."""
    saved = ownership.read_identity(state_dir)
    if saved:
        return saved
    own = [c for c in network.claims() if c.state_dir == str(state_dir)]
    return ownership.legacy_identity(own[0]) if own else {}


def _write_secret(path: Path, data: bytes, mode: int) -> None:
    """A new key or password file (callers write only missing ones): atomic, ``mode`` from the start."""
    write_secret(path, data, mode=mode)


def _write_if_changed(path: Path, text: str, mode: int) -> bool:
    if path.exists() and path.read_text() == text:
        os.chmod(path, mode)
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def _chmod_if_owned(path: Path, mode: int) -> None:
    try:
        if path.stat().st_uid == os.geteuid():
            os.chmod(path, path.stat().st_mode | mode)
    except OSError:
        pass


def _ensure_unix_user(user: str) -> None:
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", user],
                       capture_output=True, text=True, check=True)
