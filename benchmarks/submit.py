"""Submission overhead and time to first training step: slinkyml vs plain sbatch.

    .venv/bin/python benchmarks/submit.py [--repeats 60] [--skip-training] [--ttfs-rounds 4]

Figures (medians; the cluster is shared, so expect noise):
* raw ``sbatch --parsable`` of a rendered script vs ``submit()`` in-process (render + sbatch of
  the script on stdin) → ratio of medians with a 95 % bootstrap interval, and the median of
  per-round ratios; the goal is ≤ 1.02×. This process's own CPU time per submission beside it (raw
  vs ``submit()``: what a loaded machine stretches). Also with the live-cluster checks;
* the CLI's start-up (``slinkyml --help``) and the import of ``slinkyml.cli.sbatch``;
* the same submission through slurmrestd's unix socket (the ``restapi`` backend: no ``sbatch``
  process per job) → ratio to raw ``sbatch``;
* ``slinkyml sbatch submit JOB.yaml`` (checks included), the same with ``--no-check``, ``slinkyml run``
  (checks included) and ``sbatch submit`` from a regular (non-editable) install when ``--regular-python``
  names one, as whole processes (Python start-up included), each paired with raw ``sbatch`` of the script
  it submits, also a whole process: ``--cli-pairs`` ABBA rounds, the median of per-pair ratios with a 95 %
  bootstrap interval, wall and CPU time (``cli_pairs``; ``--cli-only`` measures only these);
  ``--against-tree DIR`` adds the same commands from another source tree as a third side (ABC/CBA), for
  before/after ratios from one run. Jobs are cancelled after each case, never inside a timed call;
* time from submission to the first training step of a 2-node torchrun job, rendered vs a
  hand-written sbatch running the same trainer, alternating in ABBA order;
* beside it, raw ``sbatch`` vs ``submit()`` on the Slurm 26.05 cluster when one runs (``--other-state-dir``,
  default the one ``make test`` brings up): its release's sbatch, through the links in its state dir.
Every job submitted here is cancelled or waited for; only its own job ids are touched.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
from pairs import abba, paired  # noqa: E402 - benchmarks/drivers/pairs.py: ABBA rounds, per-pair ratios

PY = sys.executable
SLINKYML = str(Path(PY).parent / "slinkyml")

HAND_WRITTEN = """#!/bin/bash
#SBATCH --job-name=hand-ttfs
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --mem=1G
#SBATCH --time=00:10:00
#SBATCH --output={out}/hand-%j.out
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun {py} -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-id "$SLURM_JOB_ID" \\
  --rdzv-backend c10d --rdzv-endpoint "$head:29500" -m slinkyml.train --steps 3 \\
  --checkpoint-dir {out}/ckpt
