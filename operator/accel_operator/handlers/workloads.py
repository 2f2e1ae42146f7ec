"""The batch Jobs the operator made (label app.kubernetes.io/managed-by=accel-operator),
indexed by (namespace, name); a change wakes the AcceleratorJob they belong to."""

from __future__ import annotations

from typing import Any

import kopf

from accel_api import vocabulary as v
from accel_operator.adapters.kube import views
from accel_operator.handlers.scheduler import Scheduler

OURS = {v.LABEL_MANAGED_BY: views.MANAGED_BY}


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    @kopf.index("batch", "v1", "jobs", labels=OURS, id="workloads", registry=reg)
    async def workloads(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[Any, Any]:
        view = views.workload_view(body)
        return {(namespace or "", name): view} if view is not None else {}

    @kopf.on.event("batch", "v1", "jobs", labels=OURS, registry=reg)
    async def workload_changed(body: kopf.Body, **_: Any) -> None:
        view = views.workload_view(body)
        if view is not None:
            sched.workload_changed((view.namespace, view.name), view.job)
