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

The certificates themselves are made here too (:func:`self_signed_pem`, for the names
:func:`sans_for` gives), and :func:`serves` says whether a stored one still does.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGER = "accel-operator"
ATTEMPTS = 4
TIMEOUT = (5.0, 15.0)  # connect, read: a replica's start never hangs on this
RENEW_DAYS = 30  # a shared certificate expiring sooner is replaced at a replica's start


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


def sans_for(host: str, service: str, namespace: str) -> list[str]:
    """The names the certificate must carry: ``host`` (if any) and the Service's DNS names."""
    names = [host] if host else []
    names += [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    return list(dict.fromkeys(names))


def self_signed_pem(names: Sequence[str]) -> TlsPair:
    """A self-signed certificate for ``names`` (IP addresses or DNS names; the first is the
    subject), valid a year, and its key, in PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    sans: list[x509.GeneralName] = []
    for host in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return TlsPair(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def serves(pair: TlsPair, names: Sequence[str], *, renew_days: float = RENEW_DAYS) -> bool:
    """Whether ``pair`` is a certificate and key that belong together, name every one of ``names``
    and stay valid for ``renew_days`` more."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return False
    if cert.public_key() != key.public_key():
        return False
    held = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} | set(sans.get_values_for_type(x509.DNSName))
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=renew_days)
    return set(names) <= held and cert.not_valid_after_utc > soon


def write_pair(pair: TlsPair, directory: Path) -> tuple[Path, Path]:
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(pair.cert_pem)
    key_file.touch(mode=0o600)
    key_file.write_bytes(pair.key_pem)
    key_file.chmod(0o600)
    return cert_file, key_file


def self_signed(names: Sequence[str], directory: Path) -> tuple[Path, Path, bytes]:
    """:func:`self_signed_pem` written to ``directory``: (certificate file, key file, the
    certificate's PEM for the caBundle)."""
    pair = self_signed_pem(names)
    return (*write_pair(pair, directory), pair.cert_pem)
