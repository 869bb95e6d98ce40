"""Paired measurements for the benchmarks: every figure beside its baseline, in the same run.

Rounds run each side once, in ABBA order (AB, BA, AB, ...; for three sides ABC, CBA, ...), so a drift of
the machine or of slurmctld over the run favours none; an optional random wait before each measurement
(outside the clock) puts submissions at a random phase of slurmctld's ~1 s scheduling loop, which otherwise
moves single comparisons by a whole loop. A figure is the median of per-round ratios, with a 95 % bootstrap
interval (rounds resampled whole).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable


def abba(sides: dict[str, Callable[[], float | None]], rounds: int, *, phase_s: float = 0.0, seed: int = 0
         ) -> dict[str, list[float]]:
    """Each side's figure per round: what the function returns, or its wall time when it returns None. A
    round in which a side fails is dropped for every side (per-round ratios need both); the failure is said."""
    rng = random.Random(seed)
    names = list(sides)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        order = names if i % 2 == 0 else names[::-1]
        got: dict[str, float] = {}
        for name in order:
            if phase_s:
                time.sleep(rng.uniform(0, phase_s))  # random phase against the scheduling loop, off the clock
            t0 = time.perf_counter()
            try:
                value = sides[name]()
            except Exception as exc:  # noqa: BLE001 - one failed round must not hide the others
                print(f"# round {i}: {name}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                      file=sys.stderr)
                break
            got[name] = time.perf_counter() - t0 if value is None else value
        if len(got) == len(names):
            for name in names:
                out[name].append(got[name])
    return out


def paired(ours: list[float], base: list[float], seed: int = 1) -> dict[str, object]:
    """The median of per-round ratios ``ours / base`` and its 95 % bootstrap interval."""
    ratios = [o / b for o, b in zip(ours, base, strict=True)]
    if not ratios:
        return {"ratio": None, "pairs": 0}
    rng = random.Random(seed)
    boot = sorted(statistics.median(rng.choice(ratios) for _ in ratios) for _ in range(2000))
    return {"ratio": round(statistics.median(ratios), 3), "ci95": [round(boot[50], 3), round(boot[1949], 3)],
            "pairs": len(ratios)}
