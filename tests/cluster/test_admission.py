"""The admission webhook against the real API server: kopf serves it over TLS and registers it
(with its CA bundle); a job that breaks a policy, or names another team than its namespace's,
is refused with the violations' lines; an obeying job is created."""

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from tests.support import webhooks
from tests.support.cluster import ROOT, free_port, wait_for
from tests.support.hostile import EXAMPLES


@pytest.fixture
def webhook(api: client.ApiClient, crds: list[str], tmp_path: Path) -> Iterator[None]:
    """The webhook in a process of its own, killed after the test, its configurations removed:
    a webhook left serving would refuse the next tests' jobs."""
    log = (tmp_path / "webhook.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.webhook_main", str(free_port())],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: webhooks.configured(api), timeout=60, what="the webhook configuration")
        yield
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()
        webhooks.remove(api)


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
