"""Turns a sample into the node's AcceleratorNodeReport, and decides whether it is worth writing.

:func:`build` is pure: sample + node name + time → report, with health and fragmentation from
:mod:`accel_agent.health`. :func:`decide` compares the new report with the one *last written*
(not the last sampled, or a slow drift would never be written) and says whether to write and why:
a thousand nodes sampling every 15 s must not become a thousand writes every 15 s, so only a change
beyond the thresholds, a health/process/device-set change, or a due heartbeat is written.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

from accel_agent import health
from accel_agent.backends import DeviceSample, NodeSample
from accel_api import vocabulary
from accel_api.base import ApiModel, Condition, ObjectMeta
from accel_api.durations import stamp
from accel_api.enums import AcceleratorKind
from accel_api.nodereport import (
    AcceleratorNodeReport,
    AcceleratorNodeReportSpec,
    AcceleratorNodeReportStatus,
    Device,
    DeviceProcess,
    DeviceProfile,
    MigInstance,
)

AGENT_VERSION: Final = "0.1.0"
MANAGED_BY: Final = "accel-agent"
CONDITION_SAMPLED: Final = "Sampled"


@dataclass(frozen=True)
class ChangeThresholds:
    utilization_points: float = 10.0
    # Memory used must move by 5% of the device's memory, and at least 1 GiB, to count.
    memory_fraction: float = 0.05
    memory_min_bytes: int = 1 << 30


@dataclass(frozen=True)
class WriteDecision:
    write: bool
    reasons: tuple[str, ...]


M = TypeVar("M", bound=ApiModel)


def _as_read(model: type[M], sample: object, **judged: Any) -> M:
    """``model`` (a report's part) from ``sample`` (the backend's read of it): every field of
    ``model`` but the ``judged`` ones is the sample's field of the same name, as read, so the two
    cannot drift apart unnoticed (a field the sample lacks is an AttributeError)."""
    read = {name: getattr(sample, name) for name in model.model_fields if name not in judged}
    return model(**read, **judged)


def _device(d: DeviceSample, policy: health.HealthPolicy) -> Device:
    problems = health.device_problems(d, policy)
    return _as_read(
        Device,
        d,
        throttle_reasons=health.decode_throttle(d.throttle_mask),
        mig_instances=[_as_read(MigInstance, m, in_use=health.mig_in_use(m, d)) for m in d.mig_instances],
        processes=[_as_read(DeviceProcess, p) for p in d.processes],
        healthy=not problems,
        problems=problems,
    )


def _label(d: DeviceSample) -> str:
    return f"device {d.index}" + (f" ({d.uuid})" if d.uuid else "")


def _sampled_condition(sample: NodeSample) -> Condition:
    if not sample.available:
        return Condition(
            type=CONDITION_SAMPLED, status="False", reason="BackendUnavailable", message="; ".join(sample.problems)
        )
    errors = [f"{_label(d)}: {e}" for d in sample.devices if not d.lost for e in d.errors]
    if errors:
        return Condition(type=CONDITION_SAMPLED, status="True", reason="PartialReadErrors", message="; ".join(errors))
    return Condition(type=CONDITION_SAMPLED, status="True", reason="Complete")


def build(
    sample: NodeSample,
    *,
    node_name: str,
    sample_time: datetime,
    policy: health.HealthPolicy = health.DEFAULT_POLICY,
    node_uid: str | None = None,
) -> AcceleratorNodeReport:
    """The report for ``sample``; ``heartbeatTime`` is left for the writer to stamp."""
    devices = [_device(d, policy) for d in sorted(sample.devices, key=lambda d: (d.index, d.lost))]
    problems = list(sample.problems)
    if sample.available and not sample.devices:
        kind = "TPU chip" if sample.accelerator_kind is AcceleratorKind.TPU else "GPU"
        problems.append(f"no {kind} found on this node")
    problems += [
        f"device {d.index}" + (f" ({d.uuid})" if d.uuid else "") + f": {p}" for d in devices for p in d.problems
    ]
    meta: dict[str, Any] = {
        "name": node_name,
        "labels": {vocabulary.LABEL_MANAGED_BY: MANAGED_BY},
    }
    if node_uid:
        # Owned by the Node: when the node is deleted, the garbage collector deletes its report.
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "blockOwnerDeletion": False}
        ]
    return AcceleratorNodeReport(
        metadata=ObjectMeta.model_validate(meta),
        spec=AcceleratorNodeReportSpec(node_name=node_name),
        status=AcceleratorNodeReportStatus(
            accelerator_kind=sample.accelerator_kind,
            backend=sample.backend,
            healthy=sample.available and not problems,
            problems=problems,
            driver_version=sample.driver_version,
            cuda_driver_version=sample.cuda_driver_version,
            devices=devices,
            fragmentation=health.fragmentation(sample.devices, policy),
            not_supported=list(sample.not_supported),
            sample_time=stamp(sample_time),
            agent_version=AGENT_VERSION,
            conditions=[_sampled_condition(sample)],
        ),
    )


def stamp_heartbeat(report: AcceleratorNodeReport, moment: datetime) -> AcceleratorNodeReport:
    status = report.status or AcceleratorNodeReportStatus()
    return report.model_copy(update={"status": status.model_copy(update={"heartbeat_time": stamp(moment)})})


# --- change detection -------------------------------------------------------------------------
def _key(d: Device) -> str:
    return d.uuid or f"index-{d.index}"


def _processes(d: Device) -> set[tuple[int, str | None, str | None, str | None, str | None]]:
    return {
        (p.pid, p.pod_uid, *((p.pod.namespace, p.pod.name, p.pod.container) if p.pod else (None, None, None)))
        for p in d.processes
    }


def _moved(before: float | None, after: float | None, by: float) -> bool:
    if before is None or after is None:
        return (before is None) != (after is None)
    return abs(after - before) >= by


def _device_changes(before: Device, after: Device, th: ChangeThresholds) -> Iterable[str]:
    name = f"device {after.index}"
    if (before.healthy, before.problems) != (after.healthy, after.problems):
        yield f"{name}: health changed"
    if _processes(before) != _processes(after):
        yield f"{name}: processes changed"
    mig_before = [(m.gpu_instance_id, m.profile, m.in_use) for m in before.mig_instances]
    mig_after = [(m.gpu_instance_id, m.profile, m.in_use) for m in after.mig_instances]
    if (before.mig_enabled, mig_before) != (after.mig_enabled, mig_after):
        yield f"{name}: MIG layout changed"
    if _moved(before.utilization_gpu_percent, after.utilization_gpu_percent, th.utilization_points):
        yield f"{name}: GPU utilization {before.utilization_gpu_percent} -> {after.utilization_gpu_percent}"
    if _moved(before.utilization_memory_percent, after.utilization_memory_percent, th.utilization_points):
        yield f"{name}: memory utilization {before.utilization_memory_percent} -> {after.utilization_memory_percent}"
    total = after.memory_total_bytes or before.memory_total_bytes or 0
    memory_step = max(th.memory_fraction * total, th.memory_min_bytes)
    before_used = None if before.memory_used_bytes is None else float(before.memory_used_bytes)
    after_used = None if after.memory_used_bytes is None else float(after.memory_used_bytes)
    if _moved(before_used, after_used, memory_step):
        yield f"{name}: memory used {before.memory_used_bytes} -> {after.memory_used_bytes}"
    if before.not_supported != after.not_supported:
        yield f"{name}: not-supported fields changed"
    yield from _profile_changes(name, before.profile, after.profile, th)


def _profile_changes(
    name: str, before: DeviceProfile | None, after: DeviceProfile | None, th: ChangeThresholds
) -> Iterable[str]:
    """The counters a diagnosis turns on (SM, tensor, DRAM), by the utilization threshold. Their
    first appearance (the second pass of a GPM card) and the byte rates, which move with every
    step, are no reason to write: they ride along with the next write or heartbeat."""
    if before is None or after is None or before.source != after.source:
        return
    for attr in ("sm_active_percent", "tensor_active_percent", "dram_bandwidth_percent"):
        if _moved(getattr(before, attr), getattr(after, attr), th.utilization_points):
            yield f"{name}: {attr} {getattr(before, attr)} -> {getattr(after, attr)}"


def changes(
    previous: AcceleratorNodeReport | None, current: AcceleratorNodeReport, th: ChangeThresholds | None = None
) -> list[str]:
    """Why ``current`` differs enough from ``previous`` to be written; empty when it does not."""
    th = th or ChangeThresholds()
    if previous is None or previous.status is None:
        return ["no report written yet"]
    before, after = previous.status, current.status
    assert after is not None  # build always sets it
    reasons: list[str] = []
    if (before.healthy, before.problems) != (after.healthy, after.problems):
        reasons.append("node health changed")
    for attr in ("backend", "accelerator_kind", "driver_version", "cuda_driver_version", "not_supported"):
        if getattr(before, attr) != getattr(after, attr):
            reasons.append(f"{attr} changed")
    fb, fa = before.fragmentation, after.fragmentation
    for attr in (
        "total_devices",
        "free_devices",
        "partially_used_devices",
        "whole_node_available",
        "unusable_mig_slices",
    ):
        if getattr(fb, attr) != getattr(fa, attr):
            reasons.append(f"fragmentation {attr} {getattr(fb, attr)} -> {getattr(fa, attr)}")
    cond_before = [(c.type, c.status, c.reason) for c in before.conditions]
    cond_after = [(c.type, c.status, c.reason) for c in after.conditions]
    if cond_before != cond_after:
        reasons.append("sampling condition changed")
    old = {_key(d): d for d in before.devices}
    new = {_key(d): d for d in after.devices}
    if [(_key(d), d.index) for d in before.devices] != [(_key(d), d.index) for d in after.devices]:
        reasons.append("device set changed")
    for key in new.keys() & old.keys():
        reasons.extend(_device_changes(old[key], new[key], th))
    return reasons


def decide(
    previous: AcceleratorNodeReport | None,
    current: AcceleratorNodeReport,
    *,
    seconds_since_write: float | None,
    heartbeat_seconds: float,
    thresholds: ChangeThresholds | None = None,
) -> WriteDecision:
    reasons = changes(previous, current, thresholds)
    if not reasons and (seconds_since_write is None or seconds_since_write >= heartbeat_seconds):
        reasons = ["heartbeat due"]
    return WriteDecision(write=bool(reasons), reasons=tuple(reasons))
