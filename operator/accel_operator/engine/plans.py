"""The plans the scheduler keeps between passes: one per job (its uid, generation, the pools'
version and whether it fell back to on-demand), shared by every job whose effective spec is the
same where the planner reads it (``candidates.plan_key``), each with its admission shapes beside it.

A plan is a function of what the planner reads of the job's effective spec, of what the policies
restrict and of the pools (free capacity only adds notes), so thousands of jobs from one template,
whatever their team, priority, image or checkpoint path, share one plan and one tuple of shapes. A change of the pools
(:meth:`Plans.pools_changed`) drops them all. Only the plans used last are kept whole
(:attr:`Plans.max_built`): when jobs name their pools, nearly every waiting job has a plan of its own;
the other entries keep what a pass reads of a job it skips, and their plan is made again when a
job of theirs is decided. The shapes live in the same entry as their plan, so they are found by
the job (never by the plan object's address, which a later plan may reuse).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from accel_api import catalog as catalog_mod
from accel_operator.planning import eligible, policy, selection
from accel_operator.planning.cache import PlanCache
from accel_operator.planning.candidates import OWN_MAX_DEVICES, Plan, PoolOffer, plan_key, ranked_per_pool
from accel_operator.reconcile.common.snapshot import Gang, JobKey, JobView, PoolCapacity, PoolView, Snapshot
from accel_operator.reconcile.job import fallback
from accel_operator.reconcile.job.decide import gang_of

# (job uid, generation, pools version, fell back to on-demand, spot pools it left)
PlanKey = tuple[str, int | None, int, bool, tuple[str, ...]]
Shapes = tuple[tuple[str, Gang], ...]

# Above this many distinct plans, the caches start again (a bound on memory, not a tuning).
MAX_PLANS = 20_000
# Above this many jobs' references to a plan, those references start again (the plans stay). A
# reference is a key and a pointer, one per job (generation, fallback) planned: the bound is set
# well above the jobs a fleet queues, since dropping them all makes every waiting job found again
# through its spec and no longer skippable in the pass where that happens (at 100,000 jobs a bound
# of 20,000 emptied them every pass).
MAX_JOB_PLANS = 1_000_000
# Links beyond 5/4 of the waiting jobs (plus this slack) start a pass that drops those of the jobs
# no longer waiting (admitted, at rest, deleted) and the plans no kept link names: what is kept
# stays within a quarter of what waits, and the pass costs O(1) per link made, amortised (at most
# five links looked at per link dropped).
KEEP_SLACK = 1_024
# The plans kept whole by default, the ones used last (the others are planned again when a job of
# theirs is decided, see :class:`Entry`); the operator's setting ``plans_kept`` (its env
# ACCEL_OPERATOR_PLANS_KEPT) sets it. A plan holds a candidate per device count of each pool the
# job may use, and there is about one plan per waiting job when jobs name their pools: 100,000
# waiting jobs kept some 2 GB of plans when a plan also held a candidate per pool left out. As
# many as the planner's own memos of plans keep (4,096).
MAX_BUILT = 4_096


def shapes_of(plan: Plan, cache: PlanCache | None = None) -> Shapes:
    """``plan``'s admission shapes: (pool, gang) of its ranked candidates, best first."""
    ranked = ranked_per_pool(plan, cache=cache)
    return tuple((c.pool, gang_of(c)) for c in ranked)


@dataclass
class Entry:
    """One cached plan and, once asked for, its admission shapes (and each one's expected
    seconds, which decide whether it may backfill around a pool's head).

    The plan itself is kept for the :attr:`Plans.max_built` entries used last only (``plan`` None for
    the others): ``make`` plans it again from the very inputs it was planned from (the spec, the
    offers of that moment, the pools' index), which gives an equal plan, so a waiting job that is
    decided again reads the same plan whether it was kept or not. The shapes, the durations and
    whether it is schedulable stay: they are all a pass reads of a job it skips."""

    plan: Plan | None
    make: Callable[[], Plan]
    schedulable: bool
    ranked: Shapes | None = None
    seconds: tuple[float, ...] | None = None
    spec_key: tuple[bytes, int] | None = None  # its key in ``Plans.by_spec``

    def planned(self) -> Plan:
        """The plan: the one kept, else made again (and not kept: :meth:`Plans.plan` keeps it)."""
        return self.plan if self.plan is not None else self.make()

    def shapes(self, cache: PlanCache | None = None) -> Shapes:
        if self.ranked is None:
            self.ranked = shapes_of(self.planned(), cache)
        return self.ranked

    def durations(self, cache: PlanCache | None = None) -> tuple[float, ...]:
        """Aligned with :meth:`shapes`: each ranked candidate's expected run time (inf: unknown),
        as ``decide`` reads it."""
        if self.seconds is None:
            self.seconds = tuple(
                c.cost.expected_seconds if c.cost is not None else float("inf")
                for c in ranked_per_pool(self.planned(), cache=cache)
            )
        return self.seconds

    def drop_plan(self, cache: PlanCache | None = None) -> None:
        """Keep what a pass reads of a job it skips, and let the plan go."""
        if self.plan is not None:
            self.shapes(cache)
            self.durations(cache)
            self.plan = None


