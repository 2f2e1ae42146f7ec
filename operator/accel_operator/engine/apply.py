"""Applying a pass's writes: the status first, then the workload, deletions and requests in the
decision's order, then its events in their own threads (a repeated Event coalesced into a series:
:mod:`.events`); node taints; checkpoint lookups. Every call runs in a thread of the call pools,
retried with bounded backoff while the API server is unavailable.

An admission of a new or waiting job (``Decision.status_after_workload``) is the exception: its
batch Job records the admission (its ``accel.dev/admission`` annotation) and is created first, and
its status merge patch is held back in the overlay: the job's next status write (Running, once the
pods have their nodes) carries it, composed with its own, or, when the pods have not all got their
nodes within ``admitted_status_seconds``, it is written by itself (:meth:`Applier._release`), so
an admitted job whose pods start writes one status, not two. Until it is written, the Job's
annotation is the admission's record: the snapshot's reservations read it, and a restarted
operator adopts it (``reconcile.job.decide.recorded``).

A decision's status is kept in an in-memory overlay (:meth:`Applier.job_view`) until the watch
shows it, so a pass that runs before the watch caught up never admits a job twice; a workload
this process created stands in for the watch the same way (:meth:`Applier.unseen_workloads`).

Every call is fenced by the Lease (``calls.fenced``, asked in the call's thread just before it goes
out): a replica that lost the Lease while its writes were queued (paused past the Lease, or still
draining a burst) drops them, and its decisions' overlays with them, instead of writing after the
new leader.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from accel_api import catalog as catalog_mod
from accel_api.durations import parse_time
from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_operator.adapters import errors
from accel_operator.adapters.aws.checkpoints import CheckpointStore
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube import workloads as wl_mod
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.jobs import JobGone, JobRef, JobWriter
from accel_operator.adapters.kube.nodes import NodeWriter
from accel_operator.engine import calls, node_writes
from accel_operator.engine import events as events_mod
from accel_operator.engine.cache import Observed
from accel_operator.engine.clock import Clock
from accel_operator.engine.loop import Marks
from accel_operator.engine.schedule import Write
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import Decision
from accel_operator.reconcile.common.snapshot import JobKey, JobView, PoolView, Snapshot, WorkloadView
from accel_operator.reconcile.job import resume
from accel_operator.reconcile.job import sweep as sweep_mod
from accel_operator.reconcile.nodes import consolidate, health
from accel_operator.settings import OperatorSettings

log = logging.getLogger("accel_operator.scheduler")

T = TypeVar("T")

# How long a workload this process created stands in for the watch that has not shown it yet.
CREATED_TTL_SECONDS = 60.0
# Checkpoint lookups whose thread has not ended (a store that did not bound itself); a new one
# waits (the job, with the reason) until fewer remain. Lookups are rare: one per new attempt.
LOOKUP_THREADS = 8


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


@dataclass
class _Pending:
    """A status this process wrote (or is writing) that the watch has not shown yet."""

    status: AcceleratorJobStatus  # validated once, when the decision is applied
    revision: int | None = None  # the resourceVersion the write returned; None while in flight
    # An admission's status merge patch held back (its batch Job, which records the admission, is
    # created first): written with the job's next status write (Running, when the pods have their
    # nodes) or by itself after ``admitted_status_seconds``. None: nothing held.
    held: dict[str, Any] | None = None
    # When the held admission goes out by itself (the engine clock's monotonic seconds): its Job
    # was created ``admitted_status_seconds`` before. A replay on a virtual clock releases it at
    # that time (:meth:`Applier.release_due`), the operator by a timer on the event loop.
    due: float | None = None
    # A new job's first "still waiting" write held back (``waiting_status_seconds``): the Events
    # of its decisions meanwhile, posted with the held status when it goes out, dropped when an
    # admission (or any other decision) takes the held status first. None: no waiting write held.
    waiting: tuple[act.RecordEvent, ...] | None = None


class Engine(Protocol):
    """What the applier reads of the scheduler that owns it."""

    settings: OperatorSettings
    catalog: catalog_mod.Catalog
    metrics: OperatorMetrics
    observed: Observed
    marks: Marks
    clock: Clock

    def leading(self) -> bool:
        """Whether this replica holds the Lease now: asked before every call."""
        ...


@dataclass
class Applier:
    engine: Engine  # the scheduler that owns it: its settings, metrics, clock, marks, cache, Lease
    writer: JobWriter
    workloads: wl_mod.WorkloadClient
    # Rescheduling on node reports: taints and checkpoint-now annotations (None: not applied).
    node_writer: NodeWriter | None = None
    checkpoints: CheckpointStore | None = None  # S3 lookups for resumes; None: S3 resumes wait with a reason
    # The threads the API calls run in: the lease, the writes and the events each have their own.
    pools: calls.CallPools | None = None
    # One slot per write thread, held by a decision from its status write to its workload's.
    slots: calls.Slots | None = None
    overlay: dict[JobKey, _Pending] = field(default_factory=dict)
    # The resourceVersion of this process's last background status write (the cost ledger's) of
    # a job with no decision pending: the precondition of the job's next write until the watch shows it.
    revisions: dict[JobKey, int] = field(default_factory=dict)
    # Workloads this process created that the watch has not shown yet: (namespace, name) ->
    # (view, monotonic time of the create). Without them, every pass until the watch catches up
    # would create the workload again (a 409 and a read each time).
    created: dict[tuple[str, str], tuple[WorkloadView, float]] = field(default_factory=dict)
    acting: set[JobKey] = field(default_factory=set)  # jobs whose last decision is being applied
    in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    # (node, taint | untaint) -> monotonic time of the write: not written again until the watch shows it.
    node_acting: dict[tuple[str, str], float] = field(default_factory=dict)
    # The answer of the last checkpoint lookup per job (for one attempt): what the next decision reads.
    lookups: dict[JobKey, resume.Lookup] = field(default_factory=dict)
    # Threads of checkpoint lookups that may still run (one whose wait timed out): at most LOOKUP_THREADS.
    lookup_threads: set[threading.Thread] = field(default_factory=set)
    closed: bool = False  # the operator is stopping: nothing new is started
    # (namespace, name, kind) -> (monotonic time of a delete this process sent, a decision's or
    # the sweep's; its job): the sweep does not send it again until the watch shows it gone (or the TTL).
    deleting: dict[tuple[str, str, str], tuple[float, JobKey]] = field(default_factory=dict)
    # Deleted jobs whose orphaned workloads or pods the sweep deleted -> when (the last one): the
    # cost accountant charges such a job's open attempt up to then (engine/accountant.py).
    swept_gone: dict[JobKey, dt.datetime] = field(default_factory=dict)
    rechecks: set[JobKey] = field(default_factory=set)  # jobs with a sweep recheck already timed
    # Repeated Events coalesced per (job, type, reason), as client-go's recorder does.
    event_series: events_mod.EventSeries = field(default_factory=events_mod.EventSeries)
    # Held admissions -> when each goes out by itself (``_Pending.due``); entries of those written
    # since are dropped by :meth:`next_release`.
    held_due: dict[JobKey, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pools is None:
            self.pools = calls.CallPools(self.engine.settings.api_threads)
        if self.slots is None:
            self.slots = calls.Slots(self.engine.settings.api_threads)

    @property
    def call_pools(self) -> calls.CallPools:
        assert self.pools is not None
        return self.pools

    def mark(self, key: JobKey) -> None:
        """Decide ``key`` again on the next pass."""
        self.engine.observed.touch_job(key)
        self.engine.marks.mark(key)

    # --- what the watches have not shown yet --------------------------------------------------

    def job_view(self, raw: JobView) -> JobView:
        pending = self.overlay.get(raw.key)
        if pending is None:
            if self.revisions:
                written = self.revisions.get(raw.key)
                if written is not None and _int(raw.resource_version) < written:
                    return replace(raw, resource_version=str(written))  # a cost write the watch has not shown
                self.revisions.pop(raw.key, None)
            return raw
        seen = _int(raw.resource_version)
        if pending.revision is not None and seen >= pending.revision:
            del self.overlay[raw.key]  # the watch caught up
            return raw
        if pending.revision is not None:
            # The next write's precondition is the version this process wrote, not the older one
            # the watch still shows: that would fail (409), be read again and be sent twice.
            return replace(raw, status=pending.status, resource_version=str(pending.revision))
        return replace(raw, status=pending.status)

    def unseen_workloads(self) -> dict[tuple[str, str], WorkloadView]:
        """The workloads this process created that the watch has not shown yet (those it shows,
        or never will within the TTL, are dropped)."""
        if self.created:
            expired = self.engine.clock.monotonic() - CREATED_TTL_SECONDS
            for key, (_w, at) in list(self.created.items()):
                if key in self.engine.observed.workloads or at < expired:
                    del self.created[key]  # the watch caught up (or never will: act on what it says)
        return {key: w for key, (w, _at) in self.created.items()}

    # --- apply ------------------------------------------------------------------------------

    def apply(self, w: Write, pools: Mapping[str, PoolView]) -> None:
        job, decision, new = w.job, w.decision, w.patch
        if (new is None and not decision.actions) or self.closed:
            return
        before = self.overlay.get(job.key)
        wait = self._quiet_seconds(job, decision, new, before)
        if wait is not None and new is not None and w.status is not None:
            self._hold_waiting(w, new, before, wait)
            return
        self.engine.metrics.decisions.labels(decision.phase.value).inc()
        hold = False
        if w.status is not None:
            if new is not None and before is not None and before.held is not None:
                new = compose(before.held, new)  # the admission (or the waiting status) held back goes with this write
                self.held_due.pop(job.key, None)
            hold = (
                new is not None and decision.status_after_workload and self.engine.settings.admitted_status_seconds > 0
            )
            # The status it leaves is the job's as decided with the patch's fields: only those
            # are validated (plan, conditions shared), the rest kept from the model the job held
            # (``w.status`` is that model's dump with the patch merged: parsing it whole validated
            # every field again, for each write).
            status = (
                views.job_status_patched(job.status, w.status, w.patch, plan_model=w.plan)
                if w.patch is not None
                else views.job_status(w.status, plan_model=w.plan)
            )
            self.overlay[job.key] = _Pending(status, held=new if hold else None)
            self.engine.observed.touch_job(job.key)
        self.acting.add(job.key)
        # The write keeps the pools only: a pass's snapshots (one per admission, each with the
        # reservations admitted before it) would all live as long as their writes were queued.
        task = asyncio.create_task(self._write(job, decision, None if hold else new, pools, hold=hold))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        task.add_done_callback(lambda _: self._acted(job.key))

    def _quiet_seconds(
        self, job: JobView, decision: Decision, new: dict[str, Any] | None, before: _Pending | None
    ) -> float | None:
        """How much longer a new job's "still waiting" decision is held back before its status and
        Event are written (``waiting_status_seconds`` from the job's creation); None: written now.
        Only a job whose status this process has not written and the watch shows empty (a new
        job) or whose first waiting write is held already; only a decision that says it waits
        (Pending, Events only): an admission soon after the job arrived then costs no waiting write."""
        quiet = self.engine.settings.waiting_status_seconds
        if quiet <= 0 or new is None or _priority(decision) != calls.WAITING:
            return None
        if before is not None and before.waiting is None:
            return None  # a write of this process's is pending: not a new job's first
        if before is None and job.status.phase is not None:
            return None  # its status was written: the transition shows at once
        left = quiet - (self.engine.clock.now() - job.created).total_seconds()
        return left if left > 0 else None

    def _hold_waiting(self, w: Write, new: dict[str, Any], before: _Pending | None, wait: float) -> None:
        job, decision = w.job, w.decision
        events = tuple(a for a in decision.actions if isinstance(a, act.RecordEvent))
        status = views.job_status(w.status, plan_model=w.plan) if w.status is not None else job.status
        if before is not None and before.held is not None and before.waiting is not None:
            # Waiting still (its reason may have changed): one status and its Events, when due.
            before.status, before.held = status, compose(before.held, new)
            before.waiting = (*before.waiting, *(e for e in events if e not in before.waiting))
        else:
            due = self.held_due[job.key] = self.engine.clock.monotonic() + wait
            self.overlay[job.key] = _Pending(status, held=new, due=due, waiting=events)
            asyncio.get_running_loop().call_later(wait, self._release, job.key)
            self.engine.metrics.waiting_held.inc()
        self.engine.observed.touch_job(job.key)

    def _acted(self, key: JobKey) -> None:
        self.acting.discard(key)
        marks = self.engine.marks
        if key in marks.deferred:  # marked while its decision was being applied: the next pass's
            marks.deferred.discard(key)
            marks.dirty.add(key)
        if key in marks.dirty:
            marks.wake.set()  # a pass skipped it while its decision was being applied

    async def _write(
        self,
        job: JobView,
        decision: Decision,
        new: dict[str, Any] | None,
        pools: Mapping[str, PoolView],
        *,
        hold: bool = False,
    ) -> None:
        """Write ``new`` (the status), then the decision's actions; with ``hold``, the status is
        held back (its batch Job records the admission) and written by :meth:`_release` when no
        write of the job's has taken it first."""
        ref = JobRef(job.namespace, job.name, job.uid, job.resource_version or None)
        events: list[act.RecordEvent] = []
        assert self.slots is not None
        try:
            async with self.slots.slot(_priority(decision)):
                if new is not None:
                    revision = await self._retrying("patch_status", self.writer.patch_status, ref, new)
                    self.engine.metrics.api_writes.labels("status").inc()
                    pending = self.overlay.get(job.key)
                    if pending is not None:
                        pending.revision = _int(revision)
                        self.engine.observed.touch_job(job.key)  # the next pass drops it once the watch shows it
                # The state first (the workload, deletions, requests), in the decision's order; its
                # events go to their own threads after it: a burst's Events never delay the next
                # admission's writes. An event is recorded only if every action before it in the
                # decision was applied, as when they ran in line.
                for action in decision.actions:
                    if isinstance(action, act.RecordEvent):
                        events.append(action)
                    else:
                        await self._act(job, ref, action, pools)
            if hold:
                delay = self.engine.settings.admitted_status_seconds
                pending = self.overlay.get(job.key)
                if pending is not None and pending.held is not None:
                    pending.due = self.held_due[job.key] = self.engine.clock.monotonic() + delay
                asyncio.get_running_loop().call_later(delay, self._release, job.key)
        except JobGone:
            self.overlay.pop(job.key, None)
            self.engine.observed.touch_job(job.key)
        except calls.NotLeading:
            # Dropped: the new leader decides this job again from what the cluster holds.
            self._fenced(job.key)
            events = []
        except Exception as exc:  # noqa: BLE001 - any failure: count it, retry the job, keep the loop
            self.engine.metrics.reconcile_errors.labels(type(exc).__name__).inc()
            log.warning("applying the decision for %s/%s failed (%s); it will be taken again", *job.key, exc)
            self.overlay.pop(job.key, None)
            self.engine.observed.touch_job(job.key)
            await asyncio.sleep(1.0)
            self.mark(job.key)
        finally:
            if events and not self.closed:
                task = asyncio.create_task(self._record(job, ref, events))
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)

    def _release(self, key: JobKey) -> None:
        """Write the admission held back for ``key`` if no write of the job's took it (its pods
        did not all have their nodes within ``admitted_status_seconds``): ``kubectl get`` then
        says Admitted, not Pending, while the Job waits for nodes."""
        pending = self.overlay.get(key)
        if pending is None or pending.held is None or self.closed:
            return
        left = (pending.due or 0.0) - self.engine.clock.monotonic()
        if left > 0:  # not due on the engine's clock (a replay's virtual one: release_due writes it)
            asyncio.get_running_loop().call_later(left, self._release, key)
            return
        if key in self.acting:  # a decision of the job is being written: look again after it
            asyncio.get_running_loop().call_later(1.0, self._release, key)
            return
        self.acting.add(key)
        task = asyncio.create_task(self._write_held(key, pending))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        task.add_done_callback(lambda _: self._acted(key))

    def next_release(self) -> float | None:
        """When (the engine clock's monotonic seconds) the next held admission goes out by itself;
        None: none is held."""
        for key in [k for k in self.held_due if not self._holds(k)]:
            del self.held_due[key]  # written (with Running, or by itself), dropped, or gone
        return min(self.held_due.values()) if self.held_due else None

    def release_due(self) -> int:
        """Write every held admission that is due on the engine's clock (a replay calls it as its
        virtual clock moves: the event loop's timers run on real time); the number started."""
        now = self.engine.clock.monotonic()
        due = [k for k, at in self.held_due.items() if at <= now]
        released = 0
        for key in due:
            del self.held_due[key]
            if self._holds(key):
                self._release(key)
                released += 1
        return released

    def _holds(self, key: JobKey) -> bool:
        pending = self.overlay.get(key)
        return pending is not None and pending.held is not None

    async def _write_held(self, key: JobKey, pending: _Pending) -> None:
        assert self.slots is not None and pending.held is not None
        job = self.engine.observed.jobs.get(key)
        if job is None:  # gone: its Job is the garbage collector's (an owner reference)
            self.overlay.pop(key, None)
            return
        ref = JobRef(job.namespace, job.name, job.uid, job.resource_version or None)
        try:
            # A held admission writes before waiting jobs; a held "still waiting" status after the
            # writes that change what runs, as when it was decided (_priority).
            priority = calls.WAITING if pending.waiting is not None else calls.URGENT
            async with self.slots.slot(priority):
                revision = await self._retrying("patch_status", self.writer.patch_status, ref, pending.held)
            self.engine.metrics.api_writes.labels("status").inc()
            events = pending.waiting
            if events is not None:
                self.engine.metrics.decisions.labels(JobPhase.PENDING.value).inc()
            if self.overlay.get(key) is pending:
                pending.held, pending.revision, pending.waiting = None, _int(revision), None
            self.engine.observed.touch_job(key)
            if events and not self.closed:  # the held waiting decisions' Events, after their status
                task = asyncio.create_task(self._record(job, ref, list(events)))
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)
        except JobGone:
            self.overlay.pop(key, None)
            self.engine.observed.touch_job(key)
        except calls.NotLeading:
            self._fenced(key)
        except Exception as exc:  # noqa: BLE001 - count it; the Job records the admission, try again
            self.engine.metrics.reconcile_errors.labels(type(exc).__name__).inc()
            log.warning("writing the admission of %s/%s failed (%s); it will be tried again", *key, exc)
            asyncio.get_running_loop().call_later(5.0, self._release, key)

    def _fenced(self, key: JobKey) -> None:
        self.engine.metrics.fenced_writes.inc()
        log.info("the decision for %s/%s was not applied: this replica no longer holds the lease", *key)
        self.overlay.pop(key, None)
        self.engine.observed.touch_job(key)

    async def _record(self, job: JobView, ref: JobRef, events: list[act.RecordEvent]) -> None:
        """Post a decision's events in their order, in the events' own threads (an event is
        information, not state: one the API server refuses is logged, and the decision stands).
        A repeat of a (job, type, reason) is coalesced into the first one's series
        (:mod:`.events`); every occurrence is logged."""
        metrics = self.engine.metrics
        for event in events:
            log.info(
                "%s/%s: %s: %s",
                job.namespace,
                job.name,
                event.reason,
                event.message,
                extra={"job": f"{job.namespace}/{job.name}", "reason": event.reason},
            )
            key = (ref.namespace, ref.name, ref.uid, event.type, event.reason)
            what, count = self.event_series.record(key, self.engine.clock.monotonic())
            if what is events_mod.Write.SUPPRESS:
                metrics.events_coalesced.inc()
                continue
            try:
                if what is events_mod.Write.CREATE:
                    fn: Callable[..., None] = self.writer.event
                    args: tuple[Any, ...] = (ref, event.type, event.reason, event.message)
                else:
                    fn, args = self.writer.event_series, (ref, event.type, event.reason, event.message, count)
                await calls.run_in(self.call_pools.events, calls.fenced(self.engine.leading, fn), *args)
                metrics.api_writes.labels("event" if what is events_mod.Write.CREATE else "event_series").inc()
            except calls.NotLeading:
                self.event_series.forget(key)
                metrics.fenced_writes.inc()
                return
            except ClusterUnavailable as exc:
                self.event_series.forget(key)
                log.info("event %s on %s/%s not recorded: %s", event.reason, *job.key, exc)

    async def _act(self, job: JobView, ref: JobRef, action: act.Action, pools: Mapping[str, PoolView]) -> None:
        if isinstance(action, act.RecordEvent):
            await self._record(job, ref, [action])
        elif isinstance(action, act.CreateWorkload):
            assert job.spec is not None
            pool = pools.get(action.pool)
            accel = self.engine.catalog.get(pool.spec.accelerator) if pool is not None else None
            if pool is None or accel is None:
                raise ClusterUnavailable(f"pool {action.pool} or its accelerator is gone")
            spec = wl_mod.WorkloadSpec(
                job_name=job.name,
                namespace=job.namespace,
                job_uid=job.uid,
                spec=job.spec,
                attempt=action.attempt,
                pool_name=action.pool,
                pool=pool.spec,
                accelerator=accel,
                devices=action.devices,
                nodes=action.nodes,
                resume_from=action.resume_from,
                avoid_nodes=consolidate.avoid_nodes(job),
                admission=action.admission,
            )
            batch_job, service = wl_mod.build(spec)
            created = await self._retrying("create_workload", self.workloads.create, batch_job, service)
            self.engine.metrics.api_writes.labels("workload").inc()
            name = str(batch_job["metadata"]["name"])
            view = WorkloadView(
                namespace=job.namespace, name=name, job=job.key, attempt=action.attempt, admission=action.admission
            )
            self.created[(job.namespace, name)] = (view, self.engine.clock.monotonic())
            if created:
                self.engine.metrics.workloads_created.inc()
                since = parse_time(job.status.last_failure.time if job.status.last_failure else None) or job.created
                self.engine.metrics.admission_latency.observe((self.engine.clock.now() - since).total_seconds())
        elif isinstance(action, act.RequestCheckpoint):
            if self.node_writer is None:
                return
            await node_writes.apply(self.node_writer, action, run=self._retrying)
            self.engine.metrics.checkpoint_requests.labels(action.reason).inc()
            # The move is due after the grace: decide the job again then, not at the next resync.
            grace = self.engine.settings.checkpoint_grace_seconds + 0.5
            asyncio.get_running_loop().call_later(grace, self.mark, job.key)
        elif isinstance(action, act.DeleteWorkload):
            self.created.pop((job.namespace, action.name), None)
            ident = (job.namespace, action.name, sweep_mod.Kind.WORKLOAD.value)
            self.deleting[ident] = (self.engine.clock.monotonic(), job.key)
            await self._retrying("delete_workload", self.workloads.delete, job.namespace, action.name)
        elif isinstance(action, act.ResolveCheckpoint):
            await self._resolve(job.key, action)

    # --- the sweep (reconcile/job/sweep.py) -----------------------------------------------------

    def sweep(self, found: sweep_mod.Sweep, snap: Snapshot) -> None:
        """Delete what the sweep found (each once while the watch has not shown it gone), and
        look again at the jobs whose objects were too young to judge when they are not."""
        if self.closed:
            return
        tick = self.engine.clock.monotonic()
        for ident, (at, key) in list(self.deleting.items()):
            if tick - at >= CREATED_TTL_SECONDS or not _present(snap, ident, key):
                del self.deleting[ident]  # gone (one of that name may come again), or never will be
        loop = asyncio.get_running_loop()
        for key, due in found.recheck:
            if key not in self.rechecks:
                self.rechecks.add(key)
                delay = max(0.0, (due - self.engine.clock.now()).total_seconds()) + 0.5
                loop.call_later(delay, self._recheck, key)
        for stray in found.strays:
            ident = (stray.namespace, stray.name, stray.kind.value)
            if ident in self.deleting:
                continue
            self.deleting[ident] = (tick, stray.key)
            task = asyncio.create_task(self._sweep_one(stray, ident))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    def _recheck(self, key: JobKey) -> None:
        self.rechecks.discard(key)
        self.mark(key)

    async def _sweep_one(self, stray: sweep_mod.Stray, ident: tuple[str, str, str]) -> None:
        ns, name = stray.namespace, stray.name
        try:
            if stray.kind is sweep_mod.Kind.WORKLOAD:
                self.created.pop((ns, name), None)
                await self._retrying("delete_workload", self.workloads.delete, ns, name)
            else:
                await self._retrying("delete_pod", self.workloads.delete_pod, ns, name)
        except Exception as exc:  # noqa: BLE001 - any failure: count it, try again on a later pass
            self.engine.metrics.reconcile_errors.labels("sweep").inc()
            log.warning("deleting stray %s %s/%s failed (%s); it will be tried again", stray.kind.value, ns, name, exc)
            self.deleting.pop(ident, None)
            asyncio.get_running_loop().call_later(5.0, self.mark, stray.key)
            return
        self.engine.metrics.swept.labels(stray.kind.value, stray.reason.value).inc()
        if stray.reason is sweep_mod.Reason.JOB_GONE:
            self.swept_gone[stray.key] = self.engine.clock.now()
            if len(self.swept_gone) > 10_000:  # bounded: the oldest go first (the accountant reads within minutes)
                del self.swept_gone[next(iter(self.swept_gone))]
        if stray.job is None:
            log.warning(
                "%s/%s: %s", ns, stray.key[1], stray.message, extra={"job": f"{ns}/{stray.key[1]}", "reason": "Swept"}
            )
            return
        ref = JobRef(stray.job.namespace, stray.job.name, stray.job.uid)
        await self._record(stray.job, ref, [act.RecordEvent("Warning", "StrayDeleted", stray.message)])

    async def _resolve(self, key: JobKey, action: act.ResolveCheckpoint) -> None:
        """Look up the latest complete checkpoint in a thread of its own; the answer (or the error)
        goes to the next decision of this job, and only this job waits.

        The store bounds itself (the S3 store: a deadline of ``checkpoint_lookup_timeout_seconds``
        and the client's own timeouts, so it ends within 1.5 times it), and this waits until its
        thread has ended: nothing is left running. The wait here is only a backstop, at twice the
        timeout, for a store that does not bound itself; a thread it leaves behind still counts
        against ``LOOKUP_THREADS``, so such threads cannot pile up."""
        found, error = None, None
        backstop = 2 * self.engine.settings.checkpoint_lookup_timeout_seconds + 0.1
        self.lookup_threads = {t for t in self.lookup_threads if t.is_alive()}
        if self.checkpoints is None:
            error = "no checkpoint store is configured"
        elif len(self.lookup_threads) >= LOOKUP_THREADS:
            error = f"{len(self.lookup_threads)} earlier checkpoint lookups have not ended yet"
        else:
            try:
                async with asyncio.timeout(backstop):
                    found = await calls.in_own_thread(
                        self.checkpoints.latest_complete,
                        action.uri,
                        name=f"accel-lookup-{key[0]}/{key[1]}"[:64],
                        started=self.lookup_threads.add,
                    )
            except TimeoutError:
                error = f"no answer within {backstop:g}s (the lookup's thread is left to end by itself)"
            except (CloudUnavailable, ValueError) as exc:
                error = str(exc)[:300]
        if error is not None:
            self.engine.metrics.reconcile_errors.labels("checkpoint_lookup").inc()
            log.warning("%s/%s: checkpoint lookup under %s failed: %s", *key, action.uri, error)
            asyncio.get_running_loop().call_later(resume.RETRY_SECONDS, self.mark, key)
        self.lookups[key] = resume.Lookup(action.attempt, action.uri, found, error, self.engine.clock.now())
        self.mark(key)

    async def _retrying(self, call: str, fn: Any, *args: Any) -> Any:
        fenced = calls.fenced(self.engine.leading, fn)
        return await _retrying(self.engine.metrics, self.call_pools.writes, call, fenced, *args)

    async def background_write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a write thread once no decision waits for one (handlers.cost)."""
        assert self.slots is not None
        async with self.slots.slot(calls.BACKGROUND):
            return await calls.run_in(self.call_pools.writes, calls.fenced(self.engine.leading, fn), *args)

    async def background_status(
        self,
        patch_status: Callable[[JobRef, dict[str, Any]], str],
        job: JobView,
        patch: dict[str, Any],
        shown: dict[str, Any],
    ) -> bool:
        """Merge ``patch`` into ``job``'s status (by ``patch_status``, a writer's) in a write thread
        once no decision waits for one (the cost ledger's writes), one at a time with the job's
        decisions, and return True; False, unwritten, while a decision of the job is being applied
        (the caller writes at its next step). Its precondition is the version this process last
        wrote of the job (the scheduler's or its own), else the newest the watch showed; the
        version it returns is what the next write of either takes (:meth:`job_view`: a pending
        decision's status updated with ``shown``, else :attr:`revisions`). Without that, a cost
        write and the scheduler's next write took the same version the watch showed: one of them
        failed (409), was read again and sent twice."""
        assert self.slots is not None
        key = job.key
        async with self.slots.slot(calls.BACKGROUND):
            held = self.overlay.get(key)
            if key in self.acting or self.closed or (held is not None and held.held is not None):
                return False  # an admission held back: its status goes first (its precondition is the watch's)
            self.acting.add(key)  # the scheduler's pass leaves the job to the pass after this write
            try:
                pending = self.overlay.get(key)
                if pending is not None and pending.revision is not None:
                    version: str | None = str(pending.revision)
                else:
                    seen = self.engine.observed.jobs.get(key)
                    if seen is not None and _int(seen.resource_version) > _int(job.resource_version):
                        job = seen
                    version = job.resource_version or None
                ref = JobRef(job.namespace, job.name, job.uid, version)
                revision = await calls.run_in(
                    self.call_pools.writes, calls.fenced(self.engine.leading, patch_status), ref, patch
                )
                if pending is not None and pending.revision is not None:
                    pending.status, pending.revision = pending.status.model_copy(update=shown), _int(revision)
                else:
                    # Only the version: the status the watch shows stands (the ledger's own
                    # record of what it wrote is the accountant's), its version is this write's.
                    self.revisions[key] = _int(revision)
                    if len(self.revisions) > 2 * len(self.engine.observed.jobs) + 1000:
                        self.revisions = {k: r for k, r in self.revisions.items() if k in self.engine.observed.jobs}
                self.engine.observed.touch_job(key)
            except JobGone:
                self.overlay.pop(key, None)
                self.revisions.pop(key, None)
                self.engine.observed.touch_job(key)
                raise
            finally:
                self._acted(key)
        return True

    def node_actions(self, snap: Snapshot, rules: health.Rules) -> None:
        """Taint (untaint) the nodes fresh reports condemn (clear); one write per node in flight."""
        if self.node_writer is None or not snap.reports:
            return
        expired = self.engine.clock.monotonic() - CREATED_TTL_SECONDS
        for action in health.node_actions(snap, rules):
            key = (action.node, type(action).__name__)
            if self.node_acting.get(key, -1.0) > expired:
                continue  # written; the watch has not shown it yet
            self.node_acting[key] = self.engine.clock.monotonic()
            task = asyncio.create_task(self._node_act(action))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def _node_act(self, action: act.NodeAction) -> None:
        assert self.node_writer is not None
        try:
            await node_writes.apply(self.node_writer, action, run=self._retrying)
            if isinstance(action, act.TaintNode):
                self.engine.metrics.node_taints.labels("taint").inc()
                log.warning("node %s tainted %s: %s", action.node, action.key, action.reason)
            else:
                self.engine.metrics.node_taints.labels("untaint").inc()
                log.info("node %s untainted %s: %s", action.node, action.key, action.reason)
        except calls.NotLeading:
            self.engine.metrics.fenced_writes.inc()
            self.node_acting.pop((action.node, type(action).__name__), None)
        except Exception as exc:  # noqa: BLE001 - count it; the next pass decides again
            self.engine.metrics.reconcile_errors.labels(type(exc).__name__).inc()
            log.warning("changing the taints of node %s failed (%s); it will be taken again", action.node, exc)
            self.node_acting.pop((action.node, type(action).__name__), None)


def compose(first: Mapping[str, Any], then: Mapping[str, Any]) -> dict[str, Any]:
    """One merge patch (RFC 7386) that does what ``first`` then ``then`` do: ``then``'s fields
    over ``first``'s, objects merged field by field, anything else (lists, nulls) replaced."""
    out = dict(first)
    for k, v in then.items():
        was = out.get(k)
        out[k] = compose(was, v) if isinstance(was, Mapping) and isinstance(v, Mapping) else v
    return out


def _present(snap: Snapshot, ident: tuple[str, str, str], key: JobKey) -> bool:
    """Whether the watch still shows the workload or pod ``ident`` (namespace, name, kind) of ``key``."""
    namespace, name, kind = ident
    if kind == sweep_mod.Kind.WORKLOAD.value:
        return (namespace, name) in snap.workloads
    return any(p.name == name for p in snap.pods_by_job.get(key, ()))


def _priority(decision: Decision) -> int:
    """A decision that only says its job still waits writes after those that change what runs."""
    if decision.phase is JobPhase.PENDING and all(isinstance(a, act.RecordEvent) for a in decision.actions):
        return calls.WAITING
    return calls.URGENT


async def _retrying(metrics: OperatorMetrics, pool: ThreadPoolExecutor, call: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in one of ``pool``'s threads, retried with bounded backoff while the API
    server is unavailable."""
    return await errors.retrying(
        lambda: calls.run_in(pool, fn, *args), on_retry=lambda _: metrics.api_retries.labels(call).inc()
    )
