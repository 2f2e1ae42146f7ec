"""The operator's ``/metrics`` port: Prometheus text served by :class:`accel_api.httpserver.Server`,
and ``/readyz`` (:mod:`accel_operator.readiness`: 200 when ready, else 503 with the reasons).

Every pod that can reach the operator's pod can open connections to this port, so it runs on the
same bounded server as the node agent's (``1 + workers`` threads however many connections are
open, silent connections closed after ``idle_timeout_seconds``, request heads capped), not on
``prometheus_client.start_http_server``, which spends a thread per connection and never times
an idle one out (2,000 idle clients held 2,000 threads). Bound to ``settings.metrics_address``.
"""

from __future__ import annotations

import logging

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from accel_api.httpserver import Limits, Response, Route, Server
from accel_operator.readiness import Readiness
from accel_operator.settings import OperatorSettings

log = logging.getLogger("accel_operator")
LIMITS = Limits()


TEXT = "text/plain; charset=utf-8"


def route(registry: CollectorRegistry, readiness: Readiness | None = None) -> Route:
    """``/metrics``; ``/readyz`` where ``readiness`` is given; anything else is a 404."""

    def answer(path: str) -> Response:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
        if path == "/readyz" and readiness is not None:
            ready, reasons = readiness.evaluate()
            if ready:
                return 200, TEXT, b"ready\n"
            return 503, TEXT, ("not ready:\n" + "".join(f"{r}\n" for r in reasons)).encode()
        return 404, TEXT, b"not found: try /metrics\n"

    return answer


def serve(
    settings: OperatorSettings,
    registry: CollectorRegistry,
    *,
    readiness: Readiness | None = None,
    limits: Limits = LIMITS,
) -> Server | None:
    """Start serving ``registry`` (and ``readiness``) on ``metrics_address:metrics_port`` in daemon
    threads; None when ``metrics_port`` is 0 (off). The caller stops the server when the operator stops."""
    if not settings.metrics_port:
        return None
    server = Server(
        route(registry, readiness),
        host=settings.metrics_address,
        port=settings.metrics_port,
        limits=limits,
        name="accel-metrics",
    )
    log.info("metrics on %s:%d/metrics", settings.metrics_address, server.port)
    return server
