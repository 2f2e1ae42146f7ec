"""One scheduling pass as a pure function: the jobs to decide, in queue order, each decided on a
snapshot that counts every decision before it, and amended for node health and consolidation.

:func:`schedule_pass` makes no call and reads no clock: it takes the snapshot, the jobs to
decide, ``now``, the rules and the plan cache (:class:`~accel_operator.engine.plans.Plans`, which
it fills), and returns the writes in the order they are to be applied (:class:`Pass`). Jobs that
hold devices come first, then waiting jobs in queue order (priority, then submission), so that
admission is serialized and sees every earlier reservation. Within a pass, a job that already
waits, whose shapes do not fit what is free (or fit only in pools held for a head ahead of it)
and whose pool already has its head is not decided again, unless an event about the job itself
(beyond its own status coming back) woke it; a job whose last decision is still being written
(``busy``, or written earlier in this pass) is left to the next.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from accel_api.durations import later
from accel_api.enums import JobPhase
from accel_api.job import PlanStatus
from accel_operator.engine.plans import Plans
from accel_operator.engine.waiting import Queue, may_wait, ordered
from accel_operator.planning.candidates import Plan
from accel_operator.reconcile.common.decision import Decision, PlanWrite
from accel_operator.reconcile.common.snapshot import AT_REST, HOLDING, Gang, JobKey, JobView, Snapshot
from accel_operator.reconcile.job import fallback, resume
from accel_operator.reconcile.job.decide import DECISION_FAILED, decide, failed, held_against
from accel_operator.reconcile.job.status import holds, settle_status
from accel_operator.reconcile.nodes import consolidate, health
from accel_operator.settings import OperatorSettings


@dataclass(frozen=True)
class Rules:
    """The settings a pass decides by."""

    bind_timeout: float
    spot: fallback.SpotRules
    health: health.Rules
    consolidation: consolidate.Rules


def spot_rules(settings: OperatorSettings) -> fallback.SpotRules:
    return fallback.SpotRules(
        window_seconds=settings.spot_fallback_window_seconds,
        preemptions_in_window=settings.spot_fallback_preemptions,
    )


def health_rules(settings: OperatorSettings) -> health.Rules:
    s = settings
    return health.Rules(
        stale_after=s.report_stale_seconds,
        checkpoint_grace=s.checkpoint_grace_seconds,
        idle_window=s.idle_window_seconds,
        idle_percent=s.idle_utilization_percent,
        hung_window=s.hung_window_seconds,
        hung_percent=s.hung_utilization_percent,
    )


def consolidation_rules(settings: OperatorSettings, snap: Snapshot) -> consolidate.Rules:
    s = settings
    # A gang waits this long for the moves made for it (checkpoint, then the moved job's new
    # attempt bound) before it may propose more.
    settle = s.checkpoint_grace_seconds + s.bind_timeout_seconds + 60.0
    return consolidate.rules_from(snap.policy.policies, checkpoint_grace=s.checkpoint_grace_seconds, settle=settle)


def rules_from(settings: OperatorSettings, snap: Snapshot) -> Rules:
    return Rules(
        bind_timeout=settings.bind_timeout_seconds,
        spot=spot_rules(settings),
        health=health_rules(settings),
        consolidation=consolidation_rules(settings, snap),
    )


@dataclass(frozen=True)
class Write:
    """A decision to apply: the job as decided, the decision, and the status merge patch it
    writes with the whole status it leaves (both None when the job already holds it)."""

    job: JobView
    decision: Decision
    patch: dict[str, Any] | None
    status: dict[str, Any] | None
    # The model of ``status["plan"]`` (the plan the decision wrote, or the one the job held), so
    # that the status it leaves is read back without parsing the plan again; None: parse it.
    plan: PlanStatus | None = None

    @property
    def acts(self) -> bool:
        """Whether applying it writes anything (a status, a workload, an event...)."""
        return self.patch is not None or bool(self.decision.actions)


def settle(job: JobView, decision: Decision, now: dt.datetime) -> Write:
    current: dict[str, Any] = {}
    new: dict[str, Any] | None = None
    if not holds(job.status, decision, job.generation):  # the common case, without serialising
        current = job.status.model_dump(by_alias=True, mode="json", exclude_none=True)
        new = settle_status(current, decision, job.generation, now=now, stored=True)  # no nulls: as dumped
    merged: dict[str, Any] | None = None
    plan: PlanStatus | None = None
    if new is not None:
        merged = {**current, **{k: v for k, v in new.items() if v is not None}}
        for k, v in new.items():
            if v is None:
                merged.pop(k, None)
        wrote = decision.status.plan
        if "plan" not in new:
            plan = job.status.plan  # current["plan"] is its dump
        elif isinstance(wrote, PlanWrite) and new["plan"] is wrote.wire:
            plan = wrote.model
    return Write(job, decision, new, merged, plan)


@dataclass(frozen=True)
class Pass:
    """What a pass decided: the writes in the order to apply them, the jobs left to the next
    pass (busy), what to count, and the snapshot after every admission of the pass."""

    writes: tuple[Write, ...]
    retry: frozenset[JobKey]
    moves: tuple[health.MoveReason, ...]
    stages: tuple[consolidate.Stage, ...]
    phases: Mapping[str, int]  # jobs per phase after the pass (at rest ones counted as they are)
    queue: Mapping[str, int]  # waiting jobs per pool they block
    snapshot: Snapshot
    # Jobs whose decision raised, with the error as text: each got a DecisionFailed condition and
    # event instead, and the pass went on (one tenant's job never stops admission for everyone).
    failed: tuple[tuple[JobKey, str], ...] = ()

    @property
    def decisions(self) -> list[tuple[JobView, Decision]]:
        return [(w.job, w.decision) for w in self.writes]


@dataclass
class _Tally:
    """A pass's results as they accumulate (private to :func:`schedule_pass`)."""

    acting: set[JobKey]
    writes: list[Write] = field(default_factory=list)
    retry: set[JobKey] = field(default_factory=set)
    moves: list[health.MoveReason] = field(default_factory=list)
    stages: list[consolidate.Stage] = field(default_factory=list)
    failed: list[tuple[JobKey, str]] = field(default_factory=list)

    def saved(self, key: JobKey) -> tuple[int, int, int, bool]:
        """Where one job's decision starts (its lengths, not copies: O(1) a job)."""
        return len(self.writes), len(self.moves), len(self.stages), key in self.retry

    def restore(self, key: JobKey, saved: tuple[int, int, int, bool]) -> None:
        """Undo what one job's decision added. The writes it added are of jobs that were not
        acting before (``_start_moves`` skips those), so their keys leave ``acting``."""
        writes, moves, stages, in_retry = saved
        for w in self.writes[writes:]:
            self.acting.discard(w.job.key)
        if not in_retry:
            self.retry.discard(key)
        del self.writes[writes:], self.moves[moves:], self.stages[stages:]

    def write(self, job: JobView, decision: Decision, now: dt.datetime) -> None:
        w = settle(job, decision, now)
        self.writes.append(w)
        if w.acts:
            self.acting.add(job.key)


