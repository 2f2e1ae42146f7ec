"""The operator's /metrics port is the bounded server: idle clients cost it no thread, a scrape
gets through a crowd of them, and silent connections are closed after the idle timeout."""

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from accel_api.httpserver import Limits, Server
from accel_operator import metrics_server
from accel_operator.settings import OperatorSettings
from tests.support import http_clients
from tests.support.cluster import free_port

IDLE_CLIENTS = 300


@pytest.fixture
def server() -> Iterator[Server]:
    registry = CollectorRegistry()
    Counter("accel_operator_test_total", "a counter to find in the scrape", registry=registry).inc(3)
    settings = OperatorSettings(metrics_port=free_port(), metrics_address="127.0.0.1")
    limits = Limits(workers=2, max_connections=32, idle_timeout_seconds=0.5)
    s = metrics_server.serve(settings, registry, limits=limits)
    assert s is not None
    try:
        yield s
    finally:
        s.stop()


def test_off_without_a_port() -> None:
    assert metrics_server.serve(OperatorSettings(metrics_port=0), CollectorRegistry()) is None


def test_idle_clients_hold_no_threads_and_a_scrape_gets_through(server: Server) -> None:
    answer, _ = http_clients.through_idle_crowd(server, IDLE_CLIENTS, "/metrics", max_connections=32)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert b"accel_operator_test_total 3.0" in answer
    assert len(server.threads) == 3


def test_only_metrics_is_served(server: Server) -> None:
    assert http_clients.get(server.port, "/other").startswith(b"HTTP/1.1 404 ")
