"""``report --serve`` (``slinkyml.accounting.serve``): the page from memory with an ETag, built by one
thread; Host checked; 503 with one line when the page cannot be built (slurmdbd down); idle clients
timed out; a bounded number of handler threads; disconnects that leave no traceback. The load test
(200 concurrent clients) is benchmarks/serve.py."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from slinkyml.accounting import serve
from slinkyml.slurm import AccountingUnavailable

PAGE = b"<html>" + b"x" * 4_000_000 + b"</html>"  # large: a client can leave mid-answer


@pytest.fixture
def running():
    """``running(build, **options)``: a started server (its cache built once), stopped afterwards."""
    servers = []

    def start(build, **options):
        server = serve.make_server(build, port=0, refresh_s=options.pop("refresh_s", 300), **options)
        server.cache.refresh()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(server, path="/", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def test_page_is_served_from_memory_with_an_etag(running):
    builds = []
    server = running(lambda: builds.append(1) or b"<html>page</html>")
    status, headers, body = _get(server)
    assert (status, body) == (200, b"<html>page</html>") and headers["ETag"].startswith('"')
    status, again, body = _get(server, headers={"If-None-Match": headers["ETag"]})
    assert (status, body, again["ETag"]) == (304, b"", headers["ETag"])
    for _ in range(20):
        assert _get(server)[0] == 200
    assert builds == [1]  # 22 loads, one build
    status, _, body = _get(server, "/../etc/passwd")
    assert status == 404 and body.count(b"\n") == 1


def test_host_header_must_name_this_server(running):
    server = running(lambda: b"page", allowed_hosts=["localhost:9000"])
    port = server.server_port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST:9000"):
        assert _get(server, headers={"Host": host})[0] == 200
    for host in ("evil.example:80", f"evil.example:{port}", "127.0.0.1", ""):
        status, _, body = _get(server, headers={"Host": host})
        assert status == 400 and body.startswith(b"slinkyml: Host ") and body.count(b"\n") == 1


def test_slurmdbd_down_is_503_with_one_line_and_recovers(running, capfd):
    up = threading.Event()

    def build():
        if not up.is_set():
            raise AccountingUnavailable("sacct: slurmdbd is not reachable (is it running?): Connection refused")
        return b"page"

    server = running(build, refresh_s=5)
    status, headers, body = _get(server)
    assert status == 503 and headers["Retry-After"] == "5"
    assert body == b"slinkyml: sacct: slurmdbd is not reachable (is it running?): Connection refused\n"
    up.set()
    assert server.cache.refresh() and _get(server)[:3:2] == (200, b"page")
    err = capfd.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1  # the one warning line


def test_a_failing_build_of_any_kind_is_503_not_a_crash(running, capfd):
    server = running(lambda: 1 / 0)
    status, _, body = _get(server)
    assert status == 503 and body == b"slinkyml: the page could not be built: ZeroDivisionError: division by zero\n"
    assert "Traceback" not in capfd.readouterr().err


def test_clients_that_leave_mid_answer_leave_no_traceback(running, capfd):
    server = running(lambda: PAGE)
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.server_port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
            sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.server_port}\r\n\r\n".encode())
            sock.recv(100)
    assert _get(server)[0] == 200  # still serving
    assert capfd.readouterr().err == ""


def test_idle_clients_are_timed_out(running):
    server = running(lambda: b"page", client_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", server.server_port)) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed by the server, not by our 10 s
        assert time.monotonic() - started < 9


def test_connections_past_the_limit_get_a_503_at_once(running):
    server = running(lambda: b"page", max_connections=2, client_timeout_s=5)
    idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(2)]
    try:
        time.sleep(0.2)  # both taken by handler threads
        status, _, body = _get(server)
        assert status == 503 and body == b"slinkyml: busy: too many connections; retry shortly\n"
    finally:
        for sock in idle:
            sock.close()
    for _ in range(50):  # their threads end when they see the close
        if _get(server)[0] == 200:
            break
        time.sleep(0.1)
    else:
        pytest.fail("slots were not given back")


@pytest.mark.parametrize(("argv", "needle"), [
    (("--port", "99999"), "argument --port: '99999': a port is 0 to 65535"),
    (("--port", "-1"), "argument --port: '-1': a port is 0 to 65535"),
    (("--refresh", "0"), "argument --refresh: '0': seconds from 5 to 86400"),
    (("--allow-host", "localhost"), "argument --allow-host: 'localhost': give HOST:PORT"),
])
def test_bad_serve_options_are_one_line(cli, argv, needle):
    code, out, err = cli("report", "--serve", *argv)
    assert (code, out) == (2, "") and needle in err and err.count("\n") == 1, err


def test_a_port_in_use_is_one_line(cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = cli("report", "--serve", "--port", str(port))
    assert (code, out) == (2, "")
    assert err == f"slinkyml: error: --port {port}: cannot listen on 127.0.0.1:{port}: Address already in use\n"
