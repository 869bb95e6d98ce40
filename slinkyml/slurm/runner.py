"""The one subprocess layer for Slurm commands.

:class:`Slurm` adds ``SLURM_CONF`` (and ``TZ=UTC`` where it parses output), timeouts, retries of
transient controller errors, and typed exceptions carrying stderr.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from slinkyml import DATA_DIR, config
from slinkyml.slurm import records
from slinkyml.slurm.errors import (
    AccountingDisabled,
    AccountingUnavailable,
    InvalidRequest,
    JobNotFound,
    SlurmCommandNotFound,
    SlurmConfigMissing,
    SlurmControllerDown,
    SlurmError,
    SlurmTimeout,
    SlurmTransientError,
)

if TYPE_CHECKING:  # loaded by Slurm.version: a submission never asks for the release
    from slinkyml.slurm.version import SlurmVersion

SLURM_COMMANDS = frozenset(
    {"sbatch", "srun", "salloc", "scontrol", "sinfo", "squeue", "sacct", "sshare", "sreport",
     "sacctmgr", "scancel", "sdiag", "sprio", "sstat"}
)

#: stderr fragments: errors that go away when retried (controller busy or restarting), reasons that
#: make an error permanent even inside a transient-looking message, and accounting outages
_PATTERNS = json.loads((DATA_DIR / "slurm_errors.json").read_text())
TRANSIENT_PATTERNS = tuple(_PATTERNS["transient"])
PERMANENT_PATTERNS = tuple(_PATTERNS["permanent"])
_ACCOUNTING_PATTERNS = tuple(_PATTERNS["accounting"])
_ACCOUNTING_COMMANDS = frozenset({"sacct", "sshare", "sreport", "sacctmgr"})
#: commands that hand their environment to a job: run in the caller's time zone, like by hand.
_LAUNCH_COMMANDS = frozenset({"sbatch", "srun", "salloc"})


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    attempts: int = 1


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


_WHICH: dict[tuple[str, str | None], str] = {}


def _which(command: str, path: str | None) -> str | None:
    """``shutil.which`` for a bare command name on POSIX (the first executable file of that name on PATH),
    without importing shutil (its bz2/lzma imports cost every submission ~2 ms); remembered per PATH while
    the file stays executable (a PATH walk per call is 5 % of a fast ``sbatch``); misses are not remembered,
    so installing Slurm later works."""
    key = (command, path)
    found = _WHICH.get(key)
    if found and os.access(found, os.X_OK):
        return found
    found = next((full for folder in (path if path is not None else os.defpath).split(os.pathsep) if folder
                  for full in (os.path.join(folder, command),)
                  if os.access(full, os.X_OK) and not os.path.isdir(full)), None)
    if found:
        _WHICH[key] = found
    return found


def clients_beside(conf: str | None) -> str | None:
    """The client commands of ``conf``'s cluster when they are another release's (``STATE/bin/``),
    else None.
    """
    if not conf:
        return None
    bin_dir = os.path.join(os.path.dirname(os.path.dirname(conf)), "bin")
    return bin_dir if os.path.basename(os.path.dirname(conf)) == "etc" and os.path.isfile(
        os.path.join(bin_dir, "sbatch")) else None


class Slurm:
    """Runs Slurm client commands for one cluster (one slurm.conf)."""

    def __init__(self, conf: str | os.PathLike[str] | None = None, *, bin_dir: str | None = None,
                 timeout: float = 60.0, retries: int | None = None, backoff: float = 0.5,
                 env: Mapping[str, str] | None = None):
        self.conf = str(conf) if conf is not None else config.slurm_conf()
        self.bin_dir = bin_dir if bin_dir is not None else clients_beside(self.conf)
        self.timeout = timeout
        self.retries = retries if retries is not None else config.slurm_retries()
        self.backoff = backoff
        self.extra_env = dict(env or {})
        self.calls = 0  # commands run (for RPC accounting in benchmarks)

    # -- environment --------------------------------------------------------------------
    def environ(self, extra: Mapping[str, str] | None = None, *, utc: bool = True) -> dict[str, str]:
        """The environment every Slurm command runs with (also handed to jobs we launch).

        ``utc`` pins ``TZ=UTC``; submission keeps the user's zone, which sbatch passes to the job.
        """
        env = dict(os.environ)
        if utc:
            env["TZ"] = "UTC"
            env.pop("SLURM_TIME_FORMAT", None)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        env.update(self.extra_env)
        if extra:
            env.update(extra)
        return env

    def _command_env(self, command: str, extra: Mapping[str, str] | None) -> dict[str, str] | None:
        """:meth:`environ` for ``command`` (UTC unless it starts a job), or ``None`` when that is
        the inherited environment (no copy to build and encode per call: a measurable part of a
        fast ``sbatch``)."""
        utc = command not in _LAUNCH_COMMANDS
        if (not utc and not extra and not self.extra_env
                and (not self.conf or os.environ.get("SLURM_CONF") == self.conf)):
            return None
        return self.environ(extra, utc=utc)

    def executable(self, command: str) -> str:
        if command not in SLURM_COMMANDS:
            raise ValueError(f"not a Slurm command: {command!r}")
        if self.bin_dir:
            path = os.path.join(self.bin_dir, command)
            if os.access(path, os.X_OK):
                return path
        found = _which(command, os.environ.get("PATH"))
        if not found:
            raise SlurmCommandNotFound(
                f"'{command}' not found on PATH: install Slurm's client commands "
                "(Debian: apt-get install slurm-client)", argv=[command])
        return found

    # -- running ------------------------------------------------------------------------
    def run(self, command: str, args: Sequence[str] = (), *, input: str | Callable[[], str] | None = None,
            timeout: float | None = None, check: bool = True, retries: int | None = None,
            env: Mapping[str, str] | None = None, as_user: str | None = None,
            cwd: str | os.PathLike[str] | None = None, while_waiting: Callable[[], object] | None = None
            ) -> Result:
        """Run ``command args`` (no shell); retry transient failures; raise typed errors.

        ``input`` may be a function: it is called once the process has started (work done while the
        program loads), and its text is the program's stdin. ``while_waiting`` runs once stdin is
        written, while the command waits for its answer (sbatch: for slurmctld)."""
        argv = [self.executable(command), *map(str, args)]
        conf = (env or {}).get("SLURM_CONF") or self.extra_env.get("SLURM_CONF") or self.conf
        if conf and not os.path.exists(conf):  # one stat: Slurm's clients would retry for a minute
            raise SlurmConfigMissing(f"{command}: no slurm.conf at {conf} (is the cluster up? `slinkyml dev up` "
                                     "makes the local one; SLURM_CONF or --slurm-conf names another)", argv=argv)
        if callable(input):
            input = _Once(input)
        if as_user:
            argv = ["runuser", "-u", as_user, "--", *argv]
        attempts = 1 + (self.retries if retries is None else retries)
        limit = self.timeout if timeout is None else timeout
        full_env = self._command_env(command, env)
        started = time.monotonic()
        proc = None
        for attempt in range(1, attempts + 1):
            self.calls += 1
            try:
                proc = _run_with_deadline(argv, input, limit, full_env, cwd,
                                          while_waiting if attempt == 1 else None)
            except subprocess.TimeoutExpired as exc:
                if attempt < attempts:
                    time.sleep(self.backoff * 2 ** (attempt - 1))
                    continue
                raise SlurmTimeout(f"{command} timed out after {limit:g} s", argv=argv,
                                   stderr=_decode(exc.stderr), stdout=_decode(exc.stdout)) from None
            if proc.returncode == 0 or not self._is_transient(command, proc.stderr):
                break
            if attempt < attempts:
                time.sleep(self.backoff * 2 ** (attempt - 1))
        assert proc is not None
        result = Result(tuple(argv), proc.returncode, proc.stdout, proc.stderr,
                        time.monotonic() - started, attempt)
        if check and proc.returncode != 0:
            raise self._classify(command, result)
        return result

    @staticmethod
    def _is_transient(command: str, stderr: str) -> bool:
        if command in _ACCOUNTING_COMMANDS and any(p in stderr for p in _ACCOUNTING_PATTERNS):
            return False  # slurmdbd down is reported at once, not retried for a minute
        if any(p in stderr for p in PERMANENT_PATTERNS):
            return False
        return any(p in stderr for p in TRANSIENT_PATTERNS)

    @staticmethod
    def _classify(command: str, result: Result) -> SlurmError:
        stderr = result.stderr or ""
        detail = _last_line(stderr) or _last_line(result.stdout) or f"exit status {result.returncode}"
        kwargs: dict[str, Any] = dict(argv=list(result.argv), returncode=result.returncode, stderr=stderr,
                                      stdout=result.stdout)
        if command in _ACCOUNTING_COMMANDS:
            if re.search(r"accounting storage is disabled|not running a supported "
                         r"accounting_storage plugin", stderr, re.I):
                return AccountingDisabled(
                    f"{command}: Slurm accounting is disabled on this cluster "
                    "(AccountingStorageType is not accounting_storage/slurmdbd)", **kwargs)
            if "Unable to connect to database" in stderr:  # slurmdbd answers; its database does not
                return AccountingUnavailable(
                    f"{command}: slurmdbd cannot reach its database (is MariaDB/MySQL running?): {detail}",
                    **kwargs)
            if any(p in stderr for p in _ACCOUNTING_PATTERNS):
                return AccountingUnavailable(
                    f"{command}: slurmdbd is not reachable (is it running?): {detail}", **kwargs)
        if "Invalid job id" in stderr:
            return JobNotFound(f"{command}: {detail}", **kwargs)
        if "Unable to contact slurm controller" in stderr or "Connection refused" in stderr:
            return SlurmControllerDown(f"{command}: slurmctld is not reachable: {detail}", **kwargs)
        if Slurm._is_transient(command, stderr):
            return SlurmTransientError(f"{command}: {detail} (after {result.attempts} attempts)",
                                       **kwargs)
        if command in ("sbatch", "srun", "salloc") or "Invalid" in stderr:
            return InvalidRequest(f"{command}: {detail}", **kwargs)
        return SlurmError(f"{command} failed: {detail}", **kwargs)

    # -- facts about the installation -----------------------------------------------------
    @cached_property
    def version(self) -> SlurmVersion:
        """The installed Slurm version, from ``sinfo --version`` (no controller needed)."""
        from slinkyml.slurm.version import SlurmVersion  # lazy: see the import above

        conf = self.conf or "/etc/slurm/slurm.conf"
        if os.path.exists(conf):
            try:
                return SlurmVersion.parse(self.run("sinfo", ["--version"], retries=0, timeout=15).stdout)
            except SlurmError as exc:
                if "configuration" not in exc.stderr:
                    raise
        # 22.05 clients refuse even --version without a readable slurm.conf (and a missing one
        # sends them to a DNS SRV lookup for configless mode): give them a minimal one.
        import tempfile  # lazy: only on this rare path; tempfile costs every command ~3 ms

        with tempfile.NamedTemporaryFile("w", suffix=".conf") as probe:
            probe.write("ClusterName=probe\nSlurmctldHost=localhost\n")
            probe.flush()
            out = self.run("sinfo", ["--version"], retries=0, timeout=15,
                           env={"SLURM_CONF": probe.name}).stdout
        return SlurmVersion.parse(out)

    # -- small helpers used everywhere ------------------------------------------------------
    def sbatch(self, script: str | os.PathLike[str] | Callable[[], str], args: Sequence[str] = (), *,
               as_user: str | None = None, env: Mapping[str, str] | None = None,
               cwd: str | os.PathLike[str] | None = None, while_waiting: Callable[[], object] | None = None
               ) -> int:
        """Submit a script (a path, or the script text itself, given on stdin; or a function that
        renders it, called while sbatch loads) and return the job id.

        One attempt: ``sbatch`` retries a busy controller itself, and a repeat could submit twice.
        """
        stdin: Callable[[], str] | str | None
        if callable(script):
            text, stdin, path = True, script, ""
        else:
            path = str(script)
            text = isinstance(script, str) and path.startswith("#!")
            stdin = path if text else None
        argv = ["--parsable", *args] if text else ["--parsable", *args, path]
        out = self.run("sbatch", argv, input=stdin, retries=0, as_user=as_user, env=env, cwd=cwd,
                       while_waiting=while_waiting).stdout
        return parse_job_id(out)

    def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as a dict (keys as Slurm prints them)."""
        return records.scontrol_config(self.run("scontrol", ["show", "config"]).stdout)

    def show(self, entity: str, name: str | None = None) -> list[dict[str, str]]:
        """``scontrol -o show ENTITY [NAME]`` parsed into one dict per record."""
        args = ["-o", "show", entity] + ([name] if name else [])
        return records.split_scontrol(self.run("scontrol", args).stdout)


