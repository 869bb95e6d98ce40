"""Benchmark: slinkyml at production size on one machine, as a table (and a PNG of each curve).

    .venv/bin/python benchmarks/scale.py [--sizes 1000,10000] [--only NAME,...] [--png DIR]

Measurements (each a row per size, with a ratio against a baseline run in the same process):

- ``tracker``: N array tasks (held, so nothing runs) tracked by the dispatch tracker for a minute on
  a cluster of its own: slurmctld RPCs per minute from ``sdiag`` (the goal: flat in N), the
  tracker's CPU seconds and memory. Baseline: the same minute with N = 100.
- ``map_array``: 10,000 trivial items through ``Executor.map_array`` to all results (goal ≤ 60 s,
  ≥ 166 items/s). Baseline: 100 items.
- ``fairshare``: 1,000 users in a 3-level tree (shares 1/3/7/100 and ``parent``), real usage from
  jobs of four users placed across it; slinkyml's Fair Tree recomputation compared with sshare for
  every association, and its time (goal ≤ 1 s). Baseline: parsing sshare's output.
- ``sacct``: sacct text → DataFrames (TRES, keys, types) against ``pandas.read_csv`` of the same
  text (goal ≥ 1.0×), at each size in rows.
- ``sbatch-check``: every template checked by a throw-away slurmctld declaring a 512-node
  h100-efa cluster. Baseline: the same at 2 nodes.
- ``render``: ``cluster render`` + ``validate`` of a spec with 64 node sets. Baseline: 1 node set.
- ``planner``: the layout search for a 1T model at 16,384 GPUs. Baseline: 1,024 GPUs.
- ``bringup`` (only with ``--only bringup``; ``--nodes 64,256,512`` by default): ``dev up
  --emulated-nodes N`` from an empty state dir (/var/lib/slinkyml/bench-bringup, bridge slkbu0, node
  prefix bu, 10.236.0.0/21, ports 7957-7960 and 14957), the RSS and PSS of all slurmd together, a
  ``sbatch -N<N> --wrap 'srun true'`` to its end and its states in sacct, then ``reset``. Baseline:
  the first N.
- ``records``: slurmdbd filled with ``--records`` real job records (1,000-task arrays of ``true`` on a
  64-node emulated cluster, state dir /var/lib/slinkyml/bench-records), then ``slinkyml usage``,
  ``efficiency`` and ``report --html`` over them: wall time and peak memory, and sacct's fetch rate.
  Baseline: sacct's own fetch of the same records.

The live rows bring up their own cluster (state dir /var/lib/slinkyml/bench-scale, bridge slkbs0,
node prefix bs, 10.227.0.0/24, ports 7927-7930 and 14927; MaxJobCount raised), so the session's
cluster and its accounts are untouched. What this 2-core machine cannot do is said in the output.
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accounting import synthesise  # noqa: E402 - the sibling benchmark's sacct generator
from store_fill import fill  # noqa: E402 - real records, as benchmarks/store.py fills its cluster

from slinkyml.accounting import fairshare  # noqa: E402
from slinkyml.accounting.backends.cli import CliBackend  # noqa: E402
from slinkyml.accounting.sacct import SEP  # noqa: E402
from slinkyml.accounting.sacct_arrow import parse_sacct  # noqa: E402
from slinkyml.dev import LocalCluster  # noqa: E402
from slinkyml.dispatch import Executor  # noqa: E402
from slinkyml.dispatch.tracking import Tracker  # noqa: E402
from slinkyml.plan import Settings, gpu_hardware, plan, shape_from_params  # noqa: E402
from slinkyml.slurm import SlurmError  # noqa: E402
from slinkyml.slurm import records as slurm_records  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLUSTER = dict(nodes=2, bridge="slkbs0", node_prefix="bs", subnet="10.227.0.0/24", slurmctld_port=7927,
               slurmd_port=7928, slurmdbd_port=7929, slurmrestd_port=7930, mariadb_port=14927,
               extra_slurm_conf="MaxJobCount=200000\n")
ROWS: list[dict] = []


def row(measure: str, size: int, seconds: float, baseline: float, **extra) -> None:
    entry = {"measure": measure, "N": size, "seconds": round(seconds, 3),
             "ratio_vs_baseline": round(seconds / baseline, 2) if baseline else float("nan"), **extra}
    ROWS.append(entry)
    print("  " + ", ".join(f"{k}={v}" for k, v in entry.items()), flush=True)


def live_cluster() -> LocalCluster:
    cluster = LocalCluster("/var/lib/slinkyml/bench-scale", keep_running=True, gpus=0, **CLUSTER)
    return cluster.up()


# -- tracker ---------------------------------------------------------------------------------------
def _sdiag_total(slurm) -> int:
    """All RPCs slurmctld has served since its statistics were last reset (sdiag -r)."""
    return sum(slurm_records.sdiag(slurm).values())


def tracker(sizes: list[int], minute: float) -> None:
    cluster = live_cluster()
    slurm = cluster.slurm
    work = Path(tempfile.mkdtemp(prefix="slinkyml-scale-", dir="/tmp"))
    baseline = None
    for size in [100, *sizes]:
        arrays = []
        for start in range(0, size, 1000):  # MaxArraySize 1001: held arrays of ≤ 1000 tasks
            count = min(1000, size - start)
            out = slurm.run("sbatch", ["--parsable", "--hold", f"--array=0-{count - 1}", "-o", "/dev/null",
                                       "--wrap", "true"], cwd=work).stdout
            arrays.append(out.strip().split(";")[0])
        ids = [f"{a}_{t}" for a, start in zip(arrays, range(0, size, 1000), strict=True)
               for t in range(min(1000, size - start))]
        track = Tracker(slurm)
        track.track(*ids)
        slurm.run("sdiag", ["-r"])
        before = _sdiag_total(slurm)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
        end = time.monotonic() + minute
        while time.monotonic() < end:
            track.refresh()
            time.sleep(0.2)  # a notebook polling results
        cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime - cpu0
        rpcs = (_sdiag_total(slurm) - before - 1) * 60.0 / minute  # minus our own closing sdiag
        # memory from one more full refresh, traced apart: tracemalloc running during the minute
        # made the CPU figure ~6x too high (it was on there until the 10k row read 5.4 s/min)
        tracemalloc.start()
        refresh_cpu0 = time.process_time()
        track.refresh(force=True)
        refresh_cpu = time.process_time() - refresh_cpu0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        states = {track.info(i, refresh=False).state for i in ids[:5]}
        slurm.run("scancel", arrays)
        if baseline is None:
            baseline = rpcs
            print(f"  tracker baseline N=100: {rpcs:.0f} RPCs/min, states {states}")
            continue
        row("tracker", size, cpu, 0, rpcs_per_min=round(rpcs, 1), rpcs_vs_N100=round(rpcs / baseline, 2),
            tracker_queries=track.queries, tracker_peak_mib=round(peak / 2**20, 1),
            cpu_s_per_min=round(cpu * 60.0 / minute, 2), traced_full_refresh_s=round(refresh_cpu, 3))


# -- map_array -------------------------------------------------------------------------------------
def square(x: int) -> int:
    return x * x


def map_array(sizes: list[int]) -> None:
    cluster = live_cluster()
    folder = Path(tempfile.mkdtemp(prefix="slinkyml-scale-map-", dir="/tmp"))
    folder.chmod(0o777)
    executor = Executor(folder, slurm=cluster.slurm, time=30, mem="256M")
    t0 = time.perf_counter()
    assert executor.map_array(square, range(100)).results(timeout=600) == [x * x for x in range(100)]
    baseline = time.perf_counter() - t0
    for size in sizes:
        t0 = time.perf_counter()
        array = executor.map_array(square, range(size))
        assert array.results(timeout=1800) == [x * x for x in range(size)]
        seconds = time.perf_counter() - t0
        row("map_array", size, seconds, baseline, items_per_s=round(size / seconds), tasks=len(array.task_ids))


# -- fair-share ------------------------------------------------------------------------------------
SHARES = (1, 3, 7, 100)


def fairshare_tree(cluster: LocalCluster, users: int = 1000) -> list[tuple[str, str]]:
    """root → 10 accounts → 10 sub-accounts each → 10 users each; every 7th account and sub-account
    ``fairshare=parent``. Returns (account, user) pairs that get real usage."""
    mgr = cluster.slurm
    existing = mgr.run("sacctmgr", ["-n", "-P", "list", "account", "format=Account"]).stdout.split()
    if "fs0" in existing:
        return [(f"fs{a}s{a}", u) for a, u in enumerate(("alice", "bob", "carol", "dave"))]
    per = users // 100
    for a in range(10):
        share = "parent" if a % 7 == 6 else SHARES[a % 4]
        mgr.run("sacctmgr", ["-i", "add", "account", f"fs{a}", "parent=root", f"fairshare={share}"])
        for b in range(10):
            sub = f"fs{a}s{b}"
            share = "parent" if (a * 10 + b) % 7 == 3 else SHARES[(a + b) % 4]
            mgr.run("sacctmgr", ["-i", "add", "account", sub, f"parent=fs{a}", f"fairshare={share}"])
            names = ",".join(f"u{a}{b}{c}" for c in range(per))
            mgr.run("sacctmgr", ["-i", "add", "user", names, f"account={sub}", f"fairshare={SHARES[b % 4]}"])
    placed = []
    for a, user in enumerate(("alice", "bob", "carol", "dave")):
        mgr.run("sacctmgr", ["-i", "add", "user", user, f"account=fs{a}s{a}", f"fairshare={SHARES[a]}"])
        placed.append((f"fs{a}s{a}", user))
    return placed


def fairshare_compare() -> None:
    cluster = live_cluster()
    placed = fairshare_tree(cluster)
    slurm = cluster.slurm
    for i, (account, user) in enumerate(placed):  # real usage: jobs of different lengths
        slurm.run("sbatch", ["--uid", user, "-A", account, "-n", "1", "-o", "/dev/null",
                             "--wrap", f"sleep {2 + 3 * i}"], cwd="/tmp")
    while slurm.run("squeue", ["-h", "-o", "%i"]).stdout.strip():
        time.sleep(2)
    # slurmctld folds usage into the tree (decay, EffectvUsage) once per PriorityCalcPeriod (1 min):
    # sshare and assoc_mgr agree only after a pass with no job running
    time.sleep(70)
    backend = CliBackend(slurm)
    t0 = time.perf_counter()
    assocs, raw = backend.shares_snapshot()
    snapshot = time.perf_counter() - t0
    text = slurm.run("sshare", fairshare.sshare_args()).stdout
    t0 = time.perf_counter()
    fairshare.parse_sshare(text)
    parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    root = fairshare.build_tree(assocs, raw)
    ours = fairshare.recompute(root, "fair_tree")
    seconds = time.perf_counter() - t0
    mismatches = fairshare.fair_tree_mismatches(assocs, raw)
    users = int(assocs["is_user"].sum())
    row("fairshare", users, seconds, parse, associations=len(ours), mismatches=len(mismatches),
        sshare_snapshot_s=round(snapshot, 2), first_mismatch=str(mismatches[0]) if mismatches else "")


# -- sacct parsing ---------------------------------------------------------------------------------
def sacct(sizes: list[int]) -> None:
    for size in sizes:
        text = synthesise(size)
        t0 = time.perf_counter()
        pd.read_csv(io.StringIO(text), sep=SEP, header=None, dtype=str, keep_default_na=False)
        baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        table = parse_sacct(text)
        seconds = time.perf_counter() - t0
        row("sacct", size, seconds, baseline, rows_per_s=round(size / seconds),
            vs_read_csv=round(baseline / seconds, 2), jobs=len(table.jobs))


# -- sbatch check, render, planner ----------------------------------------------------------------
def _big_spec(path: Path, count: int, node_sets: int = 1) -> Path:
    spec = (REPO / "manifests" / "h100-efa" / "cluster.yaml").read_text()
    data = __import__("yaml").safe_load(spec)
    first = data["node_sets"][0]
    data["node_sets"] = [{**first, "name": f"{first['name']}{i}" if node_sets > 1 else first["name"],
                          "count": count} for i in range(node_sets)]
    path.write_text(__import__("yaml").safe_dump(data, sort_keys=False))
    return path


def sbatch_check() -> None:
    from slinkyml.cli import main

    templates = [str(p) for p in sorted((REPO / "sbatch").glob("*.sbatch"))
                 if "trainium" not in p.name]  # the trn1 template targets the trn1 cluster
    with tempfile.TemporaryDirectory() as tmp:
        times = {}
        for count in (2, 512):
            spec = _big_spec(Path(tmp) / f"c{count}.yaml", count)
            t0 = time.perf_counter()
            code = main(["sbatch", "check", *templates, "--cluster", str(spec)])
            times[count] = time.perf_counter() - t0
            print(f"  sbatch check at {count} nodes: exit {code}")
        row("sbatch-check", 512, times[512], times[2], templates=len(templates))


def render() -> None:
    from slinkyml.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        times = {}
        for sets in (1, 64):
            spec = _big_spec(Path(tmp) / f"s{sets}.yaml", 4, node_sets=sets)
            t0 = time.perf_counter()
            assert main(["cluster", "render", str(spec), "-o", f"{tmp}/out{sets}"]) == 0
            code = main(["cluster", "validate", f"{tmp}/out{sets}"])
            times[sets] = time.perf_counter() - t0
            print(f"  render+validate {sets} node sets: validate exit {code}")
        row("render", 64, times[64], times[1], unit="node sets")


def planner() -> None:
    model = shape_from_params(1e12)
    hw = gpu_hardware("a100-80gb")
    times = {}
    for gpus in (1024, 16384):
        t0 = time.perf_counter()
        result = plan(model, hw, gpus, Settings(global_batch=4096))
        times[gpus] = time.perf_counter() - t0
    row("planner", 16384, times[16384], times[1024], layouts_evaluated=result.evaluated,
        feasible=result.feasible)


RECORDS_CLUSTER = dict(nodes=64, bridge="slkbr0", node_prefix="br", subnet="10.228.0.0/24", slurmctld_port=7937,
                       slurmd_port=7938, slurmdbd_port=7939, slurmrestd_port=7940, mariadb_port=14937,
                       extra_slurm_conf="MaxJobCount=200000\nMinJobAge=30\n")


def _timed_cli(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB, from the child's own rusage) of one ``slinkyml`` command."""
    import os
    import subprocess

    code = "import sys; from slinkyml.cli import main; sys.exit(main(sys.argv[1:]))"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"slinkyml {' '.join(argv)}: {err.strip()[-500:]}")
    return seconds, usage.ru_maxrss / 1024


