"""The metrics port stays bounded: threads, open connections and time, whatever clients do."""

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from accel_agent.server import Limits, LoopHealth, Server, serve
from tests.support import http_clients
from tests.support.http_clients import connect, ends_soon, request

IDLE_CLIENTS = 500


@pytest.fixture
def server() -> Iterator[Server]:
    loop = LoopHealth(15.0)
    loop.pass_done()
    limits = Limits(workers=2, max_connections=32, idle_timeout_seconds=0.5, max_request_bytes=1024)
    s = serve(CollectorRegistry(), loop, port=0, host="127.0.0.1", limits=limits)
    try:
        yield s
    finally:
        s.stop()


def test_many_idle_connections_cost_no_threads_and_do_not_block_probes(server: Server) -> None:
    answer, took = http_clients.through_idle_crowd(server, IDLE_CLIENTS, "/healthz", max_connections=32)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nok\n")
    assert took < 1.5, took


def test_threads_are_fixed_at_start(server: Server) -> None:
    assert len(server.threads) == 3 and all(t.is_alive() for t in server.threads)


def test_a_slow_drip_client_is_closed_after_the_idle_timeout(server: Server) -> None:
    with connect(server.port) as sock:
        started = time.perf_counter()
        sock.sendall(b"GET /metr")  # and nothing more
        assert ends_soon(sock, within=3.0)
        assert 0.4 < time.perf_counter() - started < 2.0


def test_an_oversized_head_is_refused(server: Server) -> None:
    # Over the 1 KiB limit, within one read: the whole head is read, so the answer arrives.
    answer = request(server.port, b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"a" * 1500 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ")
    # Far over it: the server stops reading and closes (the client may see the 431 or a reset).
    with connect(server.port) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"a" * (1 << 20))
        assert ends_soon(sock)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /readyz HTTP/1.0\r\n\r\n", b"200"),
        (b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", b"200"),
        (b"GET /nothing HTTP/1.1\r\n\r\n", b"404"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"405"),
        (b"nonsense\r\n\r\n", b"400"),
    ],
)
def test_answers(server: Server, raw: bytes, status: bytes) -> None:
    answer = request(server.port, raw)
    assert answer.split(b" ", 2)[1] == status, answer[:80]
    assert b"\r\nConnection: close\r\n" in answer


def test_a_failing_route_answers_500_and_keeps_its_worker() -> None:
    def route(path: str) -> tuple[int, str, bytes]:
        if path == "/boom":
            raise RuntimeError("bug")
        return 200, "text/plain", b"fine\n"

    s = Server(route, host="127.0.0.1", port=0, limits=Limits(workers=1))
    try:
        for _ in range(3):
            assert request(s.port, b"GET /boom HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500 ")
        assert request(s.port, b"GET / HTTP/1.1\r\n\r\n").endswith(b"fine\n")
    finally:
        s.stop()


def test_stop_closes_the_port() -> None:
    s = serve(CollectorRegistry(), LoopHealth(15.0), port=0, host="127.0.0.1")
    port = s.port
    s.stop()
    assert not any(t.is_alive() for t in s.threads)
    with pytest.raises(OSError):
        connect(port)


SERVER_WITH_FEW_FILES = """
import resource, sys, time
from prometheus_client import CollectorRegistry
from accel_agent.server import Limits, LoopHealth, serve
resource.setrlimit(resource.RLIMIT_NOFILE, (48, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
health = LoopHealth(15.0)
health.pass_done()
limits = Limits(workers=2, max_connections=1000, idle_timeout_seconds=30.0)
server = serve(CollectorRegistry(), health, port=0, host="127.0.0.1", limits=limits)
print(server.port, flush=True)
sys.stdin.read()
"""


def test_out_of_file_descriptors_the_server_frees_one_and_keeps_answering() -> None:
    # The server may hold 1000 silent connections but has 48 descriptors: accept fails (EMFILE).
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER_WITH_FEW_FILES], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        idle = [connect(port) for _ in range(100)]
        try:
            started = time.perf_counter()
            answer = request(port, b"GET /healthz HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:60]
            assert time.perf_counter() - started < 3.0
        finally:
            for sock in idle:
                sock.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
