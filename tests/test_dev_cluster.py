"""The local multi-node Slurm cluster, against its real daemons."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slinkyml.dev import DevClusterSpec, LocalCluster
from slinkyml.dev.slurm.cluster import missing_plugins
from slinkyml.dev.slurm.config import (
    CRED_EXPIRE_S,
    ENV_OPTIONS,
    SYSTEM_MUNGE_SOCKET,
    cgroups_unusable,
    options_from_env,
    render_cgroup_conf,
    render_gres_conf,
    render_hosts_block,
    render_node_addresses,
    render_plugstack_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    saved_node_addresses,
)
from slinkyml.dev.slurm.network import strip_hosts_block
from slinkyml.dev.slurm.ownership import conflicts, legacy_identity, read_claims, removable
from slinkyml.errors import SlinkyError, SpecError
from slinkyml.process import Daemon
from slinkyml.slurm import SlurmVersion


# -- pure rendering -------------------------------------------------------------------------
def test_slurm_conf_has_the_settings_the_cluster_depends_on(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=3, controller_host="ctl")
    conf = render_slurm_conf(spec, SlurmVersion(22, 5, 8))
    for line in ("ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup", "SelectType=select/cons_tres",
                 "PriorityType=priority/multifactor", "AccountingStorageEnforce=associations,limits,qos",
                 "JobAcctGatherFrequency=task=1", "SchedulerParameters=batch_sched_delay=0",
                 "SlurmctldHost=ctl(10.213.0.1)"):
        assert line in conf
    assert "NodeName=n3 NodeAddr=10.213.0.13" in conf
    assert "Gres" not in conf  # no GPUs


def test_gpu_machine_gets_gres(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, gpus=4, controller_host="ctl")
    conf = render_slurm_conf(spec, SlurmVersion(24, 11, 1))
    assert "GresTypes=gpu" in conf and "Gres=gpu:2" in conf
    gres = render_gres_conf(spec)
    assert "NodeName=n1 Name=gpu File=/dev/nvidia0,/dev/nvidia1" in gres
    assert "NodeName=n2 Name=gpu File=/dev/nvidia2,/dev/nvidia3" in gres


def test_preemption_only_when_asked_for(tmp_path):
    """preempt_grace_s: partition_prio preemption with a preemptible partition (GraceTime) and an
    urgent one on the same nodes, as records; none by default."""
    assert "Preempt" not in render_slurm_conf(DevClusterSpec(state_dir=tmp_path, nodes=2), SlurmVersion(22, 5, 8))
    conf = render_slurm_conf(DevClusterSpec(state_dir=tmp_path, nodes=2, preempt_grace_s=45), SlurmVersion(22, 5, 8))
    lines = conf.splitlines()
    assert "PreemptType=preempt/partition_prio" in lines and "PreemptMode=REQUEUE" in lines
    assert ("PartitionName=preemptible Nodes=n1,n2 PriorityTier=1 GraceTime=45 MaxTime=INFINITE State=UP"
            in lines)
    assert "PartitionName=urgent Nodes=n1,n2 PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP" in lines


def test_spank_plugins_are_loaded_through_our_own_plugstack_conf(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, controller_host="ctl",
                          spank_plugins=["/opt/pyxis/spank_pyxis.so  runtime_path=/run/pyxis", "/opt/x.so"])
    assert spec.spank_plugins == ("/opt/pyxis/spank_pyxis.so runtime_path=/run/pyxis", "/opt/x.so")
    assert spec.spank_plugin_paths == [Path("/opt/pyxis/spank_pyxis.so"), Path("/opt/x.so")]
    conf = render_slurm_conf(spec, SlurmVersion(22, 5, 8))
    assert f"\nPlugStackConfig={tmp_path}/etc/plugstack.conf\n" in conf
    plugstack = render_plugstack_conf(spec).splitlines()
    assert plugstack[1:] == ["required /opt/pyxis/spank_pyxis.so runtime_path=/run/pyxis", "required /opt/x.so"]
    # none: no PlugStackConfig, and no file (Slurm would read plugstack.conf next to slurm.conf anyway)
    plain = DevClusterSpec(state_dir=tmp_path, nodes=2, controller_host="ctl")
    assert "PlugStack" not in render_slurm_conf(plain, SlurmVersion(24, 11, 1))
    assert render_plugstack_conf(plain) is None


def test_hosts_block_is_replaced_not_duplicated(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2)
    base = "127.0.0.1 localhost\n"
    once = base + render_hosts_block(spec)
    assert strip_hosts_block(once, spec) == base
    assert "10.213.0.12 n2" in once
    assert f"10.213.0.1 {spec.controller_host}-slkml0" in once  # reverse lookups of munge's origin stay local


@pytest.mark.parametrize("field, value, flag", [
    ("nodes", 0, "--nodes"), ("nodes", 1025, "--nodes"), ("subnet", "10.0.0.0/30", "--subnet"),
    ("subnet", "not-a-net", "--subnet"), ("slurmctld_port", 80, "--slurmctld-port"),
    ("cluster_name", "Bad Name", "--cluster-name"), ("spank_plugins", ("spank_pyxis.so",), "--spank-plugin"),
    ("spank_plugins", ("/a.so\nrequired /b.so",), "--spank-plugin"), ("slurm_version", "25.11", "--slurm-version"),
    ("preempt_grace_s", -1, "--preempt-grace"), ("preempt_grace_s", "30", "--preempt-grace"),
])
def test_bad_spec_names_the_flag(tmp_path, field, value, flag):
    with pytest.raises(SpecError) as info:
        DevClusterSpec(state_dir=tmp_path, **{field: value})
    assert info.value.path == flag


def test_cgroup_conf_only_where_slurm_loads_a_cgroup_plugin():
    """24.05+ slurmd loads cgroup/v1|v2 unless cgroup.conf says CgroupPlugin=disabled (seen on 24.11.5)."""
    assert render_cgroup_conf(SlurmVersion(22, 5, 8), cgroups=False) is None
    assert "CgroupPlugin=disabled" in render_cgroup_conf(SlurmVersion(24, 11, 5), cgroups=False)


def test_cgroups_enforce_memory_and_cpus_by_default(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2)
    conf = render_slurm_conf(spec, SlurmVersion(22, 5, 8))
    assert "\nProctrackType=proctrack/cgroup\n" in conf and "\nTaskPlugin=task/cgroup\n" in conf
    for version in (SlurmVersion(22, 5, 8), SlurmVersion(26, 5, 5)):
        lines = render_cgroup_conf(version, cgroups=True).splitlines()
        assert {"CgroupPlugin=cgroup/v1", "CgroupAutomount=no", "ConstrainRAMSpace=yes", "ConstrainCores=yes"} <= set(lines)
    off = render_slurm_conf(DevClusterSpec(state_dir=tmp_path, nodes=2, cgroups=False), SlurmVersion(22, 5, 8))
    assert "\nProctrackType=proctrack/linuxproc\n" in off and "\nTaskPlugin=task/none\n" in off


V1 = "".join(f"cgroup /sys/fs/cgroup/{c} cgroup rw,relatime,{c} 0 0\n" for c in ("memory", "cpuset", "freezer"))


@pytest.mark.parametrize(("mounts", "writable", "why"), [
    ("tmpfs /sys/fs/cgroup tmpfs rw 0 0\n" + V1, True, ""),
    ("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n", True, "cgroup v2 only at /sys/fs/cgroup"),
    ("tmpfs /sys/fs/cgroup tmpfs ro 0 0\n" + V1, False, "/sys/fs/cgroup/memory is read-only"),
    (V1.replace("cpuset", "cpu"), True, "no cgroup v1 cpuset"),
], ids=["v1", "v2-only", "read-only", "no-cpuset"])
def test_dev_up_says_in_one_line_why_cgroups_are_off(mounts, writable, why):
    """The reason ``dev up`` prints (see LocalCluster._check_cgroups) from /proc/self/mounts."""
    said = cgroups_unusable(mounts, lambda _path: writable)
    assert said.startswith(why) and "\n" not in said


def test_env_options_move_a_second_cluster_out_of_the_way():
    env = {"SLINKYML_DEV_SUBNET": "10.215.0.0/24", "SLINKYML_DEV_BRIDGE": "slkml24",
           "SLINKYML_DEV_NODE_PREFIX": "t", "SLINKYML_DEV_PORT_BASE": "7817",
           "SLINKYML_DEV_MARIADB_PORT": "14306", "SLINKYML_DEV_SPANK_PLUGINS": "/p/spank_pyxis.so a=1; /p/b.so;",
           "SLINKYML_DEV_SLURM_VERSION": "26.05", "UNRELATED": "x"}
    assert options_from_env(env) == {
        "subnet": "10.215.0.0/24", "bridge": "slkml24", "node_prefix": "t", "slurmctld_port": 7817,
        "slurmd_port": 7818, "slurmdbd_port": 7819, "slurmrestd_port": 7820, "mariadb_port": 14306,
        "spank_plugins": ("/p/spank_pyxis.so a=1", "/p/b.so"), "slurm_version": "26.05"}
    assert options_from_env({}) == {} and options_from_env({"SLINKYML_DEV_BRIDGE": " "}) == {}
    assert set(ENV_OPTIONS) == {k for k in env if k.startswith("SLINKYML_DEV_")}


@pytest.mark.parametrize("var, value", [("SLINKYML_DEV_PORT_BASE", "65534"), ("SLINKYML_DEV_PORT_BASE", "80"),
                                        ("SLINKYML_DEV_MARIADB_PORT", "abc")])
def test_bad_env_option_names_the_variable(var, value):
    with pytest.raises(SpecError) as info:
        options_from_env({var: value})
    assert info.value.path == var


def test_local_cluster_takes_env_defaults_but_arguments_win(tmp_path, monkeypatch):
    monkeypatch.setenv("SLINKYML_DEV_BRIDGE", "slkml24")
    monkeypatch.setenv("SLINKYML_DEV_NODE_PREFIX", "t")
    monkeypatch.setenv("SLINKYML_DEV_PORT_BASE", "7817")
    monkeypatch.setenv("SLINKYML_DEV_SUBNET", "10.215.0.0/24")
    spec = LocalCluster(tmp_path, nodes=2, gpus=0).spec
    assert (spec.bridge, spec.node_names, spec.slurmd_port, spec.netns("t1")) == ("slkml24", ["t1", "t2"], 7818,
                                                                                  "slkml-t1")
    spec = LocalCluster(tmp_path, nodes=2, gpus=0, subnet="10.216.0.0/24", slurmctld_port=None).spec
    assert spec.subnet == "10.216.0.0/24" and spec.slurmctld_port == 7817  # None = "not given"
    monkeypatch.setenv("SLINKYML_DEV_SUBNET", "bogus")
    with pytest.raises(SpecError, match="--subnet"):
        LocalCluster(tmp_path, gpus=0)


def test_missing_jwt_plugin_is_named_with_its_package(tmp_path):
    """Debian 13 (24.11) ships auth/jwt in slurm-wlm-jwt-plugin, which slurm-wlm does not pull in."""
    plugins = tmp_path / "lib" / "x86_64-linux-gnu" / "slurm-wlm"
    plugins.mkdir(parents=True)
    (plugins / "auth_munge.so").touch()
    globs = (str(tmp_path / "lib" / "*" / "slurm-wlm"),)
    assert missing_plugins(globs) == ["auth/jwt plugin (Debian package slurm-wlm-jwt-plugin)"]
    (plugins / "auth_jwt.so").touch()
    assert missing_plugins(globs) == []
    assert missing_plugins((str(tmp_path / "nowhere"),)) == []


def test_own_child_counts_as_running_while_it_execs(tmp_path):
    """Our daemons exec nsenter → unshare → sh → slurmd; /proc shows no command line mid-exec."""
    daemon = Daemon("sleeper", ["sleep", "30"], pid_file=tmp_path / "p.pid", log_file=tmp_path / "l.log",
                    match="slurmd")  # never matches: only "our own live child" can make it running
    pid = daemon.start()
    try:
        assert daemon.pid == pid and daemon.running
        stranger = Daemon("sleeper", ["sleep"], pid_file=tmp_path / "p.pid", log_file=tmp_path / "l.log",
                          match="slurmd")
        assert stranger.pid is None  # a PID file alone is not proof
    finally:
        assert daemon.stop(timeout=5)
    assert not daemon.running


def test_a_daemon_runs_in_the_root_folder_not_where_it_was_started(tmp_path, monkeypatch):
    """A daemon started from a folder that is removed later (a CI clone) does not keep it as its cwd."""
    started_in = tmp_path / "clone"
    started_in.mkdir()
    monkeypatch.chdir(started_in)
    daemon = Daemon("sleeper", ["sleep", "30"], pid_file=tmp_path / "p.pid", log_file=tmp_path / "l.log")
    pid = daemon.start()
    try:
        assert Path(f"/proc/{pid}/cwd").resolve() == Path("/")
    finally:
        assert daemon.stop(timeout=5)


def test_cli_bad_nodes_is_one_line(cli):
    code, out, err = cli("dev", "up", "--nodes", "0")
    assert code == 2
    assert err.strip() == "slinkyml: error: --nodes: must be an integer from 1 to 1024, got 0"


@pytest.mark.slurm
def test_cli_missing_spank_plugin_is_refused_before_anything_starts(cli, tmp_path):
    code, _, err = cli("dev", "up", "--state-dir", str(tmp_path / "state"), "--nodes", "1",
                       "--spank-plugin", f"{tmp_path}/spank_pyxis.so runtime_path=/run/pyxis")
    assert code == 2
    assert err.strip() == f"slinkyml: error: --spank-plugin: no such plugin file: {tmp_path}/spank_pyxis.so"
    assert not (tmp_path / "state").exists()


def test_cli_missing_package_is_one_line(tmp_path):
    """Without the Slurm packages on PATH: one line naming what to install, no traceback."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "SLINKYML_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "up", "--nodes", "2"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slinkyml: error: missing: slurmctld")
    assert "Traceback" not in proc.stderr


