"""Where reports go: the ``ReportSink`` port, the Kubernetes implementation and an in-memory one.

:class:`KubernetesReportSink` creates the node's AcceleratorNodeReport once (a 409 means it already
exists) and then replaces its status through the ``status`` subresource with a JSON patch
(``add /status``): a merge patch would leave behind fields that became empty, and a status PUT
would need the resourceVersion. A 404 on the patch (someone deleted the object, or the node was
deleted and the garbage collector took its report) recreates it once in the same write.

Errors are mapped here, once, into :class:`SinkError` with ``retryable``: the loop does not count a
failed write as written, so the next pass (one sample interval later) tries again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import registry, vocabulary
from accel_api.nodereport import AcceleratorNodeReport

FIELD_MANAGER: Final = "accel-agent"
_RETRYABLE_STATUS: Final = frozenset({408, 409, 429, 500, 502, 503, 504})


class SinkError(Exception):
    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ReportSink(Protocol):
    def write(self, report: AcceleratorNodeReport) -> None:
        """Store the report (object + status); raises :class:`SinkError` only."""
        ...


def _object_body(report: AcceleratorNodeReport) -> dict[str, Any]:
    wire = report.to_wire()
    wire.pop("status", None)
    return wire


def _status_patch(report: AcceleratorNodeReport) -> list[dict[str, Any]]:
    status = report.to_wire().get("status", {})
    return [{"op": "add", "path": "/status", "value": status}]


class KubernetesReportSink:
    """Writes through ``CustomObjectsApi`` (pass one in, or an ``ApiClient`` to build it)."""

    def __init__(self, custom_objects_api: Any) -> None:
        self._api = custom_objects_api
        self._exists = False
        self._errors: tuple[type[BaseException], ...] | None = None

    @classmethod
    def from_api_client(cls, api_client: Any) -> KubernetesReportSink:
        return cls(client.CustomObjectsApi(api_client))

    def _error_types(self) -> tuple[type[BaseException], ...]:
        if self._errors is None:
            self._errors = (ApiException, urllib3.exceptions.HTTPError, OSError)
        return self._errors

    def _create(self, report: AcceleratorNodeReport) -> None:
        try:
            self._api.create_cluster_custom_object(
                vocabulary.GROUP,
                vocabulary.VERSION,
                registry.NODE_REPORT.plural,
                _object_body(report),
                field_manager=FIELD_MANAGER,
            )
        except self._error_types() as exc:
            if getattr(exc, "status", None) != 409:  # 409: it exists already, which is what we want
                raise _mapped("create", exc) from exc
        self._exists = True

    def _patch_status(self, report: AcceleratorNodeReport) -> None:
        self._api.patch_cluster_custom_object_status(
            vocabulary.GROUP,
            vocabulary.VERSION,
            registry.NODE_REPORT.plural,
            report.metadata.name,
            _status_patch(report),
            field_manager=FIELD_MANAGER,
            _content_type="application/json-patch+json",
        )

    def write(self, report: AcceleratorNodeReport) -> None:
        if not self._exists:
            self._create(report)
        try:
            self._patch_status(report)
        except self._error_types() as exc:
            if getattr(exc, "status", None) != 404:
                raise _mapped("patch status", exc) from exc
        else:
            return
        # Deleted under us: create it again and patch once more.
        self._exists = False
        self._create(report)
        try:
            self._patch_status(report)
        except self._error_types() as exc:
            raise _mapped("patch status", exc) from exc


def _mapped(action: str, exc: BaseException) -> SinkError:
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        reason = getattr(exc, "reason", "") or ""
        body = getattr(exc, "body", None)
        detail = _message(body) or reason
        return SinkError(
            f"{action} of the node report failed: HTTP {status} {detail}".strip(),
            retryable=status in _RETRYABLE_STATUS or status >= 500,
            status=status,
        )
    return SinkError(f"{action} of the node report failed: {exc}", retryable=True)


def _message(body: Any) -> str:
    if not body:
        return ""
    try:
        parsed = json.loads(body)
    except (TypeError, ValueError):
        return str(body)[:300]
    return str(parsed.get("message", ""))[:300] if isinstance(parsed, dict) else ""


@dataclass
class InMemoryReportSink:
    """Keeps the objects as the API server would (wire dicts by name); can be told to fail next."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: list[AcceleratorNodeReport] = field(default_factory=list)
    creates: int = 0
    next_error: SinkError | None = None

    def write(self, report: AcceleratorNodeReport) -> None:
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        name = report.metadata.name or ""
        if name not in self.objects:
            self.objects[name] = _object_body(report)
            self.creates += 1
        self.objects[name] = {**self.objects[name], "status": report.to_wire().get("status", {})}
        self.writes.append(report)

    def get(self, name: str) -> AcceleratorNodeReport | None:
        wire = self.objects.get(name)
        return None if wire is None else AcceleratorNodeReport.model_validate(wire)
