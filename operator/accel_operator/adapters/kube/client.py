"""The operator's one Kubernetes client loader and its error vocabulary."""

import os

from kubernetes import client, config

from accel_operator.adapters.errors import Unavailable


class ClusterUnavailable(Unavailable):
    """The API server could not answer now (network, 5xx, throttling): worth retrying soon."""


def api_client(
    connections: int | None = None, *, kubeconfig: str | None = None, context: str | None = None
) -> client.ApiClient:
    """A client with in-cluster credentials when running in a pod, else the KUBECONFIG's;
    ``connections``: the size of its connection pool (the library's default is 5 per CPU).
    ``kubeconfig``/``context`` (the CLI's ``--kubeconfig``/``--context``) name a kubeconfig file
    and one of its contexts, and then win over in-cluster credentials, as with kubectl."""
    cfg = client.Configuration()
    named = kubeconfig is not None or context is not None
    try:
        if named:
            raise config.ConfigException("a kubeconfig or context was named")  # noqa: TRY301 - one fallback path
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        # Read KUBECONFIG now: the client library reads it once, at import time.
        config.load_kube_config(
            config_file=kubeconfig or os.environ.get("KUBECONFIG"), context=context, client_configuration=cfg
        )
    if connections is not None:
        cfg.connection_pool_maxsize = max(connections, cfg.connection_pool_maxsize)
    return client.ApiClient(configuration=cfg)


def in_cluster_server() -> str | None:
    """The API server a pod is told to use (``KUBERNETES_SERVICE_HOST``/``_PORT``, as client-go
    reads them), or None outside a pod. kopf's own service-account login always names
    ``kubernetes.default.svc``, which a pod on the host's network (or without cluster DNS) cannot
    resolve."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
