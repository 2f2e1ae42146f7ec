"""Sample → report, and the change-threshold / heartbeat decision."""

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from accel_agent import report
from accel_agent.backends import DeviceSample, MigSample, NodeSample, ProcessSample
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import AcceleratorNodeReport, PodRef, RemappedRows

GIB = 1 << 30
T0 = datetime(2026, 11, 13, 12, 0, tzinfo=UTC)


def device(index: int = 0, **kw: object) -> DeviceSample:
    base = DeviceSample(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA H100 80GB HBM3",
        memory_total_bytes=80 * GIB,
        memory_used_bytes=40 * GIB,
        utilization_gpu_percent=50.0,
        utilization_memory_percent=30.0,
        power_watts=400.0,
        temperature_celsius=55.0,
        throttle_mask=0x4,
        ecc_uncorrected=0,
        remapped_rows=RemappedRows(),
        mig_enabled=False,
        processes=(ProcessSample(pid=10, used_memory_bytes=39 * GIB, pod=PodRef(namespace="ml", name="train-0")),),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def node(*devices: DeviceSample, **kw: object) -> NodeSample:
    base = NodeSample(
        backend=AgentBackend.NVML,
        accelerator_kind=AcceleratorKind.GPU,
        devices=devices or (device(0), device(1)),
        driver_version="580.159.04",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def build(sample: NodeSample) -> AcceleratorNodeReport:
    return report.build(sample, node_name="gpu-1", sample_time=T0)


def test_build_maps_every_field() -> None:
    r = build(node(device(0, mig_enabled=True, mig_max_slices=7, mig_instances=(MigSample(1, "3g.40gb", slices=3),))))
    assert r.metadata.name == "gpu-1" and r.spec.node_name == "gpu-1"
    assert r.metadata.labels["app.kubernetes.io/managed-by"] == "accel-agent"
    s = r.status
    assert s is not None and s.healthy and s.problems == []
    assert s.backend is AgentBackend.NVML and s.accelerator_kind is AcceleratorKind.GPU
    assert s.sample_time == "2026-11-13T12:00:00Z" and s.heartbeat_time is None
    assert s.agent_version == report.AGENT_VERSION
    d = s.devices[0]
    assert d.throttle_reasons == ["SwPowerCap"]
    assert d.processes[0].pod == PodRef(namespace="ml", name="train-0")
    assert d.mig_instances[0].in_use is False and d.mig_instances[0].profile == "3g.40gb"
    assert s.fragmentation.total_devices == 1 and s.fragmentation.partially_used_devices == 1
    assert [c.reason for c in s.conditions] == ["Complete"]


def test_node_problems_name_the_device() -> None:
    s = build(node(device(0), device(1, ecc_uncorrected=2))).status
    assert s is not None and not s.healthy
    assert s.problems == ["device 1 (GPU-1): uncorrectable ECC errors since driver load: 2"]
    assert s.devices[1].healthy is False and s.devices[0].healthy is True


@pytest.mark.parametrize(
    ("sample", "problem"),
    [
        (
            NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, available=False, problems=("NVML library not found",)),
            "NVML library not found",
        ),
        (NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, devices=()), "no GPU found on this node"),
        (NodeSample(AgentBackend.TPU, AcceleratorKind.TPU, devices=()), "no TPU chip found on this node"),
    ],
)
def test_unhealthy_nodes(sample: NodeSample, problem: str) -> None:
    s = build(sample).status
    assert s is not None and not s.healthy and s.problems == [problem]


def test_read_errors_go_to_the_condition_not_to_health() -> None:
    s = build(node(device(0, errors=("powerWatts: nvmlDeviceGetPowerUsage failed: NoPermission",)))).status
    assert s is not None and s.healthy
    assert s.conditions[0].reason == "PartialReadErrors" and "NoPermission" in (s.conditions[0].message or "")


def test_owner_reference_to_the_node() -> None:
    r = report.build(node(), node_name="gpu-1", sample_time=T0, node_uid="uid-1")
    wire = r.to_wire()
    assert wire["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "gpu-1",
        "uid": "uid-1",
        "blockOwnerDeletion": False,
    }


def test_heartbeat_stamp() -> None:
    stamped = report.stamp_heartbeat(build(node()), datetime(2026, 11, 13, 12, 5, tzinfo=UTC))
    assert stamped.status is not None and stamped.status.heartbeat_time == "2026-11-13T12:05:00Z"


