"""A node that comes back at a new address, as a rescheduled slurmd pod does (`slinkyml dev node
readdress`): slurm.conf, /etc/hosts, slurmctld and the node's namespace agree, later `up`s keep it, and
a training run that loses a worker or its batch node that way resumes from its checkpoint, the
worker's next run avoiding the node that failed.

On a cluster of this module's own: a readdress ends everything that ran on the node.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from private_cluster import cancel_at_end, kept_workdir, private_cluster
from test_train_cluster import _logs, _metrics, _submit, _train_spec, _wait_done, _wait_steps, needs_torch
from tiers import needs

from slinkyml.dev import LocalCluster
from slinkyml.dev.slurm import network
from slinkyml.jobs.follow import job_state
from slinkyml.slurm import protocol
from slinkyml.train import FINAL_FILE

pytestmark = [pytest.mark.slurm]
EVERY = 4
STEPS = 20


@pytest.fixture(scope="module")
@needs("own_cluster")
def local_cluster():
    yield from private_cluster("rdr", subnet="10.206.0.0/24", port_base=7967)


@pytest.fixture(scope="module")
def slurm(local_cluster):
    return local_cluster.slurm


@pytest.fixture(scope="module")
def workdir(request):
    """Logs and checkpoints of every run."""
    yield from kept_workdir(request, "readdress")


@pytest.fixture(scope="module")
def own_jobs(slurm):
    yield from cancel_at_end(slurm)


def agreed_address(cluster: LocalCluster, node: str) -> str:
    """The node's address, asserting slurm.conf, /etc/hosts, slurmctld and its namespace all say it."""
    conf = re.search(rf"^NodeName={node} NodeAddr=(\S+)", cluster.spec.slurm_conf.read_text(), re.M)
    hosts = [line.split()[0] for line in network.HOSTS_FILE.read_text().splitlines()
             if line.split()[1:] == [node]]
    held = cluster.slurm.show("node", node)[0]["NodeAddr"]
    assert conf and hosts == [conf.group(1)] and held == conf.group(1), (conf, hosts, held)
    assert network.node_addresses(cluster.spec, node) == [held]
    return held


def test_readdress_keeps_every_record_in_agreement(local_cluster, slurm):
    node = local_cluster.spec.node_names[1]
    first = agreed_address(local_cluster, node)
    old, new = local_cluster.readdress(node)
    assert old == first and new != first and agreed_address(local_cluster, node) == new
    assert slurm.run("srun", ["-w", node, "-N1", "hostname"]).stdout.strip() == node
    assert f'"{node}": "{new}"' in local_cluster.spec.node_addresses_file.read_text()
    again = LocalCluster(local_cluster.spec.state_dir).up()  # a later up keeps the new address, healthy
    assert again.spec.node_addr(2) == new and agreed_address(again, node) == new
    # slurmctld told another address by hand (the case): up mends it to what the node has
    slurm.run("scontrol", ["update", f"NodeName={node}", "NodeAddr=10.206.0.200"])
    again.up()
    assert agreed_address(again, node) == new
    assert slurm.run("srun", ["-w", node, "-N1", "hostname"]).stdout.strip() == node
    assert local_cluster.readdress(node, first) == (new, first)  # back: nothing saved any more
    assert agreed_address(local_cluster, node) == first
    assert local_cluster.spec.node_addresses == () and local_cluster.spec.node_addresses_file.read_text() == "{}\n"


@pytest.mark.parametrize("address", ["10.206.0.1", "10.206.0.11", "10.9.0.5", "banana"])
def test_readdress_refuses_an_address_it_cannot_give(local_cluster, cli, address):
    code, _out, err = cli("dev", "node", "readdress", local_cluster.spec.node_names[1], "--address", address,
                          "--state-dir", str(local_cluster.spec.state_dir))
    assert code == 2 and err.startswith("slinkyml: error: --address: ") and "Traceback" not in err, err