def order(snap: Snapshot, keys: Iterable[JobKey]) -> list[JobView]:
    """The jobs of ``keys`` to decide, each once: those holding devices first, then the waiting
    ones in queue order (priority, then submission)."""
    jobs = [snap.jobs[k] for k in dict.fromkeys(keys) if k in snap.jobs and not snap.jobs[k].deleting]
    holding = [j for j in jobs if j.phase in HOLDING]
    waiting = sorted((j for j in jobs if j.phase not in HOLDING), key=JobView.queue_order)
    return holding + waiting


def _jobs(
    snap: Snapshot, keys: Iterable[JobKey], woken: Queue | None, current: Callable[[], Snapshot], now: dt.datetime
) -> Iterator[JobView]:
    """:func:`order` of ``keys``, merged with ``woken``'s waiting jobs (:func:`.waiting.ordered`)."""
    jobs = order(snap, keys)
    if woken is None:
        yield from jobs
        return
    holding = [j for j in jobs if j.phase in HOLDING]
    yield from holding
    yield from ordered(snap.jobs, jobs[len(holding) :], woken, current, now)


def waiting_for(
    snap: Snapshot, plans: Plans, pools: set[str] | None, waiting: Iterable[JobKey] | None = None
) -> set[JobKey]:
    """The waiting jobs that may fit in ``pools`` (None: any pool) now; ``waiting``: the keys of
    the snapshot's waiting jobs when the caller keeps them (else every job is looked at)."""
    out: set[JobKey] = set()
    for key in snap.jobs if waiting is None else waiting:
        job = snap.jobs.get(key)
        if job is None or job.phase in HOLDING or job.phase in AT_REST:
            continue
        entry = plans.entry(job) if pools is not None else None
        if entry is None or pools is None or any(pool in pools for pool, _gang in entry.shapes(plans.cache)):
            out.add(key)
    return out


