"""The waiting jobs filed by pool and by the shapes they need, so that a pass after a pool grew
looks at the jobs that may be decided instead of every waiting job.

A pass woken by capacity (a pool grew, or a device's health changed) decides again the waiting
jobs with a shape in a pool that grew (:func:`.schedule.waiting_for`, all of them when any pool
may have), in queue order; most of them are skipped (:func:`.schedule.still_waits`): they
already wait, their first-choice pool already has its head, and none of their shapes may be taken
now. At 100,000 jobs that is some 70,000 jobs looked at, sorted and skipped, in a pass that
decides a handful. Of those jobs, a pass decides only:

* the ones :func:`may_wait` does not file as waiting already (not planned, a status that says
  something else, a plan that is not schedulable, or no shape): the *must* jobs;
* a job with a shape that may be taken at its turn: the shape fits what is free (the capacity
  only shrinks during a pass, so the shapes that do not fit at its start are never looked at),
  and the pool's head, if it has one by then, does not hold it against the job (a gang larger
  than what the head leaves spare that would not end before the head may start,
  ``decide.held_against``). Per pool and shape the jobs are kept sorted in queue order with that
  shape's expected seconds; the pass walks each fitting shape's list, passing over a job that
  would end too late in O(1), and drops the list once the shape no longer fits or is held
  against any job (a head with no known start);
* the first-choice pool's head: the first waiting job, in queue order, whose first-choice pool
  no decision of the pass has blocked yet. Per first-choice pool the jobs are kept sorted in
  queue order, and the pass walks them only while that pool is not blocked (once it is, it
  stays so for the pass, and the rest of that list is skipped whole);
* the jobs whose last decision is still being written (``busy``): the pass puts them back in
  the next one's marks, as before.

:class:`WaitingIndex` keeps the files between passes, updated for the jobs the folded picture read
again (:attr:`.cache.Observed.changed`) and the jobs linked to a plan since (:attr:`.plans.Plans.planned`),
and filed again whole after a rebuild of the picture or when the plans' links were dropped.
:meth:`WaitingIndex.queue` gives the pass its :class:`Queue`: the jobs it must look at, and per
first-choice pool and per fitting shape the sorted lists it walks. The pass decides them exactly
as it decided the whole set (the same decisions, in the same order, with the same statuses):
every job left out is one :func:`.schedule.still_waits` would have skipped.
"""

from __future__ import annotations

import bisect
import datetime as dt
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_api.durations import later
from accel_api.enums import JobPhase
from accel_operator.engine.plans import Entry, Plans, Shapes
from accel_operator.reconcile.common.decision import ADMITTED
from accel_operator.reconcile.common.snapshot import Gang, JobKey, JobView, PoolCapacity, Snapshot

Order = tuple[Any, ...]  # JobView.queue_order()
Item = tuple[Order, JobKey]
Timed = tuple[Order, JobKey, float]  # with the expected seconds of the shape it is filed under


def may_wait(job: JobView, plans: Plans) -> tuple[Entry, Shapes] | None:
    """What of :func:`.schedule.still_waits` reads the job and its plan alone: the job waits
    already (pending, admitted False as queued behind a head or waiting for capacity) on a
    schedulable plan, whose entry and ranked shapes are returned; None when it must be decided
    whatever is free. The pass and the index both read it, so the two never drift."""
    if job.phase is not JobPhase.PENDING:
        return None
    waiting = next((c for c in job.status.conditions if c.type == ADMITTED), None)
    if waiting is None or waiting.status != "False" or waiting.reason not in ("QueuedBehind", "WaitingForCapacity"):
        return None
    entry = plans.entry(job)
    if entry is None or not entry.schedulable:
        return None
    shapes = entry.shapes(plans.cache)
    return (entry, shapes) if shapes else None


@dataclass(frozen=True, slots=True)
class _Filed:
    """How one waiting job is filed: its place in the queue, the pools its plan ranks (None: not
    planned, so every capacity pass decides it), and its shapes when it may wait (None: a must job)."""

    order: Order
    pools: frozenset[str] | None
    shapes: Shapes | None
    seconds: tuple[float, ...] = ()  # each shape's expected seconds (the entry's durations)


@dataclass
class Queue:
    """What a pass woken by capacity looks at beyond the jobs an event named: ``keys``, each
    looked at; ``firsts``: per first-choice pool, the sorted lists of the jobs it heads (walked
    while that pool is not blocked); ``fitting``: per shape that fits its pool at the start of
    the pass, the sorted list of the jobs that rank it (walked while it fits, each job looked at
    only when that shape is not held against it by the pool's head)."""

    keys: set[JobKey]
    firsts: dict[str, list[list[Item]]]
    fitting: list[tuple[str, Gang, list[Timed]]] = field(default_factory=list)
    grown: set[str] | None = None  # the pools that grew (None: any): a fitting job must rank one
    filed: Mapping[JobKey, _Filed] = field(default_factory=dict)  # the index's, read during the pass

    def walk(self, first: str) -> Iterator[Item]:
        """The jobs of ``first``'s lists in queue order, each once."""
        lists = self.firsts[first]
        if len(lists) == 1:
            yield from lists[0]
            return
        last: JobKey | None = None
        for order, key in heapq.merge(*lists):
            if key != last:
                yield order, key
                last = key


