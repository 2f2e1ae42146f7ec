"""AcceleratorNodeReports (written by the node agents): indexed by node; a change other than the
heartbeat wakes the jobs on that node, and a change of what the node can take (a device's health,
its free devices and their memory: ``engine.changes.ReportChanges``) wakes admission too."""

from __future__ import annotations

from typing import Any

import kopf

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube import reports
from accel_operator.engine import changes
from accel_operator.engine.scheduler import Scheduler


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    seen = changes.ReportChanges()

    @kopf.index(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, id="reports", registry=reg)
    async def node_reports(body: kopf.Body, **_: Any) -> dict[str, Any]:
        view = reports.report_view(body)
        return {view.node: view} if view is not None else {}

    @kopf.on.event(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, registry=reg)
    async def report_changed(body: kopf.Body, name: str, type: str | None, **_: Any) -> None:
        change = seen.observe(name, None if type == "DELETED" else reports.report_view(body))
        if change is not None:
            sched.report_changed(change[0], health_changed=change[1])
