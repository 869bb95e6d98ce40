"""Daemons started directly (no systemd) and tracked by PID file; stopped by PID only.

PID 1 on these machines does not reap orphans, so a daemon that has exited can linger as a
zombie: liveness is read from ``/proc/PID/status`` rather than ``kill -0``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from slinkyml.errors import SlinkyError


def unix_connectable(path: Path) -> bool:
    """A daemon listens on ``path`` (a stale socket file left by a killed daemon does not count)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def port_open(host: str, port: int) -> bool:
    """Something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def port_in_use(port: int) -> bool:
    """True when something listens on ``port`` on any local address (we bind 0.0.0.0 to find out).

    SO_REUSEADDR, as the daemons use: connections in TIME_WAIT after a ``down`` do not count.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def process_state(pid: int) -> str | None:
    """The one-letter state from /proc (``R``, ``S``, ``Z``...) or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("State:"):
                    return line.split()[1]
    except OSError:
        return None
    return None


def is_alive(pid: int | None) -> bool:
    if not pid:
        return False
    state = process_state(pid)
    return state is not None and state not in ("Z", "X")


def cmdline(pid: int, settle: float = 0.1) -> str:
    """The process's command line, waiting up to ``settle`` s while an ``execve`` leaves it empty."""
    deadline = time.monotonic() + settle
    while True:
        try:
            text = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""
        if text or time.monotonic() >= deadline or not is_alive(pid):
            return text
        time.sleep(0.002)


class Daemon:
    """One daemon process: how to start it, where its PID file and log live."""

    def __init__(self, name: str, argv: Sequence[str], *, pid_file: Path, log_file: Path,
                 env: Mapping[str, str] | None = None, match: str | None = None):
        self.name = name
        self.argv = list(argv)
        self.pid_file = pid_file
        self.log_file = log_file
        self.env = dict(env) if env is not None else None
        #: a substring of /proc/PID/cmdline that proves a PID from the file is still our daemon.
        self.match = match or os.path.basename(self.argv[0])

    @property
    def pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        proc = getattr(self, "_popen", None)
        if proc is not None and pid == proc.pid and proc.poll() is None:
            return pid  # our own live child, whatever it is exec'ing right now
        if pid and is_alive(pid) and self.match in cmdline(pid):
            return pid
        return None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self) -> int:
        """Start in the background, detached from our session, in ``/`` as daemons run (one started from a
        folder deleted later, a CI clone's, passes that dead cwd to every slurmstepd it forks: "Unable to get
        current working directory" in jobs' output); the PID file gets the daemon's PID."""
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log, open(os.devnull, "rb") as devnull:
            log.write(f"\n=== slinkyml: starting {self.name} at {time.strftime('%F %T')}\n".encode())
            log.flush()
            proc = subprocess.Popen(self.argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT,
                                    env=self.env, start_new_session=True, close_fds=True, cwd="/")
        self.pid_file.write_text(f"{proc.pid}\n")
        self._popen = proc
        return proc.pid

    def exited_early(self) -> bool:
        """True when the process we just started has already died."""
        proc = getattr(self, "_popen", None)
        return proc is not None and proc.poll() is not None

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float, interval_s: float) -> None:
        """Poll ``ready`` until it holds; a SlinkyError with the log's last lines when the daemon dies first
        (or its PID file is taken away: a ``down`` meanwhile) or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.exited_early() or (not self.running and not self.pid_file.exists()):
                raise SlinkyError(f"{self.name} exited at start; last lines of {self.log_file}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise SlinkyError(f"{self.name} not ready after {timeout_s:.0f} s; last lines of "
                                  f"{self.log_file}:\n{self.log_tail()}")
            time.sleep(interval_s)

    def stop(self, timeout: float = 15.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; True if something was stopped."""
        pid = self.pid
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and is_alive(pid):
                _reap(pid)
                time.sleep(0.05)
            if not is_alive(pid):
                break
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _reap(pid: int) -> None:
    """Collect the exit status if the daemon is our own child (started in this process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
