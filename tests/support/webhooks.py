"""Helpers for cluster tests that run the admission webhooks: the configurations as the manifests
install them, whether they are registered, and their removal (a webhook left registered would
judge the next tests' jobs)."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_localcluster import kubeapi
from accel_operator.handlers import admission
from tests.support.cluster import ROOT, wait_for

MANIFEST = ROOT / "manifests" / "operator" / "webhooks.yaml"


def install(api: client.ApiClient, port: int) -> list[dict[str, Any]]:
    """manifests/operator/webhooks.yaml as shipped, each webhook called at https://127.0.0.1:PORT
    on its path instead of through the Service (the local control plane runs the operator as a
    process beside it); no caBundle: the operator writes it."""
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for doc in docs:
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://{admission.DEFAULT_HOST}:{port}{path}"}
        kubeapi.apply(api, doc)
    return docs


def configured(api: client.ApiClient) -> bool:
    """Whether the ValidatingWebhookConfiguration holds webhooks with a CA bundle."""
    adm = client.AdmissionregistrationV1Api(api)
    try:
        hooks = adm.read_validating_webhook_configuration(admission.WEBHOOK_CONFIGURATION).webhooks or []
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return bool(hooks) and all(h.client_config.ca_bundle for h in hooks)


def remove(api: client.ApiClient) -> None:
    """Delete both managed configurations and wait until they are gone."""
    adm = client.AdmissionregistrationV1Api(api)
    with kubeapi.ignoring(404):
        adm.delete_validating_webhook_configuration(admission.WEBHOOK_CONFIGURATION)
    with kubeapi.ignoring(404):
        adm.delete_mutating_webhook_configuration(admission.WEBHOOK_CONFIGURATION)

    def gone() -> bool:
        for read in (adm.read_validating_webhook_configuration, adm.read_mutating_webhook_configuration):
            try:
                read(admission.WEBHOOK_CONFIGURATION)
                return False
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return True

    wait_for(gone, timeout=30, what="the webhook configurations removed")