# -- the real cluster -------------------------------------------------------------------------
@pytest.mark.slurm
def test_busy_port_is_refused_before_anything_starts(local_cluster, tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        other = LocalCluster(tmp_path / "other", nodes=2, mariadb_port=port, slurmctld_port=16917,
                             slurmdbd_port=16919, slurmrestd_port=16920, bridge="slkmlbp0",
                             subnet="10.219.0.0/24", node_prefix="busyport")  # names no other cluster uses
        with pytest.raises(SlinkyError, match=rf"--mariadb-port: port {port} .* already in use"):
            other.up()
        assert not any(d.running for d in other._daemons())
    assert local_cluster.running  # the real cluster was not touched


@pytest.mark.slurm2605
@pytest.mark.slurm
def test_all_daemons_and_nodes_are_up(local_cluster):
    status = local_cluster.status()
    assert status["running"], status
    assert set(status["nodes"]) == set(local_cluster.spec.node_names)
    assert all(state in ("idle", "mixed", "allocated", "completing") for state in status["nodes"].values())


@pytest.mark.slurm2605
@pytest.mark.slurm
def test_two_node_job_sees_two_hostnames(local_cluster, slurm):
    out = slurm.run("srun", ["-N2", "--ntasks-per-node=1", "hostname"], timeout=60).stdout.split()
    assert len(out) == 2 and len(set(out)) == 2
    assert set(out) <= set(local_cluster.spec.node_names)


@pytest.mark.slurm2605
@pytest.mark.slurm
def test_nodes_reach_each_other_by_name(local_cluster, slurm):
    """Node names resolve and route between namespaces (MASTER_ADDR / gloo depend on it)."""
    spec = local_cluster.spec
    first, second = spec.node_names[:2]
    script = "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print('ok')"
    out = slurm.run("srun", ["-N1", "-w", first, sys.executable, "-c", script, second, str(spec.slurmd_port)],
                    timeout=60).stdout
    assert out.strip() == "ok"


def test_nameservers_are_the_ipv4_ones_off_loopback(tmp_path):
    from slinkyml.dev.slurm.network import nameservers

    conf = tmp_path / "resolv.conf"
    conf.write_text("# comment\nsearch example.org\nnameserver 10.255.255.53\nnameserver 127.0.0.53\n"
                    "nameserver fd00::1\nnameserver 192.168.1.1 # home\noptions edns0\n")
    assert nameservers(conf) == ["10.255.255.53", "192.168.1.1"]
    assert nameservers(tmp_path / "missing") == []


@pytest.mark.slurm
def test_dns_from_a_node_fails_at_once_instead_of_waiting_out_the_resolver(local_cluster, slurm):
    """c10d's TCPStore reverse-resolves IPv4-mapped client addresses (not in /etc/hosts): without
    a route that refuses the unreachable nameservers, each lookup waited 10 s in a node."""
    from slinkyml.dev.slurm.network import nameservers

    spec = local_cluster.spec
    if hasattr(spec, "netns"):
        ns = spec.netns(spec.node_names[0])
        routes = subprocess.run(["ip", "-n", ns, "route", "show"], capture_output=True, text=True, check=True).stdout
        for server in nameservers():
            assert f"prohibit {server} " in routes + " "
    else:  # the Docker cluster's nodes find every node in their /etc/hosts (the engine's DNS never asked)
        hosts = slurm.run("srun", ["-N1", "-w", spec.node_names[0], "cat", "/etc/hosts"], timeout=30).stdout
        assert f"{spec.address(spec.node_names[1])}\t{spec.node_names[1]}" in hosts, hosts
    script = ("import socket\ntry:\n    print(socket.getnameinfo(('::ffff:' + socket.gethostbyname('"
              + spec.node_names[1] + "'), 0), socket.NI_NAMEREQD))\nexcept OSError as e:\n    print('failed', e)")
    out = slurm.run("srun", ["-N1", "-w", spec.node_names[0], sys.executable, "-c", script], timeout=8).stdout
    assert out.strip()  # answered (or failed) well within srun's 8 s, not after the 10 s resolver timeout


@pytest.mark.slurm2605
@pytest.mark.slurm
def test_sbatch_job_appears_in_sacct_as_another_user(slurm, shared_tmp):
    job = slurm.sbatch("#!/bin/bash\n#SBATCH -N2 -o out-%j.txt\nsrun hostname\n", ["-J", "acct-check"],
                       as_user="alice", cwd=shared_tmp)
    deadline = time.monotonic() + 90
    record = ""
    while time.monotonic() < deadline:
        record = slurm.run("sacct", ["-X", "-n", "-P", "-j", str(job), "--format=JobID,User,Account,State,NNodes"]
                           ).stdout.strip()
        if record.endswith("|2") and "COMPLETED" in record:
            break
        time.sleep(0.5)
    assert record == f"{job}|alice|physics|COMPLETED|2"
    assert len(set((shared_tmp / f"out-{job}.txt").read_text().split())) == 2


@pytest.mark.slurm2605
@pytest.mark.slurm
def test_sshare_shows_the_account_tree(slurm):
    out = slurm.run("sshare", ["-a", "-P", "-o", "Account,User,RawShares"]).stdout
    rows = [line.split("|") for line in out.splitlines()[1:]]
    accounts = {row[0].strip() for row in rows}
    assert {"science", "physics", "bio", "ml"} <= accounts
    assert ["physics", "alice", "1"] in [[c.strip() for c in r] for r in rows]
    assert any(r[0].strip() == "science" and r[1] == "" and r[2] == "60" for r in rows)


def _unix_request(path: Path, method: str, url: str, body: dict | None = None) -> dict:
    conn = http.client.HTTPConnection("localhost")
    conn.sock = socket.socket(socket.AF_UNIX)
    conn.sock.connect(str(path))
    conn.request(method, url, body=json.dumps(body) if body else None,
                 headers={"Content-Type": "application/json"})
    return json.loads(conn.getresponse().read())


def _ping_state(reply: dict) -> str:
    """``UP``/``DOWN`` of the first controller: ``ping`` up to v0.0.39, ``pinged`` from v0.0.40 (24.11),
    ``responding`` (true/false) on v0.0.42+ as 26.05 serves it."""
    first = reply["pings"][0]
    if "responding" in first and "pinged" not in first:
        return "UP" if first["responding"] else "DOWN"
    return first.get("pinged", first.get("ping"))


@pytest.mark.slurm
def test_slurmrestd_ping_and_submit_over_unix_socket(local_cluster, slurm, shared_tmp):
    if local_cluster.version.restd_refuses_root:
        pytest.skip(f"Slurm {local_cluster.version} runs no unix-socket slurmrestd (it refuses root; see "
                    "SlurmVersion.restd_refuses_root): the JWT test covers its slurmrestd")
    api = slurm.version.restapi_versions[0]
    ping = _unix_request(local_cluster.spec.restd_socket, "GET", f"/slurm/{api}/ping")
    assert _ping_state(ping) == "UP"
    job = {"name": "rest-unix", "nodes": 1, "current_working_directory": str(shared_tmp),
           "environment": {"PATH": "/usr/bin:/bin"} if api == "v0.0.38" else ["PATH=/usr/bin:/bin"]}
    reply = _unix_request(local_cluster.spec.restd_socket, "POST", f"/slurm/{api}/job/submit",
                          {"script": "#!/bin/bash\ntrue\n", "job": job})
    assert not reply["errors"], reply["errors"]
    shown = slurm.show("job", str(reply["job_id"]))
    assert shown[0]["JobName"] == "rest-unix"


@pytest.mark.slurm2605
@pytest.mark.slurm
def test_slurmrestd_over_tcp_needs_a_valid_jwt(local_cluster, slurm):
    api = slurm.version.restapi_versions[0]
    conn = http.client.HTTPConnection("127.0.0.1", local_cluster.spec.slurmrestd_port, timeout=10)
    conn.request("GET", f"/slurm/{api}/ping", headers={"X-SLURM-USER-NAME": "root",
                                                        "X-SLURM-USER-TOKEN": "not-a-token"})
    refused = conn.getresponse()
    # 22.05 refuses outright; 24.11's rest_auth/jwt passes the token on, slurmctld rejects it,
    # and /ping answers 200 with the controller "DOWN" (other endpoints answer an error status).
    assert refused.status in (401, 403, 500) or _ping_state(json.loads(refused.read())) != "UP"
    conn = http.client.HTTPConnection("127.0.0.1", local_cluster.spec.slurmrestd_port, timeout=10)
    conn.request("GET", f"/slurm/{api}/ping", headers={"X-SLURM-USER-NAME": "root",
                                                        "X-SLURM-USER-TOKEN": local_cluster.token("root")})
    response = conn.getresponse()
    assert response.status == 200
    assert _ping_state(json.loads(response.read())) == "UP"


@pytest.mark.slurm2605
@pytest.mark.slurm
@pytest.mark.netns_only("the daemons' PIDs on the host")
def test_up_is_idempotent_and_fast_when_running(local_cluster):
    before = {d.name: d.pid for d in local_cluster.status()["daemons"]}
    LocalCluster(local_cluster.spec.state_dir, nodes=local_cluster.spec.nodes).up()
    after = {d.name: d.pid for d in local_cluster.status()["daemons"]}
    assert before == after and all(after.values())


@pytest.mark.slurm2605
@pytest.mark.slurm
@pytest.mark.netns_only("its state dir's key files and logs")
def test_secrets_stay_private(local_cluster):
    spec = local_cluster.spec
    for path in (spec.slurmdbd_conf, spec.jwt_key, spec.etc / "db_password", spec.etc / "munge" / "munge.key"):
        assert path.stat().st_mode & 0o077 == 0, path
    password = (spec.etc / "db_password").read_text().strip()
    for log in spec.log.glob("*.log"):
        assert password not in log.read_text(errors="replace"), log
    assert password not in spec.slurm_conf.read_text()


# -- several clusters on one machine: saved identity, ownership, refusals (no daemons) -------------
def _hosts(*specs: DevClusterSpec) -> str:
    return "127.0.0.1 localhost\n" + "".join(render_hosts_block(s) for s in specs)


LEGACY_BLOCK = ("# BEGIN slinkyml dev cluster /var/lib/slinkyml/dev\n10.213.0.1 box-slkml0\n10.213.0.11 n1\n"
                "10.213.0.12 n2\n# END slinkyml dev cluster /var/lib/slinkyml/dev\n")


def test_identity_is_saved_and_read_back(tmp_path):
    from slinkyml.dev.slurm.config import render_identity
    from slinkyml.dev.slurm.ownership import identity_options, read_identity

    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, bridge="slkpyx0", node_prefix="px", subnet="10.214.0.0/24",
                          slurmctld_port=7817, slurmd_port=7818, slurmdbd_port=7819, slurmrestd_port=7820,
                          mariadb_port=14306)
    (tmp_path / "cluster.json").write_text(render_identity(spec))
    saved = read_identity(tmp_path)
    assert saved["node_names"] == ["px1", "px2"] and saved["nodes"] == 2
    again = DevClusterSpec(state_dir=tmp_path, nodes=saved["nodes"], **identity_options(saved))
    assert again == spec
    assert read_identity(tmp_path / "missing") == {}


