"""What rescheduling changes outside AcceleratorJobs: a NoSchedule taint on a node whose device
is failing (and its removal), and the checkpoint-now annotation on a job's pods.

``RescheduleClient`` is the port; ``KubeRescheduleClient`` writes through the API server,
``FakeRescheduleClient`` records calls and can be told to fail next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_operator.adapters.kube.client import ClusterUnavailable

NO_SCHEDULE = "NoSchedule"


class RescheduleClient(Protocol):
    def taint(self, node: str, key: str, value: str) -> None: ...  # NoSchedule; replaces a taint of that key

    def untaint(self, node: str, key: str) -> None: ...

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None: ...


def _unavailable(what: str, exc: ApiException) -> Exception:
    """A refusal (4xx but 429) as it is; the server unavailable (5xx, 429, no answer) as retryable."""
    status: int | None = exc.status
    if status is not None and status < 500 and status != 429:
        refused: Exception = exc
        return refused
    return ClusterUnavailable(f"{what}: {exc}")


class KubeRescheduleClient:
    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    def _set_taints(self, node: str, change: Any) -> None:
        """Read the node's taints, change them, write them back guarded by the resourceVersion
        (a taint list has no merge key: a blind patch would drop someone else's taint)."""
        for _ in range(3):
            try:
                obj = self._core.read_node(node)
                taints = [t.to_dict() for t in (obj.spec.taints or [])]
                new = change(taints)
                if new != taints:
                    body = {"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"taints": new}}
                    self._core.patch_node(node, body)
            except ApiException as exc:
                if exc.status == 404:
                    return  # the node is gone: nothing to keep work off
                if exc.status == 409:
                    continue  # changed meanwhile: read it again
                raise _unavailable(f"taints of node {node}", exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise ClusterUnavailable(f"taints of node {node}: {exc}") from exc
            else:
                return
        raise ClusterUnavailable(f"taints of node {node}: conflicting writes")

    def taint(self, node: str, key: str, value: str) -> None:
        def change(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
            kept = [{k: v for k, v in t.items() if v is not None} for t in taints if t.get("key") != key]
            old = next((t for t in taints if t.get("key") == key), None)
            if old is not None and old.get("value") == value and old.get("effect") == NO_SCHEDULE:
                return taints
            return [*kept, {"key": key, "value": value, "effect": NO_SCHEDULE}]

        self._set_taints(node, change)

    def untaint(self, node: str, key: str) -> None:
        def change(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if not any(t.get("key") == key for t in taints):
                return taints
            return [{k: v for k, v in t.items() if v is not None} for t in taints if t.get("key") != key]

        self._set_taints(node, change)

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        try:
            self._core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {key: value}}})
        except ApiException as exc:
            if exc.status == 404:
                return  # the pod ended meanwhile
            raise _unavailable(f"pod {namespace}/{name}", exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"pod {namespace}/{name}: {exc}") from exc


@dataclass
class FakeRescheduleClient:
    taints: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> key -> value
    annotations: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    fail_next: Exception | None = None

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def taint(self, node: str, key: str, value: str) -> None:
        self._maybe_fail()
        self.calls.append(("taint", node, key, value))
        self.taints.setdefault(node, {})[key] = value

    def untaint(self, node: str, key: str) -> None:
        self._maybe_fail()
        self.calls.append(("untaint", node, key))
        self.taints.get(node, {}).pop(key, None)

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        self._maybe_fail()
        self.calls.append(("annotate_pod", namespace, name, key, value))
        self.annotations.setdefault((namespace, name), {})[key] = value


_: RescheduleClient = FakeRescheduleClient()
