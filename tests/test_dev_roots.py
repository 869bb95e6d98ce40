"""Another Slurm release for the local cluster (``--slurm-version``): the root's paths, the configs
that point into it, and how client commands find it. The live cluster itself is tested by the
tests marked ``slurm2605`` (``make test`` runs them on a 26.05 cluster)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slinkyml.dev import DevClusterSpec, LocalCluster
from slinkyml.dev.slurm import roots
from slinkyml.dev.slurm.config import render_identity, render_slurm_conf, render_slurmdbd_conf
from slinkyml.errors import SlinkyError
from slinkyml.slurm import Slurm, SlurmVersion
from slinkyml.slurm.roots import MARKER, SlurmInstall, find, root_ok
from slinkyml.slurm.runner import clients_beside

ROOT = Path("/var/lib/slinkyml/roots/sid-26.05")


def test_a_roots_programs_are_its_own_never_the_alternatives_links(tmp_path):
    slurm = SlurmInstall("26.05", tmp_path)
    assert slurm.program("slurmctld") == f"{tmp_path}/usr/sbin/slurmctld-wlm"  # slurmctld → /etc/alternatives
    assert slurm.program("slurmstepd") == f"{tmp_path}/usr/sbin/slurmstepd-wlm"
    assert slurm.program("sbatch") == f"{tmp_path}/usr/bin/sbatch"
    assert slurm.plugin_dir == tmp_path / "usr/lib/x86_64-linux-gnu/slurm-wlm"
    system = SlurmInstall()
    assert system.is_system and system.program("slurmctld") == "slurmctld" and system.plugin_dir is None


def test_configs_name_the_roots_plugins_only_when_there_is_a_root(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, controller_host="ctl", slurm_version="26.05")
    plugins = tmp_path / "root/usr/lib/x86_64-linux-gnu/slurm-wlm"
    assert f"\nPluginDir={plugins}\n" in render_slurm_conf(spec, SlurmVersion(26, 5, 5), plugins)
    assert f"\nPluginDir={plugins}\n" in render_slurmdbd_conf(spec, "pw", plugins)
    assert "PluginDir" not in render_slurm_conf(spec, SlurmVersion(22, 5, 8))
    assert "PluginDir" not in render_slurmdbd_conf(spec, "pw")


def test_unknown_release_is_one_line_naming_the_choices():
    with pytest.raises(SlinkyError, match=r"--slurm-version: expected one of system, 26.05, got '25.11'"):
        roots.install("25.11")


def test_the_release_is_part_of_the_saved_identity(tmp_path, monkeypatch):
    """`down`/`status` of a 26.05 state dir find its binaries whatever the environment says."""
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, bridge="slk26t", node_prefix="q", subnet="10.250.0.0/24",
                          slurm_version="26.05")
    (tmp_path / "cluster.json").write_text(render_identity(spec))
    monkeypatch.delenv("SLINKYML_DEV_SLURM_VERSION", raising=False)
    found = LocalCluster(tmp_path, gpus=0)
    assert found.spec.slurm_version == "26.05"
    assert found.install.program("slurmd").endswith("/sid-26.05/usr/sbin/slurmd-wlm")


def test_a_state_dir_keeps_its_release(tmp_path, monkeypatch):
    """A database made by 22.05's slurmdbd is not handed to 26.05's (nor back): one line, nothing started."""
    monkeypatch.delenv("SLINKYML_DEV_SLURM_VERSION", raising=False)
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, bridge="slk26t", node_prefix="q", subnet="10.250.0.0/24")
    (tmp_path / "cluster.json").write_text(render_identity(spec))
    (tmp_path / "mariadb").mkdir()
    cluster = LocalCluster(tmp_path, gpus=0, slurm_version="26.05")
    with pytest.raises(SlinkyError, match=r"--slurm-version: the cluster in .* runs Slurm system; use another "
                                          r"--state-dir for 26.05"):
        cluster.up()
    assert not (tmp_path / "etc").exists()


def test_client_commands_beside_a_state_dirs_conf(tmp_path):
    """A slurm.conf in STATE/etc/ with STATE/bin/sbatch uses those commands; any other conf the PATH's."""
    (tmp_path / "etc").mkdir()
    conf = str(tmp_path / "etc" / "slurm.conf")
    assert clients_beside(conf) is None and Slurm(conf).bin_dir is None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sbatch").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "bin" / "sbatch", 0o755)
    assert clients_beside(conf) == str(tmp_path / "bin") and Slurm(conf).bin_dir == str(tmp_path / "bin")
    assert Slurm(conf, bin_dir="/elsewhere").bin_dir == "/elsewhere"  # explicit wins
    assert clients_beside(str(tmp_path / "slurm.conf")) is None and clients_beside(None) is None


def test_restapi_versions_of_26_05_are_what_its_slurmrestd_serves():
    assert SlurmVersion(26, 5, 5).restapi_versions == ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42")
    assert SlurmVersion(26, 5, 5).restd_refuses_root and not SlurmVersion(24, 11, 5).restd_refuses_root


