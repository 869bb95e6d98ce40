"""Load test of ``report --serve`` on loopback: N concurrent clients (default 200), each opening fresh
connections, against the server in a child process; errors, p50/p99/max latency and throughput.

The baseline, run in the same process against the same page, is the server as it was before
(``ThreadingHTTPServer`` with its default listen backlog of 5, the page rebuilt on every load); it is
run with fewer clients (``--baseline-clients``, default 50) so that it ends in bounded time, and the
new server is measured at that count too, for a ratio at equal load. The page is the dashboard of a
synthesised window (benchmarks/accounting.py's real sacct layout); building it stands in for
``report``'s sacct call + figures + HTML.

    .venv/bin/python benchmarks/serve.py [--clients 200] [--requests 5] [--records 2000]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accounting import synthesise  # noqa: E402 - the sibling benchmark's generator

from slinkyml.accounting import dashboard, serve  # noqa: E402
from slinkyml.accounting.fairshare import parse_sshare  # noqa: E402
from slinkyml.accounting.sacct_arrow import parse_sacct  # noqa: E402

SSHARE = Path(__file__).resolve().parent.parent / "tests" / "data" / "accounting" / "sshare_fairtree_2205.txt"
CLIENT_TIMEOUT_S = 120.0  # a client gives up (an error) after this: the run is bounded


def _builder(records: int):
    """build() -> the page bytes, as report --serve's: figures from the table, then HTML."""
    table = parse_sacct(synthesise(records * 4))
    shares = parse_sshare(SSHARE.read_text())
    start, end = pd.Timestamp("2026-11-01", tz="UTC"), pd.Timestamp("2026-12-01", tz="UTC")
    return lambda: dashboard.render_html(dashboard.collect(table, shares, start, end, now=end), refresh_s=300).encode()


def _run_new(records: int, ready, port_box) -> None:
    server = serve.make_server(_builder(records), port=0, refresh_s=300)
    server.cache.refresh()
    port_box.value = server.server_port
    ready.set()
    server.serve_forever()


def _run_old(records: int, ready, port_box) -> None:
    """The server before: backlog 5 (socketserver's default), the page built on every load."""
    build = _builder(records)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            page = build()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_box.value = server.server_port
    ready.set()
    server.serve_forever()


def _load(port: int, clients: int, requests: int) -> dict[str, float]:
    """``clients`` threads released together, each making ``requests`` GETs on fresh connections."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client() -> None:
        barrier.wait()
        for _ in range(requests):
            started = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
                conn.request("GET", "/")
                response = conn.getresponse()
                body = response.read()
                conn.close()
                ok = response.status == 200 and body.rstrip().endswith(b"</html>")
                error = None if ok else f"HTTP {response.status}"
            except OSError as exc:
                error = type(exc).__name__
            with lock:
                if error:
                    errors.append(error)
                else:
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    wall = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - wall
    latencies.sort()
    pick = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]) if latencies else (lambda q: float("nan"))
    kinds = ", ".join(f"{k} ×{errors.count(k)}" for k in sorted(set(errors)))
    return {"requests": clients * requests, "errors": len(errors), "kinds": kinds, "p50": pick(0.50),
            "p99": pick(0.99), "max": latencies[-1] if latencies else float("nan"),
            "mean": statistics.fmean(latencies) if latencies else float("nan"), "wall": wall,
            "rps": len(latencies) / wall}


def _measure(target, records: int, clients: int, requests: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    ready, port_box = ctx.Event(), ctx.Value("i", 0)
    child = ctx.Process(target=target, args=(records, ready, port_box), daemon=True)
    child.start()
    try:
        if not ready.wait(300):
            raise SystemExit("the server did not start")
        return _load(port_box.value, clients, requests)
    finally:
        child.kill()
        child.join()


def _line(name: str, r: dict[str, float]) -> str:
    return (f"  {name:<34} {r['requests']:>5} req  errors {r['errors']:>3}{' (' + r['kinds'] + ')' if r['kinds'] else ''}"
            f"  p50 {r['p50'] * 1e3:8.1f} ms  p99 {r['p99'] * 1e3:8.1f} ms  max {r['max'] * 1e3:8.1f} ms"
            f"  {r['rps']:7.1f} req/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients (200)")
    parser.add_argument("--requests", type=int, default=5, help="GETs per client, fresh connection each (5)")
    parser.add_argument("--baseline-clients", type=int, default=50,
                        help="concurrent clients against the old server, 1 GET each (50; 0 skips it)")
    parser.add_argument("--records", type=int, default=2000, help="job records in the page's window (2000)")
    args = parser.parse_args()
    build = _builder(args.records)
    t0 = time.perf_counter()
    size = len(build())
    print(f"page: {size / 1e3:.0f} kB, built in {time.perf_counter() - t0:.2f} s ({args.records:,} job records)")
    new = _measure(_run_new, args.records, args.clients, args.requests)
    print(_line(f"new server, {args.clients} clients × {args.requests}", new))
    if args.baseline_clients:
        n = args.baseline_clients
        old = _measure(_run_old, args.records, n, 1)
        same = _measure(_run_new, args.records, n, 1)
        print(_line(f"old server (baseline), {n} clients × 1", old))
        print(_line(f"new server, {n} clients × 1", same))
        print(f"  at {n} clients: p99 {old['p99'] / same['p99']:.0f}x lower, throughput "
              f"{same['rps'] / old['rps']:.0f}x higher, errors {old['errors']} -> {same['errors']}")
    if new["errors"]:
        raise SystemExit(f"{new['errors']} errors at {args.clients} clients")


if __name__ == "__main__":
    main()