def test_down_and_status_use_the_saved_identity_not_the_env(tmp_path, monkeypatch):
    from slinkyml.dev.slurm.config import render_identity

    spec = DevClusterSpec(state_dir=tmp_path, nodes=3, bridge="slkpyx0", node_prefix="px", subnet="10.214.0.0/24",
                          slurmctld_port=7817, mariadb_port=14306)
    (tmp_path / "cluster.json").write_text(render_identity(spec))
    monkeypatch.setenv("SLINKYML_DEV_BRIDGE", "slkml0")
    monkeypatch.setenv("SLINKYML_DEV_NODE_PREFIX", "n")
    monkeypatch.setenv("SLINKYML_DEV_PORT_BASE", "6817")
    found = LocalCluster(tmp_path, gpus=0).spec  # what `dev down/status --state-dir` builds
    assert (found.bridge, found.node_names, found.subnet, found.slurmctld_port, found.mariadb_port,
            found.munge_socket_path) == ("slkpyx0", ["px1", "px2", "px3"], "10.214.0.0/24", 7817, 14306,
                                         spec.munge_socket_path)
    explicit = LocalCluster(tmp_path, nodes=2, gpus=0, bridge="slkother").spec  # `up --bridge`: arguments win
    assert explicit.bridge == "slkother" and explicit.node_names == ["px1", "px2"]


