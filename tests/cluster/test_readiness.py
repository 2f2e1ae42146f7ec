"""The operator's readiness against the real API server: ``/readyz`` (the Deployment's readiness
probe, on the metrics port) answers 503 while the operator cannot have listed what it watches
(its connections to the API server are held by a relay the test controls, so the webhook has not
started either: kopf serves it after its resource scan), and 200 once they are let through, on a
replica that does not hold the Lease (followers serve the webhook)."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from accel_localcluster import Cluster
from accel_operator.adapters.kube import tls
from tests.support import http_clients
from tests.support.cluster import free_port, wait_for
from tests.support.operator import checked_operator, settings_for

HELD_SECONDS = 4.0  # how long the API server is kept from the operator while /readyz is asked


class GatedRelay:
    """A TCP relay to ``target`` on 127.0.0.1 that accepts every connection at once but forwards
    none until :meth:`open` (TLS passes through: the API server's certificate names 127.0.0.1)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.gate = threading.Event()
        self.closed = False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="relay", daemon=True).start()

    def open(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.closed = True
        self.gate.set()
        self.listener.close()
        for sock in list(self.sockets):
            sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(conn)
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        self.gate.wait()
        if self.closed:
            conn.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        self.sockets.append(upstream)
        threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()
        self._pump(conn, upstream)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            src.close()
            dst.close()


@pytest.fixture
def relay(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedRelay]:
    """The relay, and KUBECONFIG pointing at it for the operator started in the test (the test's
    own clients were made from the cluster's kubeconfig already)."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = urllib.parse.urlsplit(config["clusters"][0]["cluster"]["server"])
    assert server.hostname is not None and server.port is not None
    gated = GatedRelay((server.hostname, server.port))
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://{server.hostname}:{gated.port}"
    path = tmp_path / "gated-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(path))
    try:
        yield gated
    finally:
        gated.close()


def _readyz(port: int) -> bytes:
    try:
        return http_clients.get(port, "/readyz")
    except OSError as exc:  # the metrics port is not open yet
        return repr(exc).encode()


def test_ready_only_once_listed_and_the_webhook_serves_leader_or_not(
    api: client.ApiClient, crds: list[str], namespace: str, relay: GatedRelay, tmp_path: Path
) -> None:
    # Another replica holds the Lease for the whole test: this one never leads.
    lease = f"readiness-{namespace}"
    client.CoordinationV1Api(api).create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=lease),
            spec=client.V1LeaseSpec(
                holder_identity="another-replica", lease_duration_seconds=3600, renew_time=dt.datetime.now(dt.UTC)
            ),
        ),
    )
    tls.self_signed(["127.0.0.1"], tmp_path)  # tls.crt and tls.key: the webhook needs no API call to start
    metrics, webhook = free_port(), free_port()
    settings = settings_for(
        namespace,
        metrics_port=metrics,
        metrics_address="127.0.0.1",
        webhook_port=webhook,
        webhook_address="127.0.0.1",
        webhook_host="127.0.0.1",
        webhook_cert_dir=tmp_path,
        # Installed configurations that do not exist: nothing is registered with the API server.
        webhook_configuration=f"absent-{namespace}",
        lease=lease,
        lease_namespace=namespace,
    )
    with checked_operator(settings):
        # Nothing has reached the API server: no watch can have listed, no webhook serves.
        held_until = time.monotonic() + HELD_SECONDS
        answers = 0
        while time.monotonic() < held_until:
            answer = _readyz(metrics)
            if answer.startswith(b"HTTP/"):
                answers += 1
                assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
                assert b"watches: " in answer and b"webhook: " in answer, answer[:600]
            time.sleep(0.2)
        assert answers > 0, "the metrics port never answered"
        relay.open()
        ready = wait_for(
            lambda: (a := _readyz(metrics)).startswith(b"HTTP/1.1 200 ") and a,
            timeout=60,
            what="/readyz answering 200",
        )
        assert b"ready" in ready
        held = client.CoordinationV1Api(api).read_namespaced_lease(lease, namespace)
        assert held.spec.holder_identity == "another-replica"  # ready as a follower
