"""Would a real slurmctld for the cluster in a spec accept this sbatch script? (``slinkyml sbatch check``)

A throw-away slurmctld declares the spec's node sets as the rendered Controller and NodeSets do and
answers ``sbatch --test-only``. Nodes are ``State=CLOUD`` (no slurmd: FUTURE and UNKNOWN nodes are
never schedulable); gres.conf has counts only; ``EnforcePartLimits=ALL`` turns an over-limit job
into a rejection instead of a job pending forever; no accounting.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slinkyml import DATA_DIR
from slinkyml.cluster import SlurmCluster, load_spec, names, workers
from slinkyml.errors import Problem, SlinkyError, SpecError
from slinkyml.instances import get_instance_type
from slinkyml.jobs.render import render_sbatch
from slinkyml.jobs.request import stop_signal_warning
from slinkyml.jobs.spec import JobSpec, time_limit_seconds
from slinkyml.kube import quantity
from slinkyml.slurm import roots
from slinkyml.slurm.conf import Line, SlurmConfBuilder, pairs
from slinkyml.slurm.throwaway import DEFAULT_MUNGE_SOCKET, ThrowawaySlurmctld

#: slurm.conf keys pointing the daemon at ports, files, credentials or services: a cluster's
#: ``controller.extra_conf`` setting them is ignored here
OWNED_KEYS = frozenset(k.lower() for k in json.loads(
    (DATA_DIR / "shapecheck_owned_keys.json").read_text())["keys"])

#: 26.05.5 prints "Job 1 to start at 2026-11-30T19:12:35 a using 768 processors on nodes ..." (sic)
_ACCEPTED = re.compile(r"Job \d+ to start at (?P<start>\S+)(?: on cluster \S+)?(?: a)? using (?P<cpus>\d+) "
                       r"processors? on nodes? (?P<nodes>\S+) in partition (?P<partition>\S+)")
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

    #: the Slurm release whose slurmctld judged (the spec's when it is here, see :func:`slurm_for`)
    slurm: str = ""
    #: what will go wrong when it runs (:func:`script_warnings`)
    warnings: tuple[str, ...] = ()

    def line(self) -> str:
        judge = f"cluster {self.cluster}" + (f" (Slurm {self.slurm})" if self.slurm else "")
        if self.accepted:
            return (f"{self.script}: accepted by {judge}: partition {self.partition}, "
                    f"nodes {self.nodes} ({self.cpus} CPUs)")
        return f"{self.script}: rejected by {judge}: {self.reason}"


def slurm_for(release: str) -> roots.SlurmInstall:
    """The Slurm to judge a spec with: its ``slurm_version`` where that release is here (a root that
    ``slinkyml dev up --slurm-version`` built; never built for a check), else the machine's own."""
    if release in roots.RELEASES:
        found = roots.find(release)
        if found.root is not None and roots.root_ok(release, found.root):
            return found
    return roots.SlurmInstall()


# ------------------------------------------------------------------ pure rendering


def node_names(cluster: SlurmCluster, ns) -> str | None:
    """The node set's Slurm node names as a host list (the StatefulSet's pod names), None if empty."""
    base = workers.operator_hostname_prefix(cluster, ns)
    if ns.count <= 0:
        return None
    return f"{base}0" if ns.count == 1 else f"{base}[0-{ns.count - 1}]"


def _quantity_mib(text: str) -> int:
    number = quantity(text)
    if number is None:
        raise SlinkyError(f"cannot read the memory quantity {text!r}")
    return int(number / 2**20)


def node_params(cluster: SlurmCluster, ns) -> list[tuple[str, str]] | None:
    """``NodeName`` parameters for one node set, as the rendered slurmd would register it."""
    if node_names(cluster, ns) is None:
        return None
    itype = get_instance_type(ns.instance_type)
    limits = workers.slurmd_resources(ns)["limits"]
    cpus = int(float(limits["cpu"])) if "cpu" in limits else itype.vcpus
    fields: dict[str, str] = {"CPUs": str(cpus), "RealMemory": str(_quantity_mib(limits["memory"]))}
    for key, value in dict(pairs(workers.slurmd_conf(ns))).items():
        known = {k.lower(): k for k in fields}
        if key.lower() == "state":
            continue
        fields.pop(known.get(key.lower(), key), None)
        fields[key] = value
    fields["State"] = "CLOUD"
    return list(fields.items())


def render_gres_conf(cluster: SlurmCluster) -> str | None:
    """gres.conf with counts only: no device files exist here (or need to)."""
    lines = ["# slinkyml sbatch check: counts only (no slurmd, no devices)"]
    for ns in cluster.node_sets:
        acc = get_instance_type(ns.instance_type).accelerator
        hosts = node_names(cluster, ns)
        count = workers.accelerator_count(ns)
        if acc is None or hosts is None or not count:
            continue
        name = "gpu" if acc.kind == "nvidia" else "neuron"
        lines.append(f"NodeName={hosts} Name={name} Type={acc.gres_type} Count={count}")
    return "\n".join(lines) + "\n" if len(lines) > 1 else None


def controller_lines(cluster: SlurmCluster) -> tuple[dict[str, str], list[Line], list[str]]:
    """The rendered Controller's slurm.conf records split into (settings, records, ignored keys)."""
    settings: dict[str, str] = {}
    records: list[Line] = []
    ignored: list[str] = []
    for line in workers.slurm_conf(cluster).lines:
        if line.is_comment:
            continue
        if line.is_record:
            records.append(line)
        elif line.key.lower() in OWNED_KEYS:
            ignored.append(line.key)
        else:
            settings[line.key] = line.value
    return settings, records, ignored


