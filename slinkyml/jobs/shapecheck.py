"""Would a real slurmctld for the cluster in a spec accept this sbatch script? (``slinkyml sbatch check``)

The GPU and Trainium templates target clusters this machine is not (p5.48xlarge, trn1.32xlarge);
the local dev cluster has small CPU nodes only. So this module starts a throw-away slurmctld whose
``slurm.conf`` declares the node sets of a :class:`~slinkyml.cluster.SlurmCluster` the way the
rendered Controller and NodeSets configure them, and asks it with ``sbatch --test-only``.

How the throw-away slurmctld is configured, and why:

- No slurmd anywhere, so every node is ``State=CLOUD``. slurmctld treats cloud nodes as powered
  down but available (``idle~``): the scheduler may place a job on them and would "resume" them,
  which for ``--test-only`` never happens. Tried on 22.05.8 and 24.11.5 with the same results:
  ``State=FUTURE`` nodes are left out of scheduling (every job: "Requested node configuration is
  not available"), and ``State=UNKNOWN`` nodes never respond, are not available either (same
  answer), and slurmctld resolves their host names at start (10 s per unresolvable name).
- Nodes: ``<cluster>-<nodeset>-0..count-1`` (the pod names the Slinky NodeSet creates), grouped by
  ``NodeSet=<cluster>-<nodeset> Nodes=...`` so the rendered partition lines (``Nodes=<nodeset>``)
  are used verbatim. ``CPUs`` and ``RealMemory`` are what the rendered slurmd container gets: its
  memory *limit* (the renderer keeps 15 % of the instance for the node) and all vCPUs, since the
  renderer sets a CPU request but no CPU limit (slurmd in the pod sees every CPU). ``Gres`` and
  ``Features`` (and any ``extra_slurmd_conf``) are the NodeSet's ``extraConf``.
- ``GresTypes``, partitions (which one is ``Default``, ``partition_config``) and
  ``controller.extra_conf`` are the rendered Controller ``extraConf``; its settings win over this
  module's defaults except those that would point the daemon at something real (ports, paths,
  authentication, accounting).
- gres.conf has counts only (``Name=gpu Type=h100 Count=8``, no ``File=``) and
  ``SlurmdParameters=config_overrides`` is set: slurmctld schedules from the ``Gres=`` of the node
  lines, and nothing here may depend on devices that do not exist.
- ``EnforcePartLimits=ALL``: without it a job over a partition limit (``MaxTime``, node count) is
  accepted and then pends forever (``PartitionTimeLimit``); the check reports it as rejected.
- ``AccountingStorageType=accounting_storage/none`` (no slurmdbd, so no association checks),
  its own temporary state directory, ports free at run time, the current user as ``SlurmUser``,
  and munge through the running munged's socket (or a munged of its own when none answers).

The slurmctld (and a munged it started) is stopped and the temporary directory removed on every
way out: success, errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slinkyml.cluster import SlurmCluster, load_spec
from slinkyml.errors import SlinkyError, SpecError

DEFAULT_MUNGE_SOCKET = Path("/run/munge/munge.socket.2")

#: slurm.conf keys this module must own: they point the daemon at ports, files, credentials or
#: services; a cluster's ``controller.extra_conf`` setting them is ignored here.
OWNED_KEYS = frozenset(k.lower() for k in (
    "ClusterName", "SlurmctldHost", "ControlMachine", "ControlAddr", "BackupController", "BackupAddr",
    "SlurmctldPort", "SlurmdPort", "SlurmUser", "SlurmdUser", "AuthType", "AuthInfo", "AuthAltTypes",
    "AuthAltParameters", "CredType", "StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile",
    "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile", "SlurmSchedLogFile", "AccountingStorageType",
    "AccountingStorageHost", "AccountingStoragePort", "AccountingStorageBackupHost",
    "AccountingStorageEnforce", "AccountingStoragePass", "AccountingStorageUser", "JobCompType",
    "JobCompLoc", "JobCompHost", "JobCompPort", "JobCompUser", "JobCompPass", "MailProg", "PluginDir",
    "Include", "include", "JobSubmitPlugins", "CliFilterPlugins", "SlurmctldPrimaryOnProg",
    "SlurmctldPrimaryOffProg", "ResumeProgram", "SuspendProgram", "ResumeFailProgram",
    "SlurmctldDebug", "DebugFlags", "HealthCheckProgram", "Prolog", "Epilog", "PrologSlurmctld",
    "EpilogSlurmctld", "TmpFS", "JobCredentialPrivateKey", "JobCredentialPublicCertificate",
    "AccountingStorageTRES", "AccountingStoreFlags",
))
#: lines whose first key names a record (several keys on one line), kept whole.
RECORD_KEYS = frozenset(k.lower() for k in ("PartitionName", "NodeName", "NodeSet", "DownNodes",
                                             "FrontendName", "SwitchName"))

_ACCEPTED = re.compile(r"Job \d+ to start at (?P<start>\S+) using (?P<cpus>\d+) processors? on nodes? "
                       r"(?P<nodes>\S+) in partition (?P<partition>\S+)")
_REASON_PREFIXES = ("sbatch: error: ", "allocation failure: ", "Batch job submission failed: ", "sbatch: ")


@dataclass(frozen=True)
class ShapeResult:
    """One script's answer: accepted on ``nodes`` in ``partition``, or Slurm's ``reason``."""

    script: str
    cluster: str
    accepted: bool
    partition: str | None = None
    nodes: str | None = None
    cpus: int | None = None
    reason: str | None = None

    def line(self) -> str:
        if self.accepted:
            return (f"{self.script}: accepted by cluster {self.cluster}: partition {self.partition}, "
                    f"nodes {self.nodes} ({self.cpus} CPUs)")
        return f"{self.script}: rejected by cluster {self.cluster}: {self.reason}"


# ------------------------------------------------------------------ pure rendering


def node_names(cluster: SlurmCluster, ns) -> str | None:
    """The node set's Slurm node names as a host list (the StatefulSet's pod names), None if empty."""
    from slinkyml.cluster import names

    base = names.nodeset(cluster, ns)
    if ns.count <= 0:
        return None
    return f"{base}-0" if ns.count == 1 else f"{base}-[0-{ns.count - 1}]"


def _quantity_mib(text: str) -> int:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 ** 2, "k": 1000 / 1024 ** 2,
             "M": 1000 ** 2 / 1024 ** 2, "G": 1000 ** 3 / 1024 ** 2, "T": 1000 ** 4 / 1024 ** 2}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?|k)?", str(text))
    if not match:
        raise SlinkyError(f"cannot read the memory quantity {text!r}")
    number, unit = float(match.group(1)), match.group(2)
    return int(number * units[unit] if unit else number / 1024 ** 2)


def _tokens(text: str) -> dict[str, str]:
    """``Key=value Key2=value2`` → ordered mapping (words without ``=`` are dropped)."""
    out: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep:
            out[key] = value
    return out


def node_line(cluster: SlurmCluster, ns) -> str | None:
    """``NodeName=...`` for one node set, as the rendered slurmd would register it."""
    from slinkyml.cluster.render import slurmd_conf, slurmd_resources
    from slinkyml.instances import get_instance_type

    hosts = node_names(cluster, ns)
    if hosts is None:
        return None
    itype = get_instance_type(ns.instance_type)
    limits = slurmd_resources(ns)["limits"]
    cpus = int(float(limits["cpu"])) if "cpu" in limits else itype.vcpus
    fields: dict[str, str] = {"CPUs": str(cpus), "RealMemory": str(_quantity_mib(limits["memory"]))}
    for key, value in _tokens(slurmd_conf(ns)).items():
        known = {k.lower(): k for k in fields}
        if key.lower() == "state":
            continue
        fields.pop(known.get(key.lower(), key), None)
        fields[key] = value
    fields["State"] = "CLOUD"
    return f"NodeName={hosts} " + " ".join(f"{k}={v}" for k, v in fields.items())


def render_gres_conf(cluster: SlurmCluster) -> str | None:
    """gres.conf with counts only: no device files exist here (or need to)."""
    from slinkyml.cluster.render import accelerator_count
    from slinkyml.instances import get_instance_type

    lines = ["# slinkyml sbatch check: counts only (no slurmd, no devices)"]
    for ns in cluster.node_sets:
        acc = get_instance_type(ns.instance_type).accelerator
        hosts = node_names(cluster, ns)
        if acc is None or hosts is None or not accelerator_count(ns):
            continue
        name = "gpu" if acc.kind == "nvidia" else "neuron"
        lines.append(f"NodeName={hosts} Name={name} Type={acc.gres_type} Count={accelerator_count(ns)}")
    return "\n".join(lines) + "\n" if len(lines) > 1 else None


def controller_lines(cluster: SlurmCluster) -> tuple[dict[str, str], list[str], list[str]]:
    """The rendered Controller ``extraConf`` split into (settings, record lines, ignored keys)."""
    from slinkyml.cluster.render import slurm_conf_extra

    settings: dict[str, str] = {}
    records: list[str] = []
    ignored: list[str] = []
    for raw in slurm_conf_extra(cluster).splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key.strip().lower() in RECORD_KEYS:
            records.append(line)
        elif key.strip().lower() in OWNED_KEYS:
            ignored.append(key.strip())
        else:
            settings[key.strip()] = value.strip()
    return settings, records, ignored


def partition_names(cluster: SlurmCluster) -> list[str]:
    """Partitions the rendered Controller declares, in order."""
    _settings, records, _ignored = controller_lines(cluster)
    return [line.split()[0].partition("=")[2] for line in records if line.lower().startswith("partitionname=")]


def render_slurm_conf(cluster: SlurmCluster, *, state_dir: Path, port: int, slurmd_port: int,
                      munge_socket: Path, user: str | None = None, host: str | None = None) -> str:
    """slurm.conf for the throw-away slurmctld (pure; see the module docstring for each choice)."""
    from slinkyml.cluster import names

    user = user or pwd.getpwuid(os.geteuid()).pw_name
    host = host or socket.gethostname().split(".")[0]
    owned = {
        "ClusterName": cluster.name,
        "SlurmctldHost": f"{host}(127.0.0.1)",
        "SlurmctldPort": str(port),
        "SlurmdPort": str(slurmd_port),
        "SlurmUser": user,
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "AuthInfo": f"socket={munge_socket}",
        "CredType": "cred/munge",
        "StateSaveLocation": str(state_dir / "state"),
        "SlurmdSpoolDir": str(state_dir / "slurmd"),
        "SlurmctldPidFile": str(state_dir / "slurmctld.pid"),
        "SlurmctldLogFile": str(state_dir / "slurmctld.log"),
        "SlurmctldDebug": "info",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "MailProg": shutil.which("true") or "/bin/true",
    }
    defaults = {
        "SlurmdParameters": "config_overrides",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "MpiDefault": "none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core_Memory",
        "JobAcctGatherType": "jobacct_gather/none",
        "EnforcePartLimits": "ALL",
        "ReturnToService": "2",
    }
    settings, records, _ignored = controller_lines(cluster)
    lower = {k.lower() for k in settings}
    defaults = {k: v for k, v in defaults.items() if k.lower() not in lower}
    lines = ["# Written by `slinkyml sbatch check`: a throw-away slurmctld for cluster "
             f"{cluster.name!r}; no slurmd, nodes State=CLOUD."]
    lines += [f"{k}={v}" for k, v in {**owned, **defaults, **settings}.items()]
    for ns in cluster.node_sets:
        line = node_line(cluster, ns)
        if line:
            lines.append(line)
    for ns in cluster.node_sets:
        hosts = node_names(cluster, ns)
        nodeset = names.nodeset(cluster, ns)
        # a node set scaled to 0 is an empty NodeSet (no node has that feature)
        lines.append(f"NodeSet={nodeset} Nodes={hosts}" if hosts else f"NodeSet={nodeset} Feature={nodeset}")
    lines += records
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the throw-away controller


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (slurmctld forks slurmscriptd)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the controller runs, so ``finally`` cleans up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        yield
        return

    def _raise(signum, frame):  # noqa: ANN001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class ThrowawayController:
    """A slurmctld for one cluster spec, in its own temporary directory. Use as a context manager.

    >>> with ThrowawayController(load_spec("manifests/h100-efa/cluster.yaml")) as ctl:  # doctest: +SKIP
    ...     ctl.check("sbatch/nccl-allreduce.sbatch").line()
    """

    def __init__(self, cluster: SlurmCluster, *, munge_socket: str | os.PathLike[str] = DEFAULT_MUNGE_SOCKET,
                 start_timeout: float = 30.0):
        self.cluster = cluster
        self.munge_socket = Path(munge_socket)
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self._daemons: list = []

    @property
    def slurm_conf(self) -> Path:
        assert self.dir is not None
        return self.dir / "etc" / "slurm.conf"

    @property
    def slurm(self):
        from slinkyml.slurm import Slurm

        return Slurm(self.slurm_conf, timeout=60, retries=1)

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> ThrowawayController:
        self._guard = _sigterm_as_interrupt()
        self._guard.__enter__()
        try:
            self.start()
        except BaseException:
            self.stop()
            self._guard.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self._guard.__exit__(None, None, None)

    def start(self) -> None:
        for binary, package in (("slurmctld", "slurmctld"), ("sbatch", "slurm-client"), ("scontrol", "slurm-client")):
            if not shutil.which(binary):
                raise SlinkyError(f"{binary} not found: install the Debian package {package} (or slurm-wlm)")
        self.dir = Path(tempfile.mkdtemp(prefix="slinkyml-sbatch-check-"))
        for sub in ("etc", "state", "slurmd", "run"):
            (self.dir / sub).mkdir(mode=0o755)
        socket_path = self._ensure_munge()
        gres = render_gres_conf(self.cluster)
        if gres:
            (self.dir / "etc" / "gres.conf").write_text(gres)
        last_error = ""
        for _attempt in range(3):  # a port picked as free can be taken before slurmctld binds it
            port, slurmd_port = _free_port(), _free_port()
            self.slurm_conf.write_text(render_slurm_conf(
                self.cluster, state_dir=self.dir, port=port, slurmd_port=slurmd_port, munge_socket=socket_path))
            daemon = self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.slurm_conf)])
            try:
                self._start(daemon, self._controller_up)
                return
            except SlinkyError as exc:
                last_error = str(exc)
                daemon.stop(timeout=5)
                self._daemons.remove(daemon)
                if "Address already in use" not in daemon.log_tail(40):
                    raise
        raise SlinkyError(last_error)

    def stop(self) -> None:
        """Stop what was started here (by PID), then remove the temporary directory. Idempotent."""
        from slinkyml.dev.process import is_alive

        for daemon in reversed(self._daemons):
            pid = daemon.pid
            children = _children(pid) if pid else []
            daemon.stop(timeout=10)
            for child in children:  # slurmctld's slurmscriptd exits with it; make sure of it
                deadline = time.monotonic() + 5
                while is_alive(child) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if is_alive(child):
                    try:
                        os.kill(child, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self._daemons = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- helpers -------------------------------------------------------------------------
    def _daemon(self, name: str, argv: list[str]):
        from slinkyml.dev.process import Daemon

        assert self.dir is not None
        daemon = Daemon(name, argv, pid_file=self.dir / "run" / f"{name}.pid",
                        log_file=self.dir / f"{name}.out", env={**os.environ, "SLURM_CONF": str(self.slurm_conf)})
        self._daemons.append(daemon)
        return daemon

    def _start(self, daemon, ready) -> None:
        daemon.start()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline and not daemon.exited_early():
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        why = "exited" if daemon.exited_early() else f"was not ready after {self.start_timeout:g} s"
        tail = " | ".join(line.strip() for line in daemon.log_tail(6).splitlines() if line.strip())
        raise SlinkyError(f"the throw-away {daemon.name} {why}: {tail}")

    def _controller_up(self) -> bool:
        result = self.slurm.run("scontrol", ["ping"], check=False, retries=0, timeout=5)
        return "is UP" in result.stdout

    def _ensure_munge(self) -> Path:
        """The running munged's socket, or the socket of a munged started here for this check."""
        from slinkyml.dev.cluster import _unix_connectable

        if _unix_connectable(self.munge_socket):
            return self.munge_socket
        if not shutil.which("munged"):
            raise SlinkyError(f"no munged answers on {self.munge_socket} and munged is not installed "
                              "(Debian package munge)")
        assert self.dir is not None
        mdir = self.dir / "munge"
        mdir.mkdir(mode=0o700)
        key = mdir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(1024))
        sock_dir = self.dir / "run" / "munge"
        sock_dir.mkdir(mode=0o755)
        sock = sock_dir / "munge.socket"
        daemon = self._daemon("munged", ["munged", "-F", f"--socket={sock}", f"--key-file={key}",
                                         f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
                                         f"--seed-file={mdir / 'munged.seed'}", "--force", "--origin=127.0.0.1"])
        self._start(daemon, lambda: _unix_connectable(sock))
        return sock

    # -- the check -----------------------------------------------------------------------
    def check(self, script: str | os.PathLike[str], *, partition: str | None = None,
              label: str | None = None) -> ShapeResult:
        """``sbatch --test-only`` of one script file against this controller."""
        args = ["--test-only"]
        if partition:
            args += ["--partition", partition]
        result = self.slurm.run("sbatch", [*args, str(script)], check=False, retries=1, timeout=60)
        return parse_test_only(label or str(script), self.cluster.name, result.returncode,
                               result.stdout + "\n" + result.stderr)


