"""The durable cost rollup, pure: folding ended attempts into it, once each, and what the cost
counters and reports read from it (``accel_api.costrollup`` is the wire value).

Why: a job's ledger lives in its own status, so deleting the job would take its money out of the
Prometheus counters and the reports. Instead, every attempt that has ended is *folded* into the
rollup (per UTC day, team, pool and capacity type) and then marked ``rolledUp`` in the job's
ledger; a job that is deleted has its remaining attempts folded as it goes (the running one
closed at the deletion the operator saw). A counter is then the rollup plus the live jobs' attempts
that are not folded yet, so it never goes down when a job is deleted.

Exactly once, whatever the operator is killed between: a fold records the (job uid, attempts) in
``pending`` in the same value (one ConfigMap write) that adds the money; an attempt in ``pending``
or marked ``rolledUp`` is not counted live and never folded again. The mark reaches the job's
status after the rollup is written; once the status shows it, the pending key goes.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from accel_api.costrollup import (
    ROLLUP_BUCKETS,
    ROLLUP_BYTES,
    ROLLUP_DAYS,
    ROLLUP_JOBS,
    ROLLUP_KEYS,
    Bucket,
    CostRollup,
    JobDay,
    JobSummary,
    KeyTotals,
    Pending,
)
from accel_api.enums import CapacityType
from accel_api.job import AttemptCost, CostStatus
from accel_operator.reconcile import ledger

Key = tuple[str, str, CapacityType]  # (team, pool, capacity type)
# A gone job's pending key is kept this long: a view that lags behind the deletion by less than
# this folds nothing twice.
GONE_KEEP = dt.timedelta(hours=6)


def wire(f: ledger.Figures) -> list[float]:
    return [round(max(0.0, getattr(f, name)), 6) for name in ledger.Figures.__slots__]


def figures(f: Iterable[float]) -> ledger.Figures:
    return ledger.Figures(*f)


@dataclass(frozen=True, slots=True)
class JobId:
    """Who a folded attempt belongs to."""

    uid: str
    namespace: str
    name: str
    team: str
    forecast_usd: float | None = None


# --- what is folded, what is live ----------------------------------------------------------------


def pending_of(rollup: CostRollup | None) -> dict[str, frozenset[int]]:
    return {p.uid: frozenset(p.attempts) for p in rollup.pending} if rollup is not None else {}


def is_folded(entry: AttemptCost, pending: Collection[int]) -> bool:
    return entry.rolled_up or entry.attempt in pending


def unfolded(cost: CostStatus, pending: Collection[int]) -> list[AttemptCost]:
    """The attempts of ``cost`` that are not in the rollup (counted from the job itself)."""
    return [a for a in cost.attempts if not is_folded(a, pending)]


def live_cost(cost: CostStatus, pending: Collection[int]) -> CostStatus:
    """``cost`` with only the attempts that are not in the rollup (figures derived again)."""
    kept = unfolded(cost, pending)
    if len(kept) == len(cost.attempts):
        return cost
    return ledger.with_totals(cost.model_copy(update={"attempts": kept, "rolled_up_folded": None}))


def live_by_pool(cost: CostStatus, pending: Collection[int]) -> dict[tuple[str, CapacityType], ledger.Figures]:
    """The job's figures not in the rollup per (pool, capacity type); attempts the job's ledger
    folded (``folded``: more than it keeps) under pool ``""``."""
    out: dict[tuple[str, CapacityType], ledger.Figures] = {}
    for entry in unfolded(cost, pending):
        key = (entry.pool, entry.capacity_type)
        out[key] = out.get(key, ledger.Figures()) + _attempt_totals(entry)
    if cost.folded is not None:
        key = ("", CapacityType.ON_DEMAND)
        out[key] = out.get(key, ledger.Figures()) + ledger.Figures.of(cost.folded)
    return out


def _attempt_totals(entry: AttemptCost) -> ledger.Figures:
    out = ledger.Figures()
    for seg in ledger.segments(entry):
        out = out + seg.totals()
    return out


def attempt_days(entry: AttemptCost) -> dict[dt.date, ledger.Figures]:
    """One attempt's figures per UTC day (its lost tail included)."""
    out: dict[dt.date, ledger.Figures] = {}
    for seg in ledger.segments(entry):
        day = seg.start.date()
        while True:
            lo = dt.datetime.combine(day, dt.time(), dt.UTC)
            if lo >= seg.end:
                break
            piece = seg.totals(lo, lo + dt.timedelta(days=1))
            if piece.device_seconds > 0 or piece.spent_usd > 0:
                out[day] = out.get(day, ledger.Figures()) + piece
            day += dt.timedelta(days=1)
    return out


