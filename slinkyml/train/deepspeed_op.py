"""DeepSpeed's shared-memory comm op on CPU: built once at set-up, and never waited on forever.

DeepSpeed's CPU accelerator loads this op in every rank's ``init_distributed`` through torch's JIT
extension loader, which takes a lock *file* (``<build dir>/lock``) for every load, built or not, and
waits for it without end. A process killed while it held the lock (a rank stopped by a time limit, a
node-loss test, a session that ended mid-build) leaves the file behind, and every later load, CI's
set-up step included, waits forever. :func:`clear_stale_lock` removes such a file when no process is
building in the directory; ``python -m slinkyml.train.deepspeed_op`` builds the op with that check and
a time limit (the Makefile's venv step).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OP_NAME = "deepspeed_shm_comm"  # DeepSpeed's ShareMemCommBuilder.NAME: its build directory's name
# a real build holds the lock with ninja or the compiler running in the directory; only the moments
# between taking the lock and starting ninja pass without one, far less than this
STALE_AFTER_S = 60.0
BUILD_LIMIT_S = 40 * 60  # a cold build took 6.5 min on two loaded cores
_BUILD = ("from deepspeed.accelerator import get_accelerator as a; "
          "b = a().create_op_builder('ShareMemCommBuilder'); b and b.load()")


def build_dir(name: str = OP_NAME) -> Path:
    """Where torch's JIT loader builds ``name``, by torch's own rule (``$TORCH_EXTENSIONS_DIR``, or the
    user cache with a ``py311_cu128``-like folder)."""
    from torch.utils.cpp_extension import _get_build_directory  # lazy: torch costs seconds to import

    return Path(_get_build_directory(name, verbose=False))


def _working_in(directory: Path) -> list[int]:
    """Processes whose working directory is ``directory`` (ninja and the compiler run there)."""
    target = str(directory.resolve())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, or not ours to read
            continue
        if cwd == target or cwd.startswith(target + "/"):
            pids.append(int(entry.name))
    return pids


def clear_stale_lock(directory: Path | None = None, stale_after_s: float = STALE_AFTER_S) -> Path | None:
    """Remove ``directory/lock`` when it is older than ``stale_after_s`` and nothing builds there; the
    removed path, or None when there was no lock or it may be live."""
    lock = (directory or build_dir()) / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    if age < stale_after_s or _working_in(lock.parent):
        return None
    try:
        lock.unlink()
    except FileNotFoundError:  # its holder finished meanwhile
        return None
    return lock


def main() -> int:
    removed = clear_stale_lock()
    if removed:
        print(f"removed {removed}: left by a build that was killed (no process builds there)", file=sys.stderr)
    build = subprocess.Popen([sys.executable, "-c", _BUILD], start_new_session=True)
    try:
        return build.wait(timeout=BUILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(build.pid, signal.SIGKILL)  # ninja and the compiler with it
        build.wait()
        clear_stale_lock(stale_after_s=0)
        print(f"DeepSpeed's comm op did not build in {BUILD_LIMIT_S // 60} min (build directory {build_dir()})",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
