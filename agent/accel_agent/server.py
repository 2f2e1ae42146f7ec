"""The agent's one HTTP port: ``/metrics`` (Prometheus text), ``/healthz`` and ``/readyz``.

``/healthz`` (liveness) fails only when the sampling loop has not finished a pass for a long time
(stuck in a driver call, say): restarting the pod is then the right cure. ``/readyz`` is ready once
a first pass has finished and the last one is recent. An unhealthy *node* is not an unhealthy
*agent*: it is reported, and the agent stays live and ready.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)
STALE_PASSES_NOT_READY: Final = 3
STALE_PASSES_NOT_LIVE: Final = 10


class LoopHealth:
    """Thread-safe record of the loop's progress, read by the probes."""

    def __init__(self, interval_seconds: float, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._started = monotonic()
        self._last_pass: float | None = None

    def pass_done(self) -> None:
        with self._lock:
            self._last_pass = self._monotonic()

    def _age(self) -> float:
        with self._lock:
            since = self._last_pass if self._last_pass is not None else self._started
        return self._monotonic() - since

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            done = self._last_pass is not None
        if not done:
            return False, "no sampling pass finished yet"
        age = self._age()
        if age > STALE_PASSES_NOT_READY * self._interval + 5:
            return False, f"last pass finished {age:.0f}s ago"
        return True, "ok"

    def live(self) -> tuple[bool, str]:
        age = self._age()
        if age > max(STALE_PASSES_NOT_LIVE * self._interval, 60.0):
            return False, f"no pass finished for {age:.0f}s"
        return True, "ok"


@dataclass
class Server:
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(registry: CollectorRegistry, loop_health: LoopHealth, *, port: int, host: str = "") -> Server:
    """Start serving on ``port`` (0: any free port) in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, why = loop_health.live() if path == "/healthz" else loop_health.ready()
                self._send(200 if ok else 503, f"{why}\n".encode())
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="accel-agent-http", daemon=True)
    thread.start()
    return Server(httpd, thread)