def parse_job_id(stdout: str) -> int:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    head = stdout.partition(";")[0].strip()
    if head.isdigit() and head.isascii():
        return int(head)  # the usual one line, without a regex
    text = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    match = re.match(r"^(\d+)(?:;.*)?$", text)
    if not match:
        raise SlurmError(f"sbatch printed no job id: {stdout.strip()!r}")
    return int(match.group(1))


class _Watchdog:
    """One daemon thread that kills commands past their deadline, shared by every call (a
    ``threading.Timer`` per command costs a thread start; this is a heap push under a lock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def add(self, pid: int, limit: float) -> _Deadline:
        entry = _Deadline(pid)
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + limit, self._seq, entry))
            if self._thread is None or not self._thread.is_alive():  # first use, or after fork
                self._thread = threading.Thread(target=self._loop, name="slinkyml-slurm-watchdog",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][2] is entry:  # new earliest deadline: wake the thread to re-arm
                self._cond.notify()
        return entry

    def finish(self, entry: _Deadline) -> None:
        with self._cond:  # not while the watchdog is expiring it
            entry.done = True

    def _loop(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)[2].expire()


class _Deadline:
    __slots__ = ("pid", "done", "fired")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.done = False  # finished or expired: the watchdog forgets it
        self.fired = False

    def expire(self) -> None:
        if not self.done:
            self.done = self.fired = True
            _kill_group(self.pid)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_WATCHDOG = _Watchdog()


class _Once:
    """A stdin function, called once however many attempts run."""

    def __init__(self, make: Callable[[], str]) -> None:
        self.make = make
        self.text: str | None = None

    def __call__(self) -> str:
        if self.text is None:
            self.text = self.make()
        return self.text


def _run_with_deadline(argv: list[str], input: str | Callable[[], str] | None, limit: float,
                       env: dict[str, str] | None, cwd: str | os.PathLike[str] | None,
                       while_waiting: Callable[[], object] | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(..., timeout=limit)`` for a short command, at less of this process's CPU: a
    shared watchdog kills the child's process group at the deadline (no polling loop), and the pipes
    are plain descriptors read under one ``poll`` (no file objects, no selector; a fast ``sbatch``
    costs this process ~0.15 ms instead of ~0.3 ms).
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (-1, -1)
    try:
        proc = subprocess.Popen(argv, stdin=in_r if input is not None else subprocess.DEVNULL, stdout=out_w,
                                stderr=err_w, env=env, cwd=cwd, process_group=0)
    except BaseException:
        _close(out_r, err_r, in_w)
        raise
    finally:
        _close(out_w, err_w, in_r)
    deadline = _WATCHDOG.add(proc.pid, limit)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    try:
        data = memoryview(b"")
        if input is not None:
            data = memoryview((input() if callable(input) else input).encode())
            os.set_blocking(in_w, False)
            data = _feed(in_w, data)
            if not data:  # fits the pipe (a script): written whole, closed, before waiting
                in_w = _close(in_w)
        if while_waiting is not None:
            while_waiting()
        poller = select.poll()
        for fd in chunks:
            poller.register(fd, select.POLLIN)
        if in_w >= 0:
            poller.register(in_w, select.POLLOUT)
        left = len(chunks) + (in_w >= 0)
        while left:
            for fd, _events in poller.poll():
                if fd == in_w:
                    data = _feed(in_w, data)
                    if not data:
                        poller.unregister(in_w)
                        in_w = _close(in_w)
                        left -= 1
                    continue
                chunk = os.read(fd, 65536)
                if chunk:
                    chunks[fd].append(chunk)
                else:
                    poller.unregister(fd)
                    left -= 1
        proc.wait()
    except BaseException:  # the text could not be made, or we were interrupted: it must not run on
        _kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        _WATCHDOG.finish(deadline)  # the pid may be reused from here on: never kill it later
        _close(out_r, err_r, in_w)
    out, err = b"".join(chunks[out_r]).decode(errors="replace"), b"".join(chunks[err_r]).decode(errors="replace")
    if deadline.fired:
        raise subprocess.TimeoutExpired(argv, limit, output=out, stderr=err)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _feed(fd: int, data: memoryview) -> memoryview:
    """Write what the pipe takes now; the rest. A reader that went away takes nothing more (its
    stderr says why)."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except BlockingIOError:
        pass
    except BrokenPipeError:
        return memoryview(b"")
    return data


def _close(*fds: int) -> int:
    for fd in fds:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    return -1


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