"""


def interleaved(fns: dict, repeats: int, seed: int = 0, cpu: dict[str, list[float]] | None = None
                ) -> dict[str, list[float]]:
    """Times of each function over ``repeats`` rounds, each round running all of them once in a
    shuffled order; ``cpu`` collects this process's own CPU time per call (not the children's)."""
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            c0, t0 = time.process_time(), time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.setdefault(name, []).append(time.process_time() - c0)
    return times


def ratio_stats(times: dict[str, list[float]], name: str, base: str = "raw", seed: int = 1) -> dict[str, float]:
    """``name`` against ``base`` from interleaved rounds: ratio of medians, its 95 % bootstrap
    interval (rounds resampled whole), and the median of the per-round ratios."""
    ours, raw = times[name], times[base]
    rng = random.Random(seed)
    boot = []
    for _ in range(2000):
        picks = [rng.randrange(len(raw)) for _ in raw]
        boot.append(statistics.median(ours[i] for i in picks) / statistics.median(raw[i] for i in picks))
    boot.sort()
    return {"ratio": statistics.median(ours) / statistics.median(raw),
            "ratio_ci95_low": boot[int(0.025 * len(boot))], "ratio_ci95_high": boot[int(0.975 * len(boot)) - 1],
            "paired_median": statistics.median(o / r for o, r in zip(ours, raw, strict=True))}


def cli_pairs(slurm, spec, work: Path, pairs: int, regular_python: str | None,
              against: str | None = None, against_python: str | None = None) -> dict[str, object]:
    """Whole processes, each beside raw ``sbatch`` of the same rendered script in ABBA rounds (three sides,
    ABC/CBA, with ``against``: the same command from another source tree, for before/after in one run):
    ``sbatch submit`` (checks, ``--no-check``; editable and regular install) and ``run`` (checks), and
    ``python -c pass`` of each interpreter. Every job is cancelled after its case, outside the clock."""
    import os
    import resource
    import shlex

    import yaml

    from slinkyml.jobs.render import render_sbatch

    yaml_path, script = work / "cli.yaml", work / "cli.sbatch"
    yaml_path.write_text(yaml.safe_dump(spec.to_dict()))
    script.write_text(render_sbatch(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # users keep their .pyc
    env_regular = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    env_against = {**env, "PYTHONPATH": against or ""}
    run_args = ["run", "--launcher", "srun", "--mem", str(spec.mem_per_node), "-t", str(spec.time_limit),
                "-J", spec.name, "--log-dir", str(spec.log_dir), *(["--python", spec.python] if spec.python else []),
                str(spec.entry.script)]
    # raw sbatch of what `run` submits: its own rendering (--dry-run prints the script it would send)
    run_script = work / "run.sbatch"
    run_script.write_text(subprocess.run([SLINKYML, *run_args[:1], "--dry-run", "--no-check", *run_args[1:]],
                                         capture_output=True, text=True, check=True, cwd=work, env=env).stdout)
    submitted: list[str] = []

    def run(argv: list[str], environ: dict[str, str], cpu: list[float]) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=work, env=environ).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        submitted.append(out.split("Submitted batch job ")[1].split()[0] if "Submitted" in out
                         else out.strip().split(";")[0])

    submit = ["sbatch", "submit", str(yaml_path)]
    cases = {"cli submit": ([SLINKYML, *submit], env, script),
             "cli submit --no-check": ([SLINKYML, "sbatch", "submit", "--no-check", str(yaml_path)], env, script),
             "cli run": ([SLINKYML, *run_args], env, run_script)}
    if regular_python:
        entry = "import sys; from slinkyml.cli import main; sys.argv[0] = 'slinkyml'; sys.exit(main())"
        cases["regular install: cli submit"] = ([regular_python, "-c", entry, *submit], env_regular, script)
    out: dict[str, object] = {}
    try:
        for name, (argv, environ, raw_script) in cases.items():
            cpu: dict[str, list[float]] = {"ours": [], "raw": [], "before": []}
            raw = ["sbatch", "--parsable", str(raw_script)]
            sides = {"ours": lambda argv=argv, environ=environ, cpu=cpu: run(argv, environ, cpu["ours"]),
                     "raw": lambda raw=raw, cpu=cpu: run(raw, env, cpu["raw"])}
            if against:  # the same command from the other tree, through its own venv's console script
                theirs = [str(Path(against_python or PY).parent / "slinkyml"), *argv[1:]] if argv[0] == SLINKYML \
                    else argv
                sides["before"] = lambda theirs=theirs, cpu=cpu: run(theirs, env_against, cpu["before"])
            rounds = abba(sides, pairs)
            out[name] = {"argv": shlex.join(argv[1:]),
                         "ms": round(statistics.median(rounds["ours"]) * 1e3, 1),
                         "raw_sbatch_ms": round(statistics.median(rounds["raw"]) * 1e3, 1),
                         "vs_raw_sbatch": paired(rounds["ours"], rounds["raw"]),
                         # CPU time of the processes (user + system): what a loaded machine stretches less
                         "cpu_ms": round(statistics.median(cpu["ours"]) * 1e3, 1),
                         "raw_sbatch_cpu_ms": round(statistics.median(cpu["raw"]) * 1e3, 1),
                         "cpu_vs_raw_sbatch": paired(cpu["ours"], cpu["raw"])}
            if against:
                out[name].update({"before_ms": round(statistics.median(rounds["before"]) * 1e3, 1),
                                  "before_cpu_ms": round(statistics.median(cpu["before"]) * 1e3, 1),
                                  "vs_before": paired(rounds["ours"], rounds["before"]),
                                  "cpu_vs_before": paired(cpu["ours"], cpu["before"])})
            slurm.run("scancel", submitted, check=False, retries=0)  # outside every timed call
            submitted.clear()
        for name, python, environ in (("python -c pass (this interpreter)", PY, env),
                                      ("python -c pass (regular install)", regular_python, env_regular)):
            if python:
                bare = []
                for _ in range(pairs):
                    t0 = time.perf_counter()
                    subprocess.run([python, "-c", "pass"], env=environ, check=True, cwd=work)
                    bare.append(time.perf_counter() - t0)
                out[name] = {"ms": round(statistics.median(bare) * 1e3, 1)}
        out["load_average_1min"] = round(os.getloadavg()[0], 1)
    finally:
        if submitted:
            slurm.run("scancel", submitted, check=False, retries=0)
    return out


def cli_table(figures: dict[str, object]) -> str:
    """The whole-process figures as the issue's table: slinkyml, raw sbatch, the ratios with their intervals."""
    def ratio(entry: dict) -> str:
        return f"{entry['ratio']} [{entry['ci95'][0]}, {entry['ci95'][1]}]" if entry.get("ratio") else "-"

    lines = ["| what | slinkyml (CPU) | raw sbatch (CPU) | wall ratio | CPU ratio | before (CPU) | vs before, wall | CPU |",
             "|---|---|---|---|---|---|---|---|"]
    for f in figures.values():
        if isinstance(f, dict) and "vs_raw_sbatch" in f:
            before = (f"{f['before_ms']} ms ({f['before_cpu_ms']}) | {ratio(f['vs_before'])} | {ratio(f['cpu_vs_before'])}"
                      if "vs_before" in f else "- | - | -")
            lines.append(f"| `{f['argv']}` | {f['ms']} ms ({f['cpu_ms']}) | {f['raw_sbatch_ms']} ms "
                         f"({f['raw_sbatch_cpu_ms']}) | {ratio(f['vs_raw_sbatch'])} | {ratio(f['cpu_vs_raw_sbatch'])} | "
                         f"{before} |")
    return "\n".join(lines)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=60, help="rounds of raw vs slinkyml (the other "
                    "comparisons run a quarter as many)")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--ttfs-rounds", type=int, default=4, help="pairs of 2-node training jobs (ABBA order)")
    ap.add_argument("--cli-pairs", type=int, default=20, help="ABBA pairs of whole-process submissions")
    ap.add_argument("--cli-only", action="store_true", help="measure only the whole-process submissions")
    ap.add_argument("--regular-python", help="the python of a regular (non-editable) install of this tree, "
                    "measured beside the editable one")
    ap.add_argument("--against-tree", metavar="DIR", help="another source tree of slinkyml (e.g. a git worktree "
                    "of main, byte-compiled): its CLI as a third side of the whole-process rounds (PYTHONPATH=DIR)")
    ap.add_argument("--against-python", metavar="PY", help="the venv python whose console script runs "
                    "--against-tree's commands (default: this one), e.g. an editable install beside a compat one")
    ap.add_argument("--other-state-dir", default="/var/lib/slinkyml/dev-26.05",
                    help="a local cluster on another Slurm release to measure beside this one, when it runs")
    args = ap.parse_args()

    from slinkyml.jobs.render import render_sbatch
    from slinkyml.jobs.spec import JobSpec
    from slinkyml.jobs.submit import SbatchBackend, submit
    from slinkyml.slurm import Slurm

    slurm = Slurm()
    work = Path(tempfile.mkdtemp(prefix="slinkyml-bench-", dir="/tmp"))
    work.chmod(0o777)
    spec = JobSpec.from_dict({"name": "bench-submit", "launcher": "srun", "mem_per_node": "128M",
                              "time_limit": "1", "dependencies": ["singleton"],
                              "entry": {"script": "/bin/true"}, "log_dir": str(work / "logs")})
    (work / "logs").mkdir()
    script = work / "bench.sbatch"
    script.write_text(render_sbatch(spec))
    job_ids: list[int] = []
    if args.cli_only:
        figures = cli_pairs(slurm, spec, work, args.cli_pairs, args.regular_python, args.against_tree,
                            args.against_python)
        print(json.dumps(figures, indent=2))
        print(cli_table(figures), file=sys.stderr)
        return 0

    def raw() -> None:
        out = subprocess.run(["sbatch", "--parsable", "--hold", str(script)], capture_output=True,
                             text=True, check=True, cwd=work).stdout
        job_ids.append(int(out.strip().split(";")[0]))

    held_backend = SbatchBackend(slurm, extra_args=("--hold",))  # like raw(): never takes the nodes

    def ours() -> None:
        job_ids.append(submit(spec, backend=held_backend, cwd=work).job_id)

    def ours_checked() -> None:
        job_ids.append(submit(spec, backend=held_backend, cwd=work, slurm=slurm).job_id)

    from slinkyml import config
    from slinkyml.jobs.restapi import RestApiBackend

    # the dev cluster's unix socket (local auth); a cluster without one (Slurm 26.05) over JWT
    token = None
    if not config.restapi_target().startswith("unix:"):
        token = slurm.run("scontrol", ["token", "lifespan=3600"]).stdout.strip().partition("=")[2]
    rest_backend = RestApiBackend.from_config(slurm=slurm, token=token, user="root" if token else None)

    rest_times: list[float] = []

    def ours_rest() -> None:
        t0 = time.perf_counter()
        job_id = submit(spec, backend=rest_backend, cwd=work).job_id
        rest_times.append(time.perf_counter() - t0)
        job_ids.append(job_id)
        slurm.run("scancel", [str(job_id)], check=False, retries=0)  # not held: cancel at once (untimed)

    try:
        raw()  # warm the controller and the page cache
        ours()
        # each comparison in its own interleaved rounds (shuffled order), so that controller and
        # machine noise hits both alike and the slower variants do not disturb the closest one
        cpu: dict[str, list[float]] = {}
        rounds = interleaved({"raw": raw, "ours": ours}, args.repeats, cpu=cpu)
        t_raw, t_ours = statistics.median(rounds["raw"]), statistics.median(rounds["ours"])
        in_process = ratio_stats(rounds, "ours")
        checked_rounds = interleaved({"raw": raw, "checked": ours_checked}, max(args.repeats // 4, 5))
        t_checked = statistics.median(checked_rounds["checked"])
        t_raw_checked = statistics.median(checked_rounds["raw"])
        # slurmrestd: no process to start per job (the scancel after each is not timed)
        rest_rounds = interleaved({"raw": raw, "rest": ours_rest}, max(args.repeats // 4, 5))
        t_rest, t_raw_rest = statistics.median(rest_times), statistics.median(rest_rounds["raw"])
        small = max(args.repeats // 4, 5)
        t_help = median_time(lambda: subprocess.run([SLINKYML, "--help"], capture_output=True, check=True),
                             small)
        t_import = median_time(lambda: subprocess.run([PY, "-c", "import slinkyml.cli.sbatch"], check=True),
                               small)
        t_python = median_time(lambda: subprocess.run([PY, "-c", "pass"], check=True), small)
    finally:
        for chunk in range(0, len(job_ids), 50):
            slurm.run("scancel", [str(j) for j in job_ids[chunk:chunk + 50]], check=False, retries=0)
    results = {
        "rounds": args.repeats, "raw_sbatch_s": t_raw, "submit_in_process_s": t_ours,
        "ratio_in_process": in_process["ratio"],
        "ratio_in_process_ci95": [round(in_process["ratio_ci95_low"], 4), round(in_process["ratio_ci95_high"], 4)],
        "ratio_in_process_paired_median": in_process["paired_median"],
        # what this process itself spends per submission (render, record, spawning sbatch): the part
        # of submit() that a loaded machine stretches (on an idle core it overlaps sbatch's own time)
        "parent_cpu_raw_ms": statistics.median(cpu["raw"]) * 1e3,
        "parent_cpu_submit_ms": statistics.median(cpu["ours"]) * 1e3,
        "submit_with_cluster_checks_s": t_checked, "ratio_with_checks": t_checked / t_raw_checked,
        "submit_restapi_unix_s": t_rest, "ratio_restapi_unix": t_rest / t_raw_rest,
        "cli_help_s": t_help, "python_bare_startup_s": t_python, "import_cli_sbatch_s": t_import,
        # the command line as whole processes, each paired with raw sbatch of its script (ABBA rounds)
        "cli": cli_pairs(slurm, spec, work, args.cli_pairs, args.regular_python, args.against_tree,
                         args.against_python),
    }
    other = Path(args.other_state_dir) / "etc" / "slurm.conf"
    if other.exists() and str(other) != slurm.conf:
        results.update(other_release(Slurm(other), spec, work, max(args.repeats // 2, 10)))
    if not args.skip_training:
        results.update(time_to_first_step(slurm, work, args.ttfs_rounds))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in results.items()}, indent=2))
    print(cli_table(results["cli"]), file=sys.stderr)
    return 0


def other_release(slurm, spec, work: Path, repeats: int) -> dict[str, object]:
    """Raw ``sbatch`` vs ``submit()`` on another local cluster (its own release's commands)."""
    from slinkyml.jobs.render import render_sbatch
    from slinkyml.jobs.submit import SbatchBackend, submit
    from slinkyml.slurm import SlurmError

    try:
        version = str(slurm.version)
        slurm.run("sinfo", ["-h"], retries=0, timeout=10)
    except SlurmError as exc:
        return {"other_release": f"not measured: {exc}"}
    script = work / "bench-other.sbatch"
    script.write_text(render_sbatch(spec))
    argv, env = [slurm.executable("sbatch"), "--parsable", "--hold", str(script)], slurm.environ(utc=False)
    backend = SbatchBackend(slurm, extra_args=("--hold",))
    job_ids: list[int] = []

    def raw() -> None:
        out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=work, env=env).stdout
        job_ids.append(int(out.strip().split(";")[0]))

    def ours() -> None:
        job_ids.append(submit(spec, backend=backend, cwd=work).job_id)

    try:
        raw()
        ours()
        rounds = interleaved({"raw": raw, "ours": ours}, repeats)
    finally:
        for chunk in range(0, len(job_ids), 50):
            slurm.run("scancel", [str(j) for j in job_ids[chunk:chunk + 50]], check=False, retries=0)
    stats = ratio_stats(rounds, "ours")
    return {"other_release": version, "other_raw_sbatch_s": statistics.median(rounds["raw"]),
            "other_submit_in_process_s": statistics.median(rounds["ours"]),
            "other_ratio_in_process": stats["ratio"],
            "other_ratio_in_process_ci95": [round(stats["ratio_ci95_low"], 4), round(stats["ratio_ci95_high"], 4)]}


def time_to_first_step(slurm, work: Path, rounds: int) -> dict[str, float]:
    """Submission → first training step, rendered vs hand-written, in ABBA order over ``rounds``
    pairs (page cache and controller warm-up then favour neither)."""
    from slinkyml.jobs.follow import wait
    from slinkyml.jobs.spec import JobSpec
    from slinkyml.jobs.submit import SbatchBackend, submit

    def first_step(metrics: Path, t0: float, job_id: int) -> float:
        wait(slurm, job_id, timeout=300, poll=0.5)
        first = json.loads(metrics.read_text().splitlines()[0])
        return first["wall"] - first["time"] - t0  # wall clock when step 1 began

    def ours(tag: str) -> float:
        out = work / f"ours-{tag}"
        spec = JobSpec.from_dict({"name": "ttfs", "nodes": 2, "mem_per_node": "1G", "time_limit": "00:10:00",
                                  "python": PY, "entry": {"module": "slinkyml.train", "args": ["--steps", "3"]},
                                  "checkpoint_dir": str(out / "ckpt"), "log_dir": str(out)})
        t0 = time.time()
        job = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=work).job_id
        return first_step(out / "ckpt" / "metrics.jsonl", t0, job)

    def hand(tag: str) -> float:
        out = work / f"hand-{tag}"
        out.mkdir()
        t0 = time.time()
        job = slurm.sbatch(HAND_WRITTEN.format(out=out, py=PY), cwd=str(work))
        return first_step(out / "ckpt" / "metrics.jsonl", t0, job)

    times: dict[str, list[float]] = {"ours": [], "hand": []}
    for i in range(rounds):
        order = (("ours", ours), ("hand", hand)) if i % 2 == 0 else (("hand", hand), ("ours", ours))
        for name, fn in order:
            times[name].append(fn(str(i)))
    o, h = statistics.median(times["ours"]), statistics.median(times["hand"])
    paired = statistics.median(a / b for a, b in zip(times["ours"], times["hand"], strict=True))
    return {"first_step_slinkyml_s": o, "first_step_hand_written_s": h, "first_step_ratio": o / h,
            "first_step_paired_median_ratio": paired,  # per round: robust to a round the machine starves
            "first_step_samples": {k: [round(v, 2) for v in vs] for k, vs in times.items()}}


if __name__ == "__main__":
    sys.exit(main())
