"""``report --serve``: the accounting page over HTTP on loopback, small and hard to knock over.

The machinery is the standard library's ``http.server.ThreadingHTTPServer`` (HTTP/1.1 parsing,
keep-alive, HEAD, a thread per connection): well kept, no dependency, and plenty for one page on
127.0.0.1 or behind ``kubectl port-forward``. An async framework would add a dependency for no gain
here: every answer is a memory copy. What the bare server lacks is added here:

- the page is built by one background thread once per refresh interval and served from memory with an
  ``ETag`` (``If-None-Match`` → 304), so a load never waits for sacct or rebuilds the page;
- a real listen backlog (1,024; the kernel caps it at ``net.core.somaxconn``) instead of 5;
- a timeout on every client socket, so an idle or slow connection cannot hold a thread for ever, and at
  most ``max_connections`` handler threads: past that a client gets a one-line 503 at once;
- the ``Host`` header checked against the bound address (``127.0.0.1:PORT``, ``localhost:PORT`` and any
  ``--allow-host``): a DNS-rebinding page cannot read the dashboard through the user's browser;
- slurmdbd down (or any failed build): 503 with one line saying why, retried every ``retry_s``, the
  server still up; a client that disconnects mid-answer is not an error (no traceback).
"""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slinkyml.errors import SlinkyError

#: listen(2) backlog (Linux caps it at net.core.somaxconn, 4096 on current kernels)
BACKLOG = 1024
#: seconds a client socket may stay idle (between requests, or mid-request) before it is closed
CLIENT_TIMEOUT_S = 15.0
#: handler threads at once; a connection past this gets a 503 at once instead of a thread
MAX_CONNECTIONS = 512
PATHS = ("/", "/index.html")


class PageCache:
    """The page, built by :meth:`refresh` (one thread), read by every request without waiting."""

    def __init__(self, build: Callable[[], bytes]):
        self._build = build
        self._lock = threading.Lock()
        self.page: bytes | None = None
        self.etag = ""
        self.error: str | None = "the page is being built; retry in a few seconds"
        self.builds = 0

    def refresh(self) -> bool:
        """Build the page once; on failure keep the reason (one line) and drop the old page (it would
        be served as current while it is not). Returns whether it built."""
        try:
            page = self._build()
        except SlinkyError as exc:
            error = exc.one_line()
        except Exception as exc:  # noqa: BLE001 - a failed build must never take the server down
            error = " ".join(f"the page could not be built: {type(exc).__name__}: {exc}".split())
        else:
            etag = '"' + hashlib.sha256(page).hexdigest()[:32] + '"'
            with self._lock:
                self.page, self.etag, self.error = page, etag, None
                self.builds += 1
            return True
        with self._lock:
            changed = error != self.error
            self.page, self.etag, self.error = None, "", error
        if changed:
            print(f"slinkyml: warning: {error} (answering 503 until it builds)", file=sys.stderr, flush=True)
        return False

    def snapshot(self) -> tuple[bytes | None, str, str | None]:
        with self._lock:
            return self.page, self.etag, self.error


