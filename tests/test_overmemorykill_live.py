"""Out of memory the other way production ends a job: ``JobAcctGatherParams=OverMemoryKill``.

slurmstepd's accounting poll (``JobAcctGatherFrequency=task=1``) sees a task's memory over its --mem
and slurmstepd kills the step itself ("Exceeded job memory limit"), no cgroup involved: sites that
limit memory by accounting, or that set cgroup limits above --mem (``AllowedRAMSpace``). On a cluster
of this module's own with task/none (no memory cgroup, so the kernel's OOM killer never gets there
first) and OverMemoryKill; the session's cluster enforces memory with cgroups
(tests/test_faults_live.py has that OOM).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from private_cluster import cancel_at_end, kept_workdir, private_cluster
from test_train_cluster import _logs, _submit
from tiers import needs

from slinkyml.jobs.follow import wait
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm import protocol

pytestmark = [pytest.mark.slurm]

#: grows 40 MB every 0.2 s up to 1.6 GB (never reached: the limit is 200M), so the 1 s poll sees it over
HOG = """\
import time
blocks = []
for _ in range(40):
    blocks.append(bytearray(40 << 20))
    time.sleep(0.2)
print("survived", flush=True)
"""


@pytest.fixture(scope="module")
@needs("own_cluster")
def local_cluster():
    yield from private_cluster("omk", subnet="10.207.0.0/24", port_base=7977, cgroups=False,
                               extra_slurm_conf="JobAcctGatherParams=OverMemoryKill")


@pytest.fixture(scope="module")
def slurm(local_cluster):
    return local_cluster.slurm


@pytest.fixture(scope="module")
def workdir(request):
    yield from kept_workdir(request, "overmemorykill")


@pytest.fixture(scope="module")
def own_jobs(slurm):
    yield from cancel_at_end(slurm)


def test_the_cluster_limits_memory_by_accounting_only(slurm):
    config = slurm.show_config()
    assert "OverMemoryKill" in config["JobAcctGatherParams"], config["JobAcctGatherParams"]
    assert config["TaskPlugin"] in ("task/none", "(null)"), config["TaskPlugin"]


@pytest.mark.timeout(300)
def test_slurmstepds_memory_kill_is_oom_named_as_such_and_not_requeued(slurm, workdir: Path, own_jobs, cli):
    """A task over its --mem is killed by slurmstepd; the run's one cause is oom (not node_failure,
    which the kill's signal alone would suggest), its line names slurmstepd's limit and not the
    kernel's OOM killer, and it is not requeued however many restarts are left."""
    script = workdir / "hog.py"
    script.write_text(HOG)
    spec = JobSpec.from_dict({"name": "hog", "launcher": "srun", "python": sys.executable,
                              "entry": {"script": str(script)}, "log_dir": str(workdir / "hog" / "logs"),
                              "time_limit": "00:05:00", "mem_per_node": "200M",
                              "requeue": {"max_restarts": 3}})
    job_id = _submit(slurm, spec, workdir, own_jobs)
    state = wait(slurm, job_id, timeout=240, poll=1.0)
    logs = _logs(spec)
    assert state.state in ("FAILED", "OUT_OF_MEMORY", "CANCELLED") and state.restarts == 0, (state, logs[-3000:])
    assert "survived" not in logs
    (line,) = protocol.read_events(spec.log_dir, job_id)
    assert line.startswith("r0 failed oom: ") and "memory limit" in line, line
    code, out, _err = cli("jobs", "status", str(job_id))
    assert "(out of memory)" in out and "slurmstepd killed it over its memory limit" in out, out
    assert "not the kernel's OOM killer" in out, out
    assert "node failure" not in out and "requeue" not in line, out
    code, why, _err = cli("jobs", "why", str(job_id))
    assert code == 1 and "slurmstepd killed it over its memory limit" in why, why  # 1: the job failed
