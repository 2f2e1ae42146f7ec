"""The validating admission webhook for AcceleratorJobs, served by kopf.

On CREATE and UPDATE it evaluates the job against every AcceleratorPolicy and its namespace's
team label (``vocabulary.LABEL_NAMESPACE_TEAM``) with ``planning.policy.evaluate``, the same pure
function the reconciler and ``accelctl validate --policy`` use, and refuses the request with one
line per violation (``field.path: rule by policy 'p' (rule r); fix: ...``). A spec the models
refuse is refused with the models' lines. Budget exhaustion (``queue`` violations) is not a
reason to refuse: spend is the reconciler's to weigh, and the job waits.

failurePolicy: **Ignore**. The webhook is a fast, friendly first check, not the only one: rules
inside one object are CEL in the CRDs (the API server enforces them with the webhook down) and the
reconciler evaluates the policies again before admitting a job (a job that breaks one is not
admitted and gets a condition naming the rule). With ``Fail``, an operator outage or a certificate
rotation would block every create and update of AcceleratorJobs in the cluster, including the
updates that remove finalizers during deletion, for no gain in what is enforced. Objects being
deleted are never refused.

Served (``DEFAULT_HOST``:``DEFAULT_PORT`` until settings carry them) by kopf's
:class:`kopf.WebhookServer` with a self-signed certificate made here (kopf's own generator needs
extras we do not install); kopf manages the ValidatingWebhookConfiguration ``accel.dev`` and its
``caBundle``. On the local cluster the API server runs on the same machine: ``host=127.0.0.1``.
In a cluster, ``host`` must be a Service's name (and the certificate's SAN).

Indexes: ``policies`` (name -> AcceleratorPolicy) and ``namespace_teams`` (namespace -> team
label or None); the operator's RBAC needs list/watch on namespaces and acceleratorpolicies, and
create/patch on validatingwebhookconfigurations.

``register(reg, ctx)`` declares all of it; it is not wired into ``handlers.register`` yet.
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kopf
from pydantic import ValidationError

from accel_api import errors, registry
from accel_api import vocabulary as v
from accel_api.job import AcceleratorJob
from accel_api.policy import AcceleratorPolicy
from accel_operator.context import OperatorContext
from accel_operator.planning import policy

WEBHOOK_CONFIGURATION = v.GROUP  # the managed ValidatingWebhookConfiguration's name
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9443


def review(body: Mapping[str, Any], namespace_team: str | None, policies: Iterable[AcceleratorPolicy]) -> list[str]:
    """The reasons to refuse ``body`` (an AcceleratorJob), one line each; empty: allowed."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return []
    try:
        job = AcceleratorJob.model_validate(dict(body))
    except ValidationError as exc:
        return errors.describe(exc, model=AcceleratorJob, limit=errors.MAX_PROBLEMS)
    found = policy.refusals(policy.evaluate(job.spec, namespace_team, list(policies)))
    return errors.cap([str(x) for x in found])


def self_signed(host: str, directory: Path) -> tuple[Path, Path, bytes]:
    """A self-signed certificate for ``host`` (an IP address or a DNS name), valid a year:
    (certificate file, key file, the certificate's PEM for the caBundle)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_file.chmod(0o600)
    return cert_file, key_file, cert_pem


def webhook_server(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> kopf.WebhookServer:
    directory = Path(tempfile.mkdtemp(prefix="accel-webhook-"))
    cert_file, key_file, ca = self_signed(host, directory)
    return kopf.WebhookServer(addr=host, host=host, port=port, certfile=cert_file, pkeyfile=key_file, cadata=ca)


def register(
    reg: kopf.OperatorRegistry, ctx: OperatorContext | None, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> None:
    """Declare the webhook, its server and the indexes it reads into ``reg``. ``ctx`` is taken
    for symmetry with the other handler modules (host and port should come from its settings)."""
    del ctx

    @kopf.index(v.GROUP, v.VERSION, registry.POLICY.plural, id="policies", registry=reg)
    def policies(body: kopf.Body, name: str, **_: Any) -> dict[str, AcceleratorPolicy | None]:
        try:
            return {name: AcceleratorPolicy.model_validate(dict(body))}
        except ValidationError:
            return {name: None}  # the CRD schema should make this impossible; skipped, not fatal

    @kopf.index("", "v1", "namespaces", id="namespace_teams", registry=reg)
    def namespace_teams(name: str, labels: kopf.Labels, **_: Any) -> dict[str, str | None]:
        return {name: labels.get(v.LABEL_NAMESPACE_TEAM)}

    @kopf.on.startup(registry=reg)
    def serve(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = webhook_server(host, port)
        settings.admission.managed = WEBHOOK_CONFIGURATION

    @kopf.on.validate(
        v.GROUP,
        v.VERSION,
        registry.JOB.plural,
        id="policy",
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        side_effects=False,
        registry=reg,
    )
    def validate_job(body: kopf.Body, namespace: str | None, **kwargs: Any) -> None:
        teams: kopf.Index[str, str | None] = kwargs["namespace_teams"]
        found: kopf.Index[str, AcceleratorPolicy | None] = kwargs["policies"]
        team = next(iter(teams.get(namespace or "", ())), None)
        objects = [p for values in found.values() for p in values if p is not None]
        problems = review(body, team, objects)
        if problems:
            raise kopf.AdmissionError("\n".join(problems), code=422)