# --- change detection: (what changes, whether it is worth a write) -------------------------------
Change = Callable[[NodeSample], NodeSample]


def on_device(index: int, **kw: object) -> Change:
    def change(s: NodeSample) -> NodeSample:
        devices = list(s.devices)
        devices[index] = replace(devices[index], **kw)  # type: ignore[arg-type]
        return replace(s, devices=tuple(devices))

    return change


CHANGES: list[tuple[str, Change, bool]] = [
    ("nothing", lambda s: s, False),
    ("utilization +9 points", on_device(0, utilization_gpu_percent=59.0), False),
    ("utilization +10 points", on_device(0, utilization_gpu_percent=60.0), True),
    ("utilization -10 points", on_device(0, utilization_gpu_percent=40.0), True),
    ("memory utilization +12", on_device(0, utilization_memory_percent=42.0), True),
    ("utilization becomes unknown", on_device(0, utilization_gpu_percent=None), True),
    ("memory +3.9 GiB (< 5% of 80)", on_device(0, memory_used_bytes=int(43.9 * GIB)), False),
    ("memory +4 GiB (5%)", on_device(0, memory_used_bytes=44 * GIB), True),
    ("power and temperature", on_device(0, power_watts=650.0, temperature_celsius=80.0), False),
    ("power-cap throttle toggles", on_device(0, throttle_mask=0x0), False),
    ("thermal throttle (health)", on_device(0, throttle_mask=0x40), True),
    ("ECC error (health)", on_device(1, ecc_uncorrected=1), True),
    (
        "process memory grows",
        on_device(
            0, processes=(ProcessSample(pid=10, used_memory_bytes=GIB, pod=PodRef(namespace="ml", name="train-0")),)
        ),
        False,
    ),
    ("a process starts", on_device(0, processes=(ProcessSample(pid=10), ProcessSample(pid=11))), True),
    ("a process ends", on_device(0, processes=()), True),
    ("pod mapping found", on_device(0, processes=(ProcessSample(pid=10, used_memory_bytes=39 * GIB),)), True),
    ("device lost", on_device(1, lost=True), True),
    ("device disappears", lambda s: replace(s, devices=s.devices[:1]), True),
    ("device appears", lambda s: replace(s, devices=(*s.devices, replace(s.devices[0], index=2, uuid="GPU-2"))), True),
    ("driver gone", lambda s: replace(s, available=False, devices=(), problems=("NVIDIA driver not loaded",)), True),
    ("driver upgraded", lambda s: replace(s, driver_version="590.1"), True),
    ("not supported changes", on_device(0, not_supported=("powerWatts",)), True),
    ("MIG enabled", on_device(1, mig_enabled=True), True),
]


@pytest.mark.parametrize(("what", "change", "write"), CHANGES, ids=[c[0] for c in CHANGES])
def test_changes_beyond_thresholds(what: str, change: Change, write: bool) -> None:
    before = build(node())
    after = build(change(node()))
    reasons = report.changes(before, after)
    assert bool(reasons) is write, reasons


def test_no_previous_report_is_a_change() -> None:
    assert report.changes(None, build(node())) == ["no report written yet"]


@pytest.mark.parametrize(
    ("seconds_since_write", "changed", "write", "reason"),
    [
        (None, False, True, "heartbeat due"),  # never written (previous exists only in tests)
        (10.0, False, False, None),
        (299.0, False, False, None),
        (300.0, False, True, "heartbeat due"),
        (10.0, True, True, "device 0: GPU utilization 50.0 -> 95.0"),
    ],
)
def test_decide(seconds_since_write: float | None, changed: bool, write: bool, reason: str | None) -> None:
    previous = build(node())
    current = build(on_device(0, utilization_gpu_percent=95.0)(node()) if changed else node())
    d = report.decide(previous, current, seconds_since_write=seconds_since_write, heartbeat_seconds=300.0)
    assert d.write is write
    assert (d.reasons[0] if d.reasons else None) == reason


def test_thresholds_are_settings() -> None:
    previous = build(node())
    current = build(on_device(0, utilization_gpu_percent=53.0)(node()))
    loose = report.decide(previous, current, seconds_since_write=1, heartbeat_seconds=300)
    tight = report.decide(
        previous,
        current,
        seconds_since_write=1,
        heartbeat_seconds=300,
        thresholds=report.ChangeThresholds(utilization_points=2),
    )
    assert (loose.write, tight.write) == (False, True)