def records(total: int) -> None:
    import os

    from slinkyml.dev.slurm.config import EMULATED_NODE

    cluster = LocalCluster("/var/lib/slinkyml/bench-records", keep_running=True, gpus=0,
                           **{**EMULATED_NODE, **RECORDS_CLUSTER}).up()
    slurm = cluster.slurm
    fill(slurm, total)
    time.sleep(30)  # slurmdbd commits the last completions
    env = {**os.environ, "SLURM_CONF": str(cluster.spec.slurm_conf)}
    t0 = time.perf_counter()
    text = slurm.run("sacct", ["-a", "-X", "-n", "-P", "-S", "2026-01-01", "-o", "JobID,State"], timeout=600).stdout
    fetch = time.perf_counter() - t0
    rows = len(text.splitlines())
    row("records", rows, fetch, 0, sacct_rows_per_s=round(rows / fetch))
    for name, argv in (("usage", ["usage", "--since", "2026-01-01"]),
                       ("efficiency", ["efficiency", "--since", "2026-01-01", "--csv"]),
                       ("report", ["report", "--since", "2026-01-01", "--html", "/tmp/bench-records.html"])):
        seconds, peak = _timed_cli(argv, env)
        row(f"records:{name}", rows, seconds, fetch, peak_mib=round(peak))


