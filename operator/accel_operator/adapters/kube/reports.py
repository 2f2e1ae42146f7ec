"""AcceleratorNodeReports (wire dicts, as kopf delivers them) as the snapshot's ReportViews.

The report is validated with the shared model first: an agent's report is outside input, and one
that does not validate is treated as no report (so, after the timeout, as stale), never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from accel_api.durations import parse_time
from accel_api.nodereport import AcceleratorNodeReportStatus, Device
from accel_operator.reconcile.common.reports import DeviceReport, PodKey, ReportView


def _device(d: Device) -> DeviceReport:
    pods: set[PodKey] = {(p.namespace, p.name) for p in d.allocated_pods}
    pods |= {(p.pod.namespace, p.pod.name) for p in d.processes if p.pod is not None}
    return DeviceReport(
        index=d.index,
        healthy=d.healthy,
        problems=tuple(d.problems[:4]),
        utilization=d.utilization_gpu_percent,
        memory_used=d.memory_used_bytes,
        memory_total=d.memory_total_bytes,
        pods=frozenset(pods),
        pod_uids=frozenset(p.pod_uid for p in d.processes if p.pod_uid is not None),
        # A process known by its pod's UID belongs to a pod: Kubernetes knows of it.
        stray_processes=sum(1 for p in d.processes if p.pod is None and p.pod_uid is None),
        utilization_memory=d.utilization_memory_percent,
        profile=d.profile,
    )


def report_view(body: Mapping[str, Any]) -> ReportView | None:
    """The node's report, or None when it names no node or its status does not validate."""
    spec = body.get("spec") or {}
    meta = body.get("metadata") or {}
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if not isinstance(node, str) or not node or node != meta.get("name"):
        return None  # a report must be named after the node it describes
    try:
        status = AcceleratorNodeReportStatus.model_validate(dict(body.get("status") or {}))
    except (ValidationError, TypeError):
        return None
    return ReportView(
        node=node,
        heartbeat=parse_time(status.heartbeat_time or status.sample_time),
        devices=tuple(_device(d) for d in status.devices),
    )