@pytest.mark.slurm2605
@pytest.mark.skipif(not (ROOT / MARKER).exists(), reason="no Slurm 26.05 root built on this machine "
                    "(`slinkyml dev up --slurm-version 26.05` builds it)")
def test_built_root_runs_on_the_host_with_its_own_libraries():
    """The relinked daemons start from the host's filesystem and print their own release; the marker
    records what was built."""
    assert root_ok("26.05", ROOT)
    marker = json.loads((ROOT / MARKER).read_text())
    assert marker["release"] == "26.05" and marker["suite"] == "sid"
    assert str(find("26.05").version()).startswith("26.05.")


@pytest.mark.slurm
@pytest.mark.slurm2605
def test_session_cluster_is_driven_by_its_own_release(local_cluster, slurm, cli):
    """Daemons, the client commands slinkyml picks and `dev env`'s PATH are all the cluster's release
    (on a 26.05 cluster: the root's relinked programs, never the machine's Slurm)."""
    spec = local_cluster.spec
    assert slurm.version == local_cluster.version
    if not hasattr(local_cluster, "install"):  # the Docker cluster: its release is the images', its commands bin/'s
        code, out, _ = cli("dev", "env", "--state-dir", str(spec.state_dir))
        assert code == 0 and f"export SLURM_CONF={spec.slurm_conf}" in out and f"export PATH={spec.bin_dir}:" in out
        assert slurm.bin_dir == str(spec.bin_dir) and slurm.executable("sbatch") == f"{spec.bin_dir}/sbatch"
        assert slurm.run("sbatch", ["--version"]).stdout.split()[-1] == str(local_cluster.version)  # "slurm-wlm 26.05.5"
        assert not spec.restd_socket.exists()
        return
    install = local_cluster.install
    for daemon in local_cluster._daemons():
        if daemon.name.startswith(("slurmctld", "slurmdbd")):
            exe = os.path.realpath(f"/proc/{daemon.pid}/exe")
            assert exe == os.path.realpath(shutil.which(install.program(daemon.name)) or "")
    code, out, _ = cli("dev", "env", "--state-dir", str(spec.state_dir))
    assert code == 0 and f"export SLURM_CONF={spec.slurm_conf}" in out
    if install.is_system:
        assert "PATH" not in out and slurm.bin_dir is None
    else:
        assert f"export PATH={spec.bin_dir}:" in out and slurm.bin_dir == str(spec.bin_dir)
        assert slurm.executable("sbatch") == f"{spec.bin_dir}/sbatch"
        assert os.path.realpath(slurm.executable("sbatch")) == str(install.root / "usr/bin/sbatch")
        assert str(local_cluster.version).startswith(spec.slurm_version + ".")
    if local_cluster.version.restd_refuses_root:  # no socket file for REST clients to try in vain
        assert not spec.restd_socket.exists()


def test_daemons_of_a_26_05_cluster_are_known_without_running_its_programs(tmp_path, monkeypatch):
    """`down`/`status` list the daemons of a 26.05 state dir even when its root is gone: the JWT
    slurmrestd unprivileged, no unix-socket one, slurmd with the root's slurmstepd."""
    monkeypatch.setattr("slinkyml.slurm.roots.ROOTS_DIR", tmp_path / "roots")
    cluster = LocalCluster(tmp_path / "state", nodes=2, gpus=0, slurm_version="26.05", bridge="slk26t",
                           node_prefix="q", subnet="10.250.0.0/24")
    daemons = {d.name: d for d in cluster._daemons()}
    assert "slurmrestd-unix" not in daemons
    assert daemons["slurmrestd-jwt"].argv[:4] == ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    stepd = str(tmp_path / "roots/sid-26.05/usr/sbin/slurmstepd-wlm")
    assert daemons["slurmd-q1"].argv[-2:] == ["-d", stepd]
    assert daemons["slurmctld"].argv[0] == str(tmp_path / "roots/sid-26.05/usr/sbin/slurmctld-wlm")


def test_down_stops_a_daemon_the_cluster_no_longer_runs_but_never_a_stranger(tmp_path, monkeypatch):
    """A PID file left by a daemon this release no longer starts (a unix-socket slurmrestd of a 26.05
    state dir) is stopped by name at `down`; a PID file whose process is not that daemon is dropped,
    and the process left alone."""
    monkeypatch.setattr("slinkyml.slurm.roots.ROOTS_DIR", tmp_path / "roots")
    cluster = LocalCluster(tmp_path / "state", nodes=2, gpus=0, slurm_version="26.05", bridge="slk26t",
                           node_prefix="q", subnet="10.250.0.0/24")
    pids = cluster.spec.run / "daemons"
    pids.mkdir(parents=True)
    ours = subprocess.Popen(["bash", "-c", "exec -a slurmrestd sleep 60"])
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        (pids / "slurmrestd-unix.pid").write_text(f"{ours.pid}\n")
        (pids / "slurmrestd-old.pid").write_text(f"{stranger.pid}\n")
        cluster._stop_leftovers()
        assert ours.wait(timeout=20) is not None
        assert stranger.poll() is None
        assert not any(pids.iterdir())
    finally:
        for proc in (ours, stranger):
            proc.kill()
            proc.wait()