def parse_test_only(script: str, cluster: str, returncode: int, output: str) -> ShapeResult:
    """Read ``sbatch --test-only``'s answer (the same words in 22.05 and 24.11)."""
    match = _ACCEPTED.search(output)
    if returncode == 0 and match:
        return ShapeResult(script, cluster, True, partition=match["partition"], nodes=match["nodes"],
                           cpus=int(match["cpus"]))
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "failure" in line.lower()]
    reason = (errors or lines or [f"sbatch exited with status {returncode}"])[-1]
    stripped = True
    while stripped:
        stripped = False
        for prefix in _REASON_PREFIXES:
            if reason.startswith(prefix):
                reason, stripped = reason[len(prefix):].strip(), True
    return ShapeResult(script, cluster, False, reason=reason)


# ------------------------------------------------------------------ entry point


def _load_cluster(cluster: SlurmCluster | str | os.PathLike[str]) -> SlurmCluster:
    if isinstance(cluster, SlurmCluster):
        return cluster
    try:
        return load_spec(cluster)
    except SlinkyError as exc:
        raise SlinkyError(f"--cluster: {exc.one_line()}") from None


def _script_text(path: Path, label: str) -> str | None:
    """Rendered text for a JOB.yaml, None for a script file (used as is)."""
    if path.suffix in (".yaml", ".yml"):
        from slinkyml.jobs.render import render_sbatch
        from slinkyml.jobs.spec import JobSpec

        try:
            return render_sbatch(JobSpec.from_yaml(path))
        except SpecError as exc:
            where = f"{exc.path}: " if exc.path else ""
            raise SlinkyError(f"{label}: {where}{' '.join(exc.reason.split())}") from None
    if not path.is_file():
        raise SlinkyError(f"SCRIPT {label}: no such file")
    if not os.access(path, os.R_OK):
        raise SlinkyError(f"SCRIPT {label}: not readable")
    return None


