"""Notebook dispatch: 1,000 trivial items through slinkyml arrays vs submitit's map_array vs a loop
of sbatch calls, and the slurmctld RPCs spent tracking 1,000 jobs for a minute.

Runs against the local cluster (``slinkyml dev up``). submitit's map_array starts one interpreter
per item (~2.7 items/s here), so by default its baseline is measured on 200 items and scaled
linearly to 1,000 (said in the output); the same for the sbatch loop. RPCs are slurmctld's own
counters (``sdiag``, all message types but sdiag's own), which include other users' traffic: run
it on a quiet cluster for clean figures.

    .venv/bin/python benchmarks/dispatch.py [--items 1000] [--baseline-items 200]
        [--sbatch-items 200] [--track-seconds 60] [--folder DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from slinkyml.slurm import Slurm, records


def trivial(x: int) -> int:
    return x + 1


def sdiag_rpcs(slurm: Slurm) -> dict[str, int]:
    return records.sdiag(slurm)


def rpc_delta(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    """(all RPCs but sdiag's own, job-info RPCs) between two sdiag snapshots."""
    total = sum(after.get(k, 0) - before.get(k, 0) for k in after if k != "REQUEST_STATS_INFO")
    info = sum(after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("REQUEST_JOB_INFO"))
    return total, info


def bench_slinkyml(slurm: Slurm, folder: Path, n: int) -> tuple[float, float]:
    from slinkyml.dispatch import Executor

    t0 = time.perf_counter()
    arr = Executor(folder / "slinkyml", slurm=slurm, time=10).map_array(trivial, range(n))
    submitted = time.perf_counter() - t0
    values = arr.results(timeout=1800)
    done = time.perf_counter() - t0
    assert values == [i + 1 for i in range(n)], "wrong results"
    print(f"  slinkyml map_array: {n} items in {arr.plan.n_tasks} array tasks "
          f"({len(arr.array_ids)} array(s)): submit {submitted:.2f} s, all results {done:.1f} s")
    return submitted, done


def bench_submitit(folder: Path, n: int) -> tuple[float, float]:
    import submitit

    ex = submitit.SlurmExecutor(folder=str(folder / "submitit" / "%j"))
    ex.update_parameters(time=10, array_parallelism=1000)
    t0 = time.perf_counter()
    jobs = ex.map_array(trivial, range(n))
    submitted = time.perf_counter() - t0
    values = [job.result() for job in jobs]
    done = time.perf_counter() - t0
    assert values == [i + 1 for i in range(n)], "wrong results"
    print(f"  submitit map_array: {n} items: submit {submitted:.2f} s, all results {done:.1f} s")
    return submitted, done


def bench_sbatch_loop(slurm: Slurm, folder: Path, n: int) -> tuple[float, float]:
    from slinkyml.dispatch.tracking import Tracker

    out = folder / "sbatch"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ids = [str(slurm.sbatch("#!/bin/bash\necho $((SLURM_JOB_ID + 1))\n", ["-o", str(out / "%j.out"), "-t", "10"]))
           for _ in range(n)]
    submitted = time.perf_counter() - t0
    tracker = Tracker(slurm, min_interval=1.0)
    tracker.track(*ids)
    while not all(tracker.info(i, refresh=False).terminal for i in ids):
        tracker.refresh()
        time.sleep(0.5)
    done = time.perf_counter() - t0
    print(f"  loop of sbatch:     {n} jobs: submit {submitted:.2f} s, all finished {done:.1f} s")
    return submitted, done


def bench_tracking(slurm: Slurm, folder: Path, n: int, seconds: float) -> dict[str, tuple[int, int, int]]:
    """Hold an n-task array (pending, never runs) and track it for `seconds`, ours vs submitit's."""
    from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

    from slinkyml.dispatch.tracking import Tracker

    job = slurm.sbatch("#!/bin/bash\ntrue\n", ["--hold", f"--array=0-{n - 1}", "-o", "/dev/null", "-t", "1"])
    ids = [f"{job}_{i}" for i in range(n)]
    small = ids[: max(1, n // 10)]
    results: dict[str, tuple[int, int, int]] = {}
    try:
        for label, tracked in ((f"slinkyml tracker, {n} jobs", ids), (f"slinkyml tracker, {len(small)} jobs", small)):
            tracker = Tracker(slurm)
            tracker.track(*tracked)
            before, end = sdiag_rpcs(slurm), time.monotonic() + seconds
            while time.monotonic() < end:
                for i in tracked:  # every job asks for its state, as n waiting notebooks cells would
                    tracker.info(i)
                time.sleep(0.2)
            results[label] = (*rpc_delta(before, sdiag_rpcs(slurm)), tracker.queries)
        watcher = SlurmJob.watcher = SlurmInfoWatcher(delay_s=60)  # fresh, with submitit's default policy
        jobs = [SlurmJob(folder=str(folder / "submitit-track"), job_id=i) for i in ids]
        before, end = sdiag_rpcs(slurm), time.monotonic() + seconds
        while time.monotonic() < end:
            for j in jobs:
                j.done()
            time.sleep(0.2)
        results[f"submitit watcher, {n} jobs (sacct → slurmdbd)"] = (*rpc_delta(before, sdiag_rpcs(slurm)),
                                                                     watcher.num_calls)
    finally:
        slurm.run("scancel", [str(job)], check=False)
    return results


class _SkipDispatch(Exception):
    pass


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--baseline-items", type=int, default=200, help="submitit map_array items (scaled to --items)")
    p.add_argument("--sbatch-items", type=int, default=200, help="sbatch loop jobs (scaled to --items)")
    p.add_argument("--track-seconds", type=float, default=60.0)
    p.add_argument("--tracking-only", action="store_true", help="only the RPC part")
    p.add_argument("--folder", help="shared folder for pickles/logs (default: a temp dir under /tmp)")
    args = p.parse_args(argv)
    slurm = Slurm()
    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="slinkyml-bench-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)
    n = args.items
    try:
        print(f"dispatch of {n} trivial items (Slurm {slurm.version}, "
              f"MaxArraySize {slurm.show_config().get('MaxArraySize')})")
        if args.tracking_only:
            raise _SkipDispatch
        ours_sub, ours_done = bench_slinkyml(slurm, folder, n)
        sub_sub, sub_done = bench_submitit(folder, args.baseline_items)
        scale = n / args.baseline_items
        loop_sub, loop_done = bench_sbatch_loop(slurm, folder, args.sbatch_items)
        loop_scale = n / args.sbatch_items
        print(f"\nto {n} items (submitit measured on {args.baseline_items}, ×{scale:g}; sbatch loop measured on "
              f"{args.sbatch_items}, ×{loop_scale:g}; linear scaling):")
        rows = [("slinkyml arrays", ours_sub, ours_done), ("submitit map_array", sub_sub * scale, sub_done * scale),
                ("loop of sbatch", loop_sub * loop_scale, loop_done * loop_scale)]
        print(f"  {'':20} {'submit s':>10} {'results s':>10} {'results vs slinkyml':>20}")
        for label, s, d in rows:
            print(f"  {label:20} {s:10.2f} {d:10.1f} {d / ours_done:19.1f}×")
    except _SkipDispatch:
        pass
    try:
        print(f"\nslurmctld RPCs tracking {n} jobs for {args.track_seconds:g} s (sdiag deltas; other users' "
              "traffic included):")
        print(f"  {'':48} {'own queries':>12} {'all ctld RPCs':>14} {'ctld job-info':>14}  (per minute)")
        for label, (total, info, own) in bench_tracking(slurm, folder, n, args.track_seconds).items():
            per_min = 60.0 / args.track_seconds
            print(f"  {label:48} {own * per_min:12.0f} {total * per_min:14.0f} {info * per_min:14.0f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
