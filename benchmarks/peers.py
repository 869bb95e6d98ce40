"""slinkyml against the tools a user would pick instead, on the same cluster, in interleaved rounds.

    .venv/bin/python benchmarks/peers.py [--rounds 3] [--items 100] [--skip requeue] \
        [--torchx /tmp/peers-torchx/bin/torchx] [--nemo-python /tmp/peers-nemo/bin/python]

Measured (medians over ``--rounds``; every round runs each tool once, in a shuffled order):

* **time to first step** — a 2-node job whose ranks run ``init_process_group`` and one all-reduce;
  from the moment the tool is asked to submit (process start for CLIs) to the wall clock of that
  first step (written by rank 0): ``slinkyml run`` (CLI, sbatch + torchrun), ``slinkyml.dispatch``
  ``Executor.submit`` (Python, srun tasks), plain submitit (``TorchDistributedEnvironment``),
  torchx ``dist.ddp`` on its Slurm scheduler and nemo-run's torchrun ``Script`` on a
  ``SlurmExecutor`` with a ``LocalTunnel`` — the last two only when installed (below);
* **time to results for ``--items`` mapped items** — ``Executor.map_array`` vs submitit's
  ``map_array`` (one array task per item), from the call to the last result;
* **time to resume after ``scontrol requeue``** — a running checkpointable job is requeued; from the
  requeue to its first step of the new run: ``Executor.submit`` of a ``Checkpointable`` (which
  releases the requeue hold) vs submitit's ``helpers.Checkpointable`` (waits out slurmctld's hold).

Ratios are printed against slinkyml's Python path (the smaller, the better for the other tool).

**Installing the peers** (each in its own venv, never the project's; they must see torch 2.13.0,
which the project's Makefile installs from a CPU wheel on disk — point ``--find-links`` at it, or
use ``--system-site-packages`` on a Python that has it)::

    python3 -m venv /tmp/peers-torchx && /tmp/peers-torchx/bin/pip install torchx==0.7.0 torch==2.13.0
    python3 -m venv /tmp/peers-nemo && /tmp/peers-nemo/bin/pip install nemo-run==0.11.1 torch==2.13.0

then pass ``--torchx /tmp/peers-torchx/bin/torchx`` and ``--nemo-python /tmp/peers-nemo/bin/python``.
The ranks themselves always run this interpreter (``sys.executable``), which has torch.
Every job submitted here is waited for or cancelled; only its own job ids are touched.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

#: the trainer every CLI tool runs: rank 0 writes the wall clock of its first step to argv[1]
PROBE = """\
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        fh.write(repr(time.time()))
dist.destroy_process_group()
"""


def first_step_fn(path: str) -> float:
    """The same probe as a function (slinkyml Executor / submitit): every task is one rank."""
    import torch
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:  # plain submitit: its own helper sets the variables
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    now = time.time()
    if dist.get_rank() == 0:
        Path(path).write_text(repr(now))
    dist.destroy_process_group()
    return now


def double(x: int) -> int:
    return 2 * x


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
        probe = self.work / "probe.py"
        probe.write_text(f"#!{PY}\n{PROBE}")  # runnable as is (nemo-run starts it with --no-python)
        probe.chmod(0o755)
        self.n = 0

    def _out(self, tag: str) -> Path:
        self.n += 1
        return self.work / f"{tag}-{self.n}.t"

    # -- time to first step ---------------------------------------------------------------------------
    def ttfs_slinkyml_cli(self) -> float:
        out = self._out("cli")
        t0 = time.time()
        proc = subprocess.run([PY, "-m", "slinkyml", "run", "-N", "2", "--mem", "1G", "-t", "5", "--python", PY,
                               "--log-dir", str(self.work / "logs"), "--no-check", "probe.py", str(out)],
                              cwd=self.work, capture_output=True, text=True, check=True)
        first = wait_for_file(out) - t0
        wait_gone(self.slurm, proc.stdout.split()[3])
        return first

    def ttfs_slinkyml_python(self) -> float:
        from slinkyml.dispatch import Executor

        out = self._out("py")
        t0 = time.time()
        job = Executor(self.work / "sub", slurm=self.slurm, nodes=2, mem="1G", time=5).submit(first_step_fn, str(out))
        first = wait_for_file(out) - t0
        job.wait(timeout=300)
        wait_gone(self.slurm, job.job_id)
        return first

    def _submitit(self, **params):
        import submitit

        executor = submitit.AutoExecutor(folder=str(self.work / "submitit" / "%j"), cluster="slurm")
        executor.update_parameters(**params)
        return executor

    def ttfs_submitit(self) -> float:
        out = self._out("submitit")
        t0 = time.time()
        executor = self._submitit(nodes=2, tasks_per_node=1, timeout_min=5, slurm_mem="1G")
        job = executor.submit(first_step_fn, str(out))
        first = wait_for_file(out) - t0
        job.results()
        wait_gone(self.slurm, str(job.job_id))
        return first

    def ttfs_torchx(self) -> float:
        out = self._out("torchx")
        env = dict(os.environ, PATH=f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}")
        t0 = time.time()
        proc = subprocess.run([self.args.torchx, "run", "-s", "slurm", "--scheduler_args",
                               f"mem=1024,time=5,job_dir={self.work / out.stem}", "dist.ddp", "-j", "2x1",
                               "--script", "probe.py", "--", str(out)],
                              cwd=self.work, env=env, capture_output=True, text=True, check=True)
        first = wait_for_file(out) - t0
        match = re.search(r"slurm://[^/]*/(\d+)", proc.stdout + proc.stderr)
        if match:
            wait_gone(self.slurm, match.group(1))
        return first

    def ttfs_nemo(self) -> float:
        out = self._out("nemo")
        home = self.work / "nemo"
        code = textwrap.dedent(f"""
            import nemo_run as run
            executor = run.SlurmExecutor(account={self.account()!r}, nodes=2, ntasks_per_node=1, mem="1G",
                                         time="00:05:00", launcher="torchrun", packager=run.Packager(),
                                         tunnel=run.LocalTunnel(job_dir={str(home / 'experiments')!r}))
            script = run.Script(path={str(self.work / 'probe.py')!r}, args=[{str(out)!r}])
            with run.Experiment("ttfs", executor=executor, log_level="WARN") as exp:
                exp.add(script, tail_logs=False)
                exp.run(detach=True)
        """)
        env = dict(os.environ, NEMORUN_HOME=str(home), PATH=f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}")
        t0 = time.time()
        subprocess.run([self.args.nemo_python, "-c", code], cwd=self.work, env=env, capture_output=True, text=True,
                       check=True)
        first = wait_for_file(out) - t0
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
    def map_slinkyml(self) -> float:
        from slinkyml.dispatch import Executor

        t0 = time.perf_counter()
        array = Executor(self.work / "map", slurm=self.slurm, mem="128M", time=5).map_array(
            double, range(self.args.items))
        assert array.results(timeout=600) == [2 * i for i in range(self.args.items)]
        return time.perf_counter() - t0

    def map_submitit(self) -> float:
        t0 = time.perf_counter()
        executor = self._submitit(timeout_min=5, slurm_mem="128M", slurm_array_parallelism=1000)
        jobs = executor.map_array(double, range(self.args.items))
        assert [j.result() for j in jobs] == [2 * i for i in range(self.args.items)]
        return time.perf_counter() - t0

    # -- resume after scontrol requeue ------------------------------------------------------------------
    def _requeue_and_time(self, job_id: str, started: Path, resumed: Path) -> float:
        wait_for_file(started, 300)
        t0 = time.time()
        self.slurm.run("scontrol", ["requeue", job_id])
        return wait_for_file(resumed, 600) - t0

    def resume_slinkyml(self) -> float:
        from slinkyml.dispatch import Executor

        started, resumed = self._out("rq-start"), self._out("rq-resumed")
        job = Executor(self.work / "rq", slurm=self.slurm, mem="256M", time=10).submit(
            _slinkyml_count_to(str(started), str(resumed)))
        job_wait = _Background(lambda: job.wait(timeout=900))  # Job releases the requeue hold
        try:
            return self._requeue_and_time(job.job_id, started, resumed)
        finally:
            job_wait.join()
            wait_gone(self.slurm, job.job_id)

    def resume_submitit(self) -> float:
        started, resumed = self._out("rq-start"), self._out("rq-resumed")
        executor = self._submitit(timeout_min=10, slurm_mem="256M")
        job = executor.submit(_submitit_count_to(str(started), str(resumed)))
        try:
            return self._requeue_and_time(str(job.job_id), started, resumed)
        finally:
            job.result()
            wait_gone(self.slurm, str(job.job_id))


def count_to(started: str, resumed: str) -> int:
    """The requeue probe: the first run writes ``started`` and sleeps (it is requeued long before
    it ends); a run after a requeue (SLURM_RESTART_COUNT ≥ 1) writes ``resumed`` and returns."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    Path(resumed if restarts else started).write_text(repr(time.time()))
    if not restarts:
        time.sleep(120)
    return restarts


