"""A Slurm cluster of one test module's own, for tests that kill daemons or re-address nodes: the
session's cluster, which every other test uses, must never see that. Ports, bridge, node names and
subnet are fixed per module so two modules never collide. A second test run beside CI's moves them all:
``$SLINKYML_TEST_PORT_SHIFT`` shifts the ports, ``$SLINKYML_TEST_CLUSTER_TAG`` (a number, 1 to 254)
is appended to the bridge's and the nodes' names and becomes the subnet's third byte."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slinkyml.dev import LocalCluster


def port_shift() -> int:
    return int(os.environ.get("SLINKYML_TEST_PORT_SHIFT", "0") or 0)


def cluster_tag() -> str:
    tag = os.environ.get("SLINKYML_TEST_CLUSTER_TAG", "")
    if tag and not (tag.isdigit() and 1 <= int(tag) <= 254):
        raise ValueError(f"SLINKYML_TEST_CLUSTER_TAG: a number from 1 to 254, got {tag!r}")
    return tag


def require_kubelet_node() -> None:
    """Skip unless this machine can run a kubelet node: root, Debian's containerd and the CNI plugins."""
    # lazy: the kubelet modules' own imports; the Slurm modules that use this file never load them
    import pytest

    from slinkyml.dev.kubernetes.kubenode import CNI_BIN_DIR, CONTAINERD

    if os.geteuid() != 0:
        pytest.skip("the kubelet node needs root (network namespaces, cgroups, mounts)")
    if not (os.access(CONTAINERD, os.X_OK) and (CNI_BIN_DIR / "bridge").is_file()):
        pytest.skip("Debian's containerd and containernetworking-plugins are not installed (`make setup`)")


def kubelet_node(name: str, bridge: str, first_octet: int) -> tuple[str, str, str]:
    """A kubelet test plane's node name, bridge and pod subnet: CI's (``NAME``, ``BRIDGE0``,
    ``10.FIRST.0.0/24``); a run beside it (a port shift) by its cluster tag (``NAME-TAG``, ``BRIDGETAG``,
    ``10.FIRST+1.TAG.0/24``: the node's cgroups are named after it), else ``BRIDGE1``."""
    tag = int(cluster_tag() or 0)
    if not (tag or port_shift()):
        return name, f"{bridge}0", f"10.{first_octet}.0.0/24"
    return f"{name}-{tag}", f"{bridge}{tag or 1}", f"10.{first_octet + 1}.{tag}.0/24"


STATE_ROOT = Path("/var/tmp")
#: the PID of the test process that runs the cluster in a state dir, so the next run knows a leftover
OWNER_FILE = "test-owner.pid"


def process_identity(pid: int) -> str:
    """``PID START``: the start time (clock ticks after boot, /proc/PID/stat field 22) tells a PID the
    kernel handed to a new process apart from the one that wrote it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return f"{pid} {stat.rsplit(')', 1)[1].split()[19]}"


def owner_alive(state: Path) -> bool:
    """Whether the test process that wrote ``state``'s owner file still runs."""
    try:
        written = (state / OWNER_FILE).read_text().strip()
        pid = int(written.split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return process_identity(pid) == written


def release_stale(name: str) -> None:
    """Take down the module cluster ``name`` that a killed test run left (its owner PID is gone): its
    state dir holds the bridge, node names and ports, and the next run's ``up`` would refuse them.
    ``slinkyml-NAME-cluster-*`` are the same leftovers from the runs that made their state dirs with
    mkdtemp. A cluster whose owner still runs is a second run beside this one and is left alone."""
    for state in sorted(STATE_ROOT.glob(f"slinkyml-{name}-cluster*")):
        if not state.is_dir() or owner_alive(state):
            continue
        LocalCluster(state).reset()
        shutil.rmtree(state, ignore_errors=True)


def private_cluster(name: str, *, subnet: str, port_base: int, **options: Any) -> Iterator[LocalCluster]:
    """Up a 4-node cluster named ``name`` (bridge ``slk{name}0``, nodes ``{name}N``) on ``port_base`` to
    ``port_base + 3`` and MariaDB on ``port_base + 7000``; point ``SLURM_CONF`` at it while it runs, then
    reset and remove it."""
    base = port_base + port_shift()
    tag = cluster_tag()
    if tag:
        name += tag
        first, second, _third, rest = subnet.split(".", 3)
        subnet = f"{first}.{second}.{tag}.{rest}"
    state = STATE_ROOT / f"slinkyml-{name}-cluster"
    release_stale(name)
    if state.exists():
        raise RuntimeError(f"{state}: the {name} cluster of a test run that still runs (PID in {OWNER_FILE}); "
                           "a run beside it needs SLINKYML_TEST_CLUSTER_TAG and SLINKYML_TEST_PORT_SHIFT")
    state.mkdir(mode=0o700)
    (state / OWNER_FILE).write_text(process_identity(os.getpid()) + "\n")
    cluster = LocalCluster(state, nodes=4, bridge=f"slk{name}0", node_prefix=name, subnet=subnet,
                           slurmctld_port=base, slurmd_port=base + 1, slurmdbd_port=base + 2,
                           slurmrestd_port=base + 3, mariadb_port=base + 7000, **options)
    saved = os.environ.get("SLURM_CONF")
    try:
        cluster.up()
        os.environ["SLURM_CONF"] = str(cluster.spec.slurm_conf)  # the CLI and Slurm() of the tests
        yield cluster
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        keep_logs(state, name)
        cluster.reset()
        shutil.rmtree(state, ignore_errors=True)


def keep_logs(state: Path, name: str) -> Path:
    """The daemons' logs of the run that just ended, in ``/var/tmp/slinkyml-NAME-logs-last`` until the
    next run: a failure that shows only in a loaded CI run is read from slurmctld's and slurmd's side."""
    kept = STATE_ROOT / f"slinkyml-{name}-logs-last"
    shutil.rmtree(kept, ignore_errors=True)
    if (state / "log").is_dir():  # the dev cluster's log_dir (DevClusterSpec.log_dir)
        shutil.copytree(state / "log", kept, dirs_exist_ok=True)
    return kept


def kept_workdir(request: Any, name: str) -> Iterator[Path]:
    """A world-writable folder for a module's logs and checkpoints, kept when one of its tests failed."""
    path = Path(tempfile.mkdtemp(prefix=f"slinkyml-{name}-", dir="/tmp"))
    path.chmod(0o777)
    failed = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed:
        shutil.rmtree(path, ignore_errors=True)


def cancel_at_end(slurm: Any) -> Iterator[list[int]]:
    """A list the module's tests append their job ids to; every one is cancelled afterwards."""
    ids: list[int] = []
    yield ids
    for job_id in ids:
        slurm.run("scancel", [str(job_id)], check=False, retries=0)
