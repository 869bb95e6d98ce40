"""What a fault costs a training run: for each fault, the time from the fault to the first resumed
step, how much of it slurmctld's requeue hold (BeginTime) was, and the steps trained twice.

Runs 2-node torchrun jobs of ``slinkyml.train`` (tiny model, a checkpoint every 4 steps, 0.3 s per
step) on the local cluster (``slinkyml dev up``) and hits each with one fault. Requeued jobs are
NOT released by hand: the hold measured is Slurm's own. slurmctld sets a requeued job's begin time
to now + ``AuthInfo=cred_expire`` + 1 (src/slurmctld/job_mgr.c, batch_requeue_fini; slurm.conf(5):
"This also controls how long a requeued job must wait before starting again", default 120 s), so
that the old run's launch credential has expired on every slurmd before the new one starts; the
dev cluster sets ``cred_expire=65`` (not below slurmctld's 60 s RPC retry: docs/faults-and-requeue.md).
Node-loss faults kill every process in a node's namespace and bring it back with ``dev up`` after
10 s, as a replaced slurmd pod would. ``slurm-preemption`` is Slurm's own: the cluster runs with
``preempt_grace_s`` (partition_prio, PreemptMode=REQUEUE), the training job in the preemptible
partition, and a 10 s job of the urgent partition on its nodes makes slurmctld SIGTERM its steps,
wait GraceTime and requeue it (the resumed run waits for that job too).

    .venv/bin/python benchmarks/faults.py [--faults usr2-batch,usr2-steps,...] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slinkyml.dev import LocalCluster
from slinkyml.dev.slurm.config import PREEMPTIBLE_PARTITION, URGENT_PARTITION
from slinkyml.jobs.follow import job_state
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.submit import SbatchBackend, submit
from slinkyml.slurm import Slurm, protocol
from slinkyml.train import METRICS_FILE

EVERY, STEPS, FAULT_AT = 4, 40, 10
GRACE_S = 30  # GraceTime of the preemptible partition


def kill_node(cluster: LocalCluster, node: str) -> None:
    ns = cluster.spec.netns(node)
    for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(10)
    cluster.up()


def kill_rank0(spec: JobSpec) -> None:
    needle = f"{protocol.ENV_CHECKPOINT_DIR}={spec.checkpoint_dir}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and b"slinkyml.train" in (entry / "cmdline").read_bytes()):
                env = (entry / "environ").read_bytes().split(b"\0")
                if needle in env and b"RANK=0" in env:
                    os.kill(int(entry.name), signal.SIGKILL)
                    return
        except OSError:
            continue


def urgent_job(slurm: Slurm, nodes: list[str]) -> None:
    """What preempts in production: a higher-tier job that needs the training job's nodes."""
    slurm.run("sbatch", ["--parsable", f"--partition={URGENT_PARTITION}", f"--nodes={len(nodes)}",
                         f"--nodelist={','.join(nodes)}", "--exclusive", "--time=2", "--output=/dev/null",
                         "--wrap=sleep 10"])


def faults(slurm: Slurm, cluster: LocalCluster) -> dict[str, Callable[[int, JobSpec], None]]:
    worker = cluster.spec.node_names[3]
    return {
        "usr2-batch": lambda j, s: slurm.run("scancel", ["--signal=USR2", "--batch", str(j)]),
        "usr2-steps": lambda j, s: slurm.run("scancel", ["--signal=USR2", str(j)]),
        "term-steps": lambda j, s: slurm.run("scancel", ["--signal=TERM", str(j)]),
        "scontrol-requeue": lambda j, s: slurm.run("scontrol", ["requeue", str(j)]),
        "kill-9-rank0": lambda j, s: kill_rank0(s),
        "worker-node-loss": lambda j, s: kill_node(cluster, worker),
        "slurm-preemption": lambda j, s: urgent_job(slurm, cluster.spec.node_names[2:4]),
    }


def metrics(spec: JobSpec) -> list[dict]:
    path = Path(spec.checkpoint_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def measure(slurm: Slurm, cluster: LocalCluster, folder: Path, name: str,
            fault: Callable[[int, JobSpec], None]) -> dict:
    nodes = cluster.spec.node_names[2:4]
    spec = JobSpec.from_dict({
        "name": f"bench-{name}", "nodes": 2, "mem_per_node": "1G", "time_limit": "00:15:00",
        "python": sys.executable, "nodelist": ",".join(nodes), "partition": PREEMPTIBLE_PARTITION,
        "entry": {"module": "slinkyml.train", "args": ["--steps", str(STEPS), "--checkpoint-every", str(EVERY),
                                                       "--step-sleep", "0.3"]},
        "checkpoint_dir": str(folder / name / "ckpt"), "log_dir": str(folder / name / "logs"),
        "requeue": {"signal": "USR2", "grace_seconds": 10, "max_restarts": 3}})
    job_id = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=folder).job_id
    try:
        while len(metrics(spec)) < FAULT_AT:
            time.sleep(0.2)
        t_fault = time.time()
        fault(job_id, spec)
        held_from = held_to = None
        while True:
            state = job_state(slurm, job_id)
            now = time.time()
            if state.state == "PENDING" and held_from is None:
                held_from = now
            if state.state == "RUNNING" and held_from is not None and held_to is None:
                held_to = now
            rows = metrics(spec)
            resumed = [r for r in rows if r["restart"] > 0]
            if resumed or state.finished:
                break
            time.sleep(0.2)
        first = resumed[0] if resumed else None
        before = [r["step"] for r in rows if r["restart"] == 0]
        return {"fault": name, "to_first_step_s": (first["wall"] - t_fault) if first else None,
                "hold_s": (held_to - held_from) if held_from and held_to else None,
                "retrained": (max(before) - (first["step"] - 1)) if first and before else None,
                "cause": (protocol.read_events(spec.log_dir, job_id) or ["(Slurm's own requeue)"])[0],
                "state": state.state}
    finally:
        slurm.run("scancel", [str(job_id)], check=False, retries=0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", help="comma-separated subset (default: all)")
    p.add_argument("--folder", help="where the runs write (default: a temporary dir, removed)")
    args = p.parse_args()
    cluster = LocalCluster(keep_running=True, preempt_grace_s=GRACE_S).up()
    slurm = cluster.slurm
    table = faults(slurm, cluster)
    chosen = args.faults.split(",") if args.faults else list(table)
    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="slinkyml-bench-faults-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)
    found = re.search(r"cred_expire=(\d+)", slurm.run("scontrol", ["show", "config"]).stdout)
    expire = found.group(1) if found else "120 (default)"
    print(f"2-node torchrun, checkpoint every {EVERY} steps, 0.3 s/step, fault at step {FAULT_AT}; "
          f"AuthInfo cred_expire={expire}")
    print(f"{'fault':<18} {'fault→first resumed step':>25} {'of which requeue hold':>22} {'steps re-trained':>17}  cause")
    try:
        for name in chosen:
            row = measure(slurm, cluster, folder, name, table[name])

            def fmt(value: float | None) -> str:
                return "-" if value is None else f"{value:.1f} s"

            print(f"{row['fault']:<18} {fmt(row['to_first_step_s']):>25} {fmt(row['hold_s']):>22} "
                  f"{'-' if row['retrained'] is None else row['retrained']:>17}  {row['cause'][:70]}", flush=True)
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