def _slinkyml_count_to(started: str, resumed: str):
    from slinkyml.dispatch import Checkpointable

    class CountTo(Checkpointable):  # a Checkpointable: Job releases slurmctld's requeue hold
        def __call__(self) -> int:
            return count_to(started, resumed)

    return CountTo()


def _submitit_count_to(started: str, resumed: str):
    import submitit

    class CountTo(submitit.helpers.Checkpointable):
        def __call__(self) -> int:
            return count_to(started, resumed)

    return CountTo()


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


def interleaved(fns: dict[str, Callable[[], float]], rounds: int, seed: int = 0) -> dict[str, list[float]]:
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            try:
                times[name].append(fns[name]())
            except Exception as exc:  # noqa: BLE001 - one tool failing must not hide the others
                print(f"# {name}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
    return times


def summary(times: dict[str, list[float]], base: str) -> dict[str, object]:
    medians = {k: statistics.median(v) for k, v in times.items() if v}
    out: dict[str, object] = {f"{k}_s": round(v, 3) for k, v in medians.items()}
    if base in medians:
        out.update({f"{k}_over_{base}": round(v / medians[base], 3) for k, v in medians.items() if k != base})
    out["samples"] = {k: [round(x, 2) for x in v] for k, v in times.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--skip", action="append", default=[], choices=("ttfs", "map", "requeue"))
    ap.add_argument("--torchx", help="a torchx executable (its own venv); default: `torchx` on PATH if any")
    ap.add_argument("--nemo-python", help="a Python with nemo_run installed (its own venv)")
    args = ap.parse_args()
    if args.torchx is None:
        import shutil

        args.torchx = shutil.which("torchx")
    bench = Bench(args)
    results: dict[str, object] = {"rounds": args.rounds}
    if "ttfs" not in args.skip:
        fns = {"slinkyml_python": bench.ttfs_slinkyml_python, "slinkyml_cli": bench.ttfs_slinkyml_cli,
               "submitit": bench.ttfs_submitit}
        if args.torchx:
            fns["torchx"] = bench.ttfs_torchx
        if args.nemo_python:
            fns["nemo_run"] = bench.ttfs_nemo
        results["time_to_first_step"] = summary(interleaved(fns, args.rounds), "slinkyml_python")
    if "map" not in args.skip:
        fns = {"slinkyml_python": bench.map_slinkyml, "submitit": bench.map_submitit}
        results[f"time_to_results_{args.items}_items"] = summary(interleaved(fns, args.rounds), "slinkyml_python")
    if "requeue" not in args.skip:
        fns = {"slinkyml_python": bench.resume_slinkyml, "submitit": bench.resume_submitit}
        results["time_to_resume_after_requeue"] = summary(interleaved(fns, args.rounds), "slinkyml_python")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
