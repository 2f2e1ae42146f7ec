"""Writing what the cost ledger sums up: an AcceleratorPolicy's ``status.spend`` (its teams'
spending in the current budget period) and an AcceleratorPool's price condition.

``CostWriter`` is the port; ``KubeCostWriter`` writes the status subresources (merge patch of
only the keys the ledger owns), ``FakeCostWriter`` records calls and can be told to fail next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube.client import ClusterUnavailable


class CostWriter(Protocol):
    def patch_policy_status(self, name: str, status: dict[str, Any]) -> None: ...

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None: ...


class KubeCostWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)

    def _patch(self, plural: str, name: str, status: dict[str, Any]) -> None:
        try:
            self._custom.patch_cluster_custom_object_status(v.GROUP, v.VERSION, plural, name, {"status": status})
        except ApiException as exc:
            if exc.status == 404:
                return  # deleted meanwhile: nothing to write
            raise ClusterUnavailable(f"status of {plural}/{name}: {exc.status} {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"status of {plural}/{name}: {exc}") from exc

    def patch_policy_status(self, name: str, status: dict[str, Any]) -> None:
        self._patch(registry.POLICY.plural, name, status)

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        self._patch(registry.POOL.plural, name, status)


@dataclass
class FakeCostWriter:
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail_next: Exception | None = None

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def patch_policy_status(self, name: str, status: dict[str, Any]) -> None:
        self.calls.append(("policy", name))
        self._maybe_fail()
        self.policies.setdefault(name, {}).update(status)

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        self.calls.append(("pool", name))
        self._maybe_fail()
        self.pools.setdefault(name, {}).update(status)


_: CostWriter = FakeCostWriter()


# --- reading what the ledger wrote (accelctl cost report) -----------------------------------------

PAGE = 500  # objects per LIST page


def _list(fetch: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        try:
            page = fetch(limit=PAGE, _continue=token) if token else fetch(limit=PAGE)
        except ApiException as exc:
            raise ClusterUnavailable(f"{exc.status} {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(str(exc)) from exc
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def list_jobs(api: client.ApiClient, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every AcceleratorJob (in ``namespace``, else in all), paged."""
    custom = client.CustomObjectsApi(api)
    plural = registry.JOB.plural
    if namespace:
        return _list(lambda **kw: custom.list_namespaced_custom_object(v.GROUP, v.VERSION, namespace, plural, **kw))
    return _list(lambda **kw: custom.list_cluster_custom_object(v.GROUP, v.VERSION, plural, **kw))


def list_policies(api: client.ApiClient) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(api)
    return _list(lambda **kw: custom.list_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, **kw))
