"""down → up → up again on the session's cluster. Runs last (file name) so it disturbs nothing."""

from __future__ import annotations

import pytest

from slinkyml.dev import LocalCluster
from slinkyml.process import is_alive

pytestmark = [pytest.mark.usefixtures("exclusive_cluster"),  # stops and restarts the session's cluster
              # LocalCluster's lifecycle on the session's state dir: the Docker cluster's down → up (state kept,
              # nothing left in Docker) is test_docker_cluster_live.py's
              pytest.mark.netns_only("the netns cluster's lifecycle: LocalCluster, its daemons' PIDs")]


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_down_then_up_then_up_again(local_cluster, cli):
    spec = local_cluster.spec
    pids = [d.pid for d in local_cluster.status()["daemons"]]
    code, out, _ = cli("dev", "down", "--state-dir", str(spec.state_dir), "--nodes", str(spec.nodes))
    assert code == 0 and "slurmctld" in out
    assert not any(is_alive(pid) for pid in pids)  # stopped by PID (zombies count as stopped)
    code, out, _ = cli("dev", "status", "--state-dir", str(spec.state_dir), "--nodes", str(spec.nodes))
    assert code == 1 and "stopped" in out

    cluster = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True).up()  # warm start
    assert cluster.running
    first = {d.name: d.pid for d in cluster.status()["daemons"]}
    code, out, _ = cli("dev", "up", "--state-dir", str(spec.state_dir), "--nodes", str(spec.nodes))
    assert code == 0
    assert {d.name: d.pid for d in cluster.status()["daemons"]} == first  # idempotent: nothing restarted
    hosts = cluster.slurm.run("srun", ["-N2", "hostname"], timeout=60).stdout.split()
    assert len(set(hosts)) == 2


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_config_change_restarts_the_slurm_daemons(local_cluster):
    """`up` with a different slurm.conf restarts slurmctld/slurmd/slurmrestd; munge and MariaDB stay."""
    spec = local_cluster.spec
    before = {d.name: d.pid for d in local_cluster.status()["daemons"]}
    changed = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True,
                           extra_slurm_conf="PriorityFlags=NO_FAIR_TREE")
    try:
        changed.up()
        after = {d.name: d.pid for d in changed.status()["daemons"]}
        assert after["munged"] == before["munged"] and after["mariadb"] == before["mariadb"]
        assert after["slurmctld"] != before["slurmctld"] and all(after.values())
        assert "NO_FAIR_TREE" in changed.slurm.show_config()["PriorityFlags"]
    finally:
        restored = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True).up()
    assert "NO_FAIR_TREE" not in restored.slurm.show_config().get("PriorityFlags", "")
    assert restored.slurm.run("srun", ["-N2", "true"], timeout=60).returncode == 0


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_a_daemon_failing_mid_start_stops_everything_and_shows_its_log(local_cluster):
    """slurmctld refuses its config after munge, MariaDB and slurmdbd are up: `up` raises one error
    that names the daemon and ends with its log, and leaves nothing running; a good `up` recovers."""
    from slinkyml.dev.slurm.cluster import ClusterStartError

    spec = local_cluster.spec
    before = [d.pid for d in local_cluster.status()["daemons"] if d.pid]
    broken = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True,
                          extra_slurm_conf="SelectType=select/no_such_plugin")
    try:
        with pytest.raises(ClusterStartError) as info:
            broken.up()
        message = str(info.value)
        assert message.startswith("slurmctld exited; last lines of ")
        assert "no_such_plugin" in message  # the log tail says why
        daemons = broken.status()["daemons"]
        assert [d.name for d in daemons if d.pid is not None] == []  # munged, MariaDB, slurmdbd too
        assert before and not any(is_alive(pid) for pid in before)
    finally:
        restored = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True).up()
    assert restored.running and restored.slurm.run("srun", ["-N2", "true"], timeout=60).returncode == 0
