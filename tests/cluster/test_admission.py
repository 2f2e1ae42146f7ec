"""The admission webhook against the real API server: kopf serves it over TLS and registers it
(with its CA bundle); a job that breaks a policy, or names another team than its namespace's,
is refused with the violations' lines; an obeying job is created."""

import asyncio
import copy
import socket
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import kubeapi
from accel_operator.handlers import admission
from tests.support.cluster import wait_for
from tests.support.hostile import EXAMPLES


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def webhook(api: client.ApiClient, crds: list[str]) -> Iterator[None]:
    reg = kopf.OperatorRegistry()
    admission.register(reg, None, port=_free_port())

    @kopf.on.login(registry=reg)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)

    stop, ready = threading.Event(), threading.Event()

    def target() -> None:
        asyncio.run(kopf.operator(registry=reg, clusterwide=True, stop_flag=stop, ready_flag=ready))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert ready.wait(60)
    adm = client.AdmissionregistrationV1Api(api)
    wait_for(
        lambda: adm.read_validating_webhook_configuration(admission.WEBHOOK_CONFIGURATION).webhooks,
        timeout=30,
        what="the webhook configuration",
    )
    try:
        yield
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive(), "the webhook's operator did not stop"
        # kopf may have removed its managed configuration already; no later test may meet it.
        with kubeapi.ignoring(404):
            adm.delete_validating_webhook_configuration(admission.WEBHOOK_CONFIGURATION)

        def gone() -> bool:
            try:
                adm.read_validating_webhook_configuration(admission.WEBHOOK_CONFIGURATION)
            except ApiException as exc:
                return bool(exc.status == 404)
            return False

        wait_for(gone, timeout=30, what="the webhook configuration removed")


def test_webhook_refuses_policy_violations(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, webhook: None
) -> None:
    core.patch_namespace(namespace, {"metadata": {"labels": {v.LABEL_NAMESPACE_TEAM: "research"}}})
    custom = client.CustomObjectsApi(api)
    pol = yaml.safe_load(EXAMPLES["20-policy.yaml"])
    pol["metadata"]["name"] = f"pol-{namespace}"
    custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, pol)
    job = next(d for d in yaml.safe_load_all(EXAMPLES["02-multinode-spot-training.yaml"]) if d)
    job["metadata"] = {"name": "ok", "namespace": namespace}
    bad = copy.deepcopy(job)
    bad["metadata"]["name"] = "bad"
    bad["spec"].update(team="serving", maxCost=None)
    bad["spec"].pop("checkpoint")
    bad["spec"]["spot"] = {"policy": "prefer"}
    try:

        def refused() -> str | None:
            try:
                custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, bad)
            except client.ApiException as exc:
                return str(exc.body) if exc.status == 422 else None
            custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, "bad")
            return None  # the indexes were not filled yet: try again

        body = wait_for(refused, timeout=30, what="a refusal")
        assert "spec.team: must be 'research', the team of its namespace" in body
        assert f"spec.checkpoint: required for spot jobs by policy 'pol-{namespace}'" in body
        custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, job)
    finally:
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, pol["metadata"]["name"])
