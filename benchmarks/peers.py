"""slinkyml against the tools a user would pick instead, on the same cluster, in interleaved rounds.

    .venv/bin/python benchmarks/peers.py [--rounds 20] [--probe light|torch] [--items 100] [--chunk-size N] \\
        [--skip requeue] [--torchx /tmp/peers-torchx/bin/torchx] [--nemo-python /tmp/peers-nemo/bin/python]

Fair to every side: each measurement is a fresh process started by the clock (the tool's import,
submission and waiting count for all: CLIs as they are, the Python tools through
``benchmarks/drivers/peers.py``), in a fresh directory of its own (nothing of an earlier round is
in its workspace), with the same job shapes and the same handling of slurmctld's requeue hold.
Measured over ``--rounds`` rounds (default 20); every round runs each tool once, in ABBA order (ABC, CBA,
...), each submission after a random wait of up to 1 s (off the clock: a random phase against slurmctld's
~1 s scheduling loop, which otherwise moves single comparisons by a loop); each figure is the median, and
each tool's ratio to submitit the median of per-round ratios with a 95 % bootstrap interval
(``benchmarks/drivers/pairs.py``). Every tool waits with the same 0.2 s poll (slinkyml's ``_POLL_S``:
submitit's ``result()`` would sleep 1 s between looks, so its driver polls ``done()`` at 0.2 s instead).

* **time to first step** — a 2-node job, one rank per node; from the start of the process that submits
  to the moment the last rank runs (each rank writes its wall clock first thing). ``--probe light``
  (default): the rank imports nothing (``time``, ``os``), so the figure is the tools' own (an import of
  torch in every rank, the same for all, pulls ratios toward 1); ``--probe torch``: the ranks run
  ``init_process_group`` and one all-reduce and rank 0 writes the clock of that step. ``slinkyml run``
  (CLI, sbatch; ``--launcher srun`` with the light probe, torchrun with torch), ``slinkyml.dispatch``
  ``Executor.submit`` (Python, srun tasks), plain submitit (``TorchDistributedEnvironment`` for torch), torchx ``dist.ddp`` on its Slurm
  scheduler and nemo-run's torchrun ``Script`` on a ``SlurmExecutor`` with a ``LocalTunnel`` — the
  last two only when installed (below);
* **time to results for ``--items`` mapped items** — ``Executor.map_array`` vs submitit's
  ``map_array``, both over the same chunks (``--chunk-size`` items per array task; default: the
  size slinkyml picks for this cluster, about one task per CPU), from process start to the last result;
* **time to resume after ``scontrol requeue``** — a running checkpointable job (``Checkpointable``
  of each tool) is requeued; from the requeue to its first step of the new run. slurmctld holds a
  requeued job (BeginTime = now + cred_expire); for both tools this benchmark releases it after
  ``REQUEUE_SETTLE_S`` of hold, as slinkyml's ``Job.wait`` would (the submitting process has ended).

Ratios are printed against submitit (below 1: slinkyml is faster).

**Installing the peers** (each in its own venv, never the project's; neither needs torch itself: the
ranks run ``torchrun`` and this interpreter, which have it, found on ``PATH`` as set below)::

    python3 -m venv /tmp/peers-torchx && /tmp/peers-torchx/bin/pip install torchx==0.7.0
    python3 -m venv /tmp/peers-nemo && /tmp/peers-nemo/bin/pip install nemo-run==0.11.1 leptonai==0.27.3

(nemo-run 0.11.1 asks for ``leptonai>=0.26.6``; pip then takes leptonai 0.47.1, which has no
``leptonai.api.v1``, and ``import nemo_run`` fails: ``ModuleNotFoundError: No module named
'leptonai.api.v1'``; 0.27.3, the last 0.27 release, has it.)
then pass ``--torchx /tmp/peers-torchx/bin/torchx`` and ``--nemo-python /tmp/peers-nemo/bin/python``.
The ranks themselves always run this interpreter (``sys.executable``), which has torch.
Every job submitted here is waited for or cancelled; only its own job ids are touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
#: the measured process of the Python tools (not under benchmarks/ itself: `make bench` runs every file there)
DRIVER = Path(__file__).resolve().parent / "drivers" / "peers.py"
sys.path.insert(0, str(DRIVER.parent))
from pairs import abba, paired  # noqa: E402 - benchmarks/drivers/pairs.py: ABBA rounds, per-round ratios
from peers import POLL_S  # noqa: E402 - the drivers' poll interval

#: the light probe every CLI tool runs: each rank writes the wall clock of its start to argv[1].RANK
LIGHT_PROBE = """\
import os, sys, time
now = time.time()
rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
with open(sys.argv[1] + "." + rank, "w") as fh:
    fh.write(repr(now))