def partition_names(cluster: SlurmCluster) -> list[str]:
    """Partitions the rendered Controller declares, in order."""
    return [line.value for line in workers.slurm_conf(cluster).partitions()]


def render_slurm_conf(cluster: SlurmCluster, *, state_dir: Path, port: int, slurmd_port: int,
                      munge_socket: Path, user: str | None = None, host: str | None = None,
                      plugin_dir: Path | None = None) -> str:
    """slurm.conf for the throw-away slurmctld (pure; see the module docstring for each choice)."""
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
    if plugin_dir:  # another release's slurmctld: its plugins, not the machine's Slurm's
        owned["PluginDir"] = str(plugin_dir)
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
    conf = SlurmConfBuilder().comment("Written by `slinkyml sbatch check`: a throw-away slurmctld for cluster "
                                      f"{cluster.name!r}; no slurmd, nodes State=CLOUD.")
    conf.set_all({**owned, **defaults, **settings}.items())
    for ns in cluster.node_sets:
        params = node_params(cluster, ns)
        if params is not None:
            conf.node(str(node_names(cluster, ns)), params)
    for ns in cluster.node_sets:
        hosts = node_names(cluster, ns)
        nodeset = names.nodeset(cluster, ns)
        # a node set scaled to 0 is an empty NodeSet (no node has that feature)
        conf.nodeset(nodeset, [("Nodes", hosts)] if hosts else [("Feature", nodeset)])
    # a user's record lines as Slurm reads them: comments and surrounding blanks dropped
    conf.add(Line(r.key, r.value, r.params, r.options) for r in records)
    return conf.build().text()


# ------------------------------------------------------------------ the throw-away controller


class ThrowawayController(ThrowawaySlurmctld):
    """A throw-away slurmctld configured as the cluster in ``cluster`` (see the module docstring).

    >>> with ThrowawayController(load_spec("manifests/h100-efa/cluster.yaml")) as ctl:  # doctest: +SKIP
    ...     ctl.check("sbatch/nccl-allreduce.sbatch").line()
    """

    def __init__(self, cluster: SlurmCluster, *, munge_socket: str | os.PathLike[str] = DEFAULT_MUNGE_SOCKET,
                 start_timeout: float = 30.0, install: roots.SlurmInstall | None = None):
        super().__init__(self._confs, munge_socket=munge_socket, start_timeout=start_timeout,
                         install=install or slurm_for(cluster.slurm_version))
        self.cluster = cluster

    def _confs(self, state_dir: Path, port: int, slurmd_port: int, munge_socket: Path) -> tuple[str, str | None]:
        return (render_slurm_conf(self.cluster, state_dir=state_dir, port=port, slurmd_port=slurmd_port,
                                  munge_socket=munge_socket, plugin_dir=self.install.plugin_dir),
                render_gres_conf(self.cluster))

    # -- the check -----------------------------------------------------------------------
    def check(self, script: str | os.PathLike[str], *, partition: str | None = None,
              label: str | None = None) -> ShapeResult:
        """``sbatch --test-only`` of one script file against this controller."""
        args = ["--test-only"]
        if partition:
            args += ["--partition", partition]
        result = self.slurm.run("sbatch", [*args, str(script)], check=False, retries=1, timeout=60)
        return replace(parse_test_only(label or str(script), self.cluster.name, result.returncode,
                                       result.stdout + "\n" + result.stderr), slurm=self.version)


_DIRECTIVE = re.compile(r"^#SBATCH\s+(?:--time[= ]|-t\s*)(?P<time>\S+)|^#SBATCH\s+--signal[= ](?P<signal>\S+)")


def script_warnings(text: str) -> tuple[str, ...]:
    """Warnings from a script's own ``#SBATCH`` lines: a ``--signal`` lead that leaves no time to
    checkpoint within ``--time`` (sbatch's default lead is 60 s)."""
    limit = signal = None
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            break  # sbatch reads directives only before the first command
        match = _DIRECTIVE.match(line.strip())
        if match:
            limit = match["time"].strip('"') if match["time"] else limit
            signal = match["signal"].strip('"') if match["signal"] else signal
    if limit is None or signal is None or time_limit_seconds(limit) is None:
        return ()
    name, _, lead = signal.rpartition(":")[2].partition("@")
    warning = stop_signal_warning(time_limit_seconds(limit) or 0, int(lead) if lead.isdigit() else 60, name, limit)
    return (warning,) if warning else ()


def parse_test_only(script: str, cluster: str, returncode: int, output: str) -> ShapeResult:
    """Read ``sbatch --test-only``'s answer (the same words in 22.05, 24.11 and 26.05)."""
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
        return load_spec(Path(cluster))
    except SpecError as exc:  # every problem, each naming the flag, file and line
        raise SpecError(problems=[Problem(p.path, p.message, f"--cluster: {p.source}" if p.source else "--cluster",
                                          p.line) for p in exc.problems]) from None


def _script_text(path: Path, label: str) -> str | None:
    """Rendered text for a JOB.yaml, None for a script file (used as is)."""
    if path.suffix in (".yaml", ".yml"):
        return render_sbatch(JobSpec.from_yaml(path))  # its errors name the file and line
    if not path.is_file():
        raise SlinkyError(f"{label}: cannot read: No such file or directory")
    if not os.access(path, os.R_OK):
        raise SlinkyError(f"{label}: cannot read: Permission denied")
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
            result = ctl.check(path, partition=partition, label=label)
            results.append(replace(result, warnings=script_warnings(path.read_text(errors="replace"))))
    return results
