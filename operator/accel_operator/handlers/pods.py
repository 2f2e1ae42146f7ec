"""Pods that hold accelerators (ours or anyone's) and the pods of our workloads.

Indexed twice: by the node they are bound to (what is used there) and by the AcceleratorJob
they belong to (how far its gang got). A change wakes the job; the scheduler reads the node's
usage again and wakes admission only if that freed devices (a pod binding where its job reserved
moves nothing). The handlers are coroutines: kopf runs plain functions in a thread each time.
"""

from __future__ import annotations

from typing import Any

import kopf

from accel_operator.adapters.kube import views
from accel_operator.handlers.scheduler import Scheduler
from accel_operator.reconcile.snapshot import PodView


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    seen: dict[tuple[str, str], PodView] = {}
    # The index parses each pod event's body first; the event handler for the same event (same
    # resourceVersion) takes that view instead of parsing the body again.
    parsed: dict[tuple[str, str], tuple[str | None, PodView | None]] = {}

    @kopf.index("", "v1", "pods", id="pods", registry=reg)
    async def pods(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[Any, Any]:
        view = views.pod_view(body)
        parsed[(namespace or "", name)] = (body.metadata.get("resourceVersion"), view)
        if view is None:
            return {}
        out: dict[Any, Any] = {}
        if view.node:
            out[view.node] = view
        if view.job is not None:
            out[view.job] = view
        return out

    @kopf.on.event("", "v1", "pods", registry=reg)
    async def pod_changed(body: kopf.Body, namespace: str | None, name: str, type: str | None, **_: Any) -> None:
        key = (namespace or "", name)
        hit = parsed.pop(key, None)
        if type == "DELETED":
            view = None
        elif hit is not None and hit[0] == body.metadata.get("resourceVersion"):
            view = hit[1]
        else:
            view = views.pod_view(body)
        before = seen.pop(key, None)
        if view is not None:
            seen[key] = view
        if before != view:
            sched.pods_changed(before, view)
