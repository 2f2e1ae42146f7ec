"""The agent's one HTTP port: ``/metrics`` (Prometheus text), ``/healthz`` and ``/readyz``.

``/healthz`` (liveness) fails only when the sampling loop has not finished a pass for a long time
(stuck in a driver call, say): restarting the pod is then the right cure. ``/readyz`` is ready once
a first pass has finished and the last one is recent. An unhealthy *node* is not an unhealthy
*agent*: it is reported, and the agent stays live and ready.

The port's cost is bounded whatever its clients do: :class:`accel_api.httpserver.Server`
(threads, connections, time and memory; the limits come from the agent's settings).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from accel_agent import metrics
from accel_api.httpserver import Limits, Response, Route, Server

__all__ = ["Limits", "LoopHealth", "Server", "routes", "serve"]

STALE_PASSES_NOT_READY: Final = 3
STALE_PASSES_NOT_LIVE: Final = 10
DEFAULT_LIMITS: Final = Limits()  # frozen: one shared default is safe


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


def routes(registry: CollectorRegistry, loop_health: LoopHealth) -> Route:
    """``/metrics``, ``/healthz`` and ``/readyz``; anything else is a 404."""

    def route(path: str) -> Response:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, metrics.render(registry)
        if path in ("/healthz", "/readyz"):
            ok, why = loop_health.live() if path == "/healthz" else loop_health.ready()
            return (200 if ok else 503), "text/plain; charset=utf-8", f"{why}\n".encode()
        return 404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz or /readyz\n"

    return route


def serve(
    registry: CollectorRegistry,
    loop_health: LoopHealth,
    *,
    port: int,
    host: str = "0.0.0.0",  # every interface of the pod (settings.bind_address)
    limits: Limits = DEFAULT_LIMITS,
) -> Server:
    """Start serving on ``host:port`` (port 0: any free port) in daemon threads."""
    return Server(routes(registry, loop_health), host=host, port=port, limits=limits, name="accel-agent")
