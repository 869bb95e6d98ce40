"""Benchmark: full layout search for a 1T-parameter model on 4,096 A100-80GB.

Prints candidates per second for the vectorised search (numpy, one pass over all candidates) as a
ratio against a plain-Python reference loop that evaluates the same candidates one at a time with
the same model (``evaluate`` on Python floats), in the same process. No timing is asserted anywhere.

    .venv/bin/python benchmarks/plan.py [--gpus 4096] [--params 1e12] [--global-batch 4096]
"""

from __future__ import annotations

import argparse
import time

from slinkyml.plan import Settings, gpu_hardware, plan, shape_from_params
from slinkyml.plan.search import build_grid, evaluate, evaluate_grid


def reference_loop(model, hw, settings, grid) -> int:  # type: ignore[no-untyped-def]
    """Evaluate every candidate separately with Python numbers; returns how many fit."""
    c = grid.columns
    cols = {k: v.tolist() for k, v in c.items()}
    fits = 0
    for i in range(len(grid)):
        r = evaluate(model, hw, settings, tp=float(cols["tp"][i]), pp=float(cols["pp"][i]),
                     dp=float(cols["dp"][i]), mb=float(cols["mb"][i]), zero=cols["zero"][i],
                     recompute=cols["recompute"][i], offload_optimizer=cols["offload_optimizer"][i],
                     offload_params=cols["offload_params"][i],
                     first_layers=float(cols["first_layers"][i]), last_layers=float(cols["last_layers"][i]),
                     most_layers=float(cols["most_layers"][i]))
        fits += bool(r["fits"])
    return fits


def best_of(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=4096)
    ap.add_argument("--params", type=float, default=1e12)
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--global-batch", type=int, default=4096)
    args = ap.parse_args()
    model = shape_from_params(args.params)
    hw = gpu_hardware(args.gpu)
    settings = Settings(global_batch=args.global_batch)
    grid = build_grid(model, hw, args.gpus, settings)
    n = len(grid)
    r = evaluate_grid(model, hw, settings, grid)
    fits_vec = int(r["fits"].sum())
    t_vec = best_of(lambda: evaluate_grid(model, hw, settings, grid), 20)
    t_full = best_of(lambda: plan(model, hw, args.gpus, settings, suggest=False), 5)
    t0 = time.perf_counter()
    fits_ref = reference_loop(model, hw, settings, grid)
    t_ref = time.perf_counter() - t0
    assert fits_ref == fits_vec, (fits_ref, fits_vec)  # same model, same answer
    print(f"model: {model.describe()}")
    print(f"{args.gpus} x {hw.model}, global batch {args.global_batch}: {n} candidates, {fits_vec} fit")
    print(f"reference loop (plain Python, one candidate at a time): {n / t_ref:12,.0f} candidates/s "
          f"({t_ref * 1e3:.1f} ms)")
    print(f"vectorised evaluation (numpy):                          {n / t_vec:12,.0f} candidates/s "
          f"({t_vec * 1e3:.2f} ms)  x{t_ref / t_vec:.0f}")
    print(f"full plan() incl. enumeration and ranking:              {n / t_full:12,.0f} candidates/s "
          f"({t_full * 1e3:.2f} ms)  x{t_ref / t_full:.0f}")


if __name__ == "__main__":
    main()
