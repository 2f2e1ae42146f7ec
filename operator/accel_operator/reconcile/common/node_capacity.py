"""What a node can take, from its agent's fresh report as well as from Kubernetes: pure functions.

**Free devices.** Kubernetes counts a device free when no pod requests it. The agent sees more:
a process no pod owns (a debugging session, a leftover of a killed container), memory held on a
device no pod uses. Such a *stray* device (healthy, attributed to no pod, with a process no pod
owns or at least ``BUSY_MEMORY_FRACTION`` of its memory in use, the agent's own threshold) is
taken off the node's free devices. A device the report attributes to a pod is Kubernetes' to
count: the report lags (a pod that ended a moment ago still shows there until the next report),
and Kubernetes' requests already count the pods that hold devices. The free memory of the
report's *clean* devices (healthy, no pod, no process, under 5% in use) is kept, so a gang whose
per-device memory need exceeds it is not placed there (:mod:`snapshot`: a device the report does
not list as clean is not refused for memory). A node without a fresh report is counted from
Kubernetes' view alone, and waiting jobs say so.

**Failing devices: which signal is trusted.** One failing device of eight should not take the
whole node out, but the operator does not choose which devices a pod gets: the kubelet's device
manager hands any device the device plugin advertises as healthy. The NVIDIA device plugin (and
GKE's TPU plugin) report a device they find unhealthy (XID, ECC) through ``ListAndWatch``; the
kubelet then keeps it in ``status.capacity`` and leaves it out of ``status.allocatable``. That is
the signal trusted here, not the report alone:

- every failing device the report shows is withheld by the plugin (``capacity - allocatable`` is
  at least the number of failing devices): the node stays schedulable, its usable capacity lower
  by those devices (Kubernetes' allocatable leaves them out);
- otherwise (a plugin without health checks, or one that has not noticed yet): a new pod could be
  handed the bad device, so the node is *condemned*: no new work is admitted there and it gets
  the ``accel.dev/device-unhealthy`` NoSchedule taint (:func:`health.node_actions`) until a fresh
  report shows the device healthy or the plugin withholds it.

A failing device held by a running pod is not counted as safe: when that pod ends (the job on it
is moved) the device is free again, and the plugin would hand it out. In both cases the jobs on
the failing devices are moved (:func:`health.amend`); jobs on the node's healthy devices stay.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import replace

from accel_operator.reconcile.common.reports import DeviceReport, ReportView
from accel_operator.reconcile.common.snapshot import Gang, NodeView, PoolCapacity

# A device with no process holding at least this share of its memory is in use by something
# (the agent's fragmentation figures use the same 5%).
BUSY_MEMORY_FRACTION = 0.05


def device_clean(d: DeviceReport) -> bool:
    """Healthy, attributed to no pod, no process, and (where measured) under 5% of its memory used."""
    if not d.healthy or d.pods or d.pod_uids or d.stray_processes:
        return False
    if d.memory_used is not None and d.memory_total:
        return d.memory_used < BUSY_MEMORY_FRACTION * d.memory_total
    return True


def device_stray(d: DeviceReport) -> bool:
    """Used by something Kubernetes does not know of: healthy, no pod, but a process no pod owns or
    memory in use (a failing device is counted apart; a pod's device is Kubernetes' to count)."""
    return d.healthy and not d.pods and not d.pod_uids and not device_clean(d)


def free_memory(d: DeviceReport) -> int | None:
    if d.memory_total is None:
        return None
    return max(0, d.memory_total - (d.memory_used or 0))


def withheld(node: NodeView) -> int:
    """Devices the device plugin reports unhealthy: in the node's capacity, not in its allocatable."""
    if node.capacity_devices is None:
        return 0
    return max(0, node.capacity_devices - node.devices)


def plugin_excludes(node: NodeView, sick: int) -> bool:
    """Whether the device plugin withholds (at least) ``sick`` devices, so none goes to a new pod."""
    return sick > 0 and withheld(node) >= sick


def judge(node: NodeView, report: ReportView | None, now: dt.datetime, stale_after: float) -> NodeView:
    """``node`` with what a fresh report says: its stray devices, its clean devices' free memory,
    its failing devices and whether it is condemned (a failing device the device plugin may still
    hand to a new pod)."""
    if report is None or not report.fresh(now, stale_after):
        if node.clean_memory is None and not node.sick_devices and not node.stray_devices and not node.condemned:
            return node
        return replace(node, clean_memory=None, stray_devices=0, sick_devices=0, condemned=False)
    sick = len(report.sick)
    clean = tuple(sorted((free_memory(d) for d in report.devices if device_clean(d)), key=lambda m: -(m or 0)))
    return replace(
        node,
        stray_devices=sum(1 for d in report.devices if device_stray(d)),
        clean_memory=clean,
        sick_devices=sick,
        condemned=sick > 0 and not plugin_excludes(node, sick),
    )


def judge_all(
    nodes: Iterable[NodeView], reports: Mapping[str, ReportView], now: dt.datetime, stale_after: float
) -> list[NodeView]:
    return [judge(n, reports.get(n.name), now, stale_after) for n in nodes]


def signature(report: ReportView | None) -> tuple[object, ...]:
    """What of a report changes a node's capacity: its failing and stray devices, and its clean
    devices with their free memory in GiB (so a few bytes of drift wake nothing)."""
    if report is None:
        return ()
    return (
        tuple(d.index for d in report.sick),
        tuple(d.index for d in report.devices if device_stray(d)),
        tuple((d.index, round((free_memory(d) or 0) / 2**30)) for d in report.devices if device_clean(d)),
    )


def views(cap: PoolCapacity, gang: Gang) -> str:
    """What a waiting job's message adds about where the pool's free devices were counted from:
    nodes whose report leaves too little memory free, nodes without a fresh report."""
    parts: list[str] = []
    if gang.memory_bytes > 0:
        short = sum(
            1
            for i, f in enumerate(cap.node_free)
            if f >= gang.per_node and i < len(cap.node_memory) and not cap.holds(i, gang)
        )
        if short:
            parts.append(
                f"{short} node(s) have the devices but their reports show less than "
                f"{gang.memory_bytes / 2**30:.1f} GiB free on each"
            )
    if cap.unreported_nodes and cap.node_memory:  # a pool with no report at all: Kubernetes' view, as before
        parts.append(f"{cap.unreported_nodes} node(s) without a fresh report counted from Kubernetes' view")
    return "".join(f" ({p})" for p in parts)
