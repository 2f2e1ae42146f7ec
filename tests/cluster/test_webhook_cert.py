"""The webhook certificate the replicas share through one Secret (adapters/kube/tls.py), against
the real API server and under the role manifests/operator/rbac.yaml ships."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from accel_operator.adapters.kube import tls
from accel_operator.handlers import admission
from accel_operator.settings import OperatorSettings
from tests.support.cluster import token_kubeconfig

NAMESPACE = "accel-system"
SECRET = "accel-operator-webhook-cert"  # the one name the shipped role may read and renew
SETTINGS = OperatorSettings(webhook_port=9443, webhook_namespace=NAMESPACE, webhook_tls_secret=SECRET)
NAMES = tls.sans_for("", SETTINGS.webhook_service, NAMESPACE)


def _drop(core: client.CoreV1Api) -> None:
    try:
        core.delete_namespaced_secret(SECRET, NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def operator_api(api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path) -> Iterator[client.ApiClient]:
    """An API client with the operator's ServiceAccount token; no Secret before or after."""
    kubeconfig = token_kubeconfig(api, core, tmp_path)
    _drop(core)
    yield config.new_client_from_config(config_file=str(kubeconfig))
    _drop(core)


def _server_cert(server: admission.UrlWebhookServer) -> bytes:
    assert server.certfile is not None
    cert = Path(server.certfile).read_bytes()
    server.forget_key()
    return cert


def _stored(core: client.CoreV1Api) -> client.V1Secret:
    return core.read_namespaced_secret(SECRET, NAMESPACE)


def test_replicas_starting_at_once_share_one_certificate(
    operator_api: client.ApiClient, core: client.CoreV1Api
) -> None:
    """Four replicas start together: one makes the Secret, the others read it; every server
    presents the certificate every caBundle names."""
    with ThreadPoolExecutor(4) as pool:
        servers = list(pool.map(lambda _: admission.webhook_server(SETTINGS, lambda: operator_api), range(4)))
    bundles = {bytes(s.cadata or b"") for s in servers}
    certs = {_server_cert(s) for s in servers}
    assert len(bundles) == 1 and bundles == certs
    secret = _stored(core)
    assert secret.type == "kubernetes.io/tls"
    assert secret.metadata.labels[tls.LABEL_MANAGED] == tls.MANAGER
    assert base64.b64decode(secret.data["tls.crt"]) in certs
    assert base64.b64decode(secret.data["ca.crt"]) in certs
    pair = tls.TlsPair(base64.b64decode(secret.data["tls.crt"]), base64.b64decode(secret.data["tls.key"]))
    assert tls.serves(pair, NAMES)
    # A later replica (a restart) keeps it.
    assert _server_cert(admission.webhook_server(SETTINGS, lambda: operator_api)) in certs


def test_a_certificate_this_operator_made_is_renewed_when_it_no_longer_serves(
    operator_api: client.ApiClient, core: client.CoreV1Api
) -> None:
    old = tls.self_signed_pem(["accel-operator-webhook.elsewhere.svc"])  # the Service moved
    core.create_namespaced_secret(NAMESPACE, tls._body(SECRET, old))
    server = admission.webhook_server(SETTINGS, lambda: operator_api)
    bundle = bytes(server.cadata or b"")
    cert = _server_cert(server)
    assert cert != old.cert_pem
    stored = _stored(core)
    assert base64.b64decode(stored.data["tls.crt"]) == cert
    assert tls.serves(tls.TlsPair(cert, base64.b64decode(stored.data["tls.key"])), NAMES)
    # The caBundle trusts the new certificate and the one it replaced (a replica that started
    # before the renewal still serves that one).
    assert bundle == cert + old.cert_pem == base64.b64decode(stored.data["ca.crt"])
    assert ssl.create_default_context(cadata=bundle.decode()).cert_store_stats()["x509_ca"] == 2


def test_a_certificate_someone_else_made_is_never_written(
    operator_api: client.ApiClient, core: client.CoreV1Api
) -> None:
    """A Secret the operator did not make: used when it serves; else left as it is, and this
    replica serves with its own certificate."""
    foreign = tls.self_signed_pem(NAMES)
    body = tls._body(SECRET, foreign)
    body.metadata.labels = {"app.kubernetes.io/managed-by": "cert-manager"}
    core.create_namespaced_secret(NAMESPACE, body)
    assert _server_cert(admission.webhook_server(SETTINGS, lambda: operator_api)) == foreign.cert_pem

    stale = tls.self_signed_pem(["somewhere.else.svc"])
    core.patch_namespaced_secret(SECRET, NAMESPACE, {"data": tls._body(SECRET, stale).data})
    version = _stored(core).metadata.resource_version
    own = _server_cert(admission.webhook_server(SETTINGS, lambda: operator_api))
    assert own not in (stale.cert_pem, foreign.cert_pem)
    assert _stored(core).metadata.resource_version == version
