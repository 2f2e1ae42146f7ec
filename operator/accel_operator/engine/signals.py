"""Early warnings, wired: background tasks that turn the clouds' notices into a taint on the
node and a checkpoint-now request to the jobs on it (the pure part is
:mod:`accel_operator.reconcile.nodes.early_warning`).

- AWS (``ACCEL_OPERATOR_SQS_QUEUE_URL``): the SQS queue EventBridge fills. Each notice's
  ``instance-id`` is matched to a node through ``spec.providerID`` (kopf's node index); the node
  is tainted, its jobs' pods asked to checkpoint, each job told by an event, and only then the
  message deleted. A crash in between re-delivers it; acting again changes nothing (same token).
  A notice for an instance that is no accelerator node of ours is deleted with a log line.
- GKE: a node in the index that carries ``cloud.google.com/impending-node-termination`` gets the
  same request, once per node incarnation (a scan of the index every second).
- TPU VMs outside GKE (``ACCEL_OPERATOR_TPU_POOLS``): the TPU API is polled for those pools'
  nodes; one reported PREEMPTED is tainted, goes into the scheduler's ``preempted_nodes`` (so
  ``decide`` counts the attempt as a preemption) and its jobs are woken.

Every task acts only while this replica leads (the same Lease as the scheduler), and only once
the scheduler may act (``Scheduler.can_act``: kopf's indexes and the informers hold their first
listing). Until then a notice stays on the queue rather than being judged against an empty index
(and deleted as "no node of ours").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.aws.interruptions import (
    Interruption,
    InterruptionKind,
    InterruptionQueue,
    nodes_by_instance,
)
from accel_operator.adapters.gcp.tpu import TpuNodes, TpuUnavailable
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.jobs import JobRef
from accel_operator.adapters.kube.nodes import NodeWriter
from accel_operator.engine import node_writes
from accel_operator.engine.scheduler import Scheduler
from accel_operator.reconcile.common.snapshot import NodeView, PodView
from accel_operator.reconcile.nodes import early_warning as ew

log = logging.getLogger("accel_operator.signals")

SOURCES: Final = {
    InterruptionKind.SPOT_INTERRUPTION: ew.WarningSource.AWS_SPOT_INTERRUPTION,
    InterruptionKind.REBALANCE: ew.WarningSource.AWS_REBALANCE,
    InterruptionKind.STATE_CHANGE: ew.WarningSource.AWS_STATE_CHANGE,
}
SCAN_SECONDS: Final = 1.0
RETRY_SECONDS: Final = 5.0


def _first(store: Iterable[Any]) -> Any:
    for value in store:
        return value
    return None


def aws_warning(interruption: Interruption, node: str) -> ew.NodeWarning:
    source = SOURCES[interruption.kind]
    stamp = interruption.time.strftime("%Y%m%dT%H%M%SZ")
    return ew.NodeWarning(node, source, ew.token(source, interruption.instance_id, stamp), interruption.instance_id)


@dataclass
class Signals:
    sched: Scheduler  # its settings, metrics and job writer are these signals' too
    node_writer: NodeWriter  # the taint and the checkpoint-now requests
    interruptions: InterruptionQueue | None = None
    tpu: TpuNodes | None = None
    handled: set[str] = field(default_factory=set)  # GKE and TPU tokens acted on by this process

    # --- what the indexes say ---------------------------------------------------------------

    def _active(self) -> bool:
        """kopf's indexes and the informers hold their first listing, and this replica leads."""
        return self.sched.can_act() and self.sched.elector.leading()

    def nodes(self) -> dict[str, NodeView]:
        idx = self.sched.indices
        assert idx is not None
        return {n.name: n for store in idx.nodes.values() if (n := _first(store)) is not None}

    def pods_on(self, node: str) -> list[PodView]:
        idx = self.sched.indices
        assert idx is not None
        store = idx.pods.get(node)
        return [p for p in store or () if p.node == node]

    def _uid(self, key: tuple[str, str]) -> str | None:
        idx = self.sched.indices
        assert idx is not None
        job = _first(idx.jobs.get(key) or ())
        return job.uid if job is not None else None

    # --- acting -----------------------------------------------------------------------------

    async def act(self, warning: ew.NodeWarning) -> ew.Response:
        """Taint, tell, ask: in that order, each step idempotent. Raises ClusterUnavailable when a
        write could not be made (the caller leaves the notice to be acted on again); a refusal
        (RBAC) is raised as the API's error, which the loops count as an error (the notice stays
        on the queue too)."""
        response = ew.respond(warning, self.nodes().get(warning.node), self.pods_on(warning.node))
        if response.taint is not None:
            await node_writes.apply(self.node_writer, response.taint, run=node_writes.in_thread)
        for e in response.events:
            uid = self._uid(e.job)
            if uid is None:
                continue  # the job is gone
            try:
                ref = JobRef(e.job[0], e.job[1], uid)
                await asyncio.to_thread(self.sched.applier.writer.event, ref, e.type, e.reason, e.message)
            except ClusterUnavailable as exc:  # an event is information: the request still goes out
                log.info("event %s on %s/%s not recorded: %s", e.reason, *e.job, exc)
        for r in response.requests:
            if asked := await node_writes.apply(self.node_writer, r, run=node_writes.in_thread):
                self.sched.metrics.checkpoint_requests.labels(r.reason).inc(asked)
        for job in response.jobs:
            self.sched.mark(job)
        self.sched.metrics.early_warnings.labels(warning.source.value).inc()
        log.warning("%s", response.summary, extra={"node": warning.node, "reason": warning.source.value})
        return response

    # --- AWS: the SQS queue -----------------------------------------------------------------

    async def handle(self, interruption: Interruption) -> bool:
        """Act on one notice; True when it may be deleted from the queue."""
        instances = nodes_by_instance((n.name, n.provider_id) for n in self.nodes().values())
        node = instances.get(interruption.instance_id)
        if node is None:
            log.info(  # %r: the id is from the queue (bounded by the parser, but any characters)
                "%s for %r: no accelerator node of ours runs on that instance; message deleted",
                interruption.kind.value,
                interruption.instance_id,
            )
            return True
        try:
            await self.act(aws_warning(interruption, node))
        except ClusterUnavailable as exc:
            log.warning("%s on node %s not acted on yet (%s): left on the queue", interruption.kind.value, node, exc)
            return False
        return True

    async def sqs_once(self) -> int:
        """One receive and what follows; the number of notices deleted."""
        assert self.interruptions is not None
        queue = self.interruptions
        notices = await asyncio.to_thread(queue.receive, 10, self.sched.settings.sqs_wait_seconds)

        async def one(notice: Interruption) -> bool:
            if not self._active():
                return False  # lost the lease mid-batch: it comes back to whoever leads
            if not await self.handle(notice):
                return False
            await asyncio.to_thread(queue.ack, notice)
            return True

        # A batch's notices concurrently (a zone reclaimed at once is many nodes, each a few API
        # calls); two for one node are safe: the taint is patched on the resourceVersion it read.
        results = await asyncio.gather(*(one(n) for n in notices), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return sum(1 for r in results if r is True)

    async def run_sqs(self, stop: asyncio.Event | None = None) -> None:
        while stop is None or not stop.is_set():
            if not self._active():
                await asyncio.sleep(SCAN_SECONDS)
                continue
            try:
                await self.sqs_once()
            except CloudUnavailable as exc:
                log.warning("the interruption queue did not answer (%s); trying again in %.0fs", exc, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)
            except Exception:  # one bad batch must not end the early warnings for good
                self.sched.metrics.reconcile_errors.labels("interruptions").inc()
                log.exception("reading the interruption queue failed; trying again in %.0fs", RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    # --- GKE: the impending-termination taint -----------------------------------------------

    async def gke_once(self) -> list[ew.Response]:
        nodes = self.nodes()
        out = []
        for warning in ew.gke_warnings(nodes.values()):
            if warning.token in self.handled:
                continue
            out.append(await self.act(warning))
            self.handled.add(warning.token)
        self._forget(nodes.values())
        return out

    def _forget(self, nodes: Iterable[NodeView]) -> None:
        """Keep the handled tokens of nodes that still exist only (bounded memory)."""
        live = {n.name for n in nodes}
        self.handled = {t for t in self.handled if t.split("/")[1] in live}

    async def run_gke(self, stop: asyncio.Event | None = None) -> None:
        while stop is None or not stop.is_set():
            await asyncio.sleep(SCAN_SECONDS)
            if not self._active():
                continue
            try:
                await self.gke_once()
            except ClusterUnavailable as exc:
                log.warning("a GKE termination warning was not acted on yet (%s); trying again", exc)
            except Exception:  # a bug must not end the early warnings for good
                self.sched.metrics.reconcile_errors.labels("gke-warnings").inc()
                log.exception("scanning for GKE termination taints failed; trying again")
                await asyncio.sleep(RETRY_SECONDS)

    # --- TPU VMs outside GKE: the TPU API ---------------------------------------------------

    def tpu_nodes(self) -> list[NodeView]:
        idx = self.sched.indices
        assert idx is not None
        pools = [p for name, store in idx.pools.items() if name in self.sched.settings.tpu_pools for p in store]
        views = [view for view, _problems in pools if view is not None]
        return [n for n in self.nodes().values() if any(p.owns(n) for p in views)]

    async def tpu_once(self) -> list[ew.Response]:
        assert self.tpu is not None
        nodes = self.tpu_nodes()
        hosts = {h for n in nodes if (h := ew.tpu_host(n.provider_id)) is not None}
        states: dict[ew.TpuHost, str] = {}
        for project, zone in sorted({(h.project, h.zone) for h in hosts}):
            answer = await asyncio.to_thread(self.tpu.states, project, zone)
            states.update({ew.TpuHost(project, zone, name): state for name, state in answer.items()})
        warnings = ew.tpu_preempted(nodes, states)
        # Level, not edge: the set is what the API says now (plus what it said of nodes that are
        # still in the index), so a restarted operator rebuilds it from the next poll.
        live = {n.name for n in self.nodes().values()}
        self.sched.preempted_nodes = {w.node for w in warnings} | (self.sched.preempted_nodes & live)
        out = []
        for warning in warnings:
            if warning.token in self.handled:
                continue
            out.append(await self.act(warning))
            self.handled.add(warning.token)
        return out

    async def run_tpu(self, stop: asyncio.Event | None = None) -> None:
        while stop is None or not stop.is_set():
            if self._active():
                try:
                    await self.tpu_once()
                except TpuUnavailable as exc:
                    log.warning("the TPU API did not answer (%s); trying again", exc)
                except ClusterUnavailable as exc:
                    log.warning("a TPU preemption was not acted on yet (%s); trying again", exc)
                except Exception:  # a bug must not end the early warnings for good
                    self.sched.metrics.reconcile_errors.labels("tpu-warnings").inc()
                    log.exception("polling the TPU API failed; trying again")
            await asyncio.sleep(self.sched.settings.tpu_poll_seconds)

    # --- start and stop ---------------------------------------------------------------------

    def start(self) -> list[asyncio.Task[None]]:
        tasks = [asyncio.create_task(self.run_gke(), name="accel-signals-gke")]
        if self.interruptions is not None:
            tasks.append(asyncio.create_task(self.run_sqs(), name="accel-signals-sqs"))
        if self.tpu is not None:
            tasks.append(asyncio.create_task(self.run_tpu(), name="accel-signals-tpu"))
        return tasks


async def stop(tasks: Iterable[asyncio.Task[None]]) -> None:
    pending = list(tasks)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