def check_scripts(scripts: Sequence[str | os.PathLike[str]], cluster: SlurmCluster | str | os.PathLike[str], *,
                  partition: str | None = None,
                  munge_socket: str | os.PathLike[str] = DEFAULT_MUNGE_SOCKET) -> list[ShapeResult]:
    """Check sbatch scripts (or JOB.yaml specs, rendered first) against one throw-away slurmctld.

    Inputs are read and rendered before anything starts, so a bad argument costs no daemon.
    """
    spec = _load_cluster(cluster)
    if not scripts:
        raise SlinkyError("SCRIPT: give at least one sbatch script or JOB.yaml")
    known = partition_names(spec)
    if partition is not None and partition not in known:
        raise SlinkyError(f"--partition: {partition!r} is not a partition of cluster {spec.name} "
                          f"({', '.join(known)})")
    prepared = [(str(s), _script_text(Path(s), str(s))) for s in scripts]
    results = []
    with ThrowawayController(spec, munge_socket=munge_socket) as ctl:
        assert ctl.dir is not None
        for i, (label, text) in enumerate(prepared):
            path = Path(label)
            if text is not None:
                path = ctl.dir / "rendered" / f"{i:03d}-{Path(label).stem}.sbatch"
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
            results.append(ctl.check(path, partition=partition, label=label))
    return results