def test_old_state_dir_is_read_from_its_own_hosts_block(tmp_path, monkeypatch):
    from slinkyml.dev.slurm import network

    block = LEGACY_BLOCK.replace("/var/lib/slinkyml/dev", str(tmp_path)).replace("slkml0", "slkpyx0")
    block = block.replace(" n1", " px1").replace(" n2", " px2")
    monkeypatch.setattr(network, "claims", lambda: read_claims(block, "box"))
    monkeypatch.delenv("SLINKYML_DEV_BRIDGE", raising=False)
    spec = LocalCluster(tmp_path, gpus=0).spec
    assert (spec.bridge, spec.node_names) == ("slkpyx0", ["px1", "px2"])


def test_hosts_blocks_are_the_registry_of_claims(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path / "lab", nodes=2, bridge="slkpyx0", node_prefix="px",
                          subnet="10.214.0.0/24", slurmctld_port=7817, mariadb_port=14306)
    claims = read_claims(_hosts(spec) + LEGACY_BLOCK, "box.example.org")
    new, old = claims
    assert (new.state_dir, new.bridge, new.node_names, new.subnet) == (str(tmp_path / "lab"), "slkpyx0",
                                                                       ("px1", "px2"), "10.214.0.0/24")
    assert new.ports["slurmctld_port"] == 7817 and new.ports["mariadb_port"] == 14306
    assert new.munge_socket == spec.munge_socket_path
    # written by an older slinkyml: no identity line, read from the names; it used munge's system socket
    assert (old.state_dir, old.bridge, old.node_names, old.ports) == ("/var/lib/slinkyml/dev", "slkml0",
                                                                      ("n1", "n2"), None)
    assert old.munge_socket == SYSTEM_MUNGE_SOCKET and old.netns == ["slkml-n1", "slkml-n2"]
    assert legacy_identity(old) == {"bridge": "slkml0", "node_prefix": "n", "nodes": 2, "node_names": ["n1", "n2"]}


