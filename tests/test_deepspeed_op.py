"""A lock file left by a killed JIT build is removed; a live one is kept (slinkyml/train/deepspeed_op.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from slinkyml.train.deepspeed_op import clear_stale_lock


def _lock(directory: Path, age_s: float) -> Path:
    lock = directory / "lock"
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_a_lock_nobody_builds_under_is_removed(tmp_path: Path) -> None:
    lock = _lock(tmp_path, age_s=600)
    assert clear_stale_lock(tmp_path) == lock
    assert not lock.exists()


def test_a_fresh_lock_is_kept(tmp_path: Path) -> None:
    lock = _lock(tmp_path, age_s=1)
    assert clear_stale_lock(tmp_path) is None
    assert lock.exists()


def test_an_old_lock_is_kept_while_a_process_works_in_the_directory(tmp_path: Path) -> None:
    (tmp_path / "obj").mkdir()
    lock = _lock(tmp_path, age_s=600)
    builder = subprocess.Popen(["sleep", "30"], cwd=tmp_path / "obj")  # as the compiler under ninja
    try:
        assert clear_stale_lock(tmp_path) is None
        assert lock.exists()
    finally:
        builder.kill()
        builder.wait()
    assert clear_stale_lock(tmp_path) == lock


def test_no_lock_is_nothing_to_do(tmp_path: Path) -> None:
    assert clear_stale_lock(tmp_path) is None
