"""The chart's objects as the real API server takes them: ``helm template`` (defaults, and every
optional part that needs no other operator's CRDs) applied with ``kubectl apply --dry-run=server``,
so the schema, the admission policies' CEL and the webhook configurations are validated by the
server itself, not only by helm."""

from __future__ import annotations

import os
import subprocess

import pytest
from kubernetes import client

from accel_localcluster import Cluster, kubeapi
from tests.unit.test_chart import CHART, HELM, KUBECTL, NAMESPACE


@pytest.mark.parametrize(
    "values",
    [
        (),
        (
            "networkPolicy.enabled=true",
            "agent.runAsRoot=true",
            "agent.podList=true",
            "operator.settings.aws_region=us-east-1",
        ),
    ],
    ids=["defaults", "options"],
)
def test_the_rendered_chart_is_accepted_by_the_api_server(
    cluster: Cluster, api: client.ApiClient, crds: list[str], values: tuple[str, ...]
) -> None:
    kubeapi.ensure_namespace(api, NAMESPACE)
    sets = [a for v in values for a in ("--set", v)]
    helm = [str(HELM), "template", "accel-operator", str(CHART), "-n", NAMESPACE, "--include-crds"]
    rendered = subprocess.run(
        [*helm, "--kube-version", "1.36.0", *sets],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    applied = subprocess.run(
        [str(KUBECTL), "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-"],
        input=rendered,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        check=False,
    )
    assert applied.returncode == 0, applied.stderr[-3000:]
    lines = [line for line in applied.stdout.splitlines() if line.strip()]
    assert len(lines) == rendered.count("\nkind: ") + rendered.startswith("kind: "), applied.stdout
    assert all("(server dry run)" in line for line in lines), applied.stdout
