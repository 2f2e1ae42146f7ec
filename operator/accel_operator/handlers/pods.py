"""Pods that hold accelerators (ours or anyone's) and the pods of our workloads.

Indexed twice: by the node they are bound to (what is used there) and by the AcceleratorJob
they belong to (how far its gang got). A change wakes the job and, if it moved devices,
admission.
"""

from __future__ import annotations

from typing import Any

import kopf

from accel_operator.adapters.kube import views
from accel_operator.handlers.scheduler import Scheduler
from accel_operator.reconcile.snapshot import PodView


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    seen: dict[tuple[str, str], PodView] = {}

    @kopf.index("", "v1", "pods", id="pods", registry=reg)
    def pods(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        view = views.pod_view(body)
        if view is None:
            return {}
        out: dict[Any, Any] = {}
        if view.node:
            out[view.node] = view
        if view.job is not None:
            out[view.job] = view
        return out

    @kopf.on.event("", "v1", "pods", registry=reg)
    def pod_changed(body: kopf.Body, namespace: str | None, name: str, type: str | None, **_: Any) -> None:
        view = None if type == "DELETED" else views.pod_view(body)
        key = (namespace or "", name)
        before = seen.pop(key, None)
        if view is not None:
            seen[key] = view
        if before == view:
            return
        for v in (before, view):
            if v is not None and v.job is not None:
                sched.mark(v.job)
        moved = (before is None) != (view is None) or (
            before is not None and view is not None and (before.node, before.ended) != (view.node, view.ended)
        )
        if moved and ((before and before.devices) or (view and view.devices)):
            sched.capacity_changed()
