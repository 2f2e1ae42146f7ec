"""Accelerator nodes: kept by a lean informer (``adapters.kube.informer``, as AcceleratorJobs,
pods and batch Jobs are), indexed by name (only nodes with GPU/TPU allocatable). A change that
matters for capacity (devices, readiness, cordon, a termination taint, labels) is read again by
the scheduler, which wakes admission for the pools that gained devices.

Most node events are heartbeats (the conditions' ``lastHeartbeatTime``); the view holds no
timestamp, so the informer drops them in its watch thread: they never reach the event loop.
"""

from __future__ import annotations

from collections.abc import Hashable

from kubernetes import client

from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.informer import Informer, ObjKey
from accel_operator.engine.scheduler import Scheduler
from accel_operator.reconcile.common.snapshot import NodeView


def keys(key: ObjKey, _view: NodeView) -> list[Hashable]:
    return [key[1]]  # filed under its name: the index is read as ``nodes.get(name)``


def informer(api: client.ApiClient, sched: Scheduler) -> Informer[NodeView]:
    def changed(key: ObjKey, _before: NodeView | None, _after: NodeView | None) -> None:
        sched.node_changed(key[1])

    return Informer(
        "nodes", api, "v1", "nodes", view=views.node_view, keys=keys, on_change=changed, drop_unchanged=True
    )
