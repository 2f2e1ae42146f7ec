"""The API server an operator pod logs in to: the one its environment names (as client-go reads
``KUBERNETES_SERVICE_HOST``/``_PORT``), not kopf's fixed ``kubernetes.default.svc``, which a pod on
the host's network cannot resolve (found running the chart on the local real node)."""

from __future__ import annotations

import pytest

from accel_operator.adapters.kube.client import in_cluster_server


@pytest.mark.parametrize(
    ("host", "port", "server"),
    [
        ("10.96.0.1", "443", "https://10.96.0.1:443"),
        ("127.0.0.1", "26443", "https://127.0.0.1:26443"),
        ("fd00::1", "443", "https://[fd00::1]:443"),
        ("", "443", None),
        (None, None, None),
    ],
)
def test_the_server_comes_from_the_pods_environment(
    monkeypatch: pytest.MonkeyPatch, host: str | None, port: str | None, server: str | None
) -> None:
    for name, value in (("KUBERNETES_SERVICE_HOST", host), ("KUBERNETES_SERVICE_PORT", port)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert in_cluster_server() == server
