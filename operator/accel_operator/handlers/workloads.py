"""The batch Jobs the operator made (label app.kubernetes.io/managed-by=accel-operator, selected
by the API server), indexed by (namespace, name); a change wakes the AcceleratorJob they belong
to. Watched by a lean informer (``adapters.kube.informer``), not kopf, as pods are."""

from __future__ import annotations

from collections.abc import Sequence

from kubernetes import client

from accel_api import vocabulary as v
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.informer import Informer, ObjKey, by_name
from accel_operator.engine.scheduler import Scheduler
from accel_operator.handlers.informers import for_namespaces
from accel_operator.reconcile.common.snapshot import WorkloadView

SELECTOR = f"{v.LABEL_MANAGED_BY}={views.MANAGED_BY}"


def informers(api: client.ApiClient, sched: Scheduler, namespaces: Sequence[str]) -> list[Informer[WorkloadView]]:
    def changed(key: ObjKey, before: WorkloadView | None, after: WorkloadView | None) -> None:
        view = after or before
        if view is not None:
            sched.workload_changed(key, view.job)

    return for_namespaces(
        "workloads",
        api,
        "batch/v1",
        "jobs",
        namespaces,
        view=views.workload_view,
        keys=by_name,
        on_change=changed,
        server_filter=SELECTOR,
        drop_unchanged=True,  # the Job controller's status writes the view does not hold
    )
