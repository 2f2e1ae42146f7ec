"""The webhook configurations installed with the operator (the chart's, the manifests'): the
operator serving them with its own self-signed certificate writes only their ``caBundle``.

Installed configurations are objects a GitOps tool sees and an uninstall removes; the operator
needs no right to create any (RBAC ``create`` cannot be limited by name), only ``get`` and
``patch`` on the one name. With a certificate from cert-manager the chart's configurations carry
``cert-manager.io/inject-ca-from`` and the operator writes nothing.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_operator.adapters.kube.client import ClusterUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Patched:
    """How many webhooks' caBundle were written, and the kinds not found."""

    webhooks: int
    missing: tuple[str, ...]


def patch_ca_bundle(api: client.ApiClient, name: str, bundle: bytes) -> Patched:
    """Set ``bundle`` (PEM) as the caBundle of every webhook of the Validating and Mutating
    WebhookConfigurations ``name`` whose bundle differs (a strategic merge keyed by the webhook's
    name: nothing else of the objects changes, and replicas writing the same bundle agree)."""
    adm = client.AdmissionregistrationV1Api(api)
    wanted = base64.b64encode(bundle).decode()
    kinds = (
        (
            "ValidatingWebhookConfiguration",
            adm.read_validating_webhook_configuration,
            adm.patch_validating_webhook_configuration,
        ),
        (
            "MutatingWebhookConfiguration",
            adm.read_mutating_webhook_configuration,
            adm.patch_mutating_webhook_configuration,
        ),
    )
    written, missing = 0, []
    for kind, read, patch in kinds:
        try:
            obj = read(name)
            stale = [w.name for w in obj.webhooks or [] if (w.client_config.ca_bundle or "") != wanted]
            if stale:
                patch(name, {"webhooks": [{"name": w, "clientConfig": {"caBundle": wanted}} for w in stale]})
                written += len(stale)
        except ApiException as exc:
            if exc.status == 404:
                missing.append(kind)
                continue
            if exc.status is not None and exc.status < 500 and exc.status != 429:
                raise
            raise ClusterUnavailable(f"{kind} {name}: {exc.status} {exc.reason}") from exc
    return Patched(written, tuple(missing))


def install_bundle(api: client.ApiClient, name: str, bundle: bytes, attempts: int = 5) -> None:
    """Write ``bundle`` into the installed webhook configurations ``name`` (retried while the API
    server is unavailable; a configuration that is missing is a warning: the chart installs it)."""
    for attempt in range(attempts):
        try:
            done = patch_ca_bundle(api, name, bundle)
        except ClusterUnavailable as exc:
            if attempt == attempts - 1:
                raise
            log.warning("webhook configurations %s: caBundle not written yet (%s); retrying", name, exc)
            time.sleep(2.0 * (attempt + 1))
            continue
        for kind in done.missing:
            log.warning("%s %s not found: install it with the operator (the chart or manifests/operator)", kind, name)
        log.info("webhook configurations %s: the caBundle of %d webhook(s) written", name, done.webhooks)
        return
