"""The Kubernetes pool source: an unreachable API server is a retryable error, not a crash."""

import pytest
from kubernetes import client

from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.pools import KubePoolSource


def test_unreachable_api_server_is_cluster_unavailable() -> None:
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:9"  # discard port: nothing listens, the connection is refused
    cfg.retries = 0
    with pytest.raises(ClusterUnavailable, match="listing AcceleratorPools failed"):
        KubePoolSource(client.ApiClient(cfg)).inventory()
