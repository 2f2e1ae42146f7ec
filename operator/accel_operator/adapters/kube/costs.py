"""Writing what the cost ledger sums up: an AcceleratorPolicy's ``status.spend`` (its teams'
spending in the current budget period), an AcceleratorPool's price condition, and the durable
cost rollup (a ConfigMap the operator owns: ``accel_api.costrollup``).

``CostWriter`` is the port; ``KubeCostWriter`` writes the status subresources (merge patch of
only the keys the ledger owns) and the rollup (replaced at the resourceVersion it was read at, so
a second writer's copy is never overwritten blindly), ``FakeCostWriter`` records calls and can be
told to fail next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.costrollup import CostRollup, OpenShard, stored_json
from accel_operator.adapters.kube.client import ClusterUnavailable

ROLLUP_KEY = "rollup.json"
OPEN_KEY = "open.json"


def open_shard_name(rollup: str, i: int) -> str:
    """The ConfigMap of the open attempts' shard ``i`` beside rollup ``rollup``."""
    return f"{rollup}-open-{i}"


class RollupConflict(ClusterUnavailable):
    """The rollup changed since it was read (another writer): read it again before folding."""


class RollupUnreadable(ClusterUnavailable):
    """The rollup's ConfigMap holds something that is not a rollup: it is left as it is."""


_M = TypeVar("_M", CostRollup, OpenShard)


def _parse(model: type[_M], key: str, what: str, data: dict[str, str] | None) -> _M:
    """The ``model`` stored under ``key`` of a ConfigMap's ``data`` (empty when there is none);
    RollupUnreadable when it holds something else (``what`` says what it should be)."""
    text = (data or {}).get(key)
    if text is None:
        return model()
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise RollupUnreadable(f"{key} is not {what}: {str(exc)[:300]}") from exc


def rollup_json(rollup: CostRollup) -> str:
    return stored_json(rollup)


def parse_rollup(data: dict[str, str] | None) -> CostRollup:
    return _parse(CostRollup, ROLLUP_KEY, "a cost rollup", data)


def open_json(shard: OpenShard) -> str:
    return stored_json(shard)


def parse_open(data: dict[str, str] | None) -> OpenShard:
    return _parse(OpenShard, OPEN_KEY, "a shard of open attempts", data)


class CostWriter(Protocol):
    def patch_policy_status(self, name: str, status: dict[str, Any]) -> None: ...

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None: ...

    def read_rollup(self, namespace: str, name: str) -> tuple[CostRollup, str | None]:
        """The rollup and the resourceVersion it was read at (None: no ConfigMap yet)."""
        ...

    def write_rollup(self, namespace: str, name: str, rollup: CostRollup, version: str | None) -> str | None:
        """Store ``rollup`` if the ConfigMap is still at ``version`` (None: create it); the new version."""
        ...

    def read_open(self, namespace: str, name: str) -> tuple[OpenShard, str | None]:
        """A shard of the open attempts and its resourceVersion (None: no ConfigMap yet)."""
        ...

    def write_open(self, namespace: str, name: str, shard: OpenShard, version: str | None) -> str | None:
        """Store ``shard`` if its ConfigMap is still at ``version`` (None: create it); the new version."""
        ...


class _RollupConfigMaps:
    """The rollup and the open attempts' shards over a store of ConfigMaps (``_read``: its data and
    resourceVersion; ``_write``: replace it at a version, or create it), real or fake alike."""

    def _read(self, namespace: str, name: str, what: str) -> tuple[dict[str, str] | None, str | None]:
        raise NotImplementedError

    def _write(self, namespace: str, name: str, what: str, data: dict[str, str], version: str | None) -> str:
        raise NotImplementedError

    def read_rollup(self, namespace: str, name: str) -> tuple[CostRollup, str | None]:
        data, version = self._read(namespace, name, "rollup")
        return parse_rollup(data), version

    def write_rollup(self, namespace: str, name: str, rollup: CostRollup, version: str | None) -> str | None:
        return self._write(namespace, name, "rollup", {ROLLUP_KEY: rollup_json(rollup)}, version)

    def read_open(self, namespace: str, name: str) -> tuple[OpenShard, str | None]:
        data, version = self._read(namespace, name, "open")
        return parse_open(data), version

    def write_open(self, namespace: str, name: str, shard: OpenShard, version: str | None) -> str | None:
        return self._write(namespace, name, "open", {OPEN_KEY: open_json(shard)}, version)


