"""The scheduler's picture of the cluster, kept between passes and refreshed where events said
something changed.

kopf's indexes hold every pool, accelerator node, pod, workload and AcceleratorJob. Folding all of
them into a :class:`~accel_operator.reconcile.common.snapshot.Snapshot` on every pass costs time in
proportion to the cluster (about 170 ms at 500 nodes and 5,000 jobs), while a pass usually follows
a handful of events. :class:`Observed` keeps the folded parts (nodes per pool, devices used per
node, pods per job, job views, workloads, reservations, each pool's capacity) and, on
:meth:`refresh`, reads from the indexes only the entries that the event handlers named
(:meth:`touch_job`, :meth:`touch_pods`, :meth:`touch_node`, :meth:`touch_workload`), then
recomputes the capacity of the pools those entries belong to. :meth:`rebuild` folds everything
from scratch: on start, on a pool change, on the resync; both give the same snapshot (a unit test
compares them after random event sequences).

:meth:`refresh` also says which pools *grew* (some gang shape fits now that did not before: a pod
ended, a reservation was released, a node came back): only the waiting jobs of those pools need
to be decided again. A pod that binds to a node its job reserved moves nothing.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from accel_api.durations import later, parse_time
from accel_operator.engine.versioned import Plus, Versioned
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import node_capacity
from accel_operator.reconcile.common.policy_inputs import PolicyInputs
from accel_operator.reconcile.common.reports import ReportView
from accel_operator.reconcile.common.snapshot import (
    AT_REST,
    HOLDING,
    JobKey,
    JobView,
    NodeEntry,
    NodeView,
    PodView,
    PoolCapacity,
    PoolView,
    Reservation,
    Snapshot,
    WorkloadView,
    capacity_of,
    node_entry,
)
from accel_operator.reconcile.nodes import consolidate

WorkloadKey = tuple[str, str]


def _first(store: Iterable[Any] | None) -> Any:
    for value in store or ():
        return value
    return None


_HELD_OR_AT_REST = HOLDING | AT_REST


def reservation(
    job: JobView, pods: Iterable[PodView], now: dt.datetime, workload: WorkloadView | None = None
) -> Reservation | None:
    """The devices ``job`` holds in its pool (None when it holds none): as its status says, or,
    while the status does not say it yet, as the batch Job of its current attempt (``workload``)
    records its admission. The Job is created before the status that says Admitted is written
    (docs/scale.md, "The batch Job as the admission record"), so its devices are held from the
    create on, for every pass of this process or of one started after a crash."""
    st = job.status
    bound = sum(1 for p in pods if p.attempt == st.attempt and p.node and not p.ended)
    if st.phase not in HOLDING or st.plan is None or not st.plan.pool or not st.plan.devices:
        a = workload.admission if workload is not None and st.phase not in _HELD_OR_AT_REST else None
        if a is None or a.attempt != st.attempt or workload is None or workload.attempt != st.attempt:
            return None
        if workload.owner_uid is not None and workload.owner_uid != job.uid:
            return None  # another job's of the same name (deleted and created again): the sweep's
        admitted = parse_time(a.admitted_time) or now
        end = later(admitted, a.duration_seconds) if a.duration_seconds else None
        return Reservation(job.key, a.pool, a.nodes, a.per_node, min(bound, a.nodes), end)
    nodes_n = st.plan.nodes or 1
    start = parse_time(st.start_time) or parse_time(st.admitted_time) or now
    end = later(start, st.plan.duration_seconds) if st.plan.duration_seconds else None
    return Reservation(job.key, st.plan.pool, nodes_n, st.plan.devices // nodes_n, min(bound, nodes_n), end)


def _waits(job: JobView) -> bool:
    return job.phase not in HOLDING and job.phase not in AT_REST


def grew(old: PoolCapacity | None, new: PoolCapacity) -> bool:
    """Whether some gang shape (n nodes with k free devices each) fits ``new`` but not ``old``.
    Each side's free values counted once (``Counter``, in C), then the nodes with at least k free
    summed from the most free down: O(nodes + devices per node) instead of O(nodes x devices per
    node), on every pool a refresh touches (the fleet grows with the jobs a replay runs)."""
    if old is None:
        return True
    if new.node_free == old.node_free:
        return False
    n_new, n_old = Counter(new.node_free), Counter(old.node_free)
    at_least_new = at_least_old = 0
    for k in range(max((*n_new, *n_old), default=0), 0, -1):
        at_least_new += n_new.get(k, 0)
        at_least_old += n_old.get(k, 0)
        if at_least_new > at_least_old:
            return True
    return False


@dataclass
class Observed:
    pools: dict[str, PoolView] = field(default_factory=dict)
    # The maps each snapshot carries whole are Versioned: a snapshot takes a frozen view of each in
    # O(1) instead of a copy (engine/versioned.py), so a pass costs what changed, not what is kept.
    nodes: Versioned[str, NodeView] = field(default_factory=Versioned)
    pool_nodes: dict[str, dict[str, NodeView]] = field(default_factory=dict)
    used: Versioned[str, int] = field(default_factory=Versioned)  # node -> devices of its bound, running pods
    pods_by_job: Versioned[JobKey, tuple[PodView, ...]] = field(default_factory=Versioned)
    jobs: Versioned[JobKey, JobView] = field(default_factory=Versioned)
    # The jobs that wait (neither holding devices nor at rest): what a pass after a pool grew
    # looks through, without a scan of every job the cluster keeps (most of them at rest).
    waiting: set[JobKey] = field(default_factory=set)
    # The waiting jobs that hold a reservation all the same: their batch Job records an admission
    # their status does not say yet (a held admission); the pass decides them whatever the index says.
    held: set[JobKey] = field(default_factory=set)
    workloads: Versioned[WorkloadKey, WorkloadView] = field(default_factory=Versioned)
    reservations: Versioned[JobKey, Reservation] = field(default_factory=Versioned)
    pool_reservations: dict[str, dict[JobKey, Reservation]] = field(default_factory=dict)
    capacity: dict[str, PoolCapacity] = field(default_factory=dict)
    # Each pool's nodes' parts of its capacity (snapshot.node_entry), in pool_nodes' order, changed
    # where a node or its devices in use change: a pool's capacity is folded from them without
    # judging every node again (each pass folds the pools it touched, and a pool's nodes grow
    # with the fleet: per node, this was most of a pass's refresh at 10,000 jobs).
    entries: dict[str, dict[str, NodeEntry | None]] = field(default_factory=dict)
    # The indexes each snapshot carries (Snapshot.pool_nodes, .holders, .markers): frozen values,
    # replaced where a refresh changes them, so a snapshot copies only the outer mapping.
    pool_names: dict[str, frozenset[str]] = field(default_factory=dict)
    holders: dict[str, frozenset[JobKey]] = field(default_factory=dict)
    markers: dict[JobKey, frozenset[JobKey]] = field(default_factory=dict)
    marked: dict[JobKey, JobKey] = field(default_factory=dict)  # job -> the gang its marker names
    # The node agents' reports (read whole each refresh: one small view per node): a node's free
    # devices and memory, its failing devices, whether it is condemned (reconcile/common/node_capacity.py).
    reports: dict[str, ReportView] = field(default_factory=dict)
    # node -> (its view, its report, fresh, the view judged on them): judged again only on a change.
    judged: dict[str, tuple[NodeView, ReportView | None, bool, NodeView]] = field(default_factory=dict)
    # What the event handlers said changed since the last refresh.
    stale: bool = True  # everything: the next refresh rebuilds
    stale_jobs: set[JobKey] = field(default_factory=set)
    stale_pods: set[Any] = field(default_factory=set)  # pods index keys: node names and job keys
    stale_nodes: set[str] = field(default_factory=set)
    stale_workloads: set[WorkloadKey] = field(default_factory=set)
    # For the index of waiting jobs (engine/waiting.py), once it follows: how many rebuilds there
    # were (each folds every job again) and the jobs read since it last looked (``track``: it
    # follows; else nothing is kept, so a picture no index reads keeps no log).
    rebuilds: int = 0
    track: bool = False
    changed: set[JobKey] = field(default_factory=set)

    # --- what changed (from the event handlers and the scheduler) ---------------------------------

    def touch_job(self, key: JobKey) -> None:
        self.stale_jobs.add(key)

    def touch_pods(self, *keys: Any) -> None:
        self.stale_pods.update(k for k in keys if k)

    def touch_node(self, name: str) -> None:
        self.stale_nodes.add(name)

    def touch_workload(self, key: WorkloadKey) -> None:
        self.stale_workloads.add(key)

    def invalidate(self) -> None:
        self.stale = True

    # --- folding ------------------------------------------------------------------------------

    def _read_reports(self, idx: Any) -> None:
        store = getattr(idx, "reports", None) or {}
        self.reports = {name: r for name, s in store.items() if (r := _first(s)) is not None}

    def _judged(self, nodes: Iterable[NodeView], now: dt.datetime, stale_after: float) -> list[NodeView]:
        """``nodes`` as their reports make them (node_capacity.judge), reusing the last judgement
        of a node whose view, report and freshness are the same objects and answer as then."""
        out = []
        for n in nodes:
            report = self.reports.get(n.name)
            fresh = report is not None and report.fresh(now, stale_after)
            seen = self.judged.get(n.name)
            if seen is not None and seen[0] is n and seen[1] is report and seen[2] == fresh:
                out.append(seen[3])
                continue
            judged = node_capacity.judge(n, report, now, stale_after)
            self.judged[n.name] = (n, report, fresh, judged)
            out.append(judged)
        return out

    def rebuild(
        self, idx: Any, job_view: Callable[[JobView], JobView], now: dt.datetime, *, stale_after: float = 900.0
    ) -> None:
        """Fold every index entry (``idx`` is the scheduler's ``Indices``)."""
        self.stale = False
        self.rebuilds += 1
        self.changed.clear()
        self.stale_jobs.clear()
        self.stale_pods.clear()
        self.stale_nodes.clear()
        self.stale_workloads.clear()
        self.pools = {}
        for name, store in idx.pools.items():
            view, _problems = _first(store) or (None, ())
            if view is not None:
                self.pools[name] = view
        self._read_reports(idx)
        found = [n for store in idx.nodes.values() if (n := _first(store)) is not None]
        self.nodes = Versioned((n.name, n) for n in self._judged(found, now, stale_after))
        self.judged = {name: seen for name, seen in self.judged.items() if name in self.nodes}
        self.pool_nodes = {p: {} for p in self.pools}
        for node in self.nodes.values():
            self._place_node(node)
        self.pool_names = {p: frozenset(m) for p, m in self.pool_nodes.items() if m}
        used: dict[str, int] = {}
        pods: dict[JobKey, list[PodView]] = {}
        for key, store in idx.pods.items():
            for pod in store:
                if key == pod.node and not pod.ended:
                    used[pod.node] = used.get(pod.node, 0) + pod.devices
                elif isinstance(key, tuple) and pod.job is not None:
                    pods.setdefault(pod.job, []).append(pod)
        self.used = Versioned(used)
        self.entries = {
            p: {name: node_entry(n, used.get(name, 0)) for name, n in members.items()}
            for p, members in self.pool_nodes.items()
        }
        self.pods_by_job = Versioned((k, tuple(v)) for k, v in pods.items())
        self.jobs = Versioned(
            (key, job_view(raw)) for key, store in idx.jobs.items() if (raw := _first(store)) is not None
        )
        self.waiting = {key for key, job in self.jobs.items() if _waits(job)}
        self.workloads = Versioned((key, w) for key, store in idx.workloads.items() if (w := _first(store)) is not None)
        self.reservations = Versioned()
        self.pool_reservations = {p: {} for p in self.pools}
        for key, job in self.jobs.items():
            r = reservation(job, self.pods_by_job.get(key, ()), now, self._current(job))
            if r is not None:
                self.reservations[key] = r
                self.pool_reservations.setdefault(r.pool, {})[key] = r
        self.held = {key for key in self.reservations if _waits(self.jobs[key])}
        self.holders = {p: frozenset(rs) for p, rs in self.pool_reservations.items() if rs}
        self.marked, self.markers = {}, {}
        for key, job in self.jobs.items():
            self._mark(key, job)
        self.capacity = {name: self._capacity(name) for name in self.pools}

    def refresh(
        self, idx: Any, job_view: Callable[[JobView], JobView], now: dt.datetime, *, stale_after: float = 900.0
    ) -> set[str]:
        """Read the entries that changed; returns the pools that grew (all of them after a rebuild).
        A report that turns stale with time is seen at the next rebuild (the resync's full pass)."""
        if self.stale:
            self.rebuild(idx, job_view, now, stale_after=stale_after)
            return set(self.pools)
        self._read_reports(idx)  # every pass: the running jobs' utilization is judged on them
        pools: set[str] = set()  # whose capacity must be computed again
        for name in self.stale_nodes:
            self.nodes.pop(name, None)
            owners: set[str] = set()
            for pool, members in self.pool_nodes.items():
                if members.pop(name, None) is not None:
                    self.entries.get(pool, {}).pop(name, None)
                    owners.add(pool)
            node = _first(idx.nodes.get(name))
            if node is not None:
                node = self._judged([node], now, stale_after)[0]
                self.nodes[name] = node
                placed = self._place_node(node)
                for pool in placed:
                    self.entries.setdefault(pool, {})[name] = node_entry(node, self.used.get(name, 0))
                owners.update(placed)
            pools |= owners
            for pool in owners:  # the pools it joined or left: their names again
                members = self.pool_nodes.get(pool, {})
                if (name in members) != (name in self.pool_names.get(pool, ())):
                    self._index(self.pool_names, pool, frozenset(members))
        jobs = set(self.stale_jobs)
        for key in self.stale_pods:
            store = idx.pods.get(key)
            if isinstance(key, tuple):
                views = tuple(p for p in store or () if p.job is not None)
                if views:
                    self.pods_by_job[key] = views
                else:
                    self.pods_by_job.pop(key, None)
                jobs.add(key)
            else:
                used = sum(p.devices for p in store or () if p.node == key and not p.ended)
                if used != self.used.get(key, 0):
                    if used:
                        self.used[key] = used
                    else:
                        self.used.pop(key, None)
                    for p, m in self.pool_nodes.items():
                        if key in m:
                            self.entries.setdefault(p, {})[key] = node_entry(m[key], used)
                            pools.add(p)
        if self.track:
            self.changed |= self.stale_jobs
        for key in self.stale_jobs:
            raw = _first(idx.jobs.get(key))
            if raw is None:
                self.jobs.pop(key, None)
                self.waiting.discard(key)
                self._mark(key, None)
            else:
                view = self.jobs[key] = job_view(raw)
                if _waits(view):
                    self.waiting.add(key)
                else:
                    self.waiting.discard(key)
                self._mark(key, view)
        for key in self.stale_workloads:
            w = _first(idx.workloads.get(key))
            gone = self.workloads.pop(key, None) if w is None else None
            if w is not None:
                self.workloads[key] = w
            for seen in (w, gone):
                if seen is not None and seen.admission is not None:
                    jobs.add(seen.job)  # a Job that records an admission holds devices while its status does not
        for key in jobs:
            old = self.reservations.pop(key, None)
            if old is not None:
                self.pool_reservations.get(old.pool, {}).pop(key, None)
            job = self.jobs.get(key)
            new = reservation(job, self.pods_by_job.get(key, ()), now, self._current(job)) if job is not None else None
            if new is not None:
                self.reservations[key] = new
                self.pool_reservations.setdefault(new.pool, {})[key] = new
            if new is not None and job is not None and _waits(job):
                self.held.add(key)
            else:
                self.held.discard(key)
            if old != new:
                pools.update(r.pool for r in (old, new) if r is not None)
            if (old.pool if old else None) != (new.pool if new else None):
                for r in (old, new):
                    if r is not None:
                        self._index(self.holders, r.pool, frozenset(self.pool_reservations.get(r.pool, {})))
        self.stale_jobs.clear()
        self.stale_pods.clear()
        self.stale_nodes.clear()
        self.stale_workloads.clear()
        grown: set[str] = set()
        for name in pools & set(self.pools):
            before_cap = self.capacity.get(name)
            self.capacity[name] = self._capacity(name)
            if grew(before_cap, self.capacity[name]):
                grown.add(name)
        return grown

    def _current(self, job: JobView) -> WorkloadView | None:
        """The batch Job of ``job``'s current attempt, when the job waits (the only jobs whose
        reservation a Job's admission annotation may give) and the watch shows it."""
        if job.phase in HOLDING or job.phase in AT_REST or not self.workloads:
            return None
        found: WorkloadView | None = self.workloads.get(
            (job.namespace, act.workload_name(job.name, job.status.attempt))
        )
        return found

    def snapshot(
        self,
        now: dt.datetime,
        created: Mapping[WorkloadKey, WorkloadView] | None = None,
        *,
        policy: PolicyInputs | None = None,
        preempted_nodes: frozenset[str] = frozenset(),
    ) -> Snapshot:
        """A frozen snapshot of what is folded now (frozen views and copies of the small maps: later
        refreshes do not change it); ``created`` are workloads this process made that the watch has
        not shown yet; ``policy`` the folded policies and namespace teams; ``preempted_nodes`` what a
        cloud API reports. O(pools) and O(created): the large maps are views, not copies."""
        workloads: Mapping[WorkloadKey, WorkloadView] = self.workloads.frozen()
        if created:
            workloads = Plus(workloads, created)
        return Snapshot(
            now=now,
            pools=MappingProxyType(dict(self.pools)),
            capacity=MappingProxyType(dict(self.capacity)),
            jobs=self.jobs.frozen(),
            workloads=workloads,
            pods_by_job=self.pods_by_job.frozen(),
            reservations=self.reservations.frozen(),
            plans={},
            policy=policy if policy is not None else PolicyInputs(),
            reports=MappingProxyType(self.reports),  # replaced whole by each refresh, never changed
            nodes=self.nodes.frozen(),
            node_used=self.used.frozen(),
            preempted_nodes=preempted_nodes,
            pool_nodes=MappingProxyType(dict(self.pool_names)),
            holders=MappingProxyType(dict(self.holders)),
            markers=MappingProxyType(dict(self.markers)),
        )

    @staticmethod
    def _index(index: dict[Any, frozenset[Any]], key: Any, value: frozenset[Any]) -> None:
        if value:
            index[key] = value
        else:
            index.pop(key, None)

    def _mark(self, key: JobKey, job: JobView | None) -> None:
        """``job``'s consolidation marker into the index by gang (None: the job is gone)."""
        gang = consolidate.marked_for(job) if job is not None else None
        old = self.marked.get(key)
        if old == gang:
            return
        if old is not None:
            del self.marked[key]
            self._index(self.markers, old, self.markers.get(old, frozenset()) - {key})
        if gang is not None:
            self.marked[key] = gang
            self.markers[gang] = self.markers.get(gang, frozenset()) | {key}

    def _place_node(self, node: NodeView) -> list[str]:
        owners = [name for name, pool in self.pools.items() if pool.owns(node)]
        for name in owners:
            self.pool_nodes.setdefault(name, {})[node.name] = node
        return owners

    def _capacity(self, name: str) -> PoolCapacity:
        return capacity_of(
            self.pools[name], self.entries.get(name, {}).values(), self.pool_reservations.get(name, {}).values()
        )
