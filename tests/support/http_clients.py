"""Raw-socket clients for the bounded HTTP server (``accel_api.httpserver.Server``) that both the
operator's /metrics port and the node agent's port are: requests, silent clients, and the check
that a crowd of idle connections costs no thread and does not keep a request out."""

from __future__ import annotations

import socket
import threading
import time

from accel_api.httpserver import Server


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def request(port: int, raw: bytes) -> bytes:
    """``raw`` sent as it is; everything the server answers until it closes."""
    with connect(port) as sock:
        sock.sendall(raw)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def get(port: int, path: str) -> bytes:
    return request(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


def ends_soon(sock: socket.socket, within: float = 2.0) -> bool:
    """The server closes the connection (EOF or reset) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def through_idle_crowd(server: Server, idle_clients: int, path: str, *, max_connections: int) -> tuple[bytes, float]:
    """GET ``path`` while ``idle_clients`` silent connections are open; the answer and the seconds
    the request itself took. On the way it
    checks what the bound promises: no thread more than the server started with, at most
    ``max_connections`` open, and every idle client closed (the oldest to make room, the rest after
    the idle timeout)."""
    threads_before = threading.active_count()
    idle = [connect(server.port) for _ in range(idle_clients)]
    try:
        started = time.perf_counter()
        answer = get(server.port, path)
        took = time.perf_counter() - started
        assert threading.active_count() <= threads_before  # 1 waiting thread + the workers, from the start
        assert server.open_connections <= max_connections
        assert all(ends_soon(sock, within=3.0) for sock in idle)
        assert server.open_connections == 0
    finally:
        for sock in idle:
            sock.close()
    return answer, took