class DashboardServer(ThreadingHTTPServer):
    """:class:`ThreadingHTTPServer` with a real backlog, bounded threads and quiet disconnects."""

    request_queue_size = BACKLOG
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cache: PageCache, *, refresh_s: float,
                 allowed_hosts: Iterable[str] = (), max_connections: int = MAX_CONNECTIONS,
                 client_timeout_s: float = CLIENT_TIMEOUT_S):
        super().__init__(address, _Handler)
        self.cache = cache
        self.refresh_s = refresh_s
        self.client_timeout_s = client_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        self.allowed_hosts = {f"{host}:{port}".lower(), f"localhost:{port}"}
        self.allowed_hosts |= {h.lower() for h in allowed_hosts}

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _refuse_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is no error; anything else is one line, never a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        print(f"slinkyml: warning: request from {client_address[0]} failed: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)


def _refuse_busy(request: socket.socket) -> None:
    body = b"slinkyml: busy: too many connections; retry shortly\n"
    try:
        request.settimeout(1.0)
        request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                        b"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode()
                        + b"\r\n\r\n" + body)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"  # keep-alive: a refreshing browser reuses its connection

    def setup(self) -> None:
        self.timeout = self.server.client_timeout_s  # type: ignore[misc]  # StreamRequestHandler applies it to the socket
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        host = (self.headers.get("Host") or "").strip().lower()
        if host not in self.server.allowed_hosts:
            self._line(400, f"Host {host[:80]!r} is not this server's ({', '.join(sorted(self.server.allowed_hosts))}; "
                       "add one with --allow-host)", body=body)
            return
        if self.path.split("?", 1)[0] not in PATHS:
            self._line(404, f"no page at {self.path[:80]!r}; the dashboard is at /", body=body)
            return
        page, etag, error = self.server.cache.snapshot()
        if page is None:
            self._line(503, error or "the page is not built", body=body,
                       headers={"Retry-After": str(max(1, int(min(self.server.refresh_s, 10))))})
            return
        if etag and etag in (self.headers.get("If-None-Match") or ""):
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.send_header("ETag", etag)
        self.send_header("Cache-Control", "no-cache")  # revalidate: 304 while the page is the same
        self.end_headers()
        if body:
            self.wfile.write(page)

    def _line(self, code: int, line: str, *, body: bool, headers: dict[str, str] | None = None) -> None:
        data = f"slinkyml: {line}\n".encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # the terminal keeps the one line serve() prints


def make_server(build: Callable[[], bytes], *, host: str = "127.0.0.1", port: int = 0, refresh_s: float = 300,
                allowed_hosts: Iterable[str] = (), max_connections: int = MAX_CONNECTIONS,
                client_timeout_s: float = CLIENT_TIMEOUT_S) -> DashboardServer:
    """A server for the page ``build()`` returns (bytes), not yet serving or building."""
    try:
        return DashboardServer((host, port), PageCache(build), refresh_s=refresh_s, allowed_hosts=allowed_hosts,
                               max_connections=max_connections, client_timeout_s=client_timeout_s)
    except OSError as exc:
        raise SlinkyError(f"--port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def start_builder(server: DashboardServer, stop: threading.Event, *, first_wait: float = 0.0,
                  retry_s: float = 10.0) -> threading.Thread:
    """The one thread that rebuilds the page: after ``first_wait``, then every ``refresh_s`` (every
    ``retry_s`` while it fails, e.g. slurmdbd down)."""

    def loop() -> None:
        if stop.wait(first_wait):
            return
        while not stop.is_set():
            ok = server.cache.refresh()
            stop.wait(server.refresh_s if ok else min(retry_s, server.refresh_s))

    thread = threading.Thread(target=loop, name="dashboard-builder", daemon=True)
    thread.start()
    return thread


def serve(build: Callable[[], bytes], *, port: int = 8765, refresh_s: float = 300,
          allowed_hosts: Iterable[str] = ()) -> int:
    """Serve the page until Ctrl-C (e.g. on a login pod, reached with ``kubectl port-forward``)."""
    server = make_server(build, port=port, refresh_s=refresh_s, allowed_hosts=allowed_hosts)
    stop = threading.Event()
    started = time.monotonic()
    built = server.cache.refresh()  # the first visitor gets the page (or the reason it cannot be built)
    builder = start_builder(server, stop, first_wait=refresh_s if built else min(10.0, refresh_s))
    print(f"serving the accounting dashboard on http://{server.server_address[0]!s}:{server.server_port}/ "
          f"({'built' if built else 'not built'} in {time.monotonic() - started:.1f} s, rebuilt every "
          f"{refresh_s:g} s; Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()
        builder.join(timeout=1)
    return 0
