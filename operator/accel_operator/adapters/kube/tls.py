"""The webhook's certificate, shared by every replica through one Secret (type kubernetes.io/tls).

Without a mounted certificate each replica used to make its own self-signed one, and the webhook
configuration trusted whichever replica registered last: the API server's calls through the
Service to the other replica failed TLS (and, with failurePolicy Ignore, passed unchecked).

:func:`shared` gets the Secret or creates it. A create is atomic, so of two replicas starting at
once one creates it and the other reads the winner's (409 Conflict). A Secret this operator made
(``LABEL_MANAGED``) whose certificate no longer serves (the Service's names changed, or it
expires soon) is replaced under its resourceVersion, its bundle (``ca.crt``, the caBundle every
replica registers) trusting the replaced certificate too; a replica that loses that race reads the
winner's. A Secret someone else made is never written: used when it serves, else ``None``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGER = "accel-operator"
ATTEMPTS = 4
TIMEOUT = (5.0, 15.0)  # connect, read: a replica's start never hangs on this


@dataclass(frozen=True)
class TlsPair:
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes = b""  # what clients trust; empty: the certificate itself

    @property
    def bundle(self) -> bytes:
        return self.ca_pem or self.cert_pem


def _body(name: str, pair: TlsPair, resource_version: str | None = None) -> client.V1Secret:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, labels={LABEL_MANAGED: MANAGER}, resource_version=resource_version),
        type="kubernetes.io/tls",
        # ca.crt: the certificate is its own CA (after a renewal, with the one it replaced); a
        # mount of this Secret reads like cert-manager's.
        data={"tls.crt": b64(pair.cert_pem), "tls.key": b64(pair.key_pem), "ca.crt": b64(pair.bundle)},
    )


def _pair(secret: client.V1Secret) -> TlsPair | None:
    data = secret.data or {}
    try:
        ca = base64.b64decode(data["ca.crt"]) if data.get("ca.crt") else b""
        return TlsPair(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]), ca)
    except (KeyError, ValueError, TypeError):
        return None


def shared(
    api: client.ApiClient,
    namespace: str,
    name: str,
    make: Callable[[], TlsPair],
    serves: Callable[[TlsPair], bool],
) -> TlsPair | None:
    """The pair in the Secret ``namespace/name``, made with ``make`` and stored when absent or
    (ours only) when it no longer ``serves``; ``None`` when a Secret someone else made does not
    serve. API errors other than the races above are raised."""
    core = client.CoreV1Api(api)
    for _ in range(ATTEMPTS):
        try:
            secret = core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise
            pair = make()
            try:
                core.create_namespaced_secret(namespace, _body(name, pair), _request_timeout=TIMEOUT)
            except ApiException as exc:
                if exc.status == 409:
                    continue  # another replica created it first: use theirs
                raise
            log.info("webhook certificate: made and stored in Secret %s/%s", namespace, name)
            return pair
        found = _pair(secret)
        if found is not None and serves(found):
            return found
        if (secret.metadata.labels or {}).get(LABEL_MANAGED) != MANAGER:
            log.warning(
                "webhook certificate: Secret %s/%s was not made by this operator and does not serve the "
                "webhook's names (or expires soon); it is left as it is",
                namespace,
                name,
            )
            return None
        pair = make()
        if found is not None:
            # The bundle trusts the replaced certificate too: a replica still serving it (it
            # started before the renewal) keeps its calls until it restarts.
            pair = TlsPair(pair.cert_pem, pair.key_pem, pair.cert_pem + found.cert_pem)
        try:
            core.replace_namespaced_secret(
                name, namespace, _body(name, pair, secret.metadata.resource_version), _request_timeout=TIMEOUT
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                continue  # another replica renewed (or someone deleted) it meanwhile: read again
            raise
        log.info("webhook certificate: renewed in Secret %s/%s", namespace, name)
        return pair
    raise RuntimeError(f"webhook certificate: Secret {namespace}/{name} kept changing; {ATTEMPTS} attempts")