def test_a_second_cluster_with_the_default_names_is_refused_naming_the_flag(tmp_path):
    claims = read_claims(LEGACY_BLOCK, "box")
    second = DevClusterSpec(state_dir=tmp_path / "other", nodes=4)
    problems = conflicts(second, claims)
    assert [p.split(":")[0] for p in problems] == ["--bridge", "--node-prefix", "--subnet"]
    assert "slkml-n1, slkml-n2" in problems[1] and "SLINKYML_DEV_NODE_PREFIX" in problems[1]
    assert all("\n" not in p and "/var/lib/slinkyml/dev" in p for p in problems)
    apart = DevClusterSpec(state_dir=tmp_path / "other", nodes=4, bridge="slkpyx0", node_prefix="px",
                           subnet="10.214.0.0/24")
    assert conflicts(apart, claims) == []
    # its own block is no conflict (an `up` of a running cluster)
    assert conflicts(DevClusterSpec(state_dir=Path("/var/lib/slinkyml/dev"), nodes=4), claims) == []


def test_ports_and_munge_socket_of_another_cluster_are_refused(tmp_path):
    first = DevClusterSpec(state_dir=tmp_path / "a", bridge="slka0", node_prefix="a", subnet="10.220.0.0/24",
                           slurmctld_port=7817, slurmdbd_port=7819, slurmrestd_port=7820, mariadb_port=14306)
    claims = read_claims(_hosts(first), "box")
    second = DevClusterSpec(state_dir=tmp_path / "b", bridge="slkb0", node_prefix="b", subnet="10.221.0.0/24",
                            slurmctld_port=7817, slurmdbd_port=8819, slurmrestd_port=8820, mariadb_port=14306)
    problems = conflicts(second, claims)
    assert [p.split(":")[0] for p in problems] == ["--slurmctld-port", "--mariadb-port"]
    assert "SLINKYML_DEV_PORT_BASE" in problems[0] and "SLINKYML_DEV_MARIADB_PORT" in problems[1]
    shared_socket = replace(second, slurmctld_port=8817, mariadb_port=15306,
                            munge_socket_path=first.munge_socket_path)
    assert [p.split(" ")[:2] for p in conflicts(shared_socket, claims)] == [["munge", "socket"]]


