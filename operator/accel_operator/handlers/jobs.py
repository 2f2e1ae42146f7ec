"""AcceleratorJobs: kept as parsed views by a lean informer (``adapters.kube.informer``, as pods
and workloads are: about three events per job, each only a change of what the scheduler sees);
every change (and deletion) wakes the scheduler, and a deletion is told to the cost accountant.

No kopf state is written on the objects (no finalizer, no annotations): the job's own status is
the whole record, and deleting a job never waits for the operator. Owner references
garbage-collect its workloads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.informer import Informer, ObjKey, by_name
from accel_operator.engine.scheduler import Scheduler
from accel_operator.handlers.informers import for_namespaces
from accel_operator.reconcile.common.snapshot import JobView


def informers(
    api: client.ApiClient, sched: Scheduler, namespaces: Sequence[str], deleted: Callable[[JobView], None]
) -> list[Informer[JobView]]:
    def changed(key: ObjKey, before: JobView | None, after: JobView | None) -> None:
        if after is None:
            if before is not None:
                deleted(before)
            sched.forget(key)  # its reservation goes: its pool's waiting jobs are woken
        else:
            sched.mark(key)

    return for_namespaces(
        "jobs",
        api,
        f"{v.GROUP}/{v.VERSION}",
        registry.JOB.plural,
        namespaces,
        view=views.job_view,
        keys=by_name,
        on_change=changed,
    )