# -- bring-up of an emulated cluster ----------------------------------------------------------------
BRINGUP_CLUSTER = dict(bridge="slkbu0", node_prefix="bu", subnet="10.236.0.0/21", slurmctld_port=7957,
                       slurmd_port=7958, slurmdbd_port=7959, slurmrestd_port=7960, mariadb_port=14957)


def _slurmd_memory_mib(cluster: LocalCluster) -> tuple[float, float]:
    """RSS and PSS (MiB) of all the cluster's slurmd together, from its PID files."""
    rss = pss = 0
    for pid_file in (cluster.spec.run / "daemons").glob("slurmd-*.pid"):
        pid = pid_file.read_text().split()[0]
        try:
            rss += int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                            if line.startswith("VmRSS:")).split()[1])
            pss += int(next(line for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                            if line.startswith("Pss:")).split()[1])
        except (OSError, StopIteration):
            continue
    return rss / 1024, pss / 1024


def _run_job(cluster: LocalCluster, nodes: int, limit: float = 420.0) -> tuple[float, str]:
    """``sbatch -N<nodes> --wrap 'srun true'`` to its end: wall seconds and its states in sacct."""
    slurm = cluster.slurm
    t0 = time.perf_counter()
    job = slurm.run("sbatch", ["--parsable", f"-N{nodes}", "-o", "/dev/null", "--wrap", "srun true"],
                    cwd="/tmp").stdout.strip()
    while time.perf_counter() - t0 < limit:
        try:
            result = slurm.run("squeue", ["-h", "-j", job, "-o", "%T"], check=False, retries=0)
        except SlurmError:  # slurmctld (or munge) swamped by the launch: ask again
            continue
        if result.returncode == 0 and not result.stdout.strip():
            break
        time.sleep(1)
    seconds = time.perf_counter() - t0
    time.sleep(3)  # slurmdbd records the end
    try:
        out = slurm.run("sacct", ["-n", "-P", "-j", job, "-o", "JobID,State"], check=False).stdout
    except SlurmError as exc:
        return seconds, f"sacct: {exc}"
    return seconds, " ".join(line.replace("|", "=") for line in out.splitlines())


