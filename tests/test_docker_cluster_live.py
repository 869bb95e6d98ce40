"""The Docker cluster (``slinkyml dev up --docker``) live: Docker's engine started by the project, the
cluster brought up by a user who is not root (group ``docker``), a job, an array, a requeue and
``slinkyml usage`` through the host's commands (the login container's), jobs and accounting kept across
``down`` and ``up``, and ``dev down`` leaving no container, network or volume behind, the engine stopped
by the ``down`` of the ``up`` that started it; ``dev reset`` removing what ``down`` kept.

Needs root once (the engine, the images from the Debian root, the test user) and Debian's docker.io.
Names, subnets, bridges and ports are the module's own (``SLINKYML_TEST_CLUSTER_TAG`` and
``SLINKYML_TEST_PORT_SHIFT`` move them, as for the other module clusters).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from private_cluster import cluster_tag, port_shift
from tiers import needs

from slinkyml.dev.docker.config import LABEL
from slinkyml.dev.docker.engine import Engine
from slinkyml.process import is_alive

REPO = Path(__file__).resolve().parent.parent
#: the user in group docker who runs the cluster
USER = "slkdocker"
STATE_ROOT = Path("/var/tmp")
TIMEOUT_S = 300


def _names(role: str, index: int, port: int) -> dict[str, str]:
    """The ``SLINKYML_DOCKER_*`` names of the module's cluster number ``index`` (1 or 2): 10.234.INDEX.0/24,
    or with a cluster tag the INDEXth half of 10.235.TAG.0/24."""
    tag = cluster_tag()
    subnet = f"10.235.{tag}.{(index - 1) * 128}/25" if tag else f"10.234.{index}.0/24"
    return {"SLINKYML_DOCKER_NAME": f"slkdt{tag}-{role}", "SLINKYML_DOCKER_SUBNET": subnet,
            "SLINKYML_DOCKER_BRIDGE": f"slkdt{tag}{role[0]}", "SLINKYML_DOCKER_RESTD_PORT": str(port + port_shift())}


def _as(user: str) -> list[str]:
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]


def _python(user: str | None) -> tuple[list[str], str]:
    """The interpreter ``user`` runs slinkyml with, and its PYTHONPATH: this one, or where it lies under a
    folder the user may not enter (a pyenv Python in root's home), the machine's python3 of the same
    minor version with this environment's packages on its path."""
    if user is None or subprocess.run([*_as(user), sys.executable, "-c", "pass"], capture_output=True).returncode == 0:
        return [sys.executable], str(REPO)
    return ["/usr/bin/python3"], os.pathsep.join([str(REPO), *sysconfig_paths()])


def sysconfig_paths() -> list[str]:
    import site

    return site.getsitepackages()


def _cli(*argv: str, env: dict[str, str], user: str | None = None, cwd: Path | None = None,
         timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``slinkyml ARGV`` in a process of its own, as ``user`` when given (setpriv: its groups, docker's)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLINKYML_DOCKER", "DOCKER_HOST", "SLURM_"))}
    home = {"HOME": pwd.getpwnam(user).pw_dir} if user else {}
    python, path = _python(user)
    return subprocess.run([*(_as(user) if user else []), *python, "-m", "slinkyml", *argv], capture_output=True,
                          text=True, env={**clean, "PYTHONPATH": path, **home, **env}, cwd=cwd or "/", timeout=timeout)


def _shell(script: str, env: dict[str, str], user: str, cwd: Path) -> str:
    """A shell line as ``user`` in the cluster's ``dev env`` (its output eval'ed, as a user types it)."""
    exports = _cli("dev", "env", "--docker", env=env, user=user)
    assert exports.returncode == 0, exports.stderr
    done = subprocess.run([*_as(user), "bash", "-c", f"{exports.stdout}\n{script}"], capture_output=True, text=True,
                          cwd=cwd, timeout=TIMEOUT_S, env={"PATH": os.environ["PATH"], "HOME": str(cwd), **env})
    assert done.returncode == 0, f"{script}: {done.stderr}{done.stdout}"
    return done.stdout


@pytest.fixture(scope="module")
@needs("own_cluster")
def engine_cluster():
    """Root's ``dev up --docker`` with no engine running: it starts Docker's engine in its state dir, loads
    the images and brings up a one-node cluster; taken down at the end, when ``down`` stops the engine."""
    if os.geteuid() != 0:
        pytest.skip("starting Docker's engine and building the images need root")
    if not shutil.which("dockerd"):
        pytest.skip("Debian's docker.io is not installed (`make setup`)")
    state = STATE_ROOT / f"slinkyml-docker{cluster_tag()}-engine"
    env = {"SLINKYML_DOCKER_STATE_DIR": str(state), **_names("root", 1, 16831)}
    _cli("dev", "down", "--docker", env=env)  # what a killed run left
    shutil.rmtree(state, ignore_errors=True)
    started = time.monotonic()
    up = _cli("dev", "up", "--docker", "--nodes", "1", env=env)
    assert up.returncode == 0, up.stderr + up.stdout
    engine = Engine(state / "engine")
    yield {"state": state, "env": env, "engine": engine, "host": engine.own_host,
           "seconds": time.monotonic() - started}
    _cli("dev", "down", "--docker", env=env)
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def user_cluster(engine_cluster):
    """A user of group docker (not root) brings up a two-node cluster on that engine: their own state dir
    and shared folder."""
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--groups", "docker", "--shell", "/bin/bash", USER], check=True)
    subprocess.run(["usermod", "-aG", "docker", USER], check=True)
    entry = pwd.getpwnam(USER)
    root = STATE_ROOT / f"slinkyml-docker{cluster_tag()}-user"
    shutil.rmtree(root, ignore_errors=True)
    (root / "work").mkdir(parents=True)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    os.chown(root / "work", entry.pw_uid, entry.pw_gid)
    env = {"DOCKER_HOST": engine_cluster["host"], "SLINKYML_DOCKER_STATE_DIR": str(root / "state"),
           "SLINKYML_DOCKER_SHARES": str(root / "work"), **_names("user", 2, 16832)}
    started = time.monotonic()
    up = _cli("dev", "up", "--docker", "--nodes", "2", env=env, user=USER)
    assert up.returncode == 0, up.stderr + up.stdout
    yield {"root": root, "work": root / "work", "env": env, "seconds": time.monotonic() - started}
    _cli("dev", "down", "--docker", env=env, user=USER)
    shutil.rmtree(root, ignore_errors=True)


def _wait_state(run, job: str, wanted: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = run(f"sacct -X -n -P -j {job} -o State").strip()
        if state == wanted:
            return state
        time.sleep(1)
    return state


def test_a_user_submits_an_array_and_a_requeue_and_reads_usage(user_cluster):
    env, work = user_cluster["env"], user_cluster["work"]

    def run(line: str) -> str:
        return _shell(line, env, USER, work)

    status = _cli("dev", "status", "--docker", "--json", env=env, user=USER)
    assert status.returncode == 0, status.stderr
    assert set(json.loads(status.stdout)["nodes"].values()) == {"idle"}
    # other settings on a running cluster: refused in one line, the cluster left as it was
    refused = _cli("dev", "up", "--docker", "--nodes", "3", env=env, user=USER)
    assert refused.returncode == 2 and "`slinkyml dev down --docker` first" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    status = _cli("dev", "status", "--docker", "--json", env=env, user=USER)
    assert status.returncode == 0 and len(json.loads(status.stdout)["nodes"]) == 2

    job = run("sbatch --parsable --wrap 'hostname; id -un' -o plain-%j.out").strip()
    array = run("sbatch --parsable --array=1-3 -o arr-%A_%a.out --wrap 'echo task $SLURM_ARRAY_TASK_ID'").strip()
    requeued = run("sbatch --parsable --requeue -o requeue-%j.out --open-mode=append "
                   "--wrap 'echo run $SLURM_RESTART_COUNT; sleep $((${SLURM_RESTART_COUNT:-0} ? 1 : 90))'").strip()
    deadline = time.monotonic() + 60
    while "RUNNING" not in run(f"squeue -h -j {requeued} -o %T") and time.monotonic() < deadline:
        time.sleep(0.5)
    run(f"scontrol requeue {requeued}")  # while its first run sleeps (a 6 s one had ended first at load 20)
    assert _wait_state(run, job, "COMPLETED") == "COMPLETED"
    for task in (1, 2, 3):
        assert _wait_state(run, f"{array}_{task}", "COMPLETED") == "COMPLETED"
    # the requeued job runs again after the job credential's lifetime (CRED_EXPIRE_S) and completes
    assert _wait_state(run, requeued, "COMPLETED", timeout=150) == "COMPLETED"

    # results come back in the shared folder, the user's own
    plain = work / f"plain-{job}.out"
    host, name = plain.read_text().split()
    assert host in ("d1", "d2") and name == USER
    assert plain.stat().st_uid == pwd.getpwnam(USER).pw_uid
    assert sorted((work / f"arr-{array}_{t}.out").read_text().strip() for t in (1, 2, 3)) == \
        ["task 1", "task 2", "task 3"]
    runs = [line for line in (work / f"requeue-{requeued}.out").read_text().splitlines() if line.startswith("run")]
    assert runs == ["run", "run 1"]  # between them, slurmstepd's line that the first run was requeued
    history = run(f"sacct -n -P -D -X -j {requeued} -o State").split()
    assert history == ["REQUEUED", "COMPLETED"]

    usage = _cli("usage", "--since", "1h", "--json", env={**env, "PATH": f"{user_cluster['root']}/state/bin:"
                                                          f"{os.environ['PATH']}",
                                                          "SLURM_CONF": f"{user_cluster['root']}/state/etc/slurm.conf",
                                                          "SLINKYML_ACCOUNTING_STORE": str(work / "store")},
                 user=USER, cwd=work)
    assert usage.returncode == 0, usage.stderr
    rows, _end = json.JSONDecoder().raw_decode(usage.stdout)
    mine = [r for r in rows if r.get("user") == USER]
    assert mine and mine[0]["account"] == "ml" and mine[0]["jobs"] >= 2 and mine[0]["cpu_hours"] > 0, rows


def _usage(user_cluster, since: str) -> list[dict]:
    """``slinkyml usage --no-cache`` (slurmdbd's records, no store) as the user, rows of that user."""
    state = user_cluster["root"] / "state"
    done = _cli("usage", "--since", since, "--no-cache", "--json", user=USER, cwd=user_cluster["work"],
                env={**user_cluster["env"], "PATH": f"{state}/bin:{os.environ['PATH']}",
                     "SLURM_CONF": f"{state}/etc/slurm.conf"})
    assert done.returncode == 0, done.stderr
    rows, _end = json.JSONDecoder().raw_decode(done.stdout)
    return [r for r in rows if r.get("user") == USER]


def test_down_keeps_the_jobs_and_the_database_for_the_next_up(engine_cluster, user_cluster):
    """As the netns cluster's ``down``: slurmctld's StateSaveLocation and MariaDB's data are folders of the
    state dir (made by the user, given to the daemons' users in the containers), so a job run before ``down``
    is in ``sacct`` and ``slinkyml usage`` after the next ``up``, and job ids go on from where they were;
    between the two, no container, network or volume of the cluster is left."""
    import docker

    env, work = user_cluster["env"], user_cluster["work"]

    def run(line: str) -> str:
        return _shell(line, env, USER, work)

    # a window from the next whole second, after the jobs of the test before (usage counts a job that ended in it)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    since = start.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    time.sleep((start - datetime.now(UTC)).total_seconds() + 0.2)
    job = run("sbatch --parsable --wait -o kept-%j.out --wrap 'sleep 1'").strip()
    assert _wait_state(run, job, "COMPLETED") == "COMPLETED"
    before = _usage(user_cluster, since)
    assert before and before[0]["jobs"] == 1 and before[0]["cpu_hours"] > 0, before

    down = _cli("dev", "down", "--docker", env=env, user=USER)
    assert down.returncode == 0, down.stderr
    client = docker.DockerClient(base_url=engine_cluster["host"])
    label = {"label": f"{LABEL}={user_cluster['root'] / 'state'}"}
    try:
        assert (client.containers.list(all=True, filters=label), client.networks.list(filters=label),
                client.volumes.list(filters=label)) == ([], [], [])
    finally:
        client.close()
    up = _cli("dev", "up", "--docker", env=env, user=USER)
    assert up.returncode == 0, up.stderr + up.stdout

    assert run(f"sacct -X -n -P -j {job} -o JobID,User,Account,State").strip() == f"{job}|{USER}|ml|COMPLETED"
    assert _usage(user_cluster, since) == before
    later = run("sbatch --parsable --wrap true").strip()
    assert int(later) > int(job)  # slurmctld's state kept: no job id given twice


def test_down_leaves_nothing_and_stops_the_engine_it_started(engine_cluster, user_cluster):
    """The user's ``down`` removes their containers, network and volume (root's cluster stays); root's
    ``down`` removes the rest and stops the engine its ``up`` started: no bridge, no process left."""
    import docker

    client = docker.DockerClient(base_url=engine_cluster["host"])
    user_env = user_cluster["env"]
    down = _cli("dev", "down", "--docker", env=user_env, user=USER)
    assert down.returncode == 0, down.stderr
    user_label = {"label": f"{LABEL}={user_cluster['root'] / 'state'}"}
    assert client.containers.list(all=True, filters=user_label) == []
    assert client.networks.list(filters=user_label) == []
    assert client.volumes.list(filters=user_label) == []
    assert client.containers.list(filters={"label": f"{LABEL}={engine_cluster['state']}"}), "root's cluster went too"
    client.close()
    # what `down` kept (the database's files are the containers' mysql's): `reset` removes it, as the user
    assert (user_cluster["root"] / "state" / "data" / "mariadb").is_dir()
    reset = _cli("dev", "reset", "--docker", env=user_env, user=USER)
    assert reset.returncode == 0, reset.stderr
    assert not (user_cluster["root"] / "state").exists()

    engine = engine_cluster["engine"]
    pid = engine.pid()
    assert pid is not None
    down = _cli("dev", "down", "--docker", env=engine_cluster["env"])
    assert down.returncode == 0, down.stderr
    assert "dockerd" in down.stdout
    assert not is_alive(pid) and not engine.socket.exists()
    data = engine.folder / "root"
    assert list((data / "containers").iterdir()) == []
    assert [p.name for p in (data / "volumes").iterdir() if p.is_dir()] == []
    for bridge in (engine_cluster["env"]["SLINKYML_DOCKER_BRIDGE"], user_env["SLINKYML_DOCKER_BRIDGE"]):
        assert not Path(f"/sys/class/net/{bridge}").exists(), bridge
    print(f"\nstart-up: engine + images + 1 node {engine_cluster['seconds']:.1f} s; "
          f"a user's 2-node cluster {user_cluster['seconds']:.1f} s")
