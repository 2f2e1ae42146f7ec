"""Pods that hold accelerators (ours or anyone's) and the pods of our workloads.

Watched by a lean informer (``adapters.kube.informer``), not kopf: about four events per admitted
job, each of which only changes what the scheduler sees. Indexed twice: by the node they are bound
to (what is used there) and by the AcceleratorJob they belong to (how far its gang got). A change
wakes the job; the scheduler reads the node's usage again and wakes admission only if that freed
devices (a pod binding where its job reserved moves nothing).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from kubernetes import client

from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.informer import Informer, ObjKey
from accel_operator.engine.scheduler import Scheduler
from accel_operator.handlers.informers import for_namespaces
from accel_operator.reconcile.common.snapshot import PodView


def keys(_key: ObjKey, view: PodView) -> list[Hashable]:
    out: list[Hashable] = []
    if view.node:
        out.append(view.node)
    if view.job is not None:
        out.append(view.job)
    return out


def informers(api: client.ApiClient, sched: Scheduler, namespaces: Sequence[str]) -> list[Informer[PodView]]:
    def changed(_key: ObjKey, before: PodView | None, after: PodView | None) -> None:
        sched.pods_changed(before, after)

    # A pod's status changes the view does not hold (its conditions' times, container ids) are
    # dropped in the watch thread.
    return for_namespaces(
        "pods", api, "v1", "pods", namespaces, view=views.pod_view, keys=keys, on_change=changed, drop_unchanged=True
    )
