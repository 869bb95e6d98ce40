"""Job arrays: pack many small items into few array tasks, split arrays at MaxArraySize.

Each task pays a Python start-up and an unpickle, so a :class:`Chunk` runs many items in one task
and returns one outcome (value or error) per item.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slinkyml.dispatch.task import record_task_failure
from slinkyml.errors import SlinkyError
from slinkyml.slurm import records

if TYPE_CHECKING:  # array tasks unpickle Chunk from this module: they need no Slurm client
    from slinkyml.slurm.runner import Slurm


@dataclass(frozen=True)
class ItemOutcome:
    """One item's outcome inside a chunk: a value, or an error (type, message, traceback)."""

    ok: bool
    value: Any = None
    error: str = ""
    traceback: str = ""
    seconds: float = 0.0


class ItemError(SlinkyError):
    """An item of a map_array raised; ``index`` is its position, ``traceback`` the remote one."""

    def __init__(self, index: int, error: str, tb: str = "", job_id: str = ""):
        self.index = index
        self.error = error
        self.traceback = tb
        self.job_id = job_id
        where = f" (array task {job_id})" if job_id else ""
        super().__init__(f"item {index}{where} failed: {error}")


class Chunk:
    """Calls ``fn(*args)`` for each item's args in one task; never lets one item sink the rest."""

    def __init__(self, fn: Callable[..., Any], items: Sequence[tuple], first_index: int = 0):
        self.fn = fn
        self.items = list(items)
        self.first_index = first_index

    def __call__(self) -> list[ItemOutcome]:
        outcomes = []
        for args in self.items:
            start = time.perf_counter()
            try:
                value = self.fn(*args)
            except Exception as exc:  # noqa: BLE001 - reported per item
                outcomes.append(ItemOutcome(False, error=f"{type(exc).__name__}: {exc}",
                                            traceback=traceback.format_exc(),
                                            seconds=time.perf_counter() - start))
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: the whole task ends here
                record_task_failure(exc)  # the run protocol's marker: `jobs status|why` name it
                raise
            else:
                outcomes.append(ItemOutcome(True, value, seconds=time.perf_counter() - start))
        return outcomes

    def __repr__(self) -> str:
        return f"Chunk({getattr(self.fn, '__qualname__', self.fn)!r}, items {self.first_index}.." \
               f"{self.first_index + len(self.items) - 1})"


@dataclass(frozen=True)
class ArrayPlan:
    """How items map to array tasks and array tasks to sbatch arrays."""

    chunks: tuple[tuple[int, int], ...]  # (first item, item count) per array task
    arrays: tuple[tuple[int, int], ...]  # (first chunk, chunk count) per sbatch array
    parallelism: int | None  # %N of each sbatch array (None: no limit)
    max_array_size: int

    @property
    def n_tasks(self) -> int:
        return len(self.chunks)


def plan_array(n_items: int, *, max_array_size: int, chunk_size: int | None = None,
               target_tasks: int = 16, max_parallel: int | None = None) -> ArrayPlan:
    """Chunk ``n_items`` (``chunk_size`` items per task, or about ``target_tasks`` tasks) and
    split the tasks into arrays of at most ``max_array_size`` (indices 0..MaxArraySize-1)."""
    if n_items < 0:
        raise SlinkyError("map_array: negative item count")
    if max_array_size < 1:
        raise SlinkyError(f"MaxArraySize is {max_array_size}: this cluster does not allow job arrays")
    if chunk_size is None:
        chunk_size = max(1, math.ceil(n_items / max(1, target_tasks)))
    if chunk_size < 1:
        raise SlinkyError(f"map_array: chunk_size must be ≥ 1, got {chunk_size}")
    chunks = tuple((start, min(chunk_size, n_items - start)) for start in range(0, n_items, chunk_size))
    arrays = tuple((start, min(max_array_size, len(chunks) - start))
                   for start in range(0, len(chunks), max_array_size))
    parallelism = None
    if max_parallel is not None:
        if max_parallel < 1:
            raise SlinkyError(f"map_array: max_parallel must be ≥ 1, got {max_parallel}")
        # the limit is per sbatch array: share it between the split arrays
        parallelism = max(1, max_parallel // max(1, len(arrays)))
    return ArrayPlan(chunks, arrays, parallelism, max_array_size)


def max_array_size(slurm: Slurm) -> int:
    """The cluster's MaxArraySize from ``scontrol show config`` (Slurm's default is 1001)."""
    value = slurm.show_config().get("MaxArraySize", "1001")
    try:
        return int(value.split()[0])
    except (ValueError, IndexError):
        return 1001


def total_cpus(slurm: Slurm, partition: str | None = None) -> int:
    """CPUs of the partition (``sinfo %C``: allocated/idle/other/total) to size chunks by."""
    rows = records.sinfo(slurm, ("CPUsState",), ["-p", partition] if partition else [], retries=1, timeout=30)
    totals = [int(row["CPUsState"].split("/")[-1]) for row in rows if row["CPUsState"].count("/") == 3]
    return max(totals) if totals else 1