def check_resumed(spec, steps: int) -> None:
    """Full step count; every run after the first resumed from a checkpoint at most one interval old."""
    rows = _metrics(spec)
    by_run: dict[int, list[int]] = {}
    for row in rows:
        by_run.setdefault(row["restart"], []).append(row["step"])
    runs = [by_run[r] for r in sorted(by_run)]
    assert len(runs) >= 2 and runs[0][0] == 1 and runs[-1][-1] == steps, runs
    for before, after in zip(runs, runs[1:], strict=False):
        assert 0 <= before[-1] - (after[0] - 1) <= EVERY and after[0] > 1, (before, after)
    assert (Path(spec.checkpoint_dir) / FINAL_FILE).exists()


def run_nodes(slurm, job_id: int) -> list[list[str]]:
    """The nodes of each run of the job, oldest first (sacct -D)."""
    out = slurm.run("sacct", ["-X", "-D", "-n", "-P", "-j", str(job_id), "-o", "NodeList"]).stdout
    return [slurm.run("scontrol", ["show", "hostnames", line]).stdout.split() for line in out.split()]


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(700)
def test_worker_back_at_a_new_address(local_cluster, slurm, workdir, own_jobs):
    """The worker's pod comes back at a new address mid-run: the ranks lose their peer, the batch
    script requeues (node_failure) and excludes that node, the next run resumes from its checkpoint
    on other nodes."""
    spec = _train_spec(workdir, "worker-readdress", ["--steps", str(STEPS), "--checkpoint-every", str(EVERY),
                                                     "--step-sleep", "0.3"])
    job_id = _submit(slurm, spec, workdir, own_jobs)
    _wait_steps(slurm, job_id, spec, 9, timeout=240)
    batch, worker = slurm.run("scontrol", ["show", "hostnames", job_state(slurm, job_id).nodes]).stdout.split()
    local_cluster.readdress(worker)
    state = _wait_done(slurm, job_id, timeout=500)  # with a hold of up to cred_expire (65 s) per requeue
    assert state.state == "COMPLETED" and state.restarts >= 1, f"{state}\n{_logs(spec)[-4000:]}"
    check_resumed(spec, STEPS)
    events = protocol.read_events(spec.log_dir, job_id)
    assert events[0].startswith("r0 requeue node_failure: "), events
    assert f"avoids {worker} (ExcNodeList={worker})" in _logs(spec), _logs(spec)[-4000:]
    runs = run_nodes(slurm, job_id)
    assert runs[0] == [batch, worker] and worker not in runs[1], runs


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_batch_node_back_at_a_new_address(local_cluster, slurm, workdir, own_jobs):
    """The batch node's pod comes back at a new address mid-run: the batch script ends with it,
    slurmctld requeues the job itself (the batch job is missing from its node), and the next run
    avoids that node — it requeues itself without it before training when it landed there again
    (no script was left to exclude it) — and resumes from the checkpoint."""
    spec = _train_spec(workdir, "batch-readdress", ["--steps", str(STEPS), "--checkpoint-every", str(EVERY),
                                                    "--step-sleep", "0.3"])
    job_id = _submit(slurm, spec, workdir, own_jobs)
    _wait_steps(slurm, job_id, spec, 9, timeout=240)
    batch = slurm.run("scontrol", ["show", "hostnames", job_state(slurm, job_id).nodes]).stdout.split()[0]
    local_cluster.readdress(batch)
    state = _wait_done(slurm, job_id, timeout=700)  # slurmctld took 6 min to see the batch job missing at load
    assert state.state == "COMPLETED" and state.restarts >= 1, f"{state}\n{_logs(spec)[-4000:]}"
    check_resumed(spec, STEPS)
    runs = run_nodes(slurm, job_id)
    assert runs[0][0] == batch and batch not in runs[-1], (runs, _logs(spec)[-4000:])
    logs = _logs(spec)
    if batch in runs[1]:  # slurmctld's requeue put the run there again: it left at once, excluding it
        assert f"r1 requeue node_failure: batch node {batch} of r0 failed" in protocol.read_events(
            spec.log_dir, job_id)[0], logs[-4000:]
        assert f"avoids {batch} (ExcNodeList={batch})" in logs, logs[-4000:]
    else:
        assert f"run r0 ended with its batch node {batch} (slurmctld requeued the job); this run avoids it" in logs
