"""What the operator writes on nodes and on the pods of its jobs, outside AcceleratorJobs: a
NoSchedule taint (and its removal) that keeps new work off a node, and the checkpoint-now
annotation that asks a running pod to checkpoint. Device health, consolidation, idle stops and
the clouds' early warnings all write through this one port.

A taint list has no merge key, so a taint is written by reading the node's taints, changing them
and writing them back with the resourceVersion that was read (read again on a conflict): a blind
patch would drop a taint someone else added meanwhile. Two ways to meet a taint of the same key:

- ``keep_existing=False`` (device health): the taint says which devices fail, so a different
  value replaces it; the same value and effect is left as it is (no write).
- ``keep_existing=True`` (early warnings): the first notice's taint stays; a later notice for the
  same node changes nothing.

A node or pod that is gone answers False (nothing to keep off, nobody to ask). The API server
unavailable (no answer, 5xx, 429, conflicts in a row) raises ``ClusterUnavailable``; a refusal
(another 4xx) is raised as the API's own error: trying it again would not help.

``NodeWriter`` is the port; ``KubeNodeWriter`` writes through the API server,
``FakeNodeWriter`` records calls and can be told to fail next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import vocabulary as v
from accel_operator.adapters.kube.client import ClusterUnavailable

NO_SCHEDULE: Final = "NoSchedule"
CONFLICT_RETRIES: Final = 5  # changed between our read and our write this often in a row: unavailable

Taints = list[dict[str, Any]]


class NodeWriter(Protocol):
    def taint(self, node: str, key: str, value: str, *, keep_existing: bool) -> bool:
        """A NoSchedule taint ``key=value`` on ``node``; a taint of this key already there is
        replaced (``keep_existing`` False) or left as it is (True). False when the node is gone."""
        ...

    def untaint(self, node: str, key: str) -> bool:
        """No taint of ``key`` on ``node``. False when the node is gone."""
        ...

    def request_checkpoint(self, namespace: str, pod: str, token: str) -> bool:
        """The checkpoint-now annotation set to ``token``. False when the pod is gone."""
        ...


def _error(what: str, exc: ApiException) -> Exception:
    """A refusal (4xx but 429) as it is; the server unavailable (5xx, 429) as retryable."""
    status: int | None = exc.status
    if status is not None and status < 500 and status != 429:
        refused: Exception = exc
        return refused
    return ClusterUnavailable(f"{what}: {status} {exc.reason}")


def replaced(taints: Taints, key: str, value: str) -> Taints | None:
    """``taints`` with the one of ``key`` replaced by ``key=value:NoSchedule``; None: no change."""
    old = next((t for t in taints if t.get("key") == key), None)
    if old is not None and old.get("value") == value and old.get("effect") == NO_SCHEDULE:
        return None
    return [*(t for t in taints if t.get("key") != key), {"key": key, "value": value, "effect": NO_SCHEDULE}]


def added(taints: Taints, key: str, value: str) -> Taints | None:
    """``taints`` with ``key=value:NoSchedule`` added unless one of ``key`` is there; None: no change."""
    if any(t.get("key") == key for t in taints):
        return None
    return [*taints, {"key": key, "value": value, "effect": NO_SCHEDULE}]


def removed(taints: Taints, key: str) -> Taints | None:
    """``taints`` without those of ``key``; None: there was none."""
    if not any(t.get("key") == key for t in taints):
        return None
    return [t for t in taints if t.get("key") != key]


class KubeNodeWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    def _set_taints(self, node: str, change: Callable[[Taints], Taints | None]) -> bool:
        what = f"taints of node {node}"
        for _ in range(CONFLICT_RETRIES):
            try:
                obj = self._core.read_node(node)
                # The wire form (camelCase, no nulls): what the server stores and a patch carries.
                taints = [self._core.api_client.sanitize_for_serialization(t) for t in obj.spec.taints or []]
                new = change(taints)
                if new is not None:
                    body = {"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"taints": new}}
                    self._core.patch_node(node, body)
            except ApiException as exc:
                if exc.status == 404:
                    return False  # the node is gone: nothing to keep work off
                if exc.status == 409:
                    continue  # changed since the read: read it again
                raise _error(what, exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise ClusterUnavailable(f"{what}: {exc}") from exc
            else:
                return True
        raise ClusterUnavailable(f"{what}: {CONFLICT_RETRIES} conflicting writes in a row")

    def taint(self, node: str, key: str, value: str, *, keep_existing: bool) -> bool:
        how = added if keep_existing else replaced
        return self._set_taints(node, lambda taints: how(taints, key, value))

    def untaint(self, node: str, key: str) -> bool:
        return self._set_taints(node, lambda taints: removed(taints, key))

    def request_checkpoint(self, namespace: str, pod: str, token: str) -> bool:
        what = f"pod {namespace}/{pod}"
        body = {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT_NOW: token}}}
        try:
            self._core.patch_namespaced_pod(pod, namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return False  # the pod ended meanwhile
            raise _error(what, exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"{what}: {exc}") from exc
        return True


@dataclass
class FakeNodeWriter:
    taints: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> key -> value (all NoSchedule)
    annotations: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, pod) -> token
    gone: set[str] = field(default_factory=set)  # node names and "namespace/pod" that answer 404
    calls: list[tuple[str, ...]] = field(default_factory=list)
    fail_next: Exception | None = None

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def taint(self, node: str, key: str, value: str, *, keep_existing: bool) -> bool:
        self.calls.append(("taint", node, key, value, "keep" if keep_existing else "replace"))
        self._maybe_fail()
        if node in self.gone:
            return False
        on_node = self.taints.setdefault(node, {})
        if keep_existing:
            on_node.setdefault(key, value)
        else:
            on_node[key] = value
        return True

    def untaint(self, node: str, key: str) -> bool:
        self.calls.append(("untaint", node, key))
        self._maybe_fail()
        if node in self.gone:
            return False
        self.taints.get(node, {}).pop(key, None)
        return True

    def request_checkpoint(self, namespace: str, pod: str, token: str) -> bool:
        self.calls.append(("request_checkpoint", namespace, pod, token))
        self._maybe_fail()
        if f"{namespace}/{pod}" in self.gone:
            return False
        self.annotations[(namespace, pod)] = token
        return True


_: NodeWriter = FakeNodeWriter()
