"""The validating admission webhook for AcceleratorJobs, served by kopf.

On CREATE and UPDATE it evaluates the job against every AcceleratorPolicy and its namespace's
team label (``vocabulary.LABEL_NAMESPACE_TEAM``) with ``planning.policy.evaluate``, the same pure
function the reconciler and ``accelctl validate --policy`` use, and refuses the request with one
line per violation (``field.path: rule by policy 'p' (rule r); fix: ...``). A spec the models
refuse is refused with the models' lines. Budget exhaustion refuses only where the budget says
``onExhausted: refuse``; with ``queue`` (the default) the job is accepted and waits.

failurePolicy: **Ignore** by default (``webhook_fail_closed`` registers ``Fail``; docs/policy.md
says what that costs). The webhook is a fast, friendly first check, not the only one: rules
inside one object are CEL in the CRDs (the API server enforces them with the webhook down) and the
reconciler evaluates the policies again before admitting a job (a job that breaks one is not
admitted and gets a condition naming the rule). With ``Fail``, an operator outage or a certificate
rotation would block every create and update of AcceleratorJobs in the cluster, including the
updates that remove finalizers during deletion, for no gain in what is enforced. Objects being
deleted are never refused.

Registered by ``handlers.register`` when ``settings.webhook_port`` is set (the Deployment sets
9443): kopf's :class:`kopf.WebhookServer` listens on ``webhook_address:webhook_port`` with the
certificate from ``webhook_cert_dir`` (a Secret every replica mounts, e.g. cert-manager's) or,
without one, a self-signed certificate made here whose SANs are ``webhook_host`` and the Service's
DNS names (``SERVICE.NAMESPACE.svc`` and ``...svc.cluster.local``). With ``webhook_tls_secret``
(the Deployment sets it) that certificate is shared by every replica through one Secret the first
replica makes (``adapters.kube.tls``), so the caBundle any replica registers trusts them all; a
shared certificate with fewer than ``RENEW_DAYS`` left is replaced at a replica's start. kopf
manages the Validating and
MutatingWebhookConfigurations ``accel.dev`` with that ``caBundle``. With ``webhook_host`` (the
local control plane: ``127.0.0.1``) the API server calls ``https://HOST:PORT``; without, the
configuration names the Service (``webhook_service`` in ``webhook_namespace``, port
``webhook_service_port``).

The webhooks are ``persistent``: a stopping replica leaves them registered (kopf would otherwise
empty the configuration on exit, switching the webhook off under the replica that keeps running);
with failurePolicy Ignore an endpoint that is gone costs nothing but the check.

A mutating webhook (CREATE only) defaults a missing ``spec.team`` to the namespace's team label;
with the operator down, such a job is refused by the CRD schema (``spec.team`` is required).

Indexes (``handlers.policies``): ``policies`` and ``namespace_teams``; the operator's RBAC needs
list/watch on namespaces and acceleratorpolicies, and create/patch on validating- and
mutatingwebhookconfigurations.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kopf
from pydantic import ValidationError

from accel_api import errors, registry
from accel_api import vocabulary as v
from accel_api.job import AcceleratorJob
from accel_api.policy import AcceleratorPolicy
from accel_operator.adapters.kube import tls
from accel_operator.adapters.kube.tls import TlsPair
from accel_operator.planning import policy
from accel_operator.reconcile.common import policy_inputs
from accel_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

WEBHOOK_CONFIGURATION = v.GROUP  # the managed Validating/MutatingWebhookConfigurations' name
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9443


class RefusalsAreNotErrors(logging.Filter):
    """kopf logs a webhook's refusal (our AdmissionError) as ERROR "Webhook 'policy' failed
    permanently: ..."; a refused job is the tenant's mistake, not the operator's, so the record
    is lowered to INFO (alerts on the operator's errors stay meaningful)."""

    PREFIX = "Webhook 'policy' failed permanently: "

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and isinstance(record.msg, str) and record.msg.startswith(self.PREFIX):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


REFUSALS = RefusalsAreNotErrors()


def review(
    body: Mapping[str, Any],
    namespace_team: str | None,
    policies: Iterable[AcceleratorPolicy],
    *,
    broken: Sequence[policy.BrokenPolicy] = (),
    bound_teams: Collection[str] = (),
) -> list[str]:
    """The reasons to refuse ``body`` (an AcceleratorJob), one line each; empty: allowed. The spend
    is the policies' ``status.spend`` (the reconciler's seam too): only a budget that says
    ``onExhausted: refuse`` refuses here; a queueing one lets the job in to wait. A ``broken``
    policy refuses every job it would govern; ``bound_teams`` (the teams some namespace is
    labelled with) may not be named from an unlabelled namespace."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return []
    try:
        job = AcceleratorJob.model_validate(dict(body))
    except ValidationError as exc:
        return errors.describe(exc, model=AcceleratorJob, limit=errors.MAX_PROBLEMS)
    objects = list(policies)
    spent = policy_inputs.spend_from(objects)
    found = policy.refusals(
        policy.evaluate(job.spec, namespace_team, objects, spent=spent, broken=broken, bound_teams=bound_teams)
    )
    return errors.cap([str(x) for x in found])


def default_team(body: Mapping[str, Any], namespace_team: str | None) -> str | None:
    """The team to write into a job that names none: its namespace's (None: leave it as it is)."""
    spec = body.get("spec")
    if namespace_team is None or not isinstance(spec, Mapping) or spec.get("team"):
        return None
    return namespace_team


def sans_for(host: str, service: str, namespace: str) -> list[str]:
    """The names the certificate must carry: ``host`` (if any) and the Service's DNS names."""
    names = [host] if host else []
    names += [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    return list(dict.fromkeys(names))


RENEW_DAYS = 30  # a shared certificate expiring sooner is replaced at a replica's start


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


def _write_pair(pair: TlsPair, directory: Path) -> tuple[Path, Path]:
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
    return (*_write_pair(pair, directory), pair.cert_pem)


class UrlWebhookServer(kopf.WebhookServer):
    """kopf's server, announced as ``https://HOST:PORT``. A self-signed key made for it lives in
    ``key_dir`` only until kopf has loaded it into its SSL context (kopf reads the files once, as it
    starts serving): the directory is removed then, so no private key is left on disk."""

    def __init__(self, *, key_dir: Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key_dir = key_dir

    def forget_key(self) -> None:
        if self.key_dir is not None:
            # kopf re-reads its certificate files every few seconds to restart on a renewal: with
            # no files named it watches none (a mounted Secret's files are never forgotten).
            self.certfile = self.pkeyfile = None
            shutil.rmtree(self.key_dir, ignore_errors=True)
            self.key_dir = None

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        try:
            async for config in super().__call__(fn):
                self.forget_key()  # kopf built its SSL context before the first config
                yield config
        finally:
            self.forget_key()


class ServiceWebhookServer(UrlWebhookServer):
    """kopf's server, announced to the API server as a Service reference rather than a URL."""

    def __init__(self, *, service: str, namespace: str, service_port: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = kopf.WebhookClientConfigService(
            name=service, namespace=namespace, port=service_port, path=(self.path or "").rstrip("/")
        )

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for config in super().__call__(fn):
            out = kopf.WebhookClientConfig(service=dict(self.service))  # type: ignore[typeddict-item]
            if config.get("caBundle"):
                out["caBundle"] = config["caBundle"]
            yield out


def _certificate(settings: OperatorSettings, api: Callable[[], Any] | None) -> TlsPair:
    """The shared certificate from the Secret ``webhook_tls_secret`` (made there by the first
    replica); without one (or when it cannot be had: the API server down, a foreign Secret that
    does not serve) a self-signed certificate for this process alone."""
    names = sans_for(settings.webhook_host, settings.webhook_service, settings.webhook_namespace)
    secret = settings.webhook_tls_secret
    if secret and api is not None:
        try:
            found = tls.shared(
                api(), settings.webhook_namespace, secret, lambda: self_signed_pem(names), lambda p: serves(p, names)
            )
        except Exception as exc:  # noqa: BLE001 - the webhook still serves; only the replicas may differ
            where = f"{settings.webhook_namespace}/{secret}"
            log.warning("webhook certificate: Secret %s unavailable (%s)", where, str(exc)[:300])
            found = None
        if found is not None:
            return found
        log.warning("webhook certificate: this replica uses its own; the configuration trusts the last to register")
    return self_signed_pem(names)


def webhook_server(settings: OperatorSettings, api: Callable[[], Any] | None = None) -> UrlWebhookServer:
    """The server ``settings`` describe: its certificate (``api`` makes the API client that
    reads or stores the shared one), where it listens, how it is called."""
    host = settings.webhook_host
    cert_dir = settings.webhook_cert_dir
    files: dict[str, Any]
    if cert_dir is not None and (cert_dir / "tls.crt").is_file():
        ca = cert_dir / "ca.crt" if (cert_dir / "ca.crt").is_file() else cert_dir / "tls.crt"
        files = {"certfile": cert_dir / "tls.crt", "pkeyfile": cert_dir / "tls.key", "cafile": ca}
    else:
        pair = _certificate(settings, api)
        key_dir = Path(tempfile.mkdtemp(prefix="accel-webhook-"))
        cert_file, key_file = _write_pair(pair, key_dir)
        files = {"certfile": cert_file, "pkeyfile": key_file, "cadata": pair.bundle, "key_dir": key_dir}
    if host:
        return UrlWebhookServer(addr=settings.webhook_address, host=host, port=settings.webhook_port, **files)
    return ServiceWebhookServer(
        addr=settings.webhook_address,
        port=settings.webhook_port,
        service=settings.webhook_service,
        namespace=settings.webhook_namespace,
        service_port=settings.webhook_service_port,
        **files,
    )


def register(reg: kopf.OperatorRegistry, settings: OperatorSettings, api: Callable[[], Any] | None = None) -> None:
    """Declare the webhooks and their server into ``reg``; the indexes they read come from
    ``handlers.policies.register``; ``api`` makes the API client for the shared certificate."""

    ours = settings
    logging.getLogger("kopf.objects").addFilter(REFUSALS)  # once: the same filter is not added twice

    @kopf.on.startup(registry=reg)
    def serve(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = webhook_server(ours, api)
        settings.admission.managed = WEBHOOK_CONFIGURATION

    @kopf.on.mutate(
        v.GROUP,
        v.VERSION,
        registry.JOB.plural,
        id="team",
        operations=["CREATE"],
        ignore_failures=not settings.webhook_fail_closed,
        side_effects=False,
        persistent=True,
        registry=reg,
    )
    def default_job_team(body: kopf.Body, namespace: str | None, patch: kopf.Patch, **kwargs: Any) -> None:
        teams: kopf.Index[str, str | None] = kwargs["namespace_teams"]
        team = default_team(body, next(iter(teams.get(namespace or "", ())), None))
        if team is not None:
            patch.setdefault("spec", {})["team"] = team

    @kopf.on.validate(
        v.GROUP,
        v.VERSION,
        registry.JOB.plural,
        id="policy",
        operations=["CREATE", "UPDATE"],
        ignore_failures=not settings.webhook_fail_closed,
        side_effects=False,
        persistent=True,
        registry=reg,
    )
    def validate_job(body: kopf.Body, namespace: str | None, **kwargs: Any) -> None:
        teams: kopf.Index[str, str | None] = kwargs["namespace_teams"]
        found: kopf.Index[str, AcceleratorPolicy | policy.BrokenPolicy] = kwargs["policies"]
        team = next(iter(teams.get(namespace or "", ())), None)
        objects, broken = policy_inputs.split(found)
        bound = {t for values in teams.values() for t in values if t is not None}
        problems = review(body, team, objects, broken=broken, bound_teams=bound)
        if problems:
            raise kopf.AdmissionError("\n".join(problems), code=422)
