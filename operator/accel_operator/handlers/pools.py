"""AcceleratorPools: indexed by name; any change re-plans and re-admits the waiting jobs."""

from __future__ import annotations

from typing import Any

import kopf

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube import views
from accel_operator.engine.scheduler import Scheduler


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    @kopf.index(v.GROUP, v.VERSION, registry.POOL.plural, id="pools", registry=reg)
    async def pools(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
        return {name: views.pool_view(body)}

    @kopf.on.event(v.GROUP, v.VERSION, registry.POOL.plural, registry=reg)
    async def pool_changed(**_: Any) -> None:
        sched.pools_changed()
