"""Writing to AcceleratorJobs: the status subresource and Kubernetes events about them.

``JobWriter`` is the port; ``KubeJobWriter`` writes through the API server, ``FakeJobWriter``
records calls and can be told to fail next.

A status write is addressed to one job, not to a name: a job deleted and re-created under the
same name while a write was in flight must not receive the old job's ledger. The status
subresource ignores a ``metadata.uid`` in a merge patch (its strategy copies the stored metadata),
so a write is a patch at a resourceVersion: the API server refuses it (409) unless the object is
still at that version, and a version belongs to one object, so the patch lands on the job the
writer saw or nowhere. The version is the one the caller's view holds (``JobRef.version``: one
call when the view is current); refused, or with none, the writer reads the job, refuses the
write if its uid is not the one the write is for (``JobGone``), and patches at the version it
read.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections import OrderedDict
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
    # The resourceVersion the caller's view of the job holds (a hint: the first patch is made at it).
    version: str | None = None


class JobGone(RuntimeError):
    """The AcceleratorJob was deleted meanwhile (or re-created under its name): nothing to write."""


# Reads and patches of one status write before it gives up as unavailable (each retry follows a
# write by someone else to the same job between the read and the patch).
GUARD_TRIES = 5


class JobWriter(Protocol):
    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str: ...  # the new resourceVersion

    def event(self, ref: JobRef, type_: str, reason: str, message: str) -> None: ...

    def event_series(self, ref: JobRef, type_: str, reason: str, message: str, count: int) -> None:
        """The Event this writer last created for (``ref``, ``type_``, ``reason``) occurred
        ``count`` times (``engine/events.py``): its series is written (a new Event when the
        writer does not know it)."""
        ...


def _retryable(exc: ApiException) -> bool:
    return exc.status is None or exc.status >= 500 or exc.status == 429


# Names of the Events this writer created, per (namespace, name, uid, type, reason): what a
# series patch is addressed to (the least recently created dropped first).
EVENT_NAMES = 10_000


class KubeJobWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._events = client.EventsV1Api(api)
        self._names: OrderedDict[tuple[str, str, str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()  # events are posted from several threads

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        """Merge ``status`` into the status of the job ``ref`` names, that very job (its uid) only."""
        what = f"status of {ref.namespace}/{ref.name}"
        version = ref.version if ref.uid else None
        for _ in range(GUARD_TRIES):
            try:
                if version is None:
                    current = self._custom.get_namespaced_custom_object(
                        v.GROUP, v.VERSION, ref.namespace, registry.JOB.plural, ref.name
                    )
                    meta = current.get("metadata") or {}
                    if ref.uid and meta.get("uid") != ref.uid:
                        raise JobGone(f"{ref.namespace}/{ref.name} was deleted and re-created (uid {meta.get('uid')})")
                    version = meta.get("resourceVersion")
                body = {"metadata": {"resourceVersion": version}, "status": status}
                obj = self._custom.patch_namespaced_custom_object_status(
                    v.GROUP, v.VERSION, ref.namespace, registry.JOB.plural, ref.name, body
                )
            except ApiException as exc:
                if exc.status == 404:
                    raise JobGone(f"{ref.namespace}/{ref.name}") from exc
                if exc.status == 409:
                    version = None  # written by someone else since that version: read it again
                    continue
                if _retryable(exc):
                    raise ClusterUnavailable(f"{what}: {exc.status} {exc.reason}") from exc
                raise
            except urllib3.exceptions.HTTPError as exc:
                raise ClusterUnavailable(f"{what}: {exc}") from exc
            return str(obj.get("metadata", {}).get("resourceVersion", ""))
        raise ClusterUnavailable(f"{what}: changed by others {GUARD_TRIES} times while being written")

    def event(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        regarding = client.V1ObjectReference(
            api_version=v.API_VERSION, kind="AcceleratorJob", name=ref.name, namespace=ref.namespace, uid=ref.uid
        )
        body = _event_body(regarding, ref.namespace, type_, reason, message)
        try:
            # The created Event is not read back (not deserialised).
            self._events.create_namespaced_event(ref.namespace, body, _preload_content=False).drain_conn()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            # An event is information, not state: losing one must not stop a decision.
            raise ClusterUnavailable(f"event on {ref.namespace}/{ref.name}: {exc}") from exc
        with self._lock:
            key = (ref.namespace, ref.name, ref.uid, type_, reason)
            self._names[key] = str(body.metadata.name)
            self._names.move_to_end(key)
            while len(self._names) > EVENT_NAMES:
                self._names.popitem(last=False)

    def event_series(self, ref: JobRef, type_: str, reason: str, message: str, count: int) -> None:
        with self._lock:
            name = self._names.get((ref.namespace, ref.name, ref.uid, type_, reason))
        if name is None:  # not this writer's (a restart, or dropped from the table): a new Event
            self.event(ref, type_, reason, message)
            return
        # Only the series changes: an events.k8s.io Event's note is immutable, as client-go's
        # recorder leaves it (the first occurrence's words; the job's status has the latest).
        series = {"count": count, "lastObservedTime": _micro_time(dt.datetime.now(dt.UTC))}
        try:
            self._events.patch_namespaced_event(
                name, ref.namespace, {"series": series}, _preload_content=False
            ).drain_conn()
        except ApiException as exc:
            if exc.status == 404:  # deleted meanwhile (its TTL): a new one
                self.event(ref, type_, reason, message)
                return
            raise ClusterUnavailable(f"event series on {ref.namespace}/{ref.name}: {exc}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterUnavailable(f"event series on {ref.namespace}/{ref.name}: {exc}") from exc


@dataclass
class FakeJobWriter:
    statuses: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # (job, type, reason, message)
    series: list[tuple[str, str, str, int]] = field(default_factory=list)  # (job, type, reason, count)
    fail_next: Exception | None = None
    revision: int = 0
    # The uid of each job as the API server holds it; a write for another uid is refused as the
    # real writer refuses it (a job not listed here takes any uid).
    uids: dict[tuple[str, str], str] = field(default_factory=dict)

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        self._maybe_fail()
        held = self.uids.get((ref.namespace, ref.name))
        if held is not None and ref.uid and held != ref.uid:
            raise JobGone(f"{ref.namespace}/{ref.name} was deleted and re-created (uid {held})")
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

    def event_series(self, ref: JobRef, type_: str, reason: str, message: str, count: int) -> None:
        self._maybe_fail()
        self.series.append((f"{ref.namespace}/{ref.name}", type_, reason, count))


_: JobWriter = FakeJobWriter()


def object_event(
    api: client.ApiClient, *, kind: str, name: str, uid: str | None, type_: str, reason: str, message: str
) -> None:
    """An Event about a cluster-scoped accel.dev object (an AcceleratorPolicy), in the ``default``
    namespace as Kubernetes keeps them; raises ClusterUnavailable when it cannot be posted."""
    regarding = client.V1ObjectReference(api_version=v.API_VERSION, kind=kind, name=name, uid=uid)
    body = _event_body(regarding, CLUSTER_EVENTS, type_, reason, message)
    try:
        client.EventsV1Api(api).create_namespaced_event(CLUSTER_EVENTS, body, _preload_content=False).drain_conn()
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        raise ClusterUnavailable(f"event on {kind} {name}: {exc}") from exc


CLUSTER_EVENTS = "default"  # where the events of cluster-scoped objects go


def _micro_time(at: dt.datetime) -> str:
    """A MicroTime as the API server writes it (RFC 3339, microseconds, Z)."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _event_body(
    regarding: client.V1ObjectReference, namespace: str, type_: str, reason: str, message: str
) -> client.EventsV1Event:
    """One Event of ours about ``regarding``, its note bounded (a message may quote tenant input)."""
    return client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=f"{str(regarding.name)[:200]}.{uuid.uuid4().hex[:12]}", namespace=namespace),
        event_time=dt.datetime.now(dt.UTC),
        action=reason,
        reason=reason,
        note=message[:1000],
        type=type_,
        reporting_controller=f"{v.GROUP}/{COMPONENT}",
        reporting_instance=COMPONENT,
        regarding=regarding,
    )