def ordered(
    jobs: Mapping[JobKey, JobView],
    waiting: Iterable[JobView],
    queue: Queue,
    current: Callable[[], Snapshot],
    now: dt.datetime,
) -> Iterator[JobView]:
    """``waiting`` (the jobs the pass must look at, in queue order) merged with the queue's: its
    keys; from each first-choice pool's lists the next job while that pool has no head; from each
    fitting shape's list the next job while the shape fits and its pool's head does not hold it
    against that job (``decide.held_against``). Each is asked of ``current()``, the pass's
    snapshot when that job's turn comes (every job before it decided): as
    :func:`.schedule.still_waits` asks, so every job left out is one it would have skipped."""
    listed = {j.key for j in waiting}
    for key in queue.keys:
        job = jobs.get(key)
        if job is not None and not job.deleting and key not in listed:
            listed.add(key)
    explicit = sorted((jobs[k] for k in listed), key=JobView.queue_order)
    heap: list[tuple[Order, JobKey, int, float]] = []  # the walk's next job, with its shape's seconds
    walks: list[Iterator[tuple[Any, ...]]] = [iter([(j.queue_order(), j.key) for j in explicit])]
    firsts: list[str | None] = [None]
    shapes: list[tuple[str, Gang] | None] = [None]
    for first in queue.firsts:
        walks.append(queue.walk(first))
        firsts.append(first)
        shapes.append(None)
    for pool, gang, members in queue.fitting:
        walks.append(iter(members))
        firsts.append(None)
        shapes.append((pool, gang))
    for i, walk in enumerate(walks):
        head = next(walk, None)
        if head is not None:
            heap.append((head[0], head[1], i, head[2] if len(head) > 2 else 0.0))
    heapq.heapify(heap)
    seen: set[JobKey] = set()
    fits: dict[tuple[str, Gang], tuple[PoolCapacity, bool]] = {}
    grown, filed = queue.grown, queue.filed
    while heap:
        _order, key, i, seconds = heapq.heappop(heap)
        take, done = True, False
        if i != 0:
            job = jobs.get(key)
            take = key not in seen and key not in listed and job is not None and not job.deleting
            first_pool, shape = firsts[i], shapes[i]
            if first_pool is not None:
                if first_pool in current().blocked:
                    take, done = False, True  # blocked by now, so for every later job of that pool
            elif shape is not None and take:
                snap = current()
                pool, gang = shape
                cap = snap.capacity.get(pool)
                memo = fits.get(shape)
                if cap is not None and (memo is None or memo[0] is not cap):
                    memo = fits[shape] = (cap, cap.fits(gang))
                if cap is None or memo is None or not memo[1]:
                    take, done = False, True  # it no longer fits: not later in the pass either
                else:
                    pools = filed[key].pools
                    if grown is not None and pools is not None and pools.isdisjoint(grown):
                        take = False  # not of the pass's set (no shape in a pool that grew)
                    else:
                        b = snap.blocked.get(pool)
                        if b is not None and b.job != key and gang.devices > b.extra:
                            if b.shadow is None:
                                take, done = False, True  # held against this shape and every later job's
                            elif later(now, seconds) > b.shadow:  # it would not end before the head may start
                                take = False
        if take and key not in seen:
            seen.add(key)
            yield jobs[key]
        if not done:
            nxt = next(walks[i], None)
            if nxt is not None:
                heapq.heappush(heap, (nxt[0], nxt[1], i, nxt[2] if len(nxt) > 2 else 0.0))


