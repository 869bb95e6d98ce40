"""A production-shaped cluster on one machine: `dev up --emulated-nodes`.

64 nodes that declare a p5.48xlarge each (192 CPUs, 2 TiB, 8 H100 as gres gpu:h100:8, features),
every one a real slurmd in its own network namespace (SlurmdParameters=config_overrides: the
declared hardware is what the scheduler sees). A 32-node job and a 1,000-item array go through
slinkyml and are accounted in slurmdbd. Its own state dir, bridge, node names, subnet and ports,
so it runs beside the session's cluster.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from tiers import needs

from slinkyml.dev import LocalCluster
from slinkyml.dev.slurm.config import EMULATED_NODE
from slinkyml.dispatch import Executor
from slinkyml.jobs.follow import wait
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
NODES = 64


def cube(x: int) -> int:
    return x ** 3


@pytest.fixture(scope="module")
@needs("own_cluster")
def emulated():
    state = Path(tempfile.mkdtemp(prefix="slinkyml-emulated-", dir="/var/tmp"))
    cluster = LocalCluster(state, nodes=NODES, bridge="slkemu0", node_prefix="emu", subnet="10.200.0.0/22",
                           slurmctld_port=7917, slurmd_port=7918, slurmdbd_port=7919, slurmrestd_port=7920,
                           mariadb_port=14917, gpus=0, **EMULATED_NODE)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def work():
    path = Path(tempfile.mkdtemp(prefix="slinkyml-emulated-work-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(600)
def test_slurmctld_sees_the_declared_hardware(emulated):
    out = emulated.slurm.run("sinfo", ["-h", "-N", "-p", "debug", "-o", "%N %c %m %G %f"]).stdout.splitlines()
    assert len(out) == NODES
    assert all(line.split()[1:] == ["192", "2097152", "gpu:h100:8", "p5.48xlarge,h100,efa"] for line in out)


@pytest.mark.timeout(600)
def test_32_node_gpu_job_runs_and_is_accounted(emulated, work):
    spec = JobSpec.from_dict({"name": "emu32", "nodes": 32, "gpus_per_node": 8, "launcher": "srun",
                              "tasks_per_node": 1, "mem_per_node": "1G", "time_limit": "00:05:00",
                              "log_dir": str(work / "logs"),
                              "entry": {"script": "/bin/sh", "args": ["-c", "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"]}})
    job_id = submit(spec, backend=SbatchBackend(emulated.slurm), slurm=emulated.slurm, cwd=work).job_id
    state = wait(emulated.slurm, job_id, timeout=300, poll=1.0)
    assert state.state == "COMPLETED"
    lines = [line for path in sorted((work / "logs").glob(f"emu32-{job_id}-*task*.log"))
             for line in path.read_text().splitlines()]
    ranks = [line.split() for line in lines if line.startswith("emu")]
    assert len({node for node, _ in ranks}) == 32 and {gpus for _, gpus in ranks} == {"0,1,2,3,4,5,6,7"}
    sacct = emulated.slurm.run("sacct", ["-X", "-n", "-P", "-j", str(job_id), "-o", "NNodes,AllocTRES,State"],
                               retries=5).stdout.strip()
    nnodes, tres, final = sacct.split("|")
    assert (nnodes, final) == ("32", "COMPLETED") and "gres/gpu=256" in tres


@pytest.mark.timeout(600)
def test_thousand_item_array_through_dispatch(emulated, work):
    executor = Executor(work / "dispatch", slurm=emulated.slurm, time=10, mem="256M")
    array = executor.map_array(cube, range(1000), target_tasks=100)
    assert array.results(timeout=420) == [x ** 3 for x in range(1000)]
    assert len(array.task_ids) == 100
    arrays = ",".join(array.array_ids)
    deadline = time.monotonic() + 120  # a task's results are written before slurmdbd hears it ended
    while True:
        sacct = emulated.slurm.run("sacct", ["-X", "-n", "-P", "-o", "JobID,State", "-j", arrays], retries=5).stdout
        states = dict(line.split("|") for line in sacct.splitlines())
        if set(states.values()) == {"COMPLETED"} or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert sorted(states) == sorted(array.task_ids) and set(states.values()) == {"COMPLETED"}
