"""AcceleratorNodeReports (written by the node agents): indexed by node; a change other than the
heartbeat wakes the jobs on that node, and a change of what the node can take (a device's health,
its free devices and their memory: ``node_capacity.signature``) wakes admission too."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kopf

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube import reports
from accel_operator.engine.scheduler import Scheduler
from accel_operator.reconcile.common import node_capacity
from accel_operator.reconcile.common.reports import ReportView


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    seen: dict[str, ReportView] = {}

    @kopf.index(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, id="reports", registry=reg)
    async def node_reports(body: kopf.Body, **_: Any) -> dict[str, Any]:
        view = reports.report_view(body)
        return {view.node: view} if view is not None else {}

    @kopf.on.event(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, registry=reg)
    async def report_changed(body: kopf.Body, name: str, type: str | None, **_: Any) -> None:
        view = None if type == "DELETED" else reports.report_view(body)
        before = seen.pop(name, None)
        if view is not None:
            seen[name] = view
        # A heartbeat alone changes nothing a decision reads now (staleness is seen on the resync).
        if before is not None and view is not None and replace(before, heartbeat=None) == replace(view, heartbeat=None):
            return
        node = view.node if view is not None else (before.node if before is not None else name)
        changed = node_capacity.signature(before) != node_capacity.signature(view)
        sched.report_changed(node, health_changed=changed)
