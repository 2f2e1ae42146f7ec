"""The operator's readiness (accel_operator/readiness.py): ready only when every watch has listed
and the webhook answers over TLS; a follower is ready like a leader; /readyz on the metrics port
answers 503 with the reasons, then 200."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from accel_api import catalog
from accel_operator import metrics_server, readiness
from accel_operator.adapters.kube import tls
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.engine.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.settings import OperatorSettings
from tests.support import http_clients
from tests.support.cluster import free_port


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(405)  # as kopf's server would
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[int]:
    """A TLS server on 127.0.0.1 with a certificate for another name (as the webhook's, made for
    its Service)."""
    cert, key, _ = tls.self_signed(["accel-operator-webhook.accel-system.svc"], tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never speaks (a server stuck before its TLS handshake)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


class NeverLeader:
    def leading(self) -> bool:
        return False

    def tick(self) -> bool:
        return False


def _scheduler(*, listed: bool) -> Scheduler:
    sched = Scheduler(
        settings=OperatorSettings(),
        catalog=catalog.default(),
        writer=FakeJobWriter(),
        workloads=FakeWorkloadClient(),
        metrics=OperatorMetrics(),
        elector=NeverLeader(),
    )
    sched.indices = Indices(pools={}, nodes={}, pods={}, workloads={}, jobs={}, listed=lambda: listed)
    return sched


def test_the_webhook_check_needs_a_tls_answer(tls_server: int, silent_port: int) -> None:
    assert readiness.webhook_answers("127.0.0.1", tls_server).probe() is None
    closed = free_port()
    refused = readiness.webhook_answers("127.0.0.1", closed).probe()
    assert refused is not None and f"no TLS answer on 127.0.0.1:{closed}" in refused
    silent = readiness.webhook_answers("127.0.0.1", silent_port, timeout=0.3).probe()
    assert silent is not None and "no TLS answer" in silent


@pytest.mark.parametrize(
    ("kopf_listed", "informers_listed", "webhook_up", "reasons"),
    [
        (False, True, True, ["watches"]),  # kopf has called no handler: its indexes are not filled
        (True, False, True, ["watches"]),  # an informer (jobs, pods, batch Jobs) has not listed
        (True, True, False, ["webhook"]),
        (False, False, False, ["watches", "webhook"]),
        (True, True, True, []),
    ],
)
def test_ready_only_when_listed_and_the_webhook_answers(
    kopf_listed: bool, informers_listed: bool, webhook_up: bool, reasons: list[str], tls_server: int
) -> None:
    """The scheduler of a replica that does not hold the Lease: leading is no condition."""
    sched = _scheduler(listed=informers_listed)
    if kopf_listed:
        sched.kopf_listed()
    port = tls_server if webhook_up else free_port()
    settings = OperatorSettings(webhook_port=port, webhook_address="0.0.0.0")
    ready, why = readiness.for_operator(settings, sched.can_act).evaluate()
    assert not sched.leading()
    assert [w.split(":")[0] for w in why] == reasons
    assert ready is (not reasons)


def test_no_webhook_check_without_a_webhook() -> None:
    sched = _scheduler(listed=True)
    sched.kopf_listed()
    assert readiness.for_operator(OperatorSettings(webhook_port=0), sched.can_act).evaluate() == (True, [])


def test_readyz_answers_503_with_the_reasons_then_200() -> None:
    state = {"listed": False}
    checks = readiness.Readiness([readiness.listed(lambda: state["listed"])])
    settings = OperatorSettings(metrics_port=free_port(), metrics_address="127.0.0.1")
    server = metrics_server.serve(settings, CollectorRegistry(), readiness=checks)
    assert server is not None
    try:
        answer = http_clients.get(server.port, "/readyz")
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert b"watches: not every watched kind has been listed yet" in answer
        state["listed"] = True
        answer = http_clients.get(server.port, "/readyz")
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    finally:
        server.stop()