"""
#: the torch probe: rank 0 writes the wall clock of its first all-reduce to argv[1].0
PROBE = """\
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
if dist.get_rank() == 0:
    with open(sys.argv[1] + ".0", "w") as fh:
        fh.write(repr(time.time()))
dist.destroy_process_group()
"""


def wait_for_file(path: Path, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"no first step in {path} after {timeout:g} s")


def first_step_at(out: Path, light: bool, ranks: int = 2) -> float:
    """When the step could begin: the last rank's start (light probe), or rank 0's first all-reduce."""
    return max(wait_for_file(Path(f"{out}.{rank}")) for rank in (range(ranks) if light else [0]))


def wait_gone(slurm, job_id: str, timeout: float = 600) -> None:
    """Until squeue no longer lists the job (so the next round finds the nodes free)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = slurm.run("squeue", ["-h", "-j", job_id, "-o", "%i"], check=False, retries=0).stdout
        if not out.strip():
            return
        time.sleep(0.2)


class Bench:
    def __init__(self, args: argparse.Namespace):
        from slinkyml.slurm import Slurm

        self.args = args
        self.slurm = Slurm()
        self.work = Path(tempfile.mkdtemp(prefix="slinkyml-peers-", dir="/tmp"))
        self.work.chmod(0o777)
        self.n = 0
        self.light = args.probe == "light"

    def fresh(self, tag: str) -> Path:
        """A directory of this run's own, holding only the probe (a tool's workspace)."""
        self.n += 1
        run = self.work / f"{tag}-{self.n}"
        run.mkdir()
        run.chmod(0o777)
        probe = run / "probe.py"
        probe.write_text(f"#!{PY}\n{LIGHT_PROBE if self.light else PROBE}")  # runnable as is (nemo-run starts it with --no-python)
        probe.chmod(0o755)
        return run

    def driver(self, *argv: str) -> list[str]:
        """Run the driver (a fresh process); the job ids it submitted."""
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        proc = subprocess.run([PY, str(DRIVER), *argv], capture_output=True, text=True, check=False,
                              env=dict(os.environ, PYTHONPATH=path))
        if proc.returncode:
            raise RuntimeError(f"peers driver {' '.join(argv[:2])}: {proc.stderr.strip()[-600:]}")
        return [word for line in proc.stdout.splitlines() if line.startswith("JOB ") for word in line.split()[1:]]

    # -- time to first step ---------------------------------------------------------------------------
    def ttfs_slinkyml_cli(self) -> float:
        run = self.fresh("cli")
        out = run / "first.t"
        t0 = time.time()
        proc = subprocess.run([PY, "-m", "slinkyml", "run", "-N", "2", "--mem", "1G", "-t", "5",
                               "--launcher", "srun" if self.light else "torchrun", "--log-dir", str(run / "logs"),
                               "--no-check", "probe.py", str(out)],
                              cwd=run, capture_output=True, text=True, check=True)
        first = first_step_at(out, self.light) - t0
        wait_gone(self.slurm, proc.stdout.split()[3])
        return first

    def _ttfs_driver(self, tool: str) -> float:
        run = self.fresh(tool)
        out = run / "first.t"
        t0 = time.time()
        job_ids = self.driver("ttfs-light" if self.light else "ttfs", tool, str(run), str(out))
        first = first_step_at(out, self.light) - t0
        for job_id in job_ids:
            wait_gone(self.slurm, job_id)
        return first

    def ttfs_slinkyml_python(self) -> float:
        return self._ttfs_driver("slinkyml")

    def ttfs_submitit(self) -> float:
        return self._ttfs_driver("submitit")

    def ttfs_torchx(self) -> float:
        run = self.fresh("torchx")
        out = run / "first.t"
        env = dict(os.environ, PATH=f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}")
        t0 = time.time()
        proc = subprocess.run([self.args.torchx, "run", "-s", "slurm", "--scheduler_args",
                               f"mem=1024,time=5,job_dir={run / 'job'}", "dist.ddp", "-j", "2x1",
                               "--script", "probe.py", "--", str(out)],
                              cwd=run, env=env, capture_output=True, text=True, check=True)
        first = first_step_at(out, self.light) - t0
        match = re.search(r"slurm://[^/]*/(\d+)", proc.stdout + proc.stderr)
        if match:
            wait_gone(self.slurm, match.group(1))
        return first

    def ttfs_nemo(self) -> float:
        run = self.fresh("nemo")
        out = run / "first.t"
        home = run / "nemo"
        code = textwrap.dedent(f"""
            import nemo_run as run
            executor = run.SlurmExecutor(account={self.account()!r}, nodes=2, ntasks_per_node=1, mem="1G",
                                         time="00:05:00", launcher="torchrun", packager=run.Packager(),
                                         tunnel=run.LocalTunnel(job_dir={str(home / 'experiments')!r}))
            script = run.Script(path={str(run / 'probe.py')!r}, args=[{str(out)!r}])
            with run.Experiment("ttfs", executor=executor, log_level="WARN") as exp:
                exp.add(script, tail_logs=False)
                exp.run(detach=True)
        """)
        env = dict(os.environ, NEMORUN_HOME=str(home), PATH=f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}")
        t0 = time.time()
        subprocess.run([self.args.nemo_python, "-c", code], cwd=run, env=env, capture_output=True, text=True,
                       check=True)
        first = first_step_at(out, self.light) - t0
        self.wait_idle()
        return first

    def account(self) -> str:
        """The user's default account (nemo-run's SlurmExecutor wants one)."""
        user = os.environ.get("USER") or "root"
        out = self.slurm.run("sacctmgr", ["-n", "-P", "show", "user", user, "format=DefaultAccount"]).stdout
        return out.strip().splitlines()[0] if out.strip() else "root"

    def wait_idle(self, timeout: float = 300) -> None:
        """Until none of this user's jobs is left in the queue (tools that print no job id)."""
        user = os.environ.get("USER") or "root"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.slurm.run("squeue", ["-h", "-u", user], check=False, retries=0).stdout.strip():
                return
            time.sleep(0.2)

    # -- mapped items -------------------------------------------------------------------------------
    def chunk_size(self) -> int:
        """``--chunk-size``, else what slinkyml's map_array picks here (about one task per CPU)."""
        if self.args.chunk_size:
            return self.args.chunk_size
        from slinkyml.dispatch.arrays import plan_array, total_cpus

        plan = plan_array(self.args.items, max_array_size=1000, target_tasks=total_cpus(self.slurm))
        return max(count for _start, count in plan.chunks)

    def _map(self, tool: str) -> float:
        run = self.fresh(f"map-{tool}")
        t0 = time.perf_counter()
        self.driver("map", tool, str(run), str(self.args.items), str(self.chunk_size()))
        return time.perf_counter() - t0

    def map_slinkyml(self) -> float:
        return self._map("slinkyml")

    def map_submitit(self) -> float:
        return self._map("submitit")

    # -- resume after scontrol requeue ------------------------------------------------------------------
    def _resume(self, tool: str) -> float:
        run = self.fresh(f"rq-{tool}")
        started, resumed = run / "started.t", run / "resumed.t"
        (job_id,) = self.driver("requeue", tool, str(run), str(started), str(resumed))
        try:
            wait_for_file(started, 300)
            t0 = time.time()
            self.slurm.run("scontrol", ["requeue", job_id])
            release = _Background(lambda: release_requeue_hold(self.slurm, job_id, resumed))
            first = wait_for_file(resumed, 600) - t0
            release.join()
            return first
        finally:
            wait_gone(self.slurm, job_id)

    def resume_slinkyml(self) -> float:
        return self._resume("slinkyml")

    def resume_submitit(self) -> float:
        return self._resume("submitit")


