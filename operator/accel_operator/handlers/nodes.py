"""Accelerator nodes: indexed by name (only nodes with GPU/TPU allocatable); a change that
matters for capacity (devices, readiness, cordon, a termination taint, labels) is read again by
the scheduler, which wakes admission for the pools that gained devices."""

from __future__ import annotations

from typing import Any

import kopf

from accel_operator.adapters.kube import views
from accel_operator.engine.scheduler import Scheduler
from accel_operator.reconcile.common.snapshot import NodeView


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    seen: dict[str, NodeView | None] = {}

    @kopf.index("", "v1", "nodes", id="nodes", registry=reg)
    async def nodes(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
        view = views.node_view(body)
        return {name: view} if view is not None else {}

    @kopf.on.event("", "v1", "nodes", registry=reg)
    async def node_changed(body: kopf.Body, name: str, type: str | None, **_: Any) -> None:
        view = None if type == "DELETED" else views.node_view(body)
        if seen.get(name) != view:  # heartbeats change nothing that matters
            seen[name] = view
            if view is None:
                seen.pop(name, None)
            sched.node_changed(name)