def foldable(cost: CostStatus, pending: Collection[int]) -> list[AttemptCost]:
    """The attempts that have ended and are not folded yet."""
    return [a for a in unfolded(cost, pending) if a.end is not None]


# --- folding ---------------------------------------------------------------------------------------


def fold(
    rollup: CostRollup,
    job: JobId,
    attempts: Iterable[AttemptCost],
    *,
    gone: dt.datetime | None = None,
    summary: CostStatus | None = None,
) -> CostRollup:
    """``rollup`` with ``attempts`` of ``job`` folded in, each at most once (an attempt already in
    ``pending`` for the job adds nothing). ``gone``: the job was deleted then; its ``summary``
    (its whole ledger, the attempts folded earlier included) becomes its report row."""
    pending = {p.uid: p for p in rollup.pending}
    done = set(pending[job.uid].attempts) if job.uid in pending else set()
    changed: dict[tuple[str, str, str, CapacityType], ledger.Figures] = {}
    added: list[int] = []
    for entry in attempts:
        if entry.attempt in done or entry.rolled_up:
            continue
        for day, f in attempt_days(entry).items():
            key = (day.isoformat(), job.team, entry.pool, entry.capacity_type)
            changed[key] = changed.get(key, ledger.Figures()) + f
        done.add(entry.attempt)
        added.append(entry.attempt)
    if not added and gone is None:
        return rollup
    # Only the buckets this fold touches are made anew (a rollup holds thousands).
    buckets: dict[tuple[str, str, str, CapacityType], Bucket] = {
        (b.day, b.team, b.pool, b.capacity_type): b for b in rollup.buckets
    }
    for key, f in changed.items():
        old_bucket = buckets.get(key)
        total = f if old_bucket is None else figures(old_bucket.f) + f
        d, t, p, c = key
        buckets[key] = Bucket(day=d, team=t, pool=p, capacity_type=c, f=wire(total))
    old = pending.get(job.uid)
    mark = Pending(
        uid=job.uid,
        attempts=sorted(done)[-64:],
        gone=ledger.fmt(gone) if gone is not None else (old.gone if old is not None else None),
    )
    kept = [p for p in rollup.pending if p.uid != job.uid]
    jobs = list(rollup.jobs)
    if gone is not None and summary is not None and all(j.uid != job.uid for j in jobs):
        jobs.append(_summary(job, summary, gone))
    return rollup.model_copy(
        update={
            # A new key is put in order; otherwise the order stands.
            "buckets": [buckets[k] for k in sorted(buckets)]
            if len(buckets) > len(rollup.buckets)
            else list(buckets.values()),
            "pending": [*kept, mark],
            "jobs": jobs[-ROLLUP_JOBS:],
            "revision": rollup.revision + 1,
        }
    )


def _summary(job: JobId, cost: CostStatus, gone: dt.datetime) -> JobSummary:
    days: dict[tuple[str, str, CapacityType], ledger.Figures] = {}
    for entry in cost.attempts:
        for day, f in attempt_days(entry).items():
            key = (day.isoformat(), entry.pool, entry.capacity_type)
            days[key] = days.get(key, ledger.Figures()) + f
    rows = sorted(days.items())
    if len(rows) > 8:  # older days merge into the first kept one (the money stays)
        head = ledger.Figures()
        for _, f in rows[: len(rows) - 7]:
            head = head + f
        rows = [(rows[len(rows) - 8][0], head), *rows[len(rows) - 7 :]]
    return JobSummary(
        uid=job.uid,
        namespace=job.namespace,
        name=job.name,
        team=job.team,
        forecast_usd=job.forecast_usd,
        deleted=ledger.fmt(gone),
        days=[JobDay(day=d, pool=p, capacity_type=c, f=wire(f)) for (d, p, c), f in rows],
    )


def prune(
    rollup: CostRollup, marked: Mapping[str, Collection[int]], existing: Collection[str], now: dt.datetime
) -> CostRollup:
    """``rollup`` without the pending keys it no longer needs: attempts the job's status marks
    ``rolledUp``; a gone job's keys once it has been gone for ``GONE_KEEP`` (a job that vanished
    without being folded is marked gone now)."""
    out: list[Pending] = []
    for p in rollup.pending:
        if p.uid in existing:
            left = [a for a in p.attempts if a not in marked.get(p.uid, ())]
            if left:
                out.append(p if len(left) == len(p.attempts) else p.model_copy(update={"attempts": left}))
            continue
        gone = ledger.parse(p.gone) if p.gone is not None else now
        if now - gone < GONE_KEEP:
            out.append(p if p.gone is not None else p.model_copy(update={"gone": ledger.fmt(now)}))
    if out == list(rollup.pending):
        return rollup
    return rollup.model_copy(update={"pending": out, "revision": rollup.revision + 1})


