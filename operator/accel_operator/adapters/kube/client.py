"""The operator's one Kubernetes client loader and its error vocabulary."""

import os

from kubernetes import client, config

from accel_operator.adapters.errors import Unavailable


class ClusterUnavailable(Unavailable):
    """The API server could not answer now (network, 5xx, throttling): worth retrying soon."""


def api_client(connections: int | None = None) -> client.ApiClient:
    """A client with in-cluster credentials when running in a pod, else the KUBECONFIG's;
    ``connections``: the size of its connection pool (the library's default is 5 per CPU)."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        # Read KUBECONFIG now: the client library reads it once, at import time.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg)
    if connections is not None:
        cfg.connection_pool_maxsize = max(connections, cfg.connection_pool_maxsize)
    return client.ApiClient(configuration=cfg)