@dataclass
class Plans:
    catalog: catalog_mod.Catalog
    pools_version: int = 0
    by_job: dict[PlanKey, Entry] = field(default_factory=dict)
    by_spec: dict[tuple[bytes, int], Entry] = field(default_factory=dict)  # by (plan key, pools_version)
    # The planner's memo (step estimates, pool skeletons, each plan's ranking and status form),
    # keyed on values: passed to every planning call and decision.
    cache: PlanCache = field(default_factory=PlanCache)
    # The pools by name and kind (and the pools each placement leaves out), built on the first
    # plan of a pools version: a job is planned over the pools it may use, not the whole fleet.
    index: eligible.PoolIndex | None = None
    # Each pool as the planner is offered it, with the pool and capacity it was read from: an
    # admission replaces its own pool's capacity and no other, so a new plan reads the free
    # devices of the pools that changed instead of every node of the fleet (O(N) per new plan).
    offers: dict[str, tuple[PoolView, PoolCapacity, PoolOffer]] = field(default_factory=dict)
    # The entries whose plan is kept whole, the last used last, at most ``max_built`` of them.
    built: dict[tuple[bytes, int], Entry] = field(default_factory=dict)
    max_built: int = MAX_BUILT
    # The list of offers :meth:`pool_offers` gave last: given again while no pool's offer changed,
    # so the entries planned meanwhile share one list to plan again from.
    _offered: list[PoolOffer] = field(default_factory=list)
    # The (name, accelerator) of each pool of ``_offered``, in order: the planner finds the pools
    # a placement leaves out once per such tuple (``eligible.LeftOutPools.split``).
    offered_names: eligible.Offered = ()
    # The pools and capacity ``_offered`` was made of, and the pools by name of the last pools.
    _offered_for: tuple[Mapping[str, PoolView], Mapping[str, PoolCapacity]] | None = None
    _sorted: tuple[Mapping[str, PoolView], list[tuple[str, PoolView]]] | None = None
    # For the index of waiting jobs (engine/waiting.py), once it follows (``track``): the jobs
    # linked to a plan since it last looked, and a count of the times links were dropped (then it
    # reads every waiting job again).
    track: bool = False
    planned: set[JobKey] = field(default_factory=set)
    epoch: int = 0

    def pools_changed(self) -> None:
        self.pools_version += 1
        self.epoch += 1
        self.by_job.clear()
        self.by_spec.clear()
        self.built.clear()
        self.index = None
        self.offers.clear()
        self._offered = []
        self._offered_for = self._sorted = None
        self.offered_names = ()

    def pool_offers(self, snap: Snapshot) -> list[PoolOffer]:
        """``snap``'s pools by name as the planner is offered them (their free devices and whole
        free nodes now), each made again only when its pool or its capacity is another object;
        the same list while ``snap``'s pools and capacity are the same objects (a pass's plans
        between two admissions), so a new plan costs no look at every pool."""
        made = self._offered_for
        if made is not None and made[0] is snap.pools and made[1] is snap.capacity:
            return self._offered
        if self._sorted is None or self._sorted[0] is not snap.pools:
            self._sorted = (snap.pools, sorted(snap.pools.items()))
        out = []
        for name, pool in self._sorted[1]:
            cap = snap.capacity[name]
            kept = self.offers.get(name)
            if kept is None or kept[0] is not pool or kept[1] is not cap:
                offer = PoolOffer(
                    name=name, spec=pool.spec, free_devices=cap.free_devices, free_nodes=cap.whole_free_nodes
                )
                kept = self.offers[name] = (pool, cap, offer)
            out.append(kept[2])
        self._offered_for = (snap.pools, snap.capacity)
        last = self._offered
        if len(last) == len(out) and all(a is b for a, b in zip(last, out, strict=True)):
            return last  # shared, never changed: callers only read it
        self._offered = out
        names = tuple((o.name, o.spec.accelerator) for o in out)
        if names != self.offered_names:
            self.offered_names = names  # the same object while the offered pools are the same
        return out

    def pool_index(self, snap: Snapshot) -> eligible.PoolIndex:
        """The index of ``snap``'s pools (a pool the index knows under another accelerator is
        planned in full by the planner, so a stale index costs time, never a wrong plan)."""
        if self.index is None:
            self.index = eligible.PoolIndex.of(
                ((name, pool.spec.accelerator) for name, pool in snap.pools.items()), self.catalog
            )
        return self.index

    def key(self, job: JobView) -> PlanKey:
        return (
            job.uid,
            job.generation,
            self.pools_version,
            fallback.on_demand(job.status),
            fallback.left_pools(job.status),
        )

    def plan(self, job: JobView, snap: Snapshot) -> Plan | None:
        if job.spec is None:
            return None
        key = self.key(job)  # fell back: plan it as spot.policy never
        entry = self.by_job.get(key)
        if entry is None:
            # A job fallen back to on-demand is planned as spot.policy: never, and the policies'
            # granted pools and device cap limit the candidates. A plan is then a function of that
            # spec and the pools (free capacity only adds notes), so jobs with the same effective
            # spec share one: thousands of jobs from one template, one plan.
            spec = fallback.effective_spec(job.spec, job.status, snap.pools)
            offers = self.pool_offers(snap)
            pols = snap.policy.policies
            restricted, allowed = policy.restrict(spec, offers, pols)
            # The list shared by the plans made since the last change of an offer, when the
            # policies leave every pool (``restrict`` only filters): one list, not one a plan.
            every = len(allowed) == len(offers)
            offers = offers if every else allowed
            capped = restricted.placement.max_devices != spec.placement.max_devices
            source = policy.cap_source(pols) if capped else OWN_MAX_DEVICES
            # The plan's key: what the planner reads of the restricted spec, where its cap came
            # from and the pools a grant left (none: every pool offered). Jobs of one template in
            # other teams or at other priorities share it (the team acts through ``restrict``).
            digest = plan_key(restricted, source, *(() if every else ("", *(o.name for o in offers))))
            same = (digest, self.pools_version)
            entry = self.by_spec.get(same)
            if entry is None:
                # Everything the plan is made from, bound: it is made again from these when a job of
                # its spec is decided after the plan was let go (an equal plan: the planner is pure).
                make = functools.partial(
                    selection.plan,
                    restricted,
                    offers,
                    self.catalog,
                    max_devices_from=source,
                    cache=self.cache,
                    spec_digest=digest,  # the plan's key, made once
                    index=self.pool_index(snap),
                    offered=self.offered_names if every else None,
                )
                plan = make()
                entry = Entry(plan, make, plan.schedulable, spec_key=same)
                if len(self.by_spec) >= MAX_PLANS:
                    self.by_spec.clear()
                self.by_spec[same] = entry
            if len(self.by_job) >= MAX_JOB_PLANS:
                self.by_job.clear()
                self.epoch += 1
            self.by_job[key] = entry
            if self.track:
                self.planned.add(job.key)
        return self._kept(entry)

    def _kept(self, entry: Entry) -> Plan:
        """``entry``'s plan, made again if it was let go, and kept as the one used last; the
        plan used longest ago past :attr:`max_built` is let go."""
        plan = entry.planned()
        entry.plan = plan
        key = entry.spec_key
        if key is None:
            return plan
        old = self.built.pop(key, None)
        if old is not None and old is not entry:
            old.drop_plan(self.cache)  # an entry of the same key from before the plans were emptied
        self.built[key] = entry
        while len(self.built) > self.max_built:
            oldest = next(iter(self.built))
            self.built.pop(oldest).drop_plan(self.cache)
        return plan

    def keep(self, waiting: Iterable[str]) -> None:
        """Drop the links of the jobs whose uid is not in ``waiting`` and the plans no link left
        names. Only a waiting job is ever looked up (an admitted or running one is decided
        without its plan, and a job that waits again is planned again through its spec): a link
        per job ever planned and a plan per spec ever seen held memory for the fleet's history."""
        uids = set(waiting)
        self.epoch += 1
        self.by_job = {k: e for k, e in self.by_job.items() if k[0] in uids}
        live = {e.spec_key for e in self.by_job.values()}
        self.by_spec = {s: e for s, e in self.by_spec.items() if s in live}
        self.built = {s: e for s, e in self.built.items() if s in live}

    def keep_waiting(self, jobs: Mapping[JobKey, JobView], waiting: Collection[JobKey]) -> None:
        """:meth:`keep` the links of ``waiting`` (keys of ``jobs``), once the links outnumber
        5/4 of them (plus :data:`KEEP_SLACK`): memory bounded by the queue, at O(1) a link."""
        if 4 * len(self.by_job) > 5 * len(waiting) + 4 * KEEP_SLACK:
            self.keep(jobs[k].uid for k in waiting if k in jobs)

    def entry(self, job: JobView) -> Entry | None:
        """``job``'s cached plan (None: not planned since the pools or the job last changed)."""
        return self.by_job.get(self.key(job))

    def shapes(self, job: JobView, plan: Plan) -> Shapes:
        """The admission shapes of ``plan``, planned for ``job``: the cached ones when the cache
        holds that very plan for it, else worked out afresh (and not kept)."""
        entry = self.entry(job)
        if entry is None or entry.plan is not plan:
            return shapes_of(plan, self.cache)
        return entry.shapes(self.cache)