def release_requeue_hold(slurm, job_id: str, resumed: Path, timeout: float = 600) -> None:
    """What slinkyml's ``Job.wait`` does for a requeued job, done here for every tool alike: once
    the job has waited ``REQUEUE_SETTLE_S`` in slurmctld's BeginTime hold, release it."""
    from slinkyml.dispatch.executor import REQUEUE_SETTLE_S

    held_since = None
    deadline = time.monotonic() + timeout
    while not resumed.exists() and time.monotonic() < deadline:
        out = slurm.run("squeue", ["-h", "-j", job_id, "-o", "%T|%r"], check=False, retries=0).stdout.strip()
        if out == "PENDING|BeginTime":
            held_since = held_since or time.monotonic()
            if time.monotonic() - held_since >= REQUEUE_SETTLE_S:
                slurm.run("scontrol", ["update", f"JobId={job_id}", "StartTime=now"], check=False, retries=0)
                return
        time.sleep(0.2)


class _Background:
    def __init__(self, fn: Callable[[], object]):
        import threading

        self.error: BaseException | None = None

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported after the measurement
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=900)


def summary(times: dict[str, list[float]], base: str) -> dict[str, object]:
    """Medians, and each tool's median of per-round ratios to ``base`` with its 95 % interval."""
    out: dict[str, object] = {f"{k}_s": round(statistics.median(v), 3) for k, v in times.items() if v}
    for name, values in times.items():
        if name != base and values:
            out[f"{name}_over_{base}"] = paired(values, times[base])
    out["samples"] = {k: [round(x, 2) for x in v] for k, v in times.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="ABBA rounds (every tool once per round)")
    ap.add_argument("--probe", choices=("light", "torch"), default="light",
                    help="time to first step: ranks that import nothing (default), or an all-reduce in torch")
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--chunk-size", type=int, help="items per array task for both tools (default: slinkyml's "
                    "choice for this cluster)")
    ap.add_argument("--skip", action="append", default=[], choices=("ttfs", "map", "requeue"))
    ap.add_argument("--torchx", help="a torchx executable (its own venv); default: `torchx` on PATH if any")
    ap.add_argument("--nemo-python", help="a Python with nemo_run installed (its own venv)")
    args = ap.parse_args()
    if args.torchx is None:
        import shutil

        args.torchx = shutil.which("torchx")
    from slinkyml.dispatch import executor

    assert executor._POLL_S == POLL_S, "the drivers' poll must be slinkyml's"
    bench = Bench(args)
    results: dict[str, object] = {"rounds": args.rounds}
    if "ttfs" not in args.skip:
        fns = {"slinkyml_python": bench.ttfs_slinkyml_python, "slinkyml_cli": bench.ttfs_slinkyml_cli,
               "submitit": bench.ttfs_submitit}
        if args.torchx:
            fns["torchx"] = bench.ttfs_torchx
        if args.nemo_python:
            fns["nemo_run"] = bench.ttfs_nemo
        results["time_to_first_step"] = {"probe": args.probe, **summary(abba(fns, args.rounds, phase_s=1.0),
                                                                            "submitit")}
    if "map" not in args.skip:
        fns = {"slinkyml_python": bench.map_slinkyml, "submitit": bench.map_submitit}
        results[f"time_to_results_{args.items}_items"] = {
            "chunk_size": bench.chunk_size(), **summary(abba(fns, args.rounds, phase_s=1.0), "submitit")}
    if "requeue" not in args.skip:
        fns = {"slinkyml_python": bench.resume_slinkyml, "submitit": bench.resume_submitit}
        results["time_to_resume_after_requeue"] = summary(abba(fns, args.rounds, phase_s=1.0), "submitit")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