def test_up_refuses_with_one_line_before_starting_anything(tmp_path, monkeypatch):
    from slinkyml.dev.slurm import network

    monkeypatch.setattr(network, "claims", lambda: read_claims(LEGACY_BLOCK, "box"))
    for var in ("SLINKYML_DEV_BRIDGE", "SLINKYML_DEV_NODE_PREFIX", "SLINKYML_DEV_SUBNET"):
        monkeypatch.delenv(var, raising=False)
    cluster = LocalCluster(tmp_path / "other", nodes=2, gpus=0)
    with pytest.raises(SlinkyError) as info:
        cluster._check_claims(network.claims())
    assert str(info.value).startswith("--bridge: bridge slkml0 belongs to the cluster in /var/lib/slinkyml/dev")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "other").exists()


def test_up_refuses_a_munge_socket_another_munged_serves(tmp_path):
    sock_path = tmp_path / "munge.socket.2"
    cluster = LocalCluster(tmp_path / "state", nodes=1, gpus=0, munge_socket_path=str(sock_path))
    munged = cluster.daemon("munged")
    cluster._check_munge(munged)  # nothing listens: ours may start
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(sock_path))
        other.listen()
        with pytest.raises(SlinkyError, match=rf"^munge socket {sock_path} is served by a munged that is not "
                                              "this cluster's"):
            cluster._check_munge(munged)


