"""The operator's one scheduling loop: observe (kopf's indexes) → decide (pure) → apply, as a thin
facade over the engine's parts that the kopf handlers and the cost accountant talk to.

kopf's watches and the lean informers keep indexes of pools, accelerator nodes, the pods on them,
our workloads and the AcceleratorJobs; their event handlers only mark what changed (``mark``, ``pods_changed``,
``node_changed``, ``workload_changed``, ``capacity_changed``) into :class:`~.loop.Marks`. The loop
(:mod:`.loop`) wakes on a mark (or on the safety-net timer) and runs :meth:`Scheduler.step`: read
the changed index entries into the folded picture (:mod:`.cache`; all of them on a full pass), take
one :class:`~accel_operator.reconcile.common.snapshot.Snapshot`, decide the jobs that need it
(:func:`.schedule.schedule_pass`, pure, with the plan cache of :mod:`.plans`) and apply each
decision (:mod:`.apply`): the status first, then the workload and the events (an admission's batch
Job, which records it, goes first, and its status may follow with Running). Waiting jobs are
decided again when a pool they can use gained devices.

A decision's status is kept in an in-memory overlay until the watch shows it, so a pass that
runs before the watch caught up never admits a job twice. Everything persistent is in the
objects themselves: a restarted operator rebuilds the same state from the cluster.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any, TypeVar

from accel_api import catalog as catalog_mod
from accel_api.enums import JobPhase
from accel_operator.adapters.aws.checkpoints import CheckpointStore
from accel_operator.adapters.kube import workloads as wl_mod
from accel_operator.adapters.kube.jobs import JobWriter
from accel_operator.adapters.kube.lease import AlwaysLeader, Elector
from accel_operator.adapters.kube.nodes import NodeWriter
from accel_operator.engine import calls, loop, schedule, waiting
from accel_operator.engine.apply import CREATED_TTL_SECONDS, Applier
from accel_operator.engine.cache import Observed
from accel_operator.engine.clock import Clock, SystemClock
from accel_operator.engine.loop import Marks
from accel_operator.engine.plans import Plans
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import policy_inputs
from accel_operator.reconcile.common.snapshot import JobKey, JobView, PodView, Snapshot, WorkloadView
from accel_operator.reconcile.job import sweep
from accel_operator.reconcile.nodes import consolidate, health
from accel_operator.settings import OperatorSettings

T = TypeVar("T")


log = logging.getLogger("accel_operator.scheduler")


@dataclass
class Indices:
    """kopf's live indexes, handed over by the startup handler."""

    pools: Mapping[Any, Any]
    nodes: Mapping[Any, Any]
    pods: Mapping[Any, Any]
    workloads: Mapping[Any, Any]
    jobs: Mapping[Any, Any]
    policies: Mapping[Any, Any] = field(default_factory=dict)
    namespace_teams: Mapping[Any, Any] = field(default_factory=dict)
    reports: Mapping[Any, Any] = field(default_factory=dict)  # AcceleratorNodeReports by node
    # Whether the informers behind pods and workloads hold their first listing (kopf's indexes
    # are filled before kopf calls any handler; the informers say so here).
    listed: Callable[[], bool] = lambda: True


