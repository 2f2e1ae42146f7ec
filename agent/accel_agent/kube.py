"""What the agent reads from Kubernetes: its Node and the pods bound to it. Reads only.

:class:`ClusterView` is the port; :class:`KubeClusterView` implements it with the official
``kubernetes`` client (a dependency of the agent's distribution) and
:class:`StaticClusterView` is the in-memory one the tests and the simulated demo use. Objects are
plain wire dicts (camelCase, as ``kubectl get -o json`` shows them) so nothing downstream depends
on the client's model classes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class KubeError(Exception):
    """A read from the API server failed; the caller reports it rather than crashing."""


class ClusterView(Protocol):
    def node(self, name: str) -> dict[str, Any] | None: ...

    def pods_on_node(self, node_name: str) -> list[dict[str, Any]]: ...


def load_api_client(kubeconfig: Path | None = None) -> Any:
    """An ``ApiClient``: in-cluster config inside a pod, else the kubeconfig (explicit or default)."""
    if kubeconfig is None:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise KubeError(f"no in-cluster config and no usable kubeconfig: {exc}") from exc
    return client.ApiClient(configuration)


class KubeClusterView:
    def __init__(self, api_client: Any, *, timeout_seconds: float = 10.0) -> None:
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._timeout = timeout_seconds

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (ApiException, urllib3.exceptions.HTTPError, OSError)

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            obj = self._core.read_node(name, _request_timeout=self._timeout)
        except self._errors() as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise KubeError(f"reading node {name}: {exc}") from exc
        wire: dict[str, Any] = self._api_client.sanitize_for_serialization(obj)
        return wire

    def pods_on_node(self, node_name: str) -> list[dict[str, Any]]:
        try:
            pods = self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node_name}", _request_timeout=self._timeout
            )
        except self._errors() as exc:
            raise KubeError(f"listing pods on {node_name}: {exc}") from exc
        wire: dict[str, Any] = self._api_client.sanitize_for_serialization(pods)
        return list(wire.get("items") or [])


@dataclass
class StaticClusterView:
    """Nodes and pods held in memory (tests, demos). ``calls`` counts reads, as the fakes do."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    fail_next: KubeError | None = None

    def _enter(self, what: str) -> None:
        self.calls.append(what)
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error

    def node(self, name: str) -> dict[str, Any] | None:
        self._enter(f"node/{name}")
        return self.nodes.get(name)

    def pods_on_node(self, node_name: str) -> list[dict[str, Any]]:
        self._enter(f"pods/{node_name}")
        return [p for p in self.pods if (p.get("spec") or {}).get("nodeName") == node_name]


# --- small readers over wire dicts --------------------------------------------------------------
def quantity(value: Any) -> int:
    """An integer resource quantity (device counts are plain integers)."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def _first_quantity(lists: dict[str, Any], keys: tuple[str, str], resource: str) -> int:
    """``resource``'s quantity in the first of the ``keys`` lists of ``lists`` that names it (0: none)."""
    for key in keys:
        amount = (lists.get(key) or {}).get(resource)
        if amount is not None:
            return quantity(amount)
    return 0


def allocatable(node: dict[str, Any], resource: str) -> int:
    return _first_quantity(node.get("status") or {}, ("allocatable", "capacity"), resource)


def container_request(container: dict[str, Any], resource: str) -> int:
    # Extended resources must have limits == requests; either may be written.
    return _first_quantity(container.get("resources") or {}, ("limits", "requests"), resource)


def active(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods that hold their devices: bound, not finished, not being torn down past their grace."""
    return [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]


@dataclass(frozen=True)
class Holder:
    """A container that holds a device, with the pod it belongs to."""

    namespace: str
    pod: str
    container: str
    uid: str
    pod_object: dict[str, Any]


def assign_devices(pods: Iterable[dict[str, Any]], resource: str, count: int) -> list[list[Holder]]:
    """Which container holds which of ``count`` devices, in a stable order (oldest pod first).

    The kubelet's real choice of device is not visible through the API; for the simulation and for
    TPU chips only *how many* are held matters, so devices are handed out in order.
    """
    slots: list[list[Holder]] = [[] for _ in range(count)]
    ordered = sorted(
        active(pods),
        key=lambda p: (
            str((p.get("metadata") or {}).get("creationTimestamp") or ""),
            str((p.get("metadata") or {}).get("namespace") or ""),
            str((p.get("metadata") or {}).get("name") or ""),
        ),
    )
    next_free = 0
    for pod in ordered:
        meta = pod.get("metadata") or {}
        for c in (pod.get("spec") or {}).get("containers") or []:
            for _ in range(container_request(c, resource)):
                if next_free >= count:  # over-committed: the scheduler would not allow it
                    return slots
                slots[next_free].append(
                    Holder(
                        namespace=str(meta.get("namespace") or "default"),
                        pod=str(meta.get("name") or ""),
                        container=str(c.get("name") or ""),
                        uid=str(meta.get("uid") or ""),
                        pod_object=pod,
                    )
                )
                next_free += 1
    return slots