# The ConfigMaps' app.kubernetes.io/component label, per what they hold.
_COMPONENT = {"rollup": "cost-rollup", "open": "cost-open-attempts"}


class KubeCostWriter(_RollupConfigMaps):
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    def _read(self, namespace: str, name: str, what: str) -> tuple[dict[str, str] | None, str | None]:
        try:
            cm = self._core.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            raise ClusterUnavailable(f"configmap {namespace}/{name}: {exc.status} {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"configmap {namespace}/{name}: {exc}") from exc
        return cm.data, cm.metadata.resource_version

    def _write(self, namespace: str, name: str, what: str, data: dict[str, str], version: str | None) -> str:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=namespace,
                resource_version=version,
                labels={"app.kubernetes.io/name": "accel-operator", "app.kubernetes.io/component": _COMPONENT[what]},
            ),
            data=data,
        )
        try:
            if version is None:
                cm = self._core.create_namespaced_config_map(namespace, body)
            else:
                cm = self._core.replace_namespaced_config_map(name, namespace, body)
        except ApiException as exc:
            if exc.status == 409 or (exc.status == 404 and version is not None):
                raise RollupConflict(f"configmap {namespace}/{name} changed meanwhile ({exc.status})") from exc
            raise ClusterUnavailable(f"configmap {namespace}/{name}: {exc.status} {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"configmap {namespace}/{name}: {exc}") from exc
        return str(cm.metadata.resource_version)

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
class FakeCostWriter(_RollupConfigMaps):
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    rollups: dict[tuple[str, str], tuple[dict[str, str], int]] = field(default_factory=dict)  # -> (data, version)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail_next: Exception | None = None

    def _read(self, namespace: str, name: str, what: str) -> tuple[dict[str, str] | None, str | None]:
        self.calls.append((f"read-{what}", name))
        self._maybe_fail()
        stored = self.rollups.get((namespace, name))
        return (None, None) if stored is None else (stored[0], str(stored[1]))

    def _write(self, namespace: str, name: str, what: str, data: dict[str, str], version: str | None) -> str:
        self.calls.append((f"write-{what}", name))
        self._maybe_fail()
        stored = self.rollups.get((namespace, name))
        if (stored is None) != (version is None) or (stored is not None and str(stored[1]) != version):
            raise RollupConflict(f"configmap {namespace}/{name} changed meanwhile")
        new = (stored[1] if stored is not None else 0) + 1
        self.rollups[(namespace, name)] = (data, new)
        return str(new)

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


def read_rollup(api: client.ApiClient, namespace: str, name: str) -> CostRollup | None:
    """The cost rollup (None: there is none, or it cannot be read by this user)."""
    try:
        rollup, _ = KubeCostWriter(api).read_rollup(namespace, name)
    except RollupUnreadable:
        raise
    except ClusterUnavailable as exc:
        if "403" in str(exc):
            return None
        raise
    return rollup


def list_policies(api: client.ApiClient) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(api)
    return _list(lambda **kw: custom.list_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, **kw))


def list_pools(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every AcceleratorPool (cluster-scoped): the cost report names each price's source from them.
    A reader not allowed to list pools gets none (the report then says the sources are unknown)."""
    custom = client.CustomObjectsApi(api)
    try:
        return _list(lambda **kw: custom.list_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, **kw))
    except ClusterUnavailable as exc:
        if str(exc).startswith(("403", "404")):
            return []
        raise
