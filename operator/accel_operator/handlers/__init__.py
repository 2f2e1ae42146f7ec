"""kopf wiring, one module per watched kind (pools, nodes, pods, workloads, jobs, policies,
namespaces and node reports), all thin: they keep kopf's indexes (or, for the busy kinds, the
lean informers' stores) and mark what changed;
the engine (:mod:`accel_operator.engine`) observes, decides and applies; :mod:`admission` serves
the webhooks (when ``settings.webhook_port`` is set); :mod:`cost` starts the accountant.
``register`` declares everything into one registry."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kopf

from accel_operator.adapters.kube import informer as kube_informer
from accel_operator.adapters.kube.client import in_cluster_server
from accel_operator.adapters.kube.informer import Informer
from accel_operator.context import OperatorContext
from accel_operator.engine import signals
from accel_operator.engine.scheduler import Indices, Scheduler
from accel_operator.handlers import (
    admission,
    cost,
    essence,
    jobs,
    nodes,
    pods,
    policies,
    pools,
    reports,
    workloads,
)


def register(reg: kopf.OperatorRegistry, ctx: OperatorContext) -> Scheduler:
    sched = Scheduler(
        settings=ctx.settings,
        catalog=ctx.catalog,
        writer=ctx.writer,
        workloads=ctx.workloads,
        metrics=ctx.metrics,
        elector=ctx.elector,
        node_writer=ctx.nodes,
        checkpoints=ctx.checkpoints,
    )
    for module in (pools, reports):
        module.register(reg, sched)
    policies.register(reg, sched, ctx.watch_api)
    if ctx.settings.webhook_port:
        admission.register(reg, ctx.settings, ctx.watch_api)
    early_warnings = signals.Signals(sched, ctx.nodes, interruptions=ctx.interruptions, tpu=ctx.tpu)
    accountant = cost.register(reg, sched, ctx)

    @kopf.on.login(registry=reg)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster ServiceAccount first (at the server the pod is told), else the KUBECONFIG."""
        found = kopf.login_with_service_account(**kwargs)
        server = in_cluster_server()
        if found is not None and server is not None:
            return dataclasses.replace(found, server=server)
        return found or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=reg)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
        settings.posting.enabled = False  # decisions post their own events, with reasons
        essence.install(settings)  # no create/update handlers: no per-event deep copy of each body
        settings.watching.server_timeout = 300  # re-establish watches every 5 minutes at most
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 30
        # No cap on kopf's per-object workers: until every listed object is indexed, each worker
        # waits holding its slot, so a cap below the number of objects of one kind (pods, jobs)
        # deadlocks the start; afterwards a worker holds its slot for idle_timeout after its last
        # event, so a cap of N throttles each kind to about N / idle_timeout objects per second.
        settings.queueing.worker_limit = None
        # AcceleratorJobs, pods, the operator's batch Jobs and nodes: lean informers instead of
        # kopf (adapters/kube/informer.py says why).
        if ctx.watch_api is None:
            raise RuntimeError("OperatorContext.watch_api is not set: the job, pod, workload and node watches need it")
        watch_api = ctx.watch_api()
        ns = ctx.settings.namespaces
        job_watch = jobs.informers(watch_api, sched, ns, deleted=accountant.job_deleted)
        pod_watch = pods.informers(watch_api, sched, ns)
        workload_watch = workloads.informers(watch_api, sched, ns)
        node_watch = nodes.informer(watch_api, sched)  # cluster-scoped: one watch, whatever the namespaces
        watched: list[Informer[Any]] = [*job_watch, *pod_watch, *workload_watch, node_watch]
        for informer in watched:
            informer.start()
        memo.informers = watched
        sched.metrics.watches.source = lambda: kube_informer.stats(watched)
        sched.indices = Indices(
            pools=kwargs["pools"],
            nodes=node_watch.index,
            pods=pod_watch[0].index,  # shared by the informers of one kind
            workloads=workload_watch[0].index,
            jobs=job_watch[0].index,
            policies=kwargs["policies"],
            namespace_teams=kwargs["namespace_teams"],
            reports=kwargs["reports"],
            listed=lambda: all(i.listed for i in watched),
        )
        memo.scheduler_task = asyncio.create_task(sched.run(), name="accel-scheduler")
        memo.signal_tasks = early_warnings.start()

    @kopf.on.cleanup(registry=reg)
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        for informer in memo.get("informers") or ():
            informer.stop()
        await signals.stop(memo.get("signal_tasks") or ())
        await sched.close(memo.get("scheduler_task"))

    return sched