def still_waits(job: JobView, snap: Snapshot, refused: set[tuple[str, Gang]], plans: Plans, now: dt.datetime) -> bool:
    """Whether deciding ``job`` again in this pass can only repeat that it waits: it waits
    already (:func:`.waiting.may_wait`), its first-choice pool already has its head (the first waiter in
    queue order blocks the pool: it must be decided to do so), and no placement its plan ranks
    may be taken now: each either does not fit what is free, or is in a pool held for a head
    ahead of it that it may not backfill around (``decide._may_use``'s two refusals, in its order;
    the backfill rule is ``decide.held_against``, shared). A shape that does not fit is refused
    for the rest of the pass (capacity only shrinks during a pass), so the jobs behind with that
    shape cost a set lookup; a pool's head, once set, stays for the pass. Only for a job whose
    decision is left to the capacity (:func:`settled`, or no event named it)."""
    if job.key in snap.reservations:
        return False  # (a reservation: its batch Job records an admission its status does not say yet)
    found = may_wait(job, plans)
    if found is None:
        return False
    entry, shapes = found
    if shapes[0][0] not in snap.blocked:
        return False

    def end_of(i: int) -> dt.datetime:
        """When the ``i``-th ranked shape would end if it started now (the entry keeps the durations)."""
        return later(now, entry.durations(plans.cache)[i])

    for i, shape in enumerate(shapes):
        if shape in refused:
            continue
        pool, gang = shape
        cap = snap.capacity.get(pool)
        if cap is None or not cap.fits(gang):
            refused.add(shape)  # it does not fit now, so not later in this pass either
            continue
        if not held_against(snap.blocked.get(pool), job.key, gang, functools.partial(end_of, i)):
            return False  # it fits, and nothing ahead holds the pool against it (or it may backfill)
    return True


def settled(job: JobView) -> bool:
    """Whether an event on this waiting job leaves its decision to the capacity alone, as for a
    job woken by a pool that grew: the watch showing the status the engine wrote (or the
    accountant's), not a new spec, a stop, a deletion, a resume point to find or an earlier
    decision that failed. A job's own status write comes back as an event: deciding every such
    waiting job again would rewrite it (its message names what is free) and so on, each pass."""
    st = job.status
    return (
        job.spec is not None
        and not job.deleting
        and job.generation == st.observed_generation
        and not job.stop_requested
        and not resume.needs_resume(job)
        and not any(c.type == DECISION_FAILED for c in st.conditions)
    )


