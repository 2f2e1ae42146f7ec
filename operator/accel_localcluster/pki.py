"""Certificates and keys for the local control plane: a CA, the API server's serving cert, an
admin client cert (group system:masters) and the service-account signing key.

Generated once into the state folder and reused, so kubeconfigs stay valid across restarts.
"""

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def at(cls, folder: Path) -> "Pki":
        return cls(
            *(
                folder / n
                for n in (
                    "ca.crt",
                    "ca.key",
                    "apiserver.crt",
                    "apiserver.key",
                    "admin.crt",
                    "admin.key",
                    "sa.key",
                    "sa.pub",
                )
            )
        )

    def complete(self) -> bool:
        return all(
            p.is_file()
            for p in (
                self.ca_cert,
                self.ca_key,
                self.server_cert,
                self.server_key,
                self.admin_cert,
                self.admin_key,
                self.sa_key,
                self.sa_pub,
            )
        )


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def ensure(folder: Path) -> Pki:
    """Create whatever is missing under ``folder``; return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki.at(folder)
    if pki.complete():
        return pki
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=3650)
    ca_key = _key()
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("accel-local-ca"))
        .issuer_name(_name("accel-local-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, org: str | None, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _key()
        b = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes"),
                        x509.DNSName("kubernetes.default.svc"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
                    ]
                ),
                critical=False,
            )
        return b.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf("kube-apiserver", None, server=True)
    admin, admin_key = leaf("accel-admin", "system:masters", server=False)
    sa_key = _key()
    for cert, path in ((ca, pki.ca_cert), (server, pki.server_cert), (admin, pki.admin_cert)):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for key, path in (
        (ca_key, pki.ca_key),
        (server_key, pki.server_key),
        (admin_key, pki.admin_key),
        (sa_key, pki.sa_key),
    ):
        _write_key(key, path)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki
