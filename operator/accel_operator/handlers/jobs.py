"""AcceleratorJobs: indexed as parsed views; every change (and deletion) wakes the scheduler.

No kopf state is written on the objects (event handlers keep no progress, so no finalizer and no
annotations): the job's own status is the whole record, and deleting a job never waits for the
operator. Owner references garbage-collect its workloads.
"""

from __future__ import annotations

from typing import Any

import kopf

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube import views
from accel_operator.handlers.scheduler import Scheduler

PLURAL = registry.JOB.plural


def register(reg: kopf.OperatorRegistry, sched: Scheduler) -> None:
    @kopf.index(v.GROUP, v.VERSION, PLURAL, id="jobs", registry=reg)
    async def jobs(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[Any, Any]:
        return {(namespace or "", name): views.job_view(body)}

    @kopf.on.event(v.GROUP, v.VERSION, PLURAL, registry=reg)
    async def job_changed(namespace: str | None, name: str, type: str | None, **_: Any) -> None:
        if type == "DELETED":
            sched.forget((namespace or "", name))  # its reservation goes: its pool's waiting jobs are woken
        else:
            sched.mark((namespace or "", name))