def schedule_pass(
    snapshot: Snapshot,
    keys: Iterable[JobKey],
    now: dt.datetime,
    rules: Rules,
    plans: Plans,
    *,
    marked: Iterable[JobKey] = (),
    busy: Iterable[JobKey] = (),
    lookups: Mapping[JobKey, resume.Lookup] | None = None,
    full: bool = False,
    woken: Queue | None = None,
) -> Pass:
    """Decide ``keys`` on ``snapshot`` at ``now``. ``marked``: the jobs an event named (a job at
    rest is decided only then); ``busy``: the jobs whose last decision is still being written;
    ``lookups``: the last checkpoint lookup per job; ``full``: a full pass (every job decided,
    none skipped as still waiting); ``woken``: the waiting jobs of a pass woken by capacity, from
    the index (:mod:`.waiting`), looked at beyond ``keys`` (which then hold only what events named)."""
    snap = snapshot
    dirty = set(marked)
    lookups = lookups or {}
    tally = _Tally(acting=set(busy))
    plan_of = dict(snap.plans)
    refused: set[tuple[str, Gang]] = set()  # shapes that did not fit a pool in this pass
    queue: dict[str, int] = {}
    phases: dict[str, int] = {}
    # The heads are asked of the pass's snapshot as it is at each job's turn (hence late binding).
    for job in _jobs(snap, keys, woken, lambda: snap, now):  # noqa: B023
        if job.key in tally.acting:
            tally.retry.add(job.key)  # its last decision is still being written: next pass
            continue
        if job.phase in AT_REST and job.key not in dirty:
            phases[job.phase.value] = phases.get(job.phase.value, 0) + 1
            continue
        if not full and (job.key not in dirty or settled(job)) and still_waits(job, snap, refused, plans, now):
            continue
        # One job's failure is that job's alone: what it changed of the pass is rolled back, it
        # gets a DecisionFailed condition and event, and the jobs behind it are decided as usual.
        before, old_plan, saved = snap, plan_of.get(job.key), tally.saved(job.key)
        newly_refused: list[tuple[str, Gang]] = []
        try:
            if job.phase not in HOLDING and job.spec is not None:
                plan = plans.plan(job, snap)
                if plan is not None:
                    plan_of[job.key] = plan
                    snap = _with_plans(snap, plan_of)
            decision = decide(
                job,
                snap,
                now,
                bind_timeout=rules.bind_timeout,
                lookup=lookups.get(job.key),
                rules=rules.spot,
                cache=plans.cache,
                checkpoint_grace=rules.health.checkpoint_grace,
            )
            if decision.phase is JobPhase.RUNNING:  # running, or starting to (health.amend says why)
                decision, moved = health.amend(decision, job, snap, now, rules.health)
                if moved is not None:
                    tally.moves.append(moved)
                decision, stage = consolidate.carry(decision, job, snap, now, rules.consolidation)
                if stage is not None:
                    tally.stages.append(stage)
            elif decision.phase is JobPhase.PENDING:
                decision, orders = consolidate.amend(decision, job, snap, now, rules.consolidation)
                snap = _start_moves(job, orders, snap, now, rules.consolidation, tally=tally)
            if decision.admitted is not None:
                pool, gang = decision.admitted
                end = later(now, _seconds(decision))
                snap = snap.with_admission(job.key, pool, gang, end)
            if decision.blocks is not None:
                snap = snap.with_blocked(*decision.blocks)
                queue[decision.blocks[0]] = queue.get(decision.blocks[0], 0) + 1
                blocked_plan = snap.plans.get(job.key)
                if blocked_plan is not None and decision.admitted is None:
                    newly_refused = [
                        (pool, gang)
                        for pool, gang in plans.shapes(job, blocked_plan)
                        if pool in snap.capacity and not snap.capacity[pool].fits(gang) and (pool, gang) not in refused
                    ]
                    refused.update(newly_refused)
        except Exception as exc:  # noqa: BLE001 - isolated to this job, reported in Pass.failed
            snap = before  # what this job changed of the pass, undone (a journal, not copies)
            if old_plan is None:
                plan_of.pop(job.key, None)
            else:
                plan_of[job.key] = old_plan
            refused.difference_update(newly_refused)
            tally.restore(job.key, saved)
            tally.failed.append((job.key, f"{type(exc).__name__}: {exc}"))
            decision = failed(job, exc)
        phases[decision.phase.value] = phases.get(decision.phase.value, 0) + 1
        tally.write(job, decision, now)
    return Pass(
        writes=tuple(tally.writes),
        retry=frozenset(tally.retry),
        moves=tuple(tally.moves),
        stages=tuple(tally.stages),
        phases=phases,
        queue=queue,
        snapshot=snap,
        failed=tuple(tally.failed),
    )


def _start_moves(
    gang: JobView,
    orders: tuple[consolidate.Order, ...],
    snap: Snapshot,
    now: dt.datetime,
    rules: consolidate.Rules,
    *,
    tally: _Tally,
) -> Snapshot:
    """Each order's first step on the job to move (its own status write, event and
    checkpoint-now request); the snapshot then counts it for the rest of the pass."""
    for order_ in orders:
        job = snap.jobs.get(order_.move.job)
        if job is None or job.key in tally.acting:
            tally.retry.add(gang.key)  # busy: the gang proposes again next pass
            continue
        decision = consolidate.start(job, order_, snap, now, rules)
        if decision is None:
            continue
        tally.write(job, decision, now)
        tally.stages.append(consolidate.Stage.REQUESTED)
        snap = consolidate.with_started(snap, job, decision)
    return snap


def _with_plans(snap: Snapshot, plans: dict[JobKey, Plan]) -> Snapshot:
    if snap.plans is plans:
        return snap
    return replace(snap, plans=plans)


def _seconds(decision: Decision) -> float:
    plan = decision.status.plan
    if not isinstance(plan, PlanWrite) or plan.duration_seconds is None:
        return 0.0
    return plan.duration_seconds
