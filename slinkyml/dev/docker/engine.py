"""Docker's engine for the Docker cluster: the one already running (``$DOCKER_HOST``, else the system's
socket), or Debian's ``dockerd`` started by the project with every folder of its own under the state
dir, stopped again by ``dev down``.

Started here, the engine runs with ``--bridge none --iptables=false``: no default bridge and no
iptables rules on a machine whose own bridges and rules belong to other clusters (the cluster's user-
defined network still gets its bridge, and a published port its userland proxy); its socket belongs
to group ``docker``, so a user of that group drives it without root. Starting it needs root.
"""

from __future__ import annotations

import grp
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import docker

from slinkyml.errors import SlinkyError
from slinkyml.process import is_alive

SYSTEM_SOCKET = "unix:///var/run/docker.sock"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: group whose members may use the socket of an engine started here (Debian's docker.io creates it)
SOCKET_GROUP = "docker"


def answers(host: str) -> bool:
    """Whether an engine answers at ``host`` (``unix://PATH`` or ``tcp://...``)."""
    if host.startswith("unix://") and not os.path.exists(host[len("unix://"):]):
        return False
    try:
        client = docker.DockerClient(base_url=host, timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (docker.errors.DockerException, OSError):
        return False


class Engine:
    """The engine a cluster uses; ``folder`` holds the one started here (data root, socket, log, PID)."""

    def __init__(self, folder: Path):
        self.folder = folder

    @property
    def socket(self) -> Path:
        return self.folder / "docker.sock"

    @property
    def own_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid_file(self) -> Path:
        return self.folder / "docker.pid"

    @property
    def log(self) -> Path:
        return self.folder / "dockerd.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if is_alive(pid) else None

    def running_here(self) -> bool:
        """Whether the engine started by this state dir runs."""
        return self.pid() is not None

    def find(self) -> str | None:
        """The engine to use: this state dir's own when it runs, else ``$DOCKER_HOST``, else the system's."""
        if self.running_here() and answers(self.own_host):
            return self.own_host
        given = os.environ.get("DOCKER_HOST")
        if given:
            return given if answers(given) else None
        return SYSTEM_SOCKET if answers(SYSTEM_SOCKET) else None

    def ensure(self) -> tuple[str, bool]:
        """An engine's address, and whether it was started now (root and Debian's dockerd needed then)."""
        found = self.find()
        if found:
            return found, False
        if os.environ.get("DOCKER_HOST"):
            raise SlinkyError(f"DOCKER_HOST={os.environ['DOCKER_HOST']}: no Docker engine answers there")
        dockerd = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/bin")
        if os.geteuid() != 0 or not dockerd:
            why = "Debian package docker.io is not installed (`make setup`)" if not dockerd else \
                "starting one needs root: `sudo slinkyml dev up --docker` once, or your desktop's Docker"
            raise SlinkyError(f"no Docker engine answers at {SYSTEM_SOCKET} or $DOCKER_HOST, and {why}")
        self.start(dockerd)
        return self.own_host, True

    def start(self, dockerd: str) -> None:
        for sub in ("root", "exec"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o755)
        self.socket.unlink(missing_ok=True)
        argv = [dockerd, f"--data-root={self.folder / 'root'}", f"--exec-root={self.folder / 'exec'}",
                f"--pidfile={self.pid_file}", f"--host={self.own_host}", "--bridge=none", "--iptables=false",
                "--ip-masq=false"]
        if _group_exists(SOCKET_GROUP):
            argv.append(f"--group={SOCKET_GROUP}")
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd="/", start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if answers(self.own_host):
                return
            time.sleep(0.2)
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-8:])
        if proc.poll() is None:
            proc.kill()
        raise SlinkyError(f"dockerd did not answer at {self.own_host} within {START_TIMEOUT_S:g} s; last lines "
                          f"of {self.log}:\n{tail}")

    def stop(self) -> bool:
        """Stop the engine started by this state dir (its containers are gone first); False if none ran."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if is_alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        return True


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True
