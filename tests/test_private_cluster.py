"""The module clusters' leftovers: a test run killed while its module cluster ran (CI's time limit, a
session's end) leaves the state dir that holds the bridge, node names and ports; the next run takes it
down only when the process that wrote it is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.private_cluster import OWNER_FILE, owner_alive, process_identity


def test_the_running_test_process_owns_its_state_dir(tmp_path: Path) -> None:
    (tmp_path / OWNER_FILE).write_text(process_identity(os.getpid()) + "\n")
    assert owner_alive(tmp_path)


def test_a_finished_process_does_not(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    (tmp_path / OWNER_FILE).write_text(process_identity(child.pid) + "\n")
    child.wait()
    assert not owner_alive(tmp_path)


def test_a_reused_pid_does_not(tmp_path: Path) -> None:
    """Same PID, another start time: the kernel gave the PID to a new process."""
    pid, started = process_identity(os.getpid()).split()
    (tmp_path / OWNER_FILE).write_text(f"{pid} {int(started) - 1}\n")
    assert not owner_alive(tmp_path)


def test_a_state_dir_without_an_owner_file_is_a_leftover(tmp_path: Path) -> None:
    """The runs before owner files made their state dirs with mkdtemp and wrote none."""
    assert not owner_alive(tmp_path)
    (tmp_path / OWNER_FILE).write_text("garbage\n")
    assert not owner_alive(tmp_path)
