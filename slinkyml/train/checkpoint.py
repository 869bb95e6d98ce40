"""Checkpoints every N steps, keep the last K, atomic (write to a temp dir, rename), resume newest readable."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slinkyml.train import CHECKPOINT_PREFIX

META = "meta.json"


def checkpoint_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """Completed checkpoints, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX)
             and p.name[len(CHECKPOINT_PREFIX):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]), reverse=True)


def final_path(root: str | os.PathLike[str], step: int) -> Path:
    return Path(root) / f"{CHECKPOINT_PREFIX}{step:08d}"


def temp_path(root: str | os.PathLike[str], step: int) -> Path:
    return Path(root) / f".tmp-{CHECKPOINT_PREFIX}{step:08d}"


def publish(root: str | os.PathLike[str], step: int, meta: dict[str, Any], keep: int) -> Path:
    """Rank 0, after every rank has written into the temp dir: add meta, fsync, rename, prune."""
    tmp, final = temp_path(root, step), final_path(root, step)
    with open(tmp / META, "w") as fh:
        json.dump({**meta, "step": step}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    if final.exists():  # the same step saved again after a restart: replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(Path(root))
    for old in checkpoint_dirs(root)[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in Path(root).glob(f".tmp-{CHECKPOINT_PREFIX}*"):
        if stale != tmp:
            shutil.rmtree(stale, ignore_errors=True)
    return final


def load_newest(root: str | os.PathLike[str], loader: Callable[[Path], Any],
                log: Callable[[str], None] = print) -> tuple[Path, dict[str, Any], Any] | None:
    """Try checkpoints newest first; one that fails to read is reported and skipped."""
    for path in checkpoint_dirs(root):
        try:
            meta = json.loads((path / META).read_text())
            state = loader(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint: fall back
            log(f"checkpoint {path.name} is unreadable ({type(exc).__name__}: {exc}); trying an older one")
            continue
        return path, meta, state
    return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
