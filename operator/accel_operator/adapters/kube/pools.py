"""Reads the cluster's accelerator inventory for the planner.

``PoolSource`` is the port; ``KubePoolSource`` reads AcceleratorPool objects through the
Kubernetes API; ``FakePoolSource`` is the in-memory fake for unit tests. Invalid pool objects
are reported, not raised, so one bad pool never stops every job from being planned.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import InvalidResource, registry
from accel_api import vocabulary as v
from accel_api.loader import parse_as
from accel_api.pool import AcceleratorPool
from accel_operator.adapters.kube.client import ClusterUnavailable, api_client
from accel_operator.planning.candidates import PoolOffer


@dataclass(frozen=True)
class Inventory:
    pools: tuple[AcceleratorPool, ...]
    invalid: tuple[str, ...] = ()  # "pool-name: problem" for pools that failed validation

    def offers(self) -> list[PoolOffer]:
        """The pools as the planner sees them, with what the operator observed of each."""
        out = []
        for pool in self.pools:
            st = pool.status
            out.append(
                PoolOffer(
                    name=pool.metadata.name or "?",
                    spec=pool.spec,
                    observed_preemption_rate_per_hour=st.observed_preemption_rate_per_hour if st else None,
                )
            )
        return out


class PoolSource(Protocol):
    def inventory(self) -> Inventory: ...


def parse_pools(items: Sequence[dict[str, Any]]) -> Inventory:
    pools: list[AcceleratorPool] = []
    invalid: list[str] = []
    for item in items:
        name = item.get("metadata", {}).get("name", "?")
        try:
            pools.append(parse_as(AcceleratorPool, item))
        except InvalidResource as exc:
            invalid.extend(f"{name}: {p}" for p in exc.problems)
    return Inventory(tuple(pools), tuple(invalid))


class KubePoolSource:
    def __init__(self, api: client.ApiClient | None = None) -> None:
        self._custom = client.CustomObjectsApi(api or api_client())

    def inventory(self) -> Inventory:
        try:
            listing = self._custom.list_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural)
        except ApiException as exc:
            raise ClusterUnavailable(f"listing AcceleratorPools failed: {exc.status} {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"listing AcceleratorPools failed: {exc}") from exc
        return parse_pools(listing.get("items", []))


@dataclass
class FakePoolSource:
    items: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0

    def inventory(self) -> Inventory:
        self.calls += 1
        return parse_pools(self.items)
