"""What the CLI reads and writes of AcceleratorJobs (``kubectl accel why|plan|resume|stop|top``): one
job, its pool and nodes, and for ``top`` the jobs of a namespace, their pods and the node reports; with
the client's errors mapped to a small vocabulary: :class:`NotFound`, :class:`Forbidden`,
:class:`BadKubeconfig` and :class:`ClusterUnavailable` (the API server did not answer), so the CLI
never imports the Kubernetes client itself."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube.client import ClusterUnavailable, api_client

T = TypeVar("T")


class NotFound(Exception):
    """The object does not exist."""


class Forbidden(Exception):
    """The credentials may not do this (401/403)."""


class BadKubeconfig(Exception):
    """No usable kubeconfig, or no such context in it."""


def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    try:
        return api_client(kubeconfig=kubeconfig, context=context)
    except config.ConfigException as exc:
        raise BadKubeconfig(" ".join(str(exc).split())[:300]) from None
    except (OSError, ValueError) as exc:
        raise BadKubeconfig(" ".join(str(exc).split())[:300]) from None


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace the kubeconfig's ``context`` (else its current one) names; None if none, or
    no kubeconfig. BadKubeconfig when ``context`` is not in it."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
    except (config.ConfigException, OSError, ValueError):
        if context is not None:
            raise BadKubeconfig(f"no kubeconfig holding the context {context[:253]}") from None
        return None
    chosen: dict[str, Any] | None = current
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            raise BadKubeconfig(f"no context {context[:253]} in the kubeconfig")
    ns = ((chosen or {}).get("context") or {}).get("namespace")
    return str(ns) if ns else None


def _call(call: Callable[[], T]) -> T:
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            raise NotFound(str(exc.reason)[:80]) from None
        if exc.status in (401, 403):
            raise Forbidden(f"{exc.status} {str(exc.reason)[:80]}") from None
        raise ClusterUnavailable(f"the API server answered {exc.status} {str(exc.reason)[:80]}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ClusterUnavailable(" ".join(str(exc).split())[:300]) from None


def get_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    got = _call(lambda: custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name))
    return dict(got)


def get_pool(api: client.ApiClient, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    return dict(_call(lambda: custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)))


def job_nodes(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    """The nodes the job's pods are bound to (by the operator's job label)."""
    from accel_operator.adapters.kube.workloads import label_value

    core = client.CoreV1Api(api)
    pods = _call(lambda: core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}={label_value(name)}"))
    return sorted({p.spec.node_name for p in pods.items if p.spec and p.spec.node_name})


def _items(got: Any) -> list[dict[str, Any]]:
    items = got.get("items") if isinstance(got, dict) else None
    return [dict(i) for i in items or [] if isinstance(i, dict)]


def list_jobs(api: client.ApiClient, namespace: str | None) -> list[dict[str, Any]]:
    """The AcceleratorJobs of ``namespace`` (every namespace when None)."""
    custom = client.CustomObjectsApi(api)
    plural = registry.JOB.plural
    if namespace:
        return _items(_call(lambda: custom.list_namespaced_custom_object(v.GROUP, v.VERSION, namespace, plural)))
    return _items(_call(lambda: custom.list_cluster_custom_object(v.GROUP, v.VERSION, plural)))


def list_job_pods(api: client.ApiClient, namespace: str | None) -> list[dict[str, Any]]:
    """The pods the operator made for jobs (those with its job label), as wire dicts."""
    core = client.CoreV1Api(api)
    selector = v.LABEL_JOB
    if namespace:
        got = _call(lambda: core.list_namespaced_pod(namespace, label_selector=selector))
    else:
        got = _call(lambda: core.list_pod_for_all_namespaces(label_selector=selector))
    return [api.sanitize_for_serialization(p) for p in got.items]


def list_node_reports(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every AcceleratorNodeReport (cluster-scoped)."""
    custom = client.CustomObjectsApi(api)
    return _items(_call(lambda: custom.list_cluster_custom_object(v.GROUP, v.VERSION, registry.NODE_REPORT.plural)))


def annotate_job(api: client.ApiClient, namespace: str, name: str, annotations: dict[str, str]) -> None:
    """Set ``annotations`` on the job (a merge patch of only those keys)."""
    custom = client.CustomObjectsApi(api)
    body = {"metadata": {"annotations": annotations}}
    _call(lambda: custom.patch_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name, body))