def size(rollup: CostRollup) -> int:
    return len(json.dumps(rollup.model_dump(by_alias=True, mode="json", exclude_none=True), separators=(",", ":")))


def bound(rollup: CostRollup, now: dt.datetime) -> CostRollup:
    """``rollup`` within its bounds: days older than ``ROLLUP_DAYS`` and the oldest days beyond
    ``ROLLUP_BUCKETS`` fold into ``before``; over ``ROLLUP_BYTES``, the oldest job summaries go,
    then the oldest days fold too. The money (the counters' figures) is kept throughout."""
    cutoff = (now.astimezone(dt.UTC) - dt.timedelta(days=ROLLUP_DAYS)).date().isoformat()
    buckets = sorted(rollup.buckets, key=lambda b: b.day)
    moved: list[Bucket] = []
    while buckets and (buckets[0].day < cutoff or len(buckets) > ROLLUP_BUCKETS):
        day = buckets[0].day
        while buckets and buckets[0].day == day:
            moved.append(buckets.pop(0))
    jobs = list(rollup.jobs)
    out = rollup if not moved else _with(rollup, buckets, moved, jobs)
    excess = size(out) - ROLLUP_BYTES
    if excess <= 0:
        return out
    # Over the size: the oldest job summaries go first, then the oldest days fold into ``before``
    # (each item's share of the JSON measured once; a little more is taken than measured, as
    # ``before`` grows by what it receives).
    jobs, buckets, moved = list(out.jobs), sorted(out.buckets, key=lambda b: b.day), []
    while excess > 0 and jobs:
        excess -= _item_size(jobs.pop(0))
    while excess > -4096 and buckets:
        day = buckets[0].day
        while buckets and buckets[0].day == day:
            b = buckets.pop(0)
            moved.append(b)
            excess -= _item_size(b)
    out = _with(out, buckets, moved, jobs)
    while size(out) > ROLLUP_BYTES and out.buckets:  # rarely: ``before`` grew by more than measured
        day = min(b.day for b in out.buckets)
        out = _with(out, [b for b in out.buckets if b.day != day], [b for b in out.buckets if b.day == day], [])
    return out


def _item_size(item: Bucket | JobSummary) -> int:
    return len(json.dumps(item.model_dump(by_alias=True, mode="json", exclude_none=True), separators=(",", ":"))) + 1


def _with(rollup: CostRollup, buckets: list[Bucket], moved: list[Bucket], jobs: list[JobSummary]) -> CostRollup:
    before = {(k.team, k.pool, k.capacity_type): figures(k.f) for k in rollup.before}
    for b in moved:
        key = (b.team, b.pool, b.capacity_type)
        before[key] = before.get(key, ledger.Figures()) + figures(b.f)
    if len(before) > ROLLUP_KEYS:  # the smallest keys merge into one: the money stays
        ordered = sorted(before.items(), key=lambda kv: (kv[1].spent_usd, kv[0]))
        rest = ledger.Figures()
        for _, f in ordered[: len(before) - ROLLUP_KEYS + 1]:
            rest = rest + f
        before = dict(ordered[len(before) - ROLLUP_KEYS + 1 :])
        other = ("", "", CapacityType.ON_DEMAND)
        before[other] = before.get(other, ledger.Figures()) + rest
    return rollup.model_copy(
        update={
            "buckets": sorted(buckets, key=lambda b: (b.day, b.team, b.pool, b.capacity_type)),
            "before": [
                KeyTotals(team=t, pool=p, capacity_type=c, f=wire(f)) for (t, p, c), f in sorted(before.items())
            ],
            "jobs": jobs,
            "revision": rollup.revision + 1,
        }
    )


# --- reading -------------------------------------------------------------------------------------


def counters(rollup: CostRollup | None) -> dict[Key, ledger.Figures]:
    """Everything folded, per (team, pool, capacity type)."""
    out: dict[Key, ledger.Figures] = {}
    if rollup is None:
        return out
    for b in rollup.buckets:
        key = (b.team, b.pool, b.capacity_type)
        out[key] = out.get(key, ledger.Figures()) + figures(b.f)
    for k in rollup.before:
        key = (k.team, k.pool, k.capacity_type)
        out[key] = out.get(key, ledger.Figures()) + figures(k.f)
    return out


def in_window(day: str, start: dt.datetime, end: dt.datetime) -> bool:
    """Whether the UTC day overlaps [start, end): folded money is kept per whole day."""
    lo = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), dt.UTC)
    return lo < end and lo + dt.timedelta(days=1) > start