@dataclass
class WaitingIndex:
    """The waiting jobs filed by pool and shape (see the module's docstring)."""

    filed: dict[JobKey, _Filed] = field(default_factory=dict)
    unplanned: set[JobKey] = field(default_factory=set)  # must jobs without a plan
    must: dict[str, set[JobKey]] = field(default_factory=dict)  # pool -> must jobs ranking a shape there
    must_else: set[JobKey] = field(default_factory=set)  # must jobs with a plan but no shape
    # (pool, first-choice pool) -> the jobs that may wait with a shape in that pool, in queue order
    lists: dict[tuple[str, str], list[Item]] = field(default_factory=dict)
    firsts: dict[str, set[str]] = field(default_factory=dict)  # pool -> first-choice pools of its lists
    # pool -> shape -> the jobs that may wait ranking it, in queue order, with its expected seconds
    shapes: dict[str, dict[Gang, list[Timed]]] = field(default_factory=dict)
    # pool -> (the capacity its shapes were tested on, each shape's fit): tested again only
    # when the pool's capacity is another object.
    fits: dict[str, tuple[PoolCapacity, dict[Gang, bool]]] = field(default_factory=dict)
    rebuilds: int = -1
    epoch: int = -1

    def sync(
        self,
        jobs: Mapping[JobKey, JobView],
        waiting: Iterable[JobKey],
        changed: set[JobKey],
        plans: Plans,
        *,
        rebuilds: int,
    ) -> None:
        """File again the jobs read since the last sync (``changed``, then emptied) and those
        linked to a plan since (``plans.planned``, emptied); every job of ``waiting`` when the
        picture was rebuilt since (``rebuilds``) or the plans' links were dropped."""
        plans.track = True
        if rebuilds != self.rebuilds or plans.epoch != self.epoch:
            self._clear()
            self.rebuilds, self.epoch = rebuilds, plans.epoch
            keys: Iterable[JobKey] = waiting
        else:
            keys = changed | plans.planned
        waits = waiting if isinstance(waiting, (set, frozenset)) else set(waiting)
        for key in keys:
            job = jobs.get(key)
            self._file(key, job if job is not None and key in waits and not job.deleting else None, plans)
        changed.clear()
        plans.planned.clear()

    def _clear(self) -> None:
        self.filed, self.unplanned, self.must, self.must_else = {}, set(), {}, set()
        self.lists, self.firsts, self.shapes, self.fits = {}, {}, {}, {}

    def _file(self, key: JobKey, job: JobView | None, plans: Plans) -> None:
        old = self.filed.pop(key, None)
        if old is not None:
            self._unfile(key, old)
        if job is None:
            return
        found = may_wait(job, plans)
        entry = plans.entry(job) if found is None else found[0]
        shapes = None if found is None else found[1]
        pools = None if entry is None else frozenset(p for p, _g in entry.shapes(plans.cache))
        seconds = () if found is None else found[0].durations(plans.cache)
        new = _Filed(job.queue_order(), pools, shapes, seconds)
        self.filed[key] = new
        if shapes is None:
            if pools is None:
                self.unplanned.add(key)
            elif not pools:
                self.must_else.add(key)
            for pool in pools or ():
                self.must.setdefault(pool, set()).add(key)
            return
        first = shapes[0][0]
        item = (new.order, key)
        for pool in pools or ():
            bisect.insort(self.lists.setdefault((pool, first), []), item)
            self.firsts.setdefault(pool, set()).add(first)
        for (pool, gang), secs in zip(shapes, seconds, strict=True):
            bisect.insort(self.shapes.setdefault(pool, {}).setdefault(gang, []), (new.order, key, secs))

    def _unfile(self, key: JobKey, old: _Filed) -> None:
        if old.shapes is None:
            self.unplanned.discard(key)
            self.must_else.discard(key)
            for pool in old.pools or ():
                _drop(self.must, pool, key)
            return
        first = old.shapes[0][0]
        item = (old.order, key)
        for pool in old.pools or ():
            lst = self.lists[(pool, first)]
            del lst[bisect.bisect_left(lst, item)]
            if not lst:
                del self.lists[(pool, first)]
                self.firsts[pool].discard(first)
                if not self.firsts[pool]:
                    del self.firsts[pool]
        for (pool, gang), secs in zip(old.shapes, old.seconds, strict=True):
            by_gang = self.shapes[pool]
            members = by_gang[gang]
            del members[bisect.bisect_left(members, (old.order, key, secs))]
            if not members:
                del by_gang[gang]
                if not by_gang:
                    del self.shapes[pool]

    def queue(self, snap: Snapshot, grown: set[str] | None, busy: Iterable[JobKey]) -> Queue:
        """What a pass woken because ``grown`` grew (None: any pool may have) looks at beyond the
        jobs an event named (see the module's docstring)."""

        def concerned(key: JobKey) -> bool:  # the pass's set: not planned, or a shape in a pool that grew
            pools = self.filed[key].pools
            return pools is None or grown is None or not pools.isdisjoint(grown)

        keys = set(self.unplanned)
        if grown is None:
            keys |= self.must_else
            for members in self.must.values():
                keys |= members
        else:
            for pool in grown:
                keys |= self.must.get(pool, set())
        fitting: list[tuple[str, Gang, list[Timed]]] = []
        for pool, by_gang in self.shapes.items():
            cap = snap.capacity.get(pool)
            if cap is None:
                continue
            tested = self.fits.get(pool)
            if tested is None or tested[0] is not cap:
                tested = self.fits[pool] = (cap, {})
            for gang, ranking in by_gang.items():
                fit = tested[1].get(gang)
                if fit is None:
                    fit = tested[1][gang] = cap.fits(gang)
                if fit:
                    fitting.append((pool, gang, ranking))
        keys.update(k for k in busy if k in self.filed and concerned(k))
        firsts: dict[str, list[list[Item]]] = {}
        for pool in self.firsts if grown is None else grown:
            for first in self.firsts.get(pool, ()):
                if grown is None or first in grown:
                    firsts[first] = [self.lists[(first, first)]]  # every job of that first choice
                else:
                    firsts.setdefault(first, []).append(self.lists[(pool, first)])
        return Queue(keys, firsts, fitting, None if grown is None else set(grown), self.filed)


def _drop(index: dict[Any, set[JobKey]], at: Any, key: JobKey) -> None:
    members = index.get(at)
    if members is not None:
        members.discard(key)
        if not members:
            del index[at]
