"""The agent's metrics port under idle connections: threads held and probe latency.

Opens N idle TCP connections (connect, send nothing) to a server on loopback, then times
``GET /healthz`` requests made beside them, and counts the threads of this process. Two servers:
the agent's (``accel_agent.server``: one waiting thread plus a fixed pool of workers, at most
``max_connections`` silent connections, idle ones closed after a timeout) and, for comparison,
the standard library's ``ThreadingHTTPServer`` (one thread per connection, no timeout), which the
agent used before. For the agent's server it also measures how long until every idle client has
been closed. Loopback only; every loop is bounded; N is capped by the file-descriptor limit.

Run: ``PYTHONPATH=agent python bench/agent_metrics_load.py [N ...]`` (default 0 100 500 2000)
"""

from __future__ import annotations

import resource
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry

from accel_agent import server

PROBES = 20
IDLE_TIMEOUT_SECONDS = 1.0
SETTLE_SECONDS = 0.3
SETTLE_LIMIT_SECONDS = 10.0


class _Stdlib:
    """The previous server: ThreadingHTTPServer, a thread per connection."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"ok\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        class Httpd(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024  # so connects are not slowed by a full backlog (the default is 5)

        self.httpd = Httpd(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.port = int(self.httpd.server_address[1])

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _agent() -> server.Server:
    health = server.LoopHealth(15.0)
    health.pass_done()
    limits = server.Limits(idle_timeout_seconds=IDLE_TIMEOUT_SECONDS)
    return server.serve(CollectorRegistry(), health, port=0, host="127.0.0.1", limits=limits)


def _settled_thread_count() -> int:
    """This process's threads once the count stops changing (a server may still be starting
    threads for connections already accepted), waiting at most ``SETTLE_LIMIT_SECONDS``."""
    deadline = time.perf_counter() + SETTLE_LIMIT_SECONDS
    count = threading.active_count()
    while time.perf_counter() < deadline:
        time.sleep(SETTLE_SECONDS)
        now = threading.active_count()
        if now == count:
            return now
        count = now
    return count


def _get(port: int) -> float:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n")
        while sock.recv(65536):
            pass
    return time.perf_counter() - started


def _all_closed(clients: list[socket.socket], limit_seconds: float) -> float | None:
    """Seconds until every client saw the server close, or None if some were still open."""
    started = time.perf_counter()
    for sock in clients:
        left = limit_seconds - (time.perf_counter() - started)
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            sock.recv(1)
        except TimeoutError:
            return None
        except OSError:
            pass
    return time.perf_counter() - started


def measure(name: str, start: Callable[[], _Stdlib | server.Server], idle: int) -> None:
    threads_before = threading.active_count()
    srv = start()
    clients: list[socket.socket] = []
    try:
        for _ in range(idle):
            clients.append(socket.create_connection(("127.0.0.1", srv.port), timeout=10))
        opened = time.perf_counter()
        threads = _settled_thread_count() - threads_before
        latencies = sorted(_get(srv.port) for _ in range(PROBES))
        closed_text = ""
        if isinstance(srv, server.Server):
            all_closed = _all_closed(clients, 3 * IDLE_TIMEOUT_SECONDS + 2) is not None
            after = time.perf_counter() - opened
            closed_text = f"  idle all closed {after:.2f}s after connecting" if all_closed else "  idle NOT all closed"
        print(
            f"{name:>10} idle={idle:>5}  server threads={threads:>5}  /healthz median "
            f"{statistics.median(latencies) * 1000:7.2f} ms  max {latencies[-1] * 1000:7.2f} ms{closed_text}"
        )
    finally:
        for sock in clients:
            sock.close()
        srv.stop()


def main(argv: Sequence[str]) -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = max(0, soft // 2 - 64)  # client and server ends live in this one process
    counts = [int(a) for a in argv] or [0, 100, 500, 2000]
    for n in counts:
        idle = min(n, cap)
        if idle < n:
            print(f"(idle connections capped at {idle} by the file-descriptor limit {soft})")
        measure("agent", _agent, idle)
        measure("stdlib", _Stdlib, idle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