def test_down_removes_only_what_its_state_dir_owns(tmp_path, monkeypatch):
    """`dev down --state-dir OTHER` without the env it was started with fell back to slkml0/n1..: it
    deleted the default cluster's bridge and namespaces. Now what another block claims stays."""
    from slinkyml.dev.slurm import network

    removed: list = []
    monkeypatch.setattr(network, "claims", lambda: read_claims(LEGACY_BLOCK, "box"))
    monkeypatch.setattr(network, "remove_network", lambda spec, nodes, bridge: removed.append((nodes, bridge)))
    monkeypatch.setattr(network, "remove_hosts", lambda spec: removed.append(spec.state_dir))
    for var in ("SLINKYML_DEV_BRIDGE", "SLINKYML_DEV_NODE_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    state = tmp_path / "lab"
    state.mkdir()
    (state / "nodes").write_text("px1\npx2\n")  # an old state dir: no cluster.json, no hosts block
    assert LocalCluster(state, nodes=2, gpus=0).down() == []
    assert removed == [(["px1", "px2"], False), state]  # not slkml0, not n1/n2 (the default cluster's)
    # the owner itself may remove them
    bridge, nodes = removable(DevClusterSpec(state_dir=Path("/var/lib/slinkyml/dev"), nodes=2), ["n1", "n2"],
                              read_claims(LEGACY_BLOCK, "box"))
    assert (bridge, nodes) == (True, ["n1", "n2"])


def test_hosts_block_of_one_state_dir_leaves_a_longer_namesake_alone(tmp_path):
    spec, longer = DevClusterSpec(state_dir=tmp_path / "dev"), DevClusterSpec(state_dir=tmp_path / "dev2",
                                                                             bridge="slk2", node_prefix="m")
    text = _hosts(spec, longer)
    assert strip_hosts_block(text, spec) == _hosts(longer)


def test_each_state_dir_gets_its_own_munge_socket(tmp_path):
    shared = DevClusterSpec(state_dir=Path("/var/lib/slinkyml/dev"), controller_host="ctl")
    # not the system socket: that one may be the machine's own munge service (another key)
    assert shared.munge_socket_path != SYSTEM_MUNGE_SOCKET
    assert shared.munge_socket_path.startswith("/run/munge/slinkyml-")
    deep = tmp_path / ("x" * 90) / "state"
    other = DevClusterSpec(state_dir=deep, controller_host="ctl")
    assert other.munge_socket_path.startswith("/run/munge/slinkyml-") and len(other.munge_socket_path) < 108
    assert other.munge_socket_path != DevClusterSpec(state_dir=tmp_path / "b").munge_socket_path
    conf = render_slurm_conf(other, SlurmVersion(22, 5, 8))
    # connections to slurmdbd take munge's socket from AccountingStoragePass, the others from AuthInfo
    assert (f"\nAuthInfo=socket={other.munge_socket_path},cred_expire={CRED_EXPIRE_S}\n"
            f"AccountingStoragePass={other.munge_socket_path}\n") in conf
    assert f"AuthInfo=socket={other.munge_socket_path}\n" in render_slurmdbd_conf(other, "pw")


def test_cli_up_has_bridge_and_node_prefix_flags(cli):
    code, _, err = cli("dev", "up", "--bridge", "has space")
    assert code == 2 and err.strip().startswith("slinkyml: error: --bridge: must be a valid interface name")
    code, _, err = cli("dev", "up", "--node-prefix", "Bad")
    assert code == 2 and err.strip().startswith("slinkyml: error: --node-prefix: must be a short lowercase name")


def test_up_with_new_names_removes_the_old_network_of_a_stopped_cluster(tmp_path, monkeypatch):
    from slinkyml.dev.slurm import network
    from slinkyml.dev.slurm.config import render_identity

    old = DevClusterSpec(state_dir=tmp_path, nodes=2, bridge="slka0", node_prefix="a", subnet="10.220.0.0/24")
    (tmp_path / "cluster.json").write_text(render_identity(old))
    removed: list = []
    monkeypatch.setattr(network, "claims", lambda: [])
    monkeypatch.setattr(network, "remove_network",
                        lambda spec, nodes, bridge: removed.append((spec.bridge, nodes, bridge)))
    cluster = LocalCluster(tmp_path, gpus=0, bridge="slkb0", node_prefix="b")
    daemons = {d.name: d for d in cluster._daemons()}
    cluster._move_network(daemons)
    assert removed == [("slka0", ["a1", "a2"], True)]
    removed.clear()
    LocalCluster(tmp_path, nodes=3, gpus=0)._move_network(daemons)  # only the count: nothing to move
    assert removed == []


def test_emulated_node_shape_renders(tmp_path):
    from slinkyml.dev.slurm.config import EMULATED_NODE, render_gres_conf

    spec = DevClusterSpec(state_dir=tmp_path, nodes=300, subnet="10.200.0.0/22", node_prefix="emu", gpus=0,
                          **EMULATED_NODE)
    conf = render_slurm_conf(spec, SlurmVersion.parse("slurm 22.05.8"))
    assert "GresTypes=gpu" in conf and conf.count("Gres=gpu:h100:8 Feature=p5.48xlarge,h100,efa") == 300
    assert "CPUs=192 RealMemory=2097152" in conf and "PartitionName=debug Nodes=emu[1-300] " in conf
    assert render_gres_conf(spec).splitlines()[-1] == "NodeName=emu[1-300] Name=gpu Type=h100 File=/dev/tty[0-7]"
    with pytest.raises(SpecError, match="--emulated-gres"):
        DevClusterSpec(state_dir=tmp_path, node_gres="gpu:lots")
    with pytest.raises(SpecError, match="this machine has GPUs"):
        DevClusterSpec(state_dir=tmp_path, node_gres="gpu:8", gpus=2)


# -- a node moved to another address (dev node readdress) -------------------------------------------
def test_a_moved_node_is_at_its_new_address_in_slurm_conf_and_hosts(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=3, controller_host="ctl", node_addresses=(("n2", "10.213.0.40"),))
    assert [spec.node_addr(i) for i in (1, 2, 3)] == ["10.213.0.11", "10.213.0.40", "10.213.0.13"]
    conf = render_slurm_conf(spec, SlurmVersion(22, 5, 8))
    assert "NodeName=n2 NodeAddr=10.213.0.40 " in conf and "10.213.0.12" not in conf
    assert "10.213.0.40 n2\n" in render_hosts_block(spec) and "10.213.0.12" not in render_hosts_block(spec)
    # the next free address skips the nodes' first ones and every address in use
    assert spec.free_node_addr() == "10.213.0.14"
    assert DevClusterSpec(state_dir=tmp_path, nodes=3, node_addresses=(("n2", "10.213.0.14"),)).free_node_addr() \
        == "10.213.0.15"


def test_moved_addresses_are_saved_and_read_back(tmp_path):
    spec = DevClusterSpec(state_dir=tmp_path, nodes=2, node_addresses=(("n1", "10.213.0.30"),))
    spec.node_addresses_file.write_text(render_node_addresses(spec))
    assert saved_node_addresses(tmp_path) == (("n1", "10.213.0.30"),)
    (tmp_path / "node-addresses.json").write_text("not json")
    assert saved_node_addresses(tmp_path) == ()


@pytest.mark.parametrize(("moved", "needle"), [
    ((("n1", "10.9.9.9"),), "node_addresses.n1: 10.9.9.9 is not a host address of the cluster's subnet"),
    ((("n1", "10.213.0.1"),), "node_addresses.n1: 10.213.0.1 is the controller's address"),
    ((("n1", "10.213.0.255"),), "not a host address"),
    ((("n1", "ten"),), "not an IPv4 address: 'ten'"),
    ((("n1", "10.213.0.30"), ("n2", "10.213.0.30")), "two nodes at one address"),
])
def test_bad_moved_addresses_are_refused(tmp_path, moved, needle):
    with pytest.raises(SpecError, match=re.escape(needle)):
        DevClusterSpec(state_dir=tmp_path, nodes=2, node_addresses=moved)
