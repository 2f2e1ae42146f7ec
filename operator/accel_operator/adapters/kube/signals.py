"""Acting on early warnings in the cluster: a NoSchedule taint on the node a cloud will reclaim,
and the checkpoint-now annotation on the pods of our jobs there.

Both writes are idempotent: the taint is added only when its key is absent (read, then a patch
that carries the resourceVersion it read, retried on a conflict, so a taint someone else adds
meanwhile is never lost), and the annotation is a merge patch of one key to one value.

``SignalWriter`` is the port; ``KubeSignalWriter`` writes through the API server,
``FakeSignalWriter`` records calls and can be told to fail next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import vocabulary as v
from accel_operator.adapters.kube.client import ClusterUnavailable

CONFLICT_RETRIES: Final = 5


class SignalWriter(Protocol):
    def taint_node(self, node: str, key: str, value: str, effect: str) -> bool:
        """Add the taint unless the node has one with this key; False when the node is gone."""
        ...

    def request_checkpoint(self, namespace: str, pod: str, token: str) -> bool:
        """Set the checkpoint-now annotation to ``token``; False when the pod is gone."""
        ...


def _unavailable(what: str, exc: Exception) -> ClusterUnavailable:
    status = getattr(exc, "status", None)
    return ClusterUnavailable(f"{what}: {status or ''} {getattr(exc, 'reason', exc)}".strip())


class KubeSignalWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    def taint_node(self, node: str, key: str, value: str, effect: str) -> bool:
        for _ in range(CONFLICT_RETRIES):
            try:
                current = self._core.read_node(node)
                taints = list(current.spec.taints or [])
                if any(t.key == key for t in taints):
                    return True
                wire = [self._core.api_client.sanitize_for_serialization(t) for t in taints]
                wire.append({"key": key, "value": value, "effect": effect})
                self._core.patch_node(
                    node,
                    {"metadata": {"resourceVersion": current.metadata.resource_version}, "spec": {"taints": wire}},
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status == 409:
                    continue  # changed since the read: read again
                raise _unavailable(f"taint node {node}", exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise _unavailable(f"taint node {node}", exc) from exc
            else:
                return True
        raise ClusterUnavailable(f"taint node {node}: {CONFLICT_RETRIES} conflicts in a row")

    def request_checkpoint(self, namespace: str, pod: str, token: str) -> bool:
        body = {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT_NOW: token}}}
        try:
            self._core.patch_namespaced_pod(pod, namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _unavailable(f"annotate pod {namespace}/{pod}", exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise _unavailable(f"annotate pod {namespace}/{pod}", exc) from exc
        return True


@dataclass
class FakeSignalWriter:
    taints: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # node -> key -> (value, effect)
    annotations: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, pod) -> token
    gone: set[str] = field(default_factory=set)  # node names and "namespace/pod" that answer 404
    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail_next: Exception | None = None

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def taint_node(self, node: str, key: str, value: str, effect: str) -> bool:
        self.calls.append(("taint_node", (node, key, value, effect)))
        self._maybe_fail()
        if node in self.gone:
            return False
        self.taints.setdefault(node, {}).setdefault(key, (value, effect))
        return True

    def request_checkpoint(self, namespace: str, pod: str, token: str) -> bool:
        self.calls.append(("request_checkpoint", (namespace, pod, token)))
        self._maybe_fail()
        if f"{namespace}/{pod}" in self.gone:
            return False
        self.annotations[(namespace, pod)] = token
        return True


_: SignalWriter = FakeSignalWriter()
