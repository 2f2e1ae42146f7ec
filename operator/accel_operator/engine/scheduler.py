"""The operator's one scheduling loop: observe (kopf's indexes) → decide (pure) → apply.

kopf's watches keep indexes of pools, accelerator nodes, the pods on them, our workloads and the
AcceleratorJobs; its event handlers only mark what changed (``mark``, ``pods_changed``,
``node_changed``, ``workload_changed``, ``capacity_changed``). The loop wakes on a mark (or on the
safety-net timer), reads the changed index entries into its folded picture (:mod:`observed`; all
of them on a full pass) and takes one :class:`~accel_operator.reconcile.common.snapshot.Snapshot`, calls
``decide`` for every job that needs it — jobs that hold devices first, then waiting jobs in queue
order, so that admission is serialized and sees every earlier reservation — and applies each
decision: the status first (the record of an admission survives a crash), then the workload and
the events. Waiting jobs are decided again when a pool they can use gained devices; within a pass,
a job that already waits for shapes that did not fit earlier in the pass is not decided again.

A decision's status is kept in an in-memory overlay until the watch shows it, so a pass that
runs before the watch caught up never admits a job twice. Everything persistent is in the
objects themselves: a restarted operator rebuilds the same state from the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

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
from accel_operator.adapters.kube.lease import AlwaysLeader, Elector
from accel_operator.adapters.kube.nodes import NodeWriter
from accel_operator.engine import calls, node_writes
from accel_operator.engine.cache import Observed
from accel_operator.metrics import OperatorMetrics
from accel_operator.planning import policy, selection
from accel_operator.planning.candidates import OWN_MAX_DEVICES, Plan, PoolOffer, ranked_per_pool
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import policy_inputs
from accel_operator.reconcile.common.decision import ADMITTED, Decision
from accel_operator.reconcile.common.snapshot import (
    AT_REST,
    HOLDING,
    Gang,
    JobKey,
    JobView,
    PodView,
    PoolView,
    Snapshot,
    WorkloadView,
)
from accel_operator.reconcile.job import fallback, resume
from accel_operator.reconcile.job.decide import decide, gang_of
from accel_operator.reconcile.job.status import holds, settle_status
from accel_operator.reconcile.nodes import consolidate, health
from accel_operator.settings import OperatorSettings

log = logging.getLogger("accel_operator.scheduler")

T = TypeVar("T")


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


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
class _Pending:
    """A status this process wrote (or is writing) that the watch has not shown yet."""

    status: AcceleratorJobStatus  # validated once, when the decision is applied
    revision: int | None = None  # the resourceVersion the write returned; None while in flight


# How long a workload this process created stands in for the watch that has not shown it yet.
CREATED_TTL_SECONDS = 60.0
# At the operator's stop, how long the scheduling loop's last pass may take to end.
CLOSE_SECONDS = 30.0


@dataclass
class Scheduler:
    settings: OperatorSettings
    catalog: catalog_mod.Catalog
    writer: JobWriter
    workloads: wl_mod.WorkloadClient
    metrics: OperatorMetrics
    elector: Elector = field(default_factory=AlwaysLeader)
    indices: Indices | None = None
    ready: bool = False
    dirty: set[JobKey] = field(default_factory=set)
    full_pass: bool = True  # decide every job (start, resync, a failed pass)
    grown_unseen: set[str] = field(default_factory=set)  # pools a ``current`` read saw grow
    capacity_pass: bool = False  # decide every waiting job (something freed or added devices)
    pools_version: int = 0
    # The policies and namespaces' teams folded once per change (handlers.policies bumps it), with
    # the evaluations of unchanged jobs memoised on the folded value.
    policies_version: int = 0
    folded_policies: tuple[int, policy_inputs.PolicyInputs] | None = None
    overlay: dict[JobKey, _Pending] = field(default_factory=dict)
    # Workloads this process created that the watch has not shown yet: (namespace, name) ->
    # (view, monotonic time of the create). Without them, every pass until the watch catches up
    # would create the workload again (a 409 and a read each time).
    created: dict[tuple[str, str], tuple[WorkloadView, float]] = field(default_factory=dict)
    acting: set[JobKey] = field(default_factory=set)  # jobs whose last decision is being applied
    plans: dict[tuple[str, int | None, int, bool], Plan] = field(default_factory=dict)
    spec_plans: dict[tuple[bytes, int], Plan] = field(default_factory=dict)  # by (effective spec digest, pools_version)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    # The folded indexes, refreshed each pass where events said something changed.
    observed: Observed = field(default_factory=Observed)
    # Each cached plan's admission shapes: (pool, gang) of its ranked candidates, best first.
    shapes: dict[int, tuple[tuple[str, Gang], ...]] = field(default_factory=dict)
    # Rescheduling on node reports: taints and checkpoint-now annotations (None: not applied).
    node_writer: NodeWriter | None = None
    # (node, taint | untaint) -> monotonic time of the write: not written again until the watch shows it.
    node_acting: dict[tuple[str, str], float] = field(default_factory=dict)
    # Nodes a cloud API reports preempted (handlers.signals, TPU VMs): into every snapshot.
    preempted_nodes: set[str] = field(default_factory=set)
    checkpoints: CheckpointStore | None = None  # S3 lookups for resumes; None: S3 resumes wait with a reason
    # The answer of the last checkpoint lookup per job (for one attempt): what the next decision reads.
    lookups: dict[JobKey, resume.Lookup] = field(default_factory=dict)
    # The threads the API calls run in: the lease, the writes and the events each have their own.
    pools: calls.CallPools | None = None
    # One slot per write thread, held by a decision from its status write to its workload's.
    slots: calls.Slots | None = None
    closed: bool = False  # the operator is stopping: nothing new is started

    def __post_init__(self) -> None:
        if self.pools is None:
            self.pools = calls.CallPools(self.settings.api_threads)
        if self.slots is None:
            self.slots = calls.Slots(self.settings.api_threads)

    @property
    def call_pools(self) -> calls.CallPools:
        assert self.pools is not None
        return self.pools

    @property
    def spot_rules(self) -> fallback.SpotRules:
        return fallback.SpotRules(
            window_seconds=self.settings.spot_fallback_window_seconds,
            preemptions_in_window=self.settings.spot_fallback_preemptions,
        )

    # --- marks (from kopf's event handlers) -----------------------------------------------------

    def mark(self, key: JobKey) -> None:
        """Decide ``key`` on the next pass. From an informer's change too: that does not make the
        scheduler ready (``kopf_listed`` does; ``can_act`` also waits for the informers)."""
        self.dirty.add(key)
        self.observed.touch_job(key)
        self.wake.set()

    def can_act(self) -> bool:
        """Every watch has listed what is there (a pass on a half-filled picture could admit
        onto devices that a job not seen yet holds)."""
        return self.ready and self.indices is not None and self.indices.listed()

    def pods_changed(self, *views: PodView | None) -> None:
        """A pod's view changed (``views``: before and after): its node's usage and its job's gang
        are read again; waiting jobs are decided again only if that freed devices."""
        for view in views:
            if view is not None:
                self.observed.touch_pods(view.node, view.job)
                if view.job is not None:
                    self.mark(view.job)
        self.wake.set()

    def node_changed(self, name: str) -> None:
        self.observed.touch_node(name)
        self.kopf_listed()

    def workload_changed(self, key: tuple[str, str], job: JobKey) -> None:
        self.observed.touch_workload(key)
        self.mark(job)

    def capacity_changed(self) -> None:
        """Something that changes what is free happened: every waiting job may now fit. Jobs
        that hold devices are decided on their own marks (and on the resync), not on this."""
        self.capacity_pass = True
        self.kopf_listed()

    def pools_changed(self) -> None:
        self.pools_version += 1
        self.plans.clear()
        self.spec_plans.clear()
        self.shapes.clear()
        self.observed.invalidate()
        self.full_pass = True
        self.kopf_listed()

    def policies_changed(self) -> None:
        self.policies_version += 1

    def _policy_inputs(self, idx: Indices) -> policy_inputs.PolicyInputs:
        if self.folded_policies is None or self.folded_policies[0] != self.policies_version:
            self.folded_policies = (self.policies_version, policy_inputs.fold(idx.policies, idx.namespace_teams))
        return self.folded_policies[1]

    def forget(self, key: JobKey) -> None:
        self.overlay.pop(key, None)
        self.lookups.pop(key, None)
        self.observed.touch_job(key)
        self.wake.set()

    def kopf_listed(self) -> None:
        """kopf called a handler: its indexes (pools, nodes, policies, namespaces, node reports)
        hold their initial listing (kopf calls no handler before). Every kopf-driven change says
        so, and the namespaces handler at start in every cluster: there are always namespaces."""
        self.ready = True
        self.wake.set()

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

    @property
    def health_rules(self) -> health.Rules:
        s = self.settings
        return health.Rules(
            stale_after=s.report_stale_seconds,
            checkpoint_grace=s.checkpoint_grace_seconds,
            idle_window=s.idle_window_seconds,
            idle_percent=s.idle_utilization_percent,
            hung_window=s.hung_window_seconds,
            hung_percent=s.hung_utilization_percent,
        )

    # --- observe ----------------------------------------------------------------------------

    def _job_view(self, raw: JobView) -> JobView:
        pending = self.overlay.get(raw.key)
        if pending is None:
            return raw
        seen = _int(raw.resource_version)
        if pending.revision is not None and seen >= pending.revision:
            del self.overlay[raw.key]  # the watch caught up
            return raw
        return replace(raw, status=pending.status)

    def observe(self, now: dt.datetime) -> Snapshot:
        """Every index entry folded into one snapshot (what a full pass sees)."""
        self.observed.invalidate()
        return self._observe(now)[0]

    def current(self, now: dt.datetime) -> Snapshot:
        """The snapshot as the watches have it now, read incrementally (the cost accountant's:
        no full rebuild when nothing changed); the pools it saw grow are left to the next pass."""
        snap, grown = self._observe(now)
        self.grown_unseen |= grown
        return snap

    def _observe(self, now: dt.datetime) -> tuple[Snapshot, set[str]]:
        """The snapshot after reading what changed since the last pass, and the pools that grew
        (those a ``current`` read saw grow included)."""
        idx = self.indices
        assert idx is not None
        grown = self.observed.refresh(idx, self._job_view, now, stale_after=self.settings.report_stale_seconds)
        grown, self.grown_unseen = grown | self.grown_unseen, set()
        if self.created:
            expired = time.monotonic() - CREATED_TTL_SECONDS
            for key, (_w, at) in list(self.created.items()):
                if key in self.observed.workloads or at < expired:
                    del self.created[key]  # the watch caught up (or never will: act on what it says)
        created = {key: w for key, (w, _at) in self.created.items()}
        snap = self.observed.snapshot(
            now, created, policy=self._policy_inputs(idx), preempted_nodes=frozenset(self.preempted_nodes)
        )
        return snap, grown

    def _plan(self, job: JobView, snap: Snapshot) -> Plan | None:
        if job.spec is None:
            return None
        on_demand = fallback.on_demand(job.status)  # fell back: plan it as spot.policy never
        key = (job.uid, job.generation, self.pools_version, on_demand)
        plan = self.plans.get(key)
        if plan is None:
            # A job fallen back to on-demand is planned as spot.policy: never, and the policies'
            # granted pools and device cap limit the candidates. A plan is then a function of that
            # spec and the pools (free capacity only adds notes), so jobs with the same effective
            # spec share one: thousands of jobs from one template, one plan.
            spec = fallback.effective_spec(job.spec, job.status)
            same = (hashlib.blake2b(spec.model_dump_json().encode(), digest_size=16).digest(), self.pools_version)
            plan = self.spec_plans.get(same)
            if plan is None:
                offers = [
                    PoolOffer(
                        name=name,
                        spec=pool.spec,
                        free_devices=snap.capacity[name].free_devices,
                        free_nodes=snap.capacity[name].whole_free_nodes,
                    )
                    for name, pool in sorted(snap.pools.items())
                ]
                pols = snap.policy.policies
                restricted, offers = policy.restrict(spec, offers, pols)
                capped = restricted.placement.max_devices != spec.placement.max_devices
                source = policy.cap_source(pols) if capped else OWN_MAX_DEVICES
                plan = selection.plan(restricted, offers, self.catalog, max_devices_from=source)
                self.spec_plans[same] = plan
            if len(self.plans) > 20_000:
                self.plans.clear()
                self.spec_plans.clear()
                self.shapes.clear()
            self.plans[key] = plan
        return plan

    def _shapes(self, plan: Plan) -> tuple[tuple[str, Gang], ...]:
        shapes = self.shapes.get(id(plan))
        if shapes is None:
            ranked = ranked_per_pool(plan)
            shapes = tuple((c.pool, gang_of(c)) for c in ranked)
            self.shapes[id(plan)] = shapes
        return shapes

    def _cached_plan(self, job: JobView) -> Plan | None:
        return self.plans.get((job.uid, job.generation, self.pools_version, fallback.on_demand(job.status)))

    def _waiting_for(self, snap: Snapshot, pools: set[str] | None) -> set[JobKey]:
        """The waiting jobs that may fit in ``pools`` (None: any pool) now."""
        out: set[JobKey] = set()
        for key, job in snap.jobs.items():
            if job.phase in HOLDING or job.phase in AT_REST:
                continue
            plan = self._cached_plan(job) if pools is not None else None
            if plan is None or pools is None or any(pool in pools for pool, _gang in self._shapes(plan)):
                out.add(key)
        return out

    def _still_waits(self, job: JobView, snap: Snapshot, refused: set[tuple[str, Gang]]) -> bool:
        """Whether deciding ``job`` again in this pass can only repeat that it waits: it waits
        already, and every placement its plan ranks is a shape that did not fit earlier in this
        pass (capacity only shrinks during a pass), with its first-choice pool already blocked."""
        if job.phase is not JobPhase.PENDING or not refused:
            return False
        waiting = next((c for c in job.status.conditions if c.type == ADMITTED), None)
        if waiting is None or waiting.status != "False" or waiting.reason not in ("QueuedBehind", "WaitingForCapacity"):
            return False
        plan = self._cached_plan(job)
        if plan is None or not plan.schedulable:
            return False
        shapes = self._shapes(plan)
        return bool(shapes) and shapes[0][0] in snap.blocked and all(s in refused for s in shapes)

    # --- the loop ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Until cancelled: wait for a mark (or the resync interval), then one pass."""
        resync = self.settings.resync_seconds
        last_full = time.monotonic()
        last_tick, was_leading = 0.0, False
        while not self.closed and (stop is None or not stop.is_set()):
            # asyncio.timeout, not wait_for: before Python 3.12, wait_for drops a cancellation
            # that comes as the event fires, and the loop went on past the operator's stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(resync, 1.0)):
                    await self.wake.wait()
            if self.closed:
                return
            self.wake.clear()
            if time.monotonic() - last_tick >= self.settings.lease_seconds / 3:
                last_tick = time.monotonic()
                leading = await calls.run_in(self.call_pools.lease, self.elector.tick)
                if leading and not was_leading:
                    log.info("this replica leads: it decides and writes")
                    self.overlay.clear()
                    self.full_pass = True
                elif was_leading and not leading:
                    log.warning("this replica lost the lease: it stops deciding")
                was_leading = leading
            if not self.can_act() or not self.elector.leading():
                continue
            if time.monotonic() - last_full >= resync:
                self.full_pass = True  # the safety net: every job that should be acted on is
            if self.full_pass:
                last_full = time.monotonic()
            if not self.full_pass and not self.capacity_pass and not self.dirty:
                continue
            try:
                await self.step()
            except Exception:  # one bad pass must not stop the loop for every job
                self.metrics.reconcile_errors.labels("pass").inc()
                log.exception("scheduling pass failed; retrying on the next wake")
                await asyncio.sleep(1.0)
                self.full_pass = True

    def _order(self, snap: Snapshot, keys: Iterable[JobKey]) -> list[JobView]:
        jobs = [snap.jobs[k] for k in keys if k in snap.jobs and not snap.jobs[k].deleting]
        holding = [j for j in jobs if j.phase in HOLDING]
        waiting = sorted((j for j in jobs if j.phase not in HOLDING), key=JobView.queue_order)
        return holding + waiting

    async def step(self) -> None:
        t0 = time.perf_counter()
        now = dt.datetime.now(dt.UTC)
        full, self.full_pass = self.full_pass, False
        if full:
            self.observed.invalidate()
        snap, grown = self._observe(now)
        capacity, self.capacity_pass = self.capacity_pass, False
        dirty, self.dirty = self.dirty, set()
        busy = self.acting
        if full:
            keys: set[JobKey] = set(snap.jobs)
        elif capacity or grown:
            keys = dirty | self._waiting_for(snap, None if capacity else grown)
        else:
            keys = dirty
        if full or capacity:  # a device's health changed (a capacity pass), or the resync
            self._node_actions(snap)
        rules = self.health_rules
        crules = self.consolidation_rules(snap)
        plans = dict(snap.plans)
        refused: set[tuple[str, Gang]] = set()  # shapes that did not fit a pool in this pass
        queue: dict[str, int] = {}
        phases: dict[str, int] = {}
        for job in self._order(snap, keys):
            if job.key in busy:
                self.dirty.add(job.key)  # its last decision is still being written: next pass
                continue
            if job.phase in AT_REST and job.key not in dirty:
                phases[job.phase.value] = phases.get(job.phase.value, 0) + 1
                continue
            if not full and self._still_waits(job, snap, refused):
                continue
            if job.phase not in HOLDING and job.spec is not None:
                plan = self._plan(job, snap)
                if plan is not None:
                    plans[job.key] = plan
                    snap = _with_plans(snap, plans)
            decision = decide(
                job,
                snap,
                now,
                bind_timeout=self.settings.bind_timeout_seconds,
                lookup=self.lookups.get(job.key),
                rules=self.spot_rules,
            )
            if decision.phase is JobPhase.RUNNING:  # running, or starting to (health.amend says why)
                decision, moved = health.amend(decision, job, snap, now, rules)
                if moved is not None:
                    self.metrics.moves.labels(moved.value).inc()
                decision, stage = consolidate.carry(decision, job, snap, now, crules)
                self._count_consolidation(stage)
            elif decision.phase is JobPhase.PENDING:
                decision, orders = consolidate.amend(decision, job, snap, now, crules)
                snap = self._start_moves(job, orders, snap, now, crules)
            if decision.admitted is not None:
                pool, gang = decision.admitted
                end = now + dt.timedelta(seconds=_seconds(decision))
                snap = snap.with_admission(job.key, pool, gang, end)
            if decision.blocks is not None:
                snap = snap.with_blocked(*decision.blocks)
                queue[decision.blocks[0]] = queue.get(decision.blocks[0], 0) + 1
                plan = snap.plans.get(job.key)
                if plan is not None and decision.admitted is None:
                    refused.update(
                        (pool, gang)
                        for pool, gang in self._shapes(plan)
                        if pool in snap.capacity and not snap.capacity[pool].fits(gang)
                    )
            phases[decision.phase.value] = phases.get(decision.phase.value, 0) + 1
            self._apply(job, decision, snap)
        if full:
            for phase in JobPhase:
                self.metrics.jobs.labels(phase.value).set(phases.get(phase.value, 0))
            for pool in snap.pools:
                self.metrics.queue_depth.labels(pool).set(queue.get(pool, 0))
        self.metrics.pass_seconds.observe(time.perf_counter() - t0)

    # --- consolidation (reconcile/nodes/consolidate.py) ------------------------------------------------

    def consolidation_rules(self, snap: Snapshot) -> consolidate.Rules:
        s = self.settings
        # A gang waits this long for the moves made for it (checkpoint, then the moved job's new
        # attempt bound) before it may propose more.
        settle = s.checkpoint_grace_seconds + s.bind_timeout_seconds + 60.0
        return consolidate.rules_from(snap.policy.policies, checkpoint_grace=s.checkpoint_grace_seconds, settle=settle)

    def _start_moves(
        self,
        gang: JobView,
        orders: tuple[consolidate.Order, ...],
        snap: Snapshot,
        now: dt.datetime,
        rules: consolidate.Rules,
    ) -> Snapshot:
        """Each order's first step on the job to move (its own status write, event and
        checkpoint-now request); the snapshot then counts it for the rest of the pass."""
        for order in orders:
            job = snap.jobs.get(order.move.job)
            if job is None or job.key in self.acting:
                self.dirty.add(gang.key)  # busy: the gang proposes again next pass
                continue
            decision = consolidate.start(job, order, snap, now, rules)
            if decision is None:
                continue
            self._apply(job, decision, snap)
            self._count_consolidation(consolidate.Stage.REQUESTED)
            snap = consolidate.with_started(snap, job, decision)
        return snap

    def _count_consolidation(self, stage: consolidate.Stage | None) -> None:
        if stage is not None:
            self.metrics.consolidation_moves.labels(stage.value).inc()
            if stage is consolidate.Stage.MOVED:
                self.metrics.moves.labels(health.MoveReason.CONSOLIDATION.value).inc()

    async def close(self, runner: asyncio.Task[None] | None = None) -> None:
        """At the operator's stop: the scheduling loop (``runner``, the task of :meth:`run`) ends
        first, so that no pass starts a write after the pools are shut; the writes in flight are
        cancelled (what they did not write, the next leader decides again from the cluster); then
        the call pools are shut down."""
        self.closed = True
        if runner is not None:
            runner.cancel()
            self.wake.set()  # should the cancellation be lost, the loop still sees closed and ends
            await asyncio.wait({runner}, timeout=CLOSE_SECONDS)
        tasks = list(self.in_flight)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.call_pools.shutdown()

    # --- apply ------------------------------------------------------------------------------

    async def _retrying(self, call: str, fn: Any, *args: Any) -> Any:
        return await _retrying(self.metrics, self.call_pools.writes, call, fn, *args)

    async def background_write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a write thread once no decision waits for one (handlers.cost)."""
        assert self.slots is not None
        async with self.slots.slot(calls.BACKGROUND):
            return await calls.run_in(self.call_pools.writes, fn, *args)

    def _node_actions(self, snap: Snapshot) -> None:
        """Taint (untaint) the nodes fresh reports condemn (clear); one write per node in flight."""
        if self.node_writer is None or not snap.reports:
            return
        expired = time.monotonic() - CREATED_TTL_SECONDS
        for action in health.node_actions(snap, self.health_rules):
            key = (action.node, type(action).__name__)
            if self.node_acting.get(key, -1.0) > expired:
                continue  # written; the watch has not shown it yet
            self.node_acting[key] = time.monotonic()
            task = asyncio.create_task(self._node_act(action))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def _node_act(self, action: act.NodeAction) -> None:
        assert self.node_writer is not None
        try:
            await node_writes.apply(self.node_writer, action, run=self._retrying)
            if isinstance(action, act.TaintNode):
                self.metrics.node_taints.labels("taint").inc()
                log.warning("node %s tainted %s: %s", action.node, action.key, action.reason)
            else:
                self.metrics.node_taints.labels("untaint").inc()
                log.info("node %s untainted %s: %s", action.node, action.key, action.reason)
        except Exception as exc:  # noqa: BLE001 - count it; the next pass decides again
            self.metrics.reconcile_errors.labels(type(exc).__name__).inc()
            log.warning("changing the taints of node %s failed (%s); it will be taken again", action.node, exc)
            self.node_acting.pop((action.node, type(action).__name__), None)

    def _apply(self, job: JobView, decision: Decision, snap: Snapshot) -> None:
        current: dict[str, Any] = {}
        new: dict[str, Any] | None = None
        if not holds(job.status, decision, job.generation):  # the common case, without serialising
            current = job.status.model_dump(by_alias=True, mode="json", exclude_none=True)
            new = settle_status(current, decision, job.generation)
        if (new is None and not decision.actions) or self.closed:
            return
        self.metrics.decisions.labels(decision.phase.value).inc()
        if new is not None:
            merged = {**current, **{k: v for k, v in new.items() if v is not None}}
            for k, v in new.items():
                if v is None:
                    merged.pop(k, None)
            self.overlay[job.key] = _Pending(views.job_status(merged))  # plan and conditions shared
            self.observed.touch_job(job.key)
        self.acting.add(job.key)
        # The write keeps the pools only: a pass's snapshots (one per admission, each with the
        # reservations admitted before it) would all live as long as their writes were queued.
        task = asyncio.create_task(self._write(job, decision, new, snap.pools))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        task.add_done_callback(lambda _: self._acted(job.key))

    def _acted(self, key: JobKey) -> None:
        self.acting.discard(key)
        if key in self.dirty:
            self.wake.set()  # a pass skipped it while its decision was being applied

    async def _write(
        self, job: JobView, decision: Decision, new: dict[str, Any] | None, pools: Mapping[str, PoolView]
    ) -> None:
        ref = JobRef(job.namespace, job.name, job.uid)
        events: list[act.RecordEvent] = []
        assert self.slots is not None
        try:
            async with self.slots.slot(_priority(decision)):
                if new is not None:
                    revision = await self._retrying("patch_status", self.writer.patch_status, ref, new)
                    pending = self.overlay.get(job.key)
                    if pending is not None:
                        pending.revision = _int(revision)
                        self.observed.touch_job(job.key)  # the next pass drops it once the watch shows it
                # The state first (the workload, deletions, requests), in the decision's order; its
                # events go to their own threads after it: a burst's Events never delay the next
                # admission's writes. An event is recorded only if every action before it in the
                # decision was applied, as when they ran in line.
                for action in decision.actions:
                    if isinstance(action, act.RecordEvent):
                        events.append(action)
                    else:
                        await self._act(job, ref, action, pools)
        except JobGone:
            self.overlay.pop(job.key, None)
            self.observed.touch_job(job.key)
        except Exception as exc:  # noqa: BLE001 - any failure: count it, retry the job, keep the loop
            self.metrics.reconcile_errors.labels(type(exc).__name__).inc()
            log.warning("applying the decision for %s/%s failed (%s); it will be taken again", *job.key, exc)
            self.overlay.pop(job.key, None)
            self.observed.touch_job(job.key)
            await asyncio.sleep(1.0)
            self.mark(job.key)
        finally:
            if events and not self.closed:
                task = asyncio.create_task(self._record(job, ref, events))
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)

    async def _record(self, job: JobView, ref: JobRef, events: list[act.RecordEvent]) -> None:
        """Post a decision's events in their order, in the events' own threads (an event is
        information, not state: one the API server refuses is logged, and the decision stands)."""
        for event in events:
            log.info(
                "%s/%s: %s: %s",
                job.namespace,
                job.name,
                event.reason,
                event.message,
                extra={"job": f"{job.namespace}/{job.name}", "reason": event.reason},
            )
            try:
                await calls.run_in(
                    self.call_pools.events, self.writer.event, ref, event.type, event.reason, event.message
                )
            except ClusterUnavailable as exc:
                log.info("event %s on %s/%s not recorded: %s", event.reason, *job.key, exc)

    async def _act(self, job: JobView, ref: JobRef, action: act.Action, pools: Mapping[str, PoolView]) -> None:
        if isinstance(action, act.RecordEvent):
            await self._record(job, ref, [action])
        elif isinstance(action, act.CreateWorkload):
            assert job.spec is not None
            pool = pools.get(action.pool)
            accel = self.catalog.get(pool.spec.accelerator) if pool is not None else None
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
            )
            batch_job, service = wl_mod.build(spec)
            created = await self._retrying("create_workload", self.workloads.create, batch_job, service)
            name = str(batch_job["metadata"]["name"])
            view = WorkloadView(namespace=job.namespace, name=name, job=job.key, attempt=action.attempt)
            self.created[(job.namespace, name)] = (view, time.monotonic())
            if created:
                self.metrics.workloads_created.inc()
                since = parse_time(job.status.last_failure.time if job.status.last_failure else None) or job.created
                self.metrics.admission_latency.observe((dt.datetime.now(dt.UTC) - since).total_seconds())
        elif isinstance(action, act.RequestCheckpoint):
            if self.node_writer is None:
                return
            await node_writes.apply(self.node_writer, action, run=self._retrying)
            self.metrics.checkpoint_requests.labels(action.reason).inc()
            # The move is due after the grace: decide the job again then, not at the next resync.
            grace = self.settings.checkpoint_grace_seconds + 0.5
            asyncio.get_running_loop().call_later(grace, self.mark, job.key)
        elif isinstance(action, act.DeleteWorkload):
            self.created.pop((job.namespace, action.name), None)
            await self._retrying("delete_workload", self.workloads.delete, job.namespace, action.name)
        elif isinstance(action, act.ResolveCheckpoint):
            await self._resolve(job.key, action)

    async def _resolve(self, key: JobKey, action: act.ResolveCheckpoint) -> None:
        """Look up the latest complete checkpoint in a thread, within the settings' timeout; the
        answer (or the error) goes to the next decision of this job, and only this job waits."""
        found, error = None, None
        timeout = self.settings.checkpoint_lookup_timeout_seconds
        if self.checkpoints is None:
            error = "no checkpoint store is configured"
        else:
            try:
                async with asyncio.timeout(timeout):
                    found = await asyncio.to_thread(self.checkpoints.latest_complete, action.uri)
            except TimeoutError:
                error = f"no answer within {timeout:.0f}s"
            except (CloudUnavailable, ValueError) as exc:
                error = str(exc)[:300]
        if error is not None:
            self.metrics.reconcile_errors.labels("checkpoint_lookup").inc()
            log.warning("%s/%s: checkpoint lookup under %s failed: %s", *key, action.uri, error)
            asyncio.get_running_loop().call_later(resume.RETRY_SECONDS, self.mark, key)
        self.lookups[key] = resume.Lookup(action.attempt, action.uri, found, error, dt.datetime.now(dt.UTC))
        self.mark(key)


def _with_plans(snap: Snapshot, plans: dict[JobKey, Plan]) -> Snapshot:
    if snap.plans is plans:
        return snap
    from dataclasses import replace

    return replace(snap, plans=plans)


def _priority(decision: Decision) -> int:
    """A decision that only says its job still waits writes after those that change what runs."""
    if decision.phase is JobPhase.PENDING and all(isinstance(a, act.RecordEvent) for a in decision.actions):
        return calls.WAITING
    return calls.URGENT


def _seconds(decision: Decision) -> float:
    plan = decision.status.get("plan") or {}
    seconds = plan.get("durationSeconds")
    return float(seconds) if isinstance(seconds, int | float) else 0.0


async def _retrying(metrics: OperatorMetrics, pool: ThreadPoolExecutor, call: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in one of ``pool``'s threads, retried with bounded backoff while the API
    server is unavailable."""
    return await errors.retrying(
        lambda: calls.run_in(pool, fn, *args), on_retry=lambda _: metrics.api_retries.labels(call).inc()
    )
