"""The operator's one Kubernetes client loader and its error vocabulary."""

import os

from kubernetes import client, config


class ClusterUnavailable(RuntimeError):
    """The API server could not answer now (network, 5xx, throttling): worth retrying soon."""


def api_client() -> client.ApiClient:
    """A client with in-cluster credentials when running in a pod, else the KUBECONFIG's."""
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        # Read KUBECONFIG now: the client library reads it once, at import time.
        return config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
