"""Never the wrong cluster: with two live clusters up, every backend talks to the one that
``$SLURM_CONF`` (what ``slinkyml dev env`` exports) names — never the session's default cluster.

The second cluster is this module's own (2 nodes; state, bridge, node names, subnet and ports that
neither the default cluster nor the other test and bench clusters use), torn down at the end.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest
from tiers import needs

from slinkyml.dev import LocalCluster
from slinkyml.dispatch import Executor

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

OTHER = dict(bridge="slkmltg", node_prefix="tg", subnet="10.218.0.0/24", slurmctld_port=17817,
             slurmd_port=17818, slurmdbd_port=17819, slurmrestd_port=17820, mariadb_port=17306,
             cluster_name="targettest")


@pytest.fixture(scope="module")
@needs("own_cluster")
def other_cluster(local_cluster):
    """A second live cluster beside the session's (which stays up: ``local_cluster`` is the first)."""
    cluster = LocalCluster("/var/lib/slinkyml/dev-target-test", nodes=2, gpus=0, **OTHER)
    cluster.up()
    yield cluster
    cluster.reset()


@pytest.fixture
def on_other(other_cluster, monkeypatch):
    """This shell's selection: `eval "$(slinkyml dev env --state-dir OTHER)"`, nothing else set."""
    for var in ("SLINKYML_RESTAPI_URL", "SLURMRESTD_URL", "SLINKYML_SLURMRESTD_SOCKET", "SLINKYML_STATE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_CONF", str(other_cluster.spec.slurm_conf))
    return other_cluster


def _nodes_of(cluster: LocalCluster, job_id: str) -> str:
    """``JobName|NodeList`` of ``job_id`` in ``cluster``'s slurmctld ('' if it has no such job): live,
    where sacct may still hold slurmdbd's placeholder ("allocation") for a just-finished job."""
    out = cluster.slurm.run("scontrol", ["show", "job", "-o", job_id], check=False).stdout
    fields = dict(word.split("=", 1) for word in out.split() if "=" in word)
    return f"{fields['JobName']}|{fields['NodeList']}" if "JobName" in fields else ""


@pytest.mark.parametrize("backend", ["sbatch", "restapi"])
def test_submission_goes_to_the_selected_cluster(backend, on_other, local_cluster, cli, shared_tmp,
                                                 monkeypatch):
    name = f"target-{backend}-{uuid.uuid4().hex[:6]}"
    job = shared_tmp / "job.yaml"
    job.write_text(f"name: {name}\nlauncher: srun\nmem_per_node: 128M\ntime_limit: '2'\n"
                   f"entry: {{script: /bin/hostname}}\nlog_dir: {shared_tmp / 'logs'}\n")
    monkeypatch.chdir(shared_tmp)
    code, _, err = cli("sbatch", "submit", str(job), "--dry-run", "--backend", backend)
    assert code == 0, err
    cluster_line = next(line for line in err.splitlines() if line.startswith("# cluster: "))
    assert f"slurm.conf {on_other.spec.slurm_conf}" in cluster_line and "$SLURM_CONF" in cluster_line
    if backend == "restapi":
        assert f"slurmrestd unix:{on_other.spec.restd_socket}" in cluster_line
    code, out, err = cli("sbatch", "submit", str(job), "--backend", backend, "--wait", "--timeout", "90")
    assert code == 0, err
    job_id = out.split("Submitted batch job ")[1].split()[0]
    name_and_nodes = _nodes_of(on_other, job_id)
    assert name_and_nodes.startswith(f"{name}|tg"), name_and_nodes  # ran on the other cluster's nodes
    assert not _nodes_of(local_cluster, job_id).startswith(name)  # and is no job of the default one


def test_an_empty_restapi_url_is_refused(on_other, cli, shared_tmp):
    job = shared_tmp / "job.yaml"
    job.write_text("name: empty-url\nlauncher: srun\nentry: {script: /bin/true}\n")
    code, out, err = cli("sbatch", "submit", str(job), "--backend", "restapi", "--restapi-url", "")
    assert (code, out) == (2, "") and err == ("slinkyml: error: --restapi-url: empty; give http(s)://host:port "
                                              "or unix:/path\n")


def _accounted_names(cluster: LocalCluster) -> set[str]:
    out = cluster.slurm.run("sacct", ["-X", "-n", "-P", "-a", "-S", "now-1hour", "-o", "JobName"]).stdout
    return set(out.split())


@pytest.fixture(scope="module")
def other_job(other_cluster):
    """A finished job that only the other cluster's accounting holds (waiting until slurmdbd has its
    name: a job's first record can be a placeholder named "allocation")."""
    name = f"target-acct-{uuid.uuid4().hex[:6]}"
    other_cluster.slurm.sbatch(f"#!/bin/bash\n#SBATCH -J {name}\n#SBATCH -o /dev/null\ntrue\n", ())
    for _ in range(60):
        if name in _accounted_names(other_cluster):
            break
        time.sleep(1)
    return name


@pytest.mark.parametrize("backend", ["cli", "restapi"])
def test_accounting_reads_the_selected_cluster(backend, on_other, other_job, cli):
    code, out, err = cli("efficiency", "--json", "--since", "1h", "--backend", backend)
    assert code == 0, err
    names = {row["name"] for row in json.loads(out)}
    assert other_job in names and names <= _accounted_names(on_other)


def hostname() -> str:
    return socket.gethostname()


def test_dispatch_goes_to_the_selected_cluster(on_other, shared_tmp):
    """The notebook backend (submitit through ``Slurm()``): no cluster given, $SLURM_CONF's is used."""
    job = Executor(shared_tmp / "submitit", time=2, mem="256M").submit(hostname)
    assert job.result(timeout=120).startswith("tg")  # a node of the other cluster
    assert _nodes_of(on_other, str(job.job_id)).split("|")[1].startswith("tg")
