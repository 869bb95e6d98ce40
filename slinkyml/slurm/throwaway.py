"""A throw-away slurmctld: its own temporary directory, free ports, munge, stopped on every way out
(success, errors, Ctrl-C, SIGTERM). The caller's ``make_conf`` configures it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from slinkyml.errors import SlinkyError
from slinkyml.process import Daemon, is_alive, unix_connectable
from slinkyml.slurm import Slurm, roots

DEFAULT_MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
#: (state dir, slurmctld port, slurmd port, munge socket) -> (slurm.conf text, gres.conf text or None)
ConfMaker = Callable[[Path, int, int, Path], tuple[str, "str | None"]]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (slurmctld forks slurmscriptd)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the controller runs, so ``finally`` cleans up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        yield
        return

    def _raise(signum, frame):  # noqa: ANN001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class ThrowawaySlurmctld:
    """A slurmctld of its own, in a temporary directory, for asking questions. A context manager.

    ``make_conf(state_dir, port, slurmd_port, munge_socket)`` → (slurm.conf, gres.conf or None),
    called again if the ports were taken; ``install``: whose slurmctld and client commands.
    """

    def __init__(self, make_conf: ConfMaker, *, munge_socket: str | os.PathLike[str] = DEFAULT_MUNGE_SOCKET,
                 start_timeout: float = 30.0, install: roots.SlurmInstall | None = None):
        self.make_conf = make_conf
        self.install = install or roots.SlurmInstall()
        self.version = ""  # the release that answers, once started
        self.munge_socket = Path(munge_socket)
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self._daemons: list[Daemon] = []

    @property
    def slurm_conf(self) -> Path:
        assert self.dir is not None
        return self.dir / "etc" / "slurm.conf"

    @property
    def slurm(self) -> Slurm:
        bin_dir = None if self.install.root is None else str(self.install.root / "usr" / "bin")
        return Slurm(self.slurm_conf, timeout=60, retries=1, bin_dir=bin_dir)

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._guard = _sigterm_as_interrupt()
        self._guard.__enter__()
        try:
            self.start()
        except BaseException:
            self.stop()
            self._guard.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self._guard.__exit__(None, None, None)

    def start(self) -> None:
        for binary, package in (("slurmctld", "slurmctld"), ("sbatch", "slurm-client"), ("scontrol", "slurm-client")):
            if self.install.is_system and not shutil.which(binary):
                raise SlinkyError(f"{binary} not found: install the Debian package {package} (or slurm-wlm)")
        self.version = str(self.install.version())
        self.dir = Path(tempfile.mkdtemp(prefix="slinkyml-sbatch-check-"))
        for sub in ("etc", "state", "slurmd", "run"):
            (self.dir / sub).mkdir(mode=0o755)
        socket_path = self._ensure_munge()
        last_error = ""
        for _attempt in range(3):  # a port picked as free can be taken before slurmctld binds it
            port, slurmd_port = _free_port(), _free_port()
            slurm_conf, gres = self.make_conf(self.dir, port, slurmd_port, socket_path)
            if gres:
                (self.dir / "etc" / "gres.conf").write_text(gres)
            self.slurm_conf.write_text(slurm_conf)
            daemon = self._daemon("slurmctld", [self.install.program("slurmctld"), "-D", "-i", "-f",
                                                str(self.slurm_conf)])
            try:
                self._start(daemon, self._controller_up)
                return
            except SlinkyError as exc:
                last_error = str(exc)
                daemon.stop(timeout=5)
                self._daemons.remove(daemon)
                if "Address already in use" not in daemon.log_tail(40):
                    raise
        raise SlinkyError(last_error)

    def stop(self) -> None:
        """Stop what was started here (by PID), then remove the temporary directory. Idempotent."""
        for daemon in reversed(self._daemons):
            pid = daemon.pid
            children = _children(pid) if pid else []
            daemon.stop(timeout=10)
            for child in children:  # slurmctld's slurmscriptd exits with it; make sure of it
                deadline = time.monotonic() + 5
                while is_alive(child) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if is_alive(child):
                    try:
                        os.kill(child, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self._daemons = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- helpers -------------------------------------------------------------------------
    def _daemon(self, name: str, argv: list[str]) -> Daemon:
        assert self.dir is not None
        daemon = Daemon(name, argv, pid_file=self.dir / "run" / f"{name}.pid",
                        log_file=self.dir / f"{name}.out", env={**os.environ, "SLURM_CONF": str(self.slurm_conf)})
        self._daemons.append(daemon)
        return daemon

    def _start(self, daemon: Daemon, ready: Callable[[], bool]) -> None:
        daemon.start()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline and not daemon.exited_early():
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        why = "exited" if daemon.exited_early() else f"was not ready after {self.start_timeout:g} s"
        tail = " | ".join(line.strip() for line in daemon.log_tail(6).splitlines() if line.strip())
        raise SlinkyError(f"the throw-away {daemon.name} {why}: {tail}")

    def _controller_up(self) -> bool:
        result = self.slurm.run("scontrol", ["ping"], check=False, retries=0, timeout=5)
        return "is UP" in result.stdout

    def _ensure_munge(self) -> Path:
        """The running munged's socket, or the socket of a munged started here for this check."""
        if unix_connectable(self.munge_socket):
            return self.munge_socket
        if not shutil.which("munged"):
            raise SlinkyError(f"no munged answers on {self.munge_socket} and munged is not installed "
                              "(Debian package munge)")
        assert self.dir is not None
        mdir = self.dir / "munge"
        mdir.mkdir(mode=0o700)
        key = mdir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(1024))
        sock_dir = self.dir / "run" / "munge"
        sock_dir.mkdir(mode=0o755)
        sock = sock_dir / "munge.socket"
        daemon = self._daemon("munged", ["munged", "-F", f"--socket={sock}", f"--key-file={key}",
                                         f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
                                         f"--seed-file={mdir / 'munged.seed'}", "--force", "--origin=127.0.0.1"])
        self._start(daemon, lambda: unix_connectable(sock))
        return sock
