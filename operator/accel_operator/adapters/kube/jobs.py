"""Writing to AcceleratorJobs: the status subresource and Kubernetes events about them.

``JobWriter`` is the port; ``KubeJobWriter`` writes through the API server, ``FakeJobWriter``
records calls and can be told to fail next.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube.client import ClusterUnavailable

COMPONENT = "accel-operator"


@dataclass(frozen=True)
class JobRef:
    namespace: str
    name: str
    uid: str


class JobGone(RuntimeError):
    """The AcceleratorJob was deleted meanwhile: nothing to write."""


class JobWriter(Protocol):
    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str: ...  # the new resourceVersion

    def event(self, ref: JobRef, type_: str, reason: str, message: str) -> None: ...


def _retryable(exc: ApiException) -> bool:
    return exc.status is None or exc.status >= 500 or exc.status == 429


class KubeJobWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._events = client.EventsV1Api(api)

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        try:
            obj = self._custom.patch_namespaced_custom_object_status(
                v.GROUP, v.VERSION, ref.namespace, registry.JOB.plural, ref.name, {"status": status}
            )
        except ApiException as exc:
            if exc.status == 404:
                raise JobGone(f"{ref.namespace}/{ref.name}") from exc
            if _retryable(exc):
                raise ClusterUnavailable(f"status of {ref.namespace}/{ref.name}: {exc.status} {exc.reason}") from exc
            raise
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"status of {ref.namespace}/{ref.name}: {exc}") from exc
        return str(obj.get("metadata", {}).get("resourceVersion", ""))

    def event(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.UTC)
        body = client.EventsV1Event(
            metadata=client.V1ObjectMeta(name=f"{ref.name[:200]}.{uuid.uuid4().hex[:12]}", namespace=ref.namespace),
            event_time=now,
            action=reason,
            reason=reason,
            note=message[:1000],
            type=type_,
            reporting_controller=f"{v.GROUP}/{COMPONENT}",
            reporting_instance=COMPONENT,
            regarding=client.V1ObjectReference(
                api_version=v.API_VERSION, kind="AcceleratorJob", name=ref.name, namespace=ref.namespace, uid=ref.uid
            ),
        )
        try:
            # The created Event is not read back (not deserialised).
            self._events.create_namespaced_event(ref.namespace, body, _preload_content=False).drain_conn()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            # An event is information, not state: losing one must not stop a decision.
            raise ClusterUnavailable(f"event on {ref.namespace}/{ref.name}: {exc}") from exc


@dataclass
class FakeJobWriter:
    statuses: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # (job, type, reason, message)
    fail_next: Exception | None = None
    revision: int = 0

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        self._maybe_fail()
        current = self.statuses.setdefault((ref.namespace, ref.name), {})
        for k, val in status.items():
            if val is None:
                current.pop(k, None)
            else:
                current[k] = val
        self.revision += 1
        return str(self.revision)

    def event(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        self._maybe_fail()
        self.events.append((f"{ref.namespace}/{ref.name}", type_, reason, message))


_: JobWriter = FakeJobWriter()


def object_event(
    api: client.ApiClient, *, kind: str, name: str, uid: str | None, type_: str, reason: str, message: str
) -> None:
    """An Event about a cluster-scoped accel.dev object (an AcceleratorPolicy), in the ``default``
    namespace as Kubernetes keeps them; raises ClusterUnavailable when it cannot be posted."""
    now = dt.datetime.now(dt.UTC)
    body = client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=f"{name[:200]}.{uuid.uuid4().hex[:12]}", namespace=CLUSTER_EVENTS),
        event_time=now,
        action=reason,
        reason=reason,
        note=message[:1000],
        type=type_,
        reporting_controller=f"{v.GROUP}/{COMPONENT}",
        reporting_instance=COMPONENT,
        regarding=client.V1ObjectReference(api_version=v.API_VERSION, kind=kind, name=name, uid=uid),
    )
    try:
        client.EventsV1Api(api).create_namespaced_event(CLUSTER_EVENTS, body, _preload_content=False).drain_conn()
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        raise ClusterUnavailable(f"event on {kind} {name}: {exc}") from exc


CLUSTER_EVENTS = "default"  # where the events of cluster-scoped objects go
