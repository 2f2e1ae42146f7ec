"""A small HTTP/1.1 server whose cost is bounded whatever its clients do: the node agent's port
and the operator's ``/metrics`` (every pod that can reach the pod may open connections to them).

One thread waits on every open connection at once (``selectors``) and reads request heads without
blocking; only a complete head is handed, through a bounded queue, to a fixed number of worker
threads, which answer and close (no keep-alive). So:

- threads: ``1 + workers``, however many connections are open;
- connections: at most ``max_connections`` still silent (the oldest is dropped to make room for a
  new one, so probes get through a crowd of idle clients), ``queue_size`` waiting for a worker
  (more are answered 503) and one per worker;
- time: a connection that has not sent a complete request head within ``idle_timeout_seconds`` is
  closed (idle and slow-drip clients alike); a worker gives up on a client that does not read its
  whole answer within ``write_timeout_seconds``;
- memory: a request head over ``max_request_bytes`` is answered 431 and closed; bodies are never
  read (only GET is served).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

from accel_api import errors

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]  # status, content type, body
Route = Callable[[str], Response]  # request path -> response


@dataclass(frozen=True)
class Limits:
    """What one client, or many, can make the server spend (see the module's docstring)."""

    workers: int = 4
    queue_size: int = 32  # complete requests waiting for a worker; more are answered 503
    max_connections: int = 64  # silent connections held open; the oldest is dropped for a new one
    idle_timeout_seconds: float = 10.0  # from accept to a complete request head
    write_timeout_seconds: float = 10.0  # to send the whole answer (sendall)
    max_request_bytes: int = 8192  # request line and headers


@dataclass
class _Pending:
    sock: socket.socket
    opened: float
    head: bytearray


_HEAD_END: Final = (b"\r\n\r\n", b"\n\n")
_READ_CHUNK: Final = 4096
_ACCEPTS_PER_WAKE: Final = 256
ACCEPT_WARNING_SECONDS: Final = 60.0  # at most one "accept failed" warning a minute
ACCEPT_RETRY_SECONDS: Final = 0.05  # after a failed accept with nothing to free


def _http_answer(status: int, content_type: str, body: bytes, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class Server:
    """A small HTTP/1.1 server with bounded threads, connections, time and memory."""

    def __init__(
        self,
        route: Route,
        *,
        host: str,
        port: int,
        limits: Limits = Limits(),  # frozen: one shared default is safe
        monotonic: Callable[[], float] = time.monotonic,
        name: str = "accel",  # its threads' name prefix
    ) -> None:
        self._route = route
        self._limits = limits
        self._monotonic = monotonic
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=128)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._pending: dict[int, _Pending] = {}  # by file descriptor, oldest first
        self._queue: queue.Queue[tuple[socket.socket, bytes] | None] = queue.Queue(limits.queue_size)
        self._stopping = threading.Event()
        self._accept_warned = -ACCEPT_WARNING_SECONDS
        self.threads = [threading.Thread(target=self._wait_loop, name=f"{name}-http", daemon=True)] + [
            threading.Thread(target=self._work_loop, name=f"{name}-http-{i}", daemon=True)
            for i in range(limits.workers)
        ]
        for thread in self.threads:
            thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def open_connections(self) -> int:
        """Connections still waiting for a complete request (not those queued or being answered)."""
        return len(self._pending)

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        for _ in range(self._limits.workers):
            self._queue.put(None)  # blocks only while the queue is full, and workers are draining it
        for thread in self.threads:
            thread.join(timeout=5)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    # --- the one thread that waits on every connection ------------------------------------------
    def _wait_loop(self) -> None:
        try:
            while not self._stopping.is_set():
                for key, _ in self._selector.select(self._next_expiry()):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif isinstance(key.data, _Pending):
                        self._read(key.data)
                self._expire()
        finally:
            for pending in list(self._pending.values()):
                self._drop(pending)
            self._selector.close()

    def _next_expiry(self) -> float | None:
        if not self._pending:
            return None
        oldest = next(iter(self._pending.values()))
        return max(0.0, oldest.opened + self._limits.idle_timeout_seconds - self._monotonic())

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, say: free one rather than spin
                now = self._monotonic()
                if now - self._accept_warned >= ACCEPT_WARNING_SECONDS:
                    log.warning("http: accept failed: %s", exc)
                    self._accept_warned = now
                if self._pending:
                    self._drop(next(iter(self._pending.values())))
                else:
                    time.sleep(ACCEPT_RETRY_SECONDS)
                return
            if len(self._pending) >= self._limits.max_connections:
                self._drop(next(iter(self._pending.values())))
            sock.setblocking(False)
            pending = _Pending(sock, self._monotonic(), bytearray())
            self._pending[sock.fileno()] = pending
            self._selector.register(sock, selectors.EVENT_READ, pending)

    def _read(self, pending: _Pending) -> None:
        if self._pending.get(pending.sock.fileno()) is not pending:  # dropped earlier in this round
            return
        try:
            data = pending.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(pending)
            return
        pending.head += data
        if len(pending.head) > self._limits.max_request_bytes:
            self._forget(pending)
            self._refuse(pending.sock, 431, "request head too large\n")
        elif any(end in pending.head for end in _HEAD_END):
            self._forget(pending)
            try:
                self._queue.put_nowait((pending.sock, bytes(pending.head)))
            except queue.Full:
                self._refuse(pending.sock, 503, "busy, try again\n")

    def _expire(self) -> None:
        deadline = self._monotonic() - self._limits.idle_timeout_seconds
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.opened > deadline:
                return
            self._drop(oldest)

    def _forget(self, pending: _Pending) -> None:
        self._selector.unregister(pending.sock)
        del self._pending[pending.sock.fileno()]

    def _drop(self, pending: _Pending) -> None:
        self._forget(pending)
        pending.sock.close()

    @staticmethod
    def _refuse(sock: socket.socket, status: int, why: str) -> None:
        with contextlib.suppress(OSError):  # best effort, never blocks: the socket is non-blocking
            sock.send(_http_answer(status, "text/plain; charset=utf-8", why.encode()))
        sock.close()

    # --- the workers ----------------------------------------------------------------------------
    def _work_loop(self) -> None:
        while (item := self._queue.get()) is not None:
            sock, head = item
            try:
                sock.setblocking(True)
                sock.settimeout(self._limits.write_timeout_seconds)
                sock.sendall(self._answer(head))
            except OSError as exc:  # the client went away or does not read: nothing to do
                log.debug("http: answer not sent: %s", exc)
            finally:
                sock.close()

    def _answer(self, head: bytes) -> bytes:
        line = head.split(b"\n", 1)[0].decode("latin-1").strip()
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            log.debug("http: bad request line %s", errors.clip(line))
            return _http_answer(400, "text/plain; charset=utf-8", b"bad request\n")
        method, target, _version = parts
        if method != "GET":
            return _http_answer(405, "text/plain; charset=utf-8", b"only GET\n", extra="Allow: GET\r\n")
        path = target.split("?", 1)[0]
        try:
            status, content_type, body = self._route(path)
        except Exception:  # a bug in one answer must not cost the pool a worker
            log.exception("http: answering %s failed", errors.clip(path))
            status, content_type, body = 500, "text/plain; charset=utf-8", b"internal error\n"
        log.debug("http: GET %s -> %d", errors.clip(path), status)
        return _http_answer(status, content_type, body)
