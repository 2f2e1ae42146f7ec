"""The operator's /metrics port is the bounded server: idle clients cost it no thread, a scrape
gets through a crowd of them, and silent connections are closed after the idle timeout."""

import socket
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from accel_api.httpserver import Limits, Server
from accel_operator import metrics_server
from accel_operator.settings import OperatorSettings
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


def _get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def test_off_without_a_port() -> None:
    assert metrics_server.serve(OperatorSettings(metrics_port=0), CollectorRegistry()) is None


def test_idle_clients_hold_no_threads_and_a_scrape_gets_through(server: Server) -> None:
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(IDLE_CLIENTS)]
    try:
        answer = _get(server.port, "/metrics")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
        assert b"accel_operator_test_total 3.0" in answer
        assert threading.active_count() <= threads_before  # 1 waiting thread + 2 workers, from the start
        assert len(server.threads) == 3
        assert server.open_connections <= 32
        # Every idle client is closed: the oldest to make room, the rest after the idle timeout.
        assert all(_closed_by_server(sock, within=3.0) for sock in idle)
        assert server.open_connections == 0
    finally:
        for sock in idle:
            sock.close()


def test_only_metrics_is_served(server: Server) -> None:
    assert _get(server.port, "/other").startswith(b"HTTP/1.1 404 ")