def bringup(node_counts: list[int]) -> None:
    """``dev up --emulated-nodes N`` from nothing, slurmd memory, one job over every node, ``reset``."""
    from slinkyml.dev.slurm.config import EMULATED_NODE

    first = None
    for nodes in node_counts:
        cluster = LocalCluster("/var/lib/slinkyml/bench-bringup", nodes=nodes, gpus=0,
                               **{**EMULATED_NODE, **BRINGUP_CLUSTER})
        cluster.reset()
        t0 = time.perf_counter()
        try:
            cluster.up()
            up = time.perf_counter() - t0
            rss, pss = _slurmd_memory_mib(cluster)
            job_s, states = _run_job(cluster, nodes)
        finally:
            t1 = time.perf_counter()
            cluster.reset()
            reset_s = time.perf_counter() - t1
        first = first or up
        row("bringup", nodes, up, first, slurmd_rss_mib=round(rss), slurmd_pss_mib=round(pss),
            job_all_nodes_s=round(job_s, 1), job=states, reset_s=round(reset_s, 1))


def write_png(directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(ROWS)
    directory.mkdir(parents=True, exist_ok=True)
    for measure, part in frame.groupby("measure"):
        y = "rpcs_per_min" if measure == "tracker" else "seconds"
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot(part["N"], part[y], marker="o")
        ax.set_xscale("log")
        ax.set_xlabel("N")
        ax.set_ylabel(y)
        ax.set_title(f"slinkyml scale: {measure}")
        fig.tight_layout()
        fig.savefig(directory / f"scale-{measure}.png")
        plt.close(fig)
    print(f"curves in {directory}/scale-*.png")


MEASURES = ("sacct", "planner", "render", "sbatch-check", "fairshare", "tracker", "map_array", "records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="N for tracker, map_array and sacct rows")
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(MEASURES)}")
    parser.add_argument("--minute", type=float, default=60.0, help="tracker measuring window (s)")
    parser.add_argument("--png", default="out/bench", help="where the curves go")
    parser.add_argument("--records", type=int, default=100_000, help="job records for the records step")
    parser.add_argument("--nodes", default="64,256,512",
                        help="emulated node counts for the bringup step (not run unless --only names it; "
                             "1024 takes minutes and ~9 GB)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    only = set(args.only.split(",")) if args.only else set(MEASURES)  # bringup only when named
    steps = {"sacct": lambda: sacct([s * 10 for s in sizes]), "planner": planner, "render": render,
             "sbatch-check": sbatch_check, "fairshare": fairshare_compare,
             "tracker": lambda: tracker(sizes, args.minute), "map_array": lambda: map_array(sizes),
             "records": lambda: records(args.records),
             "bringup": lambda: bringup([int(n) for n in args.nodes.split(",")])}
    for name, step in steps.items():
        if name in only:
            print(f"== {name}", flush=True)
            step()
    print()
    print(pd.DataFrame(ROWS).to_string(index=False))
    if ROWS:
        write_png(Path(args.png))


if __name__ == "__main__":
    main()