@dataclass
class Scheduler:
    settings: OperatorSettings
    catalog: catalog_mod.Catalog
    # The writes' ports: held by the applier (``applier.writer`` ...), the one owner of each.
    writer: InitVar[JobWriter]
    workloads: InitVar[wl_mod.WorkloadClient]
    metrics: OperatorMetrics
    elector: Elector = field(default_factory=AlwaysLeader)
    indices: Indices | None = None
    # Every time the engine reads (the tests' and a simulator's: a ManualClock).
    clock: Clock = field(default_factory=SystemClock)
    # Rescheduling on node reports: taints and checkpoint-now annotations (None: not applied).
    node_writer: InitVar[NodeWriter | None] = None
    checkpoints: InitVar[CheckpointStore | None] = None  # S3 lookups for resumes
    # The policies and namespaces' teams folded once per change (handlers.policies bumps it), with
    # the evaluations of unchanged jobs memoised on the folded value.
    policies_version: int = 0
    folded_policies: tuple[int, policy_inputs.PolicyInputs] | None = None
    # Nodes a cloud API reports preempted (handlers.signals, TPU VMs): into every snapshot.
    preempted_nodes: set[str] = field(default_factory=set)
    # The parts: what the handlers marked, the folded indexes, the plans, the writes.
    marks: Marks = field(default_factory=Marks)
    observed: Observed = field(default_factory=Observed)
    plans: Plans = field(init=False)
    # The waiting jobs by pool and shape: what a pass after a pool grew looks at (engine/waiting.py).
    index: waiting.WaitingIndex = field(default_factory=waiting.WaitingIndex)
    applier: Applier = field(init=False)

    def __post_init__(
        self,
        writer: JobWriter,
        workloads: wl_mod.WorkloadClient,
        node_writer: NodeWriter | None,
        checkpoints: CheckpointStore | None,
    ) -> None:
        self.plans = Plans(self.catalog, max_built=self.settings.plans_kept)
        self.applier = Applier(
            engine=self, writer=writer, workloads=workloads, node_writer=node_writer, checkpoints=checkpoints
        )
        self.metrics.cost.leading = self.leading  # a replica that lost the Lease exports no stale cost

    def leading(self) -> bool:
        """Whether this replica holds the Lease now (the elector as it is then: tests replace it)."""
        return self.elector.leading()

    # --- marks (from kopf's event handlers) -----------------------------------------------------

    def mark(self, key: JobKey) -> None:
        """Decide ``key`` on the next pass. From an informer's change too: that does not make the
        scheduler ready (``kopf_listed`` does; ``can_act`` also waits for the informers)."""
        self.applier.mark(key)

    def can_act(self) -> bool:
        """Every watch has listed what is there (a pass on a half-filled picture could admit
        onto devices that a job not seen yet holds)."""
        return self.marks.ready and self.indices is not None and self.indices.listed()

    def pods_changed(self, *views: PodView | None) -> None:
        """A pod's view changed (``views``: before and after): its node's usage and its job's gang
        are read again; waiting jobs are decided again only if that freed devices."""
        for view in views:
            if view is not None:
                self.observed.touch_pods(view.node, view.job)
                if view.job is not None:
                    self.mark(view.job)
        self.marks.wake.set()

    def node_changed(self, name: str) -> None:
        """A node's view changed (the informer's: not a kopf handler, so it says nothing of kopf's
        indexes); its pools' capacity is read again."""
        self.observed.touch_node(name)
        self.marks.wake.set()

    def workload_changed(self, key: tuple[str, str], job: JobKey) -> None:
        self.observed.touch_workload(key)
        self.mark(job)

    def capacity_changed(self) -> None:
        """Something that changes what is free happened: every waiting job may now fit. Jobs
        that hold devices are decided on their own marks (and on the resync), not on this."""
        self.marks.capacity_pass = True
        self.kopf_listed()

    def pools_changed(self) -> None:
        self.plans.pools_changed()
        self.observed.invalidate()
        self.marks.full_pass = True
        self.kopf_listed()

    def policies_changed(self) -> None:
        self.policies_version += 1

    def _policy_inputs(self, idx: Indices) -> policy_inputs.PolicyInputs:
        if self.folded_policies is None or self.folded_policies[0] != self.policies_version:
            self.folded_policies = (self.policies_version, policy_inputs.fold(idx.policies, idx.namespace_teams))
        return self.folded_policies[1]

    def forget(self, key: JobKey) -> None:
        """``key`` was deleted: what this process kept for it goes, and the next pass sweeps
        what it may have left running (an orphaning deletion leaves its workload)."""
        self.applier.overlay.pop(key, None)
        self.applier.lookups.pop(key, None)
        self.marks.mark(key)
        self.observed.touch_job(key)

    def kopf_listed(self) -> None:
        """kopf called a handler: its indexes (pools, policies, namespaces, node reports)
        hold their initial listing (kopf calls no handler before). Every kopf-driven change says
        so, and the namespaces handler at start in every cluster: there are always namespaces."""
        self.marks.ready = True
        self.marks.wake.set()

    def report_changed(self, node: str, *, health_changed: bool) -> None:
        """A node report changed: decide again the jobs with pods there (and every waiting job
        when a device's health changed, since that changes what is free)."""
        if self.indices is not None:
            for pod in self.indices.pods.get(node, ()):
                if pod.job is not None:
                    self.mark(pod.job)
        if health_changed:
            self.observed.touch_node(node)  # condemned or not: its capacity is read again
            self.capacity_changed()

    # --- observe ----------------------------------------------------------------------------

    def observe(self, now: dt.datetime) -> Snapshot:
        """Every index entry folded into one snapshot (what a full pass sees)."""
        self.observed.invalidate()
        return self._observe(now)[0]

    def current(self, now: dt.datetime) -> Snapshot:
        """The snapshot as the watches have it now, read incrementally (the cost accountant's:
        no full rebuild when nothing changed); the pools it saw grow are left to the next pass."""
        snap, grown = self._observe(now)
        self.marks.grown_unseen |= grown
        return snap

    def _observe(self, now: dt.datetime) -> tuple[Snapshot, set[str]]:
        """The snapshot after reading what changed since the last pass, and the pools that grew
        (those a ``current`` read saw grow included)."""
        idx = self.indices
        assert idx is not None
        grown = self.observed.refresh(idx, self.applier.job_view, now, stale_after=self.settings.report_stale_seconds)
        grown, self.marks.grown_unseen = grown | self.marks.grown_unseen, set()
        created = self.applier.unseen_workloads()
        snap = self.observed.snapshot(
            now, created, policy=self._policy_inputs(idx), preempted_nodes=frozenset(self.preempted_nodes)
        )
        return snap, grown

    # --- the loop ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Until cancelled: wait for a mark (or the resync interval), then one pass."""
        await loop.run(self, stop)

    @property
    def call_pools(self) -> calls.CallPools:
        return self.applier.call_pools

    def closed(self) -> bool:
        """The operator is stopping: nothing new is started."""
        return self.applier.closed

    def lead(self) -> None:
        """This replica just became leader: what it wrote before is read from the cluster again."""
        self.applier.overlay.clear()
        self.marks.full_pass = True

    async def step(self) -> None:
        t0 = self.clock.monotonic()
        now = self.clock.now()
        marks = self.marks
        full, marks.full_pass = marks.full_pass, False
        if full:
            self.observed.invalidate()
        snap, grown = self._observe(now)
        self.plans.keep_waiting(snap.jobs, self.observed.waiting)  # links of jobs gone from the queue
        capacity, marks.capacity_pass = marks.capacity_pass, False
        dirty, marks.dirty = marks.dirty, set()
        # A job whose last decision is still being written is decided by no pass before that
        # write ends: set aside until then (Applier._acted), not ordered and skipped by this one.
        aside = dirty & self.applier.acting
        dirty -= aside
        marks.deferred |= aside
        self.observed.track = True
        self.index.sync(
            snap.jobs, self.observed.waiting, self.observed.changed, self.plans, rebuilds=self.observed.rebuilds
        )
        queue: waiting.Queue | None = None
        if full:
            keys: set[JobKey] = set(snap.jobs)
        elif capacity or grown:
            # The waiting jobs of the pools that grew (every pool on a capacity pass) that the
            # pass may decide, from the index by pool and shape, instead of all of them.
            # A held admission (its batch Job records it, its status does not yet) is decided whatever
            # the index says (schedule.still_waits never skips it).
            keys = dirty | {k for k in self.observed.held if k in snap.jobs}
            queue = self.index.queue(snap, None if capacity else grown, self.applier.acting)
        else:
            keys = dirty
        rules = schedule.rules_from(self.settings, snap)
        if full or capacity:  # a device's health changed (a capacity pass), or the resync
            self.applier.node_actions(snap, rules.health)
        result = schedule.schedule_pass(
            snap,
            keys,
            now,
            rules,
            self.plans,
            marked=dirty,
            busy=self.applier.acting,
            lookups=self.applier.lookups,
            full=full,
            woken=queue,
        )
        marks.dirty |= result.retry
        for key, error in result.failed:
            self.metrics.reconcile_errors.labels("decide").inc()
            log.error("deciding job %s/%s failed (the pass went on without it): %s", key[0], key[1], error[:1000])
        for moved in result.moves:
            self.metrics.moves.labels(moved.value).inc()
        for stage in result.stages:
            self.metrics.consolidation_moves.labels(stage.value).inc()
            if stage is consolidate.Stage.MOVED:
                self.metrics.moves.labels(health.MoveReason.CONSOLIDATION.value).inc()
        for write in result.writes:
            self.applier.apply(write, result.snapshot.pools)
        self._sweep(snap, None if full else dirty, now)
        if full:
            for phase in JobPhase:
                self.metrics.jobs.labels(phase.value).set(result.phases.get(phase.value, 0))
            for pool in result.snapshot.pools:
                self.metrics.queue_depth.labels(pool).set(result.queue.get(pool, 0))
        self.metrics.pass_seconds.observe(self.clock.monotonic() - t0)

    def _sweep(self, snap: Snapshot, keys: set[JobKey] | None, now: dt.datetime) -> None:
        """Delete the workloads and pods of ours that no job's current attempt accounts for
        (:mod:`~accel_operator.reconcile.job.sweep`): every one on a full pass, else those of the
        jobs an event named. A job whose decision is being applied is left to the next pass
        (its own release may be deleting the same workload)."""
        if keys is None:
            workloads = list(snap.workloads.values())
            pods = [p for ps in snap.pods_by_job.values() for p in ps]
        elif keys:
            workloads = _workloads_of(snap, keys)
            pods = [p for k in keys for p in snap.pods_by_job.get(k, ())]
        elif self.applier.deleting:  # nothing to judge, but deletes to see through
            workloads, pods = [], []
        else:
            return
        found = sweep.sweep(snap.jobs, workloads, pods, snap.workloads, now, grace=CREATED_TTL_SECONDS)
        busy = self.applier.acting
        if busy and found.strays:
            self.marks.dirty |= {s.key for s in found.strays if s.key in busy}
            found = sweep.Sweep(tuple(s for s in found.strays if s.key not in busy), found.recheck)
        self.applier.sweep(found, snap)

    async def close(self, runner: asyncio.Task[None] | None = None) -> None:
        """At the operator's stop: the scheduling loop (``runner``, the task of :meth:`run`) ends
        first, then the writes in flight are cancelled and the call pools shut (:func:`loop.close`)."""
        self.applier.closed = True
        await loop.close(
            runner=runner, wake=self.marks.wake, in_flight=self.applier.in_flight, pools=self.applier.call_pools
        )

    async def background_write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a write thread once no decision waits for one (handlers.cost)."""
        return await self.applier.background_write(fn, *args)

    async def background_status(
        self, patch_status: Callable[..., str], job: JobView, patch: dict[str, Any], shown: dict[str, Any]
    ) -> bool:
        """A status write of ``job`` behind the decisions' and in turn with its own (``Applier.background_status``)."""
        return await self.applier.background_status(patch_status, job, patch, shown)


def _workloads_of(snap: Snapshot, keys: set[JobKey]) -> list[WorkloadView]:
    """The workloads of the jobs ``keys`` for an incremental sweep, by their names (attempt 0 up to
    the one after the job's current attempt) instead of a scan of every workload per pass (a scan
    when the keys are about as many as the workloads). A deleted job's attempts are not known:
    those keys take one scan. Anything else (a workload of an attempt further ahead) is the full
    pass's to find."""
    if 2 * len(keys) >= len(snap.workloads):  # as many names to try as there are workloads: scan
        return [w for w in snap.workloads.values() if w.job in keys]
    out: list[WorkloadView] = []
    gone: set[JobKey] = set()
    for key in keys:
        job = snap.jobs.get(key)
        if job is None:
            gone.add(key)
            continue
        for attempt in range(job.status.attempt + 2):
            w = snap.workloads.get((key[0], act.workload_name(key[1], attempt)))
            if w is not None and w.job == key:
                out.append(w)
    if gone:
        out.extend(w for w in snap.workloads.values() if w.job in gone)
    return out
