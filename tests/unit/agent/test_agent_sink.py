"""The Kubernetes report sink against a recording CustomObjectsApi, and the in-memory sink."""

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from accel_agent import report
from accel_agent.backends import DeviceSample, NodeSample
from accel_agent.sink import InMemoryReportSink, KubernetesReportSink, SinkError
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import AcceleratorNodeReport


def a_report(uid: str | None = None) -> AcceleratorNodeReport:
    sample = NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, devices=(DeviceSample(index=0, uuid="GPU-0"),))
    r = report.build(sample, node_name="gpu-1", sample_time=datetime(2026, 11, 13, tzinfo=UTC), node_uid=uid)
    return report.stamp_heartbeat(r, datetime(2026, 11, 13, tzinfo=UTC))


class RecordingApi:
    """Stands in for CustomObjectsApi: records calls; ``fail`` maps a method to statuses to raise next."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.fail: dict[str, list[int]] = {}

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, args, kwargs))
        statuses = self.fail.get(name)
        if statuses:
            raise ApiException(status=statuses.pop(0), reason="test")
        return {}

    def create_cluster_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._call("create", args, kwargs)

    def patch_cluster_custom_object_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._call("patch", args, kwargs)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def test_first_write_creates_then_patches_status() -> None:
    api = RecordingApi()
    sink = KubernetesReportSink(api)
    r = a_report(uid="node-uid")
    sink.write(r)
    sink.write(r)
    assert api.names() == ["create", "patch", "patch"]
    group, version, plural, body = api.calls[0][1]
    assert (group, version, plural) == ("accel.dev", "v1alpha1", "acceleratornodereports")
    assert "status" not in body and body["spec"] == {"nodeName": "gpu-1"}
    assert body["metadata"]["name"] == "gpu-1" and body["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    name, patch = api.calls[1][1][3], api.calls[1][1][4]
    assert name == "gpu-1"
    assert patch == [{"op": "add", "path": "/status", "value": r.to_wire()["status"]}]
    assert api.calls[1][2]["_content_type"] == "application/json-patch+json"
    assert api.calls[1][2]["field_manager"] == "accel-agent"


def test_an_existing_object_is_fine() -> None:
    api = RecordingApi()
    api.fail["create"] = [409]
    KubernetesReportSink(api).write(a_report())
    assert api.names() == ["create", "patch"]


def test_a_deleted_object_is_created_again() -> None:
    api = RecordingApi()
    sink = KubernetesReportSink(api)
    sink.write(a_report())
    api.fail["patch"] = [404]
    sink.write(a_report())
    assert api.names() == ["create", "patch", "patch", "create", "patch"]


@pytest.mark.parametrize(
    ("method", "status", "retryable"),
    [
        ("patch", 500, True),
        ("patch", 503, True),
        ("patch", 429, True),
        ("patch", 403, False),
        ("patch", 422, False),
        ("create", 403, False),
        ("create", 500, True),
    ],
)
def test_errors_are_mapped(method: str, status: int, retryable: bool) -> None:
    api = RecordingApi()
    api.fail[method] = [status]
    with pytest.raises(SinkError) as caught:
        KubernetesReportSink(api).write(a_report())
    assert caught.value.status == status and caught.value.retryable is retryable


def test_connection_errors_are_retryable() -> None:
    class Down(RecordingApi):
        def create_cluster_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise ConnectionRefusedError("connection refused")

    with pytest.raises(SinkError) as caught:
        KubernetesReportSink(Down()).write(a_report())
    assert caught.value.retryable and caught.value.status is None


def test_in_memory_sink_keeps_the_object_as_the_server_would() -> None:
    sink = InMemoryReportSink()
    sink.write(a_report())
    sink.write(a_report())
    assert sink.creates == 1 and len(sink.writes) == 2
    stored = sink.get("gpu-1")
    assert stored is not None and stored.status is not None and stored.status.devices[0].uuid == "GPU-0"
    sink.next_error = SinkError("boom", retryable=True)
    with pytest.raises(SinkError):
        sink.write(a_report())
    sink.write(a_report())
    assert len(sink.writes) == 3
