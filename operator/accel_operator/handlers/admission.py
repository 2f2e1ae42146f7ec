"""The admission webhooks for AcceleratorJobs (validating and mutating), served by kopf.

The decisions (the review of a job into refusal lines, the team default, the certificate) are
``engine.admission``'s; this module serves them with kopf.

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
certificate from ``webhook_cert_dir`` (a Secret every replica mounts, e.g. cert-manager's) or
the one ``engine.admission.certificate`` gives. With ``webhook_configuration`` set, the Validating
and MutatingWebhookConfigurations of that name were installed with the operator (the manifests,
the chart) and the operator writes only their ``caBundle`` (and only for its self-signed
certificate); without, kopf manages them as ``accel.dev`` with that ``caBundle``. With ``webhook_host`` (the
local control plane: ``127.0.0.1``) the API server calls ``https://HOST:PORT``; without, the
configuration names the Service (``webhook_service`` in ``webhook_namespace``, port
``webhook_service_port``).

The webhooks are ``persistent``: a stopping replica leaves them registered (kopf would otherwise
empty the configuration on exit, switching the webhook off under the replica that keeps running);
with failurePolicy Ignore an endpoint that is gone costs nothing but the check.

A mutating webhook (CREATE only) defaults a missing ``spec.team`` to the namespace's team label;
with the operator down, such a job is refused by the CRD schema (``spec.team`` is required).

Indexes (``handlers.policies``): ``policies`` and ``namespace_teams``; the operator's RBAC needs
list/watch on namespaces and acceleratorpolicies, and get/patch on the installed validating- and
mutatingwebhookconfigurations (create too where kopf manages them).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kopf

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.policy import AcceleratorPolicy
from accel_operator.adapters.kube import tls, webhook_configs
from accel_operator.engine import admission as engine_admission
from accel_operator.planning import policy
from accel_operator.reconcile.common import policy_inputs
from accel_operator.settings import OperatorSettings

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
        pair = engine_admission.certificate(settings, api)
        key_dir = Path(tempfile.mkdtemp(prefix="accel-webhook-"))
        cert_file, key_file = tls.write_pair(pair, key_dir)
        files = {"certfile": cert_file, "pkeyfile": key_file, "cadata": pair.bundle, "key_dir": key_dir}
    listen = {"addr": settings.webhook_address, "port": settings.webhook_port, **files}
    if host:
        return UrlWebhookServer(host=host, **listen)
    service = settings.webhook_service
    return ServiceWebhookServer(
        service=service, namespace=settings.webhook_namespace, service_port=settings.webhook_service_port, **listen
    )


def register(reg: kopf.OperatorRegistry, settings: OperatorSettings, api: Callable[[], Any] | None = None) -> None:
    """Declare the webhooks and their server into ``reg``; the indexes they read come from
    ``handlers.policies.register``; ``api`` makes the API client for the shared certificate."""

    ours = settings
    logging.getLogger("kopf.objects").addFilter(REFUSALS)  # once: the same filter is not added twice

    @kopf.on.startup(registry=reg)
    def serve(settings: kopf.OperatorSettings, **_: Any) -> None:
        server = webhook_server(ours, api)
        settings.admission.server = server
        if not ours.webhook_configuration:
            settings.admission.managed = WEBHOOK_CONFIGURATION
        elif server.key_dir is not None and server.cadata is not None and api is not None:
            # Installed configurations and a self-signed certificate: their caBundle is ours to write.
            webhook_configs.install_bundle(api(), ours.webhook_configuration, server.cadata)

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
        team = engine_admission.default_team(body, next(iter(teams.get(namespace or "", ())), None))
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
        problems = engine_admission.review(body, team, objects, broken=broken, bound_teams=bound)
        if problems:
            raise kopf.AdmissionError("\n".join(problems), code=422)
