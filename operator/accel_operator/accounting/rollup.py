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

A deleted job has every attempt folded as it goes, so what keeps it from being folded again is
small: its uid's 64-bit digest and its last attempt folded (``gone``, per hour of deletion, about
13 bytes a job). A lagging view of the job, or the open attempts kept beside the rollup, fold
nothing of it while that is kept: for ``GONE_KEEP``, and at most the last ``ROLLUP_GONE``
deletions (the oldest go first), but never while the open attempts as last stored still hold the
job (``prune``'s ``held``). Before, a deleted job kept a whole pending key for 6 hours, and
11,500 deletions in that time took the ConfigMap past 1 MiB: every later write failed.

Two uids share a digest with a probability of about n / 2**64 for a job against n kept digests
(below 1e-15 at 16,384); a job that did would have its attempts up to the other's last counted
as folded.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accel_api.costrollup import (
    ROLLUP_BUCKETS,
    ROLLUP_BYTES,
    ROLLUP_DAYS,
    ROLLUP_GONE,
    ROLLUP_HOUR_DAYS,
    ROLLUP_JOB_DAYS,
    ROLLUP_JOBS,
    ROLLUP_KEYS,
    ROLLUP_OPEN_BYTES,
    ROLLUP_OPEN_PER_SHARD,
    ROLLUP_OPEN_SHARDS,
    Bucket,
    CostRollup,
    GoneHour,
    JobDay,
    JobSummary,
    KeyTotals,
    OpenAttempt,
    OpenShard,
    Pending,
    stored_json,
)
from accel_api.durations import parse_time_strict, stamp_exact
from accel_api.enums import CapacityType
from accel_api.job import AttemptCost, CostStatus
from accel_operator.accounting import ledger

Key = tuple[str, str, CapacityType]  # (team, pool, capacity type)
# A gone job's key is kept this long (and among the last ``ROLLUP_GONE`` deletions): a view that
# lags behind the deletion by less than this folds nothing twice.
GONE_KEEP = dt.timedelta(hours=6)
GONE_DIGEST_CHARS = 11
HOUR = dt.timedelta(hours=1)
DAY_LENGTH = len("YYYY-MM-DD")


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


def digest(uid: str) -> str:
    """A job uid's 64-bit digest, as ``gone`` keeps it (11 URL-safe base64 characters)."""
    raw = hashlib.blake2b(uid.encode(), digest_size=8).digest()
    return base64.urlsafe_b64encode(raw).decode()[:GONE_DIGEST_CHARS]


class Folded(Collection[int]):
    """The attempts of one job that are in the rollup: those of its pending key, and every attempt
    up to ``upto`` when the job was folded whole at its deletion (``gone``)."""

    __slots__ = ("attempts", "upto")

    def __init__(self, attempts: Collection[int] = frozenset(), upto: int = -1) -> None:
        self.attempts = frozenset(attempts)
        self.upto = upto

    def __contains__(self, attempt: object) -> bool:
        return attempt in self.attempts or (isinstance(attempt, int) and attempt <= self.upto)

    def __iter__(self) -> Iterator[int]:
        """The attempts named (those up to ``upto`` are not enumerated)."""
        return iter(sorted(self.attempts))

    def __len__(self) -> int:
        return len(self.attempts)


NONE_FOLDED = Folded()


def _gone_entries(rollup: CostRollup) -> dict[str, tuple[int, str]]:
    """``gone`` unpacked: digest -> (last attempt folded, hour of the deletion), oldest first."""
    out: dict[str, tuple[int, str]] = {}
    for group in sorted(rollup.gone, key=lambda g: g.hour):
        for entry in group.ids.split(",") if group.ids else ():
            out[entry[:GONE_DIGEST_CHARS]] = (int(entry[GONE_DIGEST_CHARS:]), group.hour)
    return out


def _gone_groups(entries: Mapping[str, tuple[int, str]]) -> list[GoneHour]:
    by_hour: dict[str, list[str]] = {}
    for d, (upto, hour) in entries.items():
        by_hour.setdefault(hour, []).append(f"{d}{upto}")
    return [GoneHour(hour=h, ids=",".join(ids)) for h, ids in sorted(by_hour.items())]


def gone_count(rollup: CostRollup) -> int:
    return sum(g.ids.count(",") + 1 for g in rollup.gone if g.ids)


class Folds:
    """What the rollup holds of each job (by uid): read once per value, looked up per job."""

    def __init__(self, rollup: CostRollup | None) -> None:
        self._pending = {p.uid: frozenset(p.attempts) for p in rollup.pending} if rollup is not None else {}
        self._gone = {d: upto for d, (upto, _) in _gone_entries(rollup).items()} if rollup is not None else {}

    def get(self, uid: str, default: Collection[int] = NONE_FOLDED) -> Collection[int]:
        named = self._pending.get(uid)
        upto = self._gone.get(digest(uid), -1) if self._gone else -1
        if named is None and upto < 0:
            return default
        return Folded(named or frozenset(), upto)

    def __getitem__(self, uid: str) -> Collection[int]:
        found = self.get(uid, NONE_FOLDED)
        if found is NONE_FOLDED:
            raise KeyError(uid)
        return found


def pending_of(rollup: CostRollup | None) -> Folds:
    return Folds(rollup)


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
    return ledger.attempt_totals(entry)  # the same sum, remembered by its inputs


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


def attempt_hours(entry: AttemptCost) -> dict[str, ledger.Figures]:
    """One attempt's figures per UTC hour (``YYYY-MM-DDTHH``; its lost tail included)."""
    out: dict[str, ledger.Figures] = {}
    for seg in ledger.segments(entry):
        lo = seg.start.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
        while lo < seg.end:
            piece = seg.totals(lo, lo + HOUR)
            if piece.device_seconds > 0 or piece.spent_usd > 0:
                key = lo.strftime("%Y-%m-%dT%H")
                out[key] = out.get(key, ledger.Figures()) + piece
            lo += HOUR
    return out


def foldable(cost: CostStatus, pending: Collection[int]) -> list[AttemptCost]:
    """The attempts that have ended and are not folded yet."""
    return [a for a in unfolded(cost, pending) if a.end is not None]


# --- folding ---------------------------------------------------------------------------------------

Row = tuple[str, str, CapacityType]  # (UTC day, pool, capacity type)


@dataclass(frozen=True, slots=True)
class FoldItem:
    """What one job adds to the rollup: its attempts' figures per row, each attempt folded at
    most once; ``gone``: the job was deleted then, and ``summary`` becomes its report row."""

    job: JobId
    attempts: tuple[tuple[int, Mapping[Row, ledger.Figures]], ...]
    gone: dt.datetime | None = None
    summary: Mapping[Row, ledger.Figures] | None = None


def attempt_rows(entry: AttemptCost) -> dict[Row, ledger.Figures]:
    return {(day.isoformat(), entry.pool, entry.capacity_type): f for day, f in attempt_days(entry).items()}


def attempt_hour_rows(entry: AttemptCost) -> dict[Row, ledger.Figures]:
    """The rows an attempt adds to the rollup's buckets: per UTC hour (``bound`` makes the hours
    older than ``ROLLUP_HOUR_DAYS`` days into days)."""
    return {(hour, entry.pool, entry.capacity_type): f for hour, f in attempt_hours(entry).items()}


def _summary_rows(cost: CostStatus) -> dict[Row, ledger.Figures]:
    rows: dict[Row, ledger.Figures] = {}
    for entry in cost.attempts:
        for key, f in attempt_rows(entry).items():
            rows[key] = rows.get(key, ledger.Figures()) + f
    return rows


def item(
    job: JobId,
    attempts: Iterable[AttemptCost],
    *,
    gone: dt.datetime | None = None,
    summary: CostStatus | None = None,
) -> FoldItem:
    return FoldItem(
        job,
        tuple((a.attempt, attempt_hour_rows(a)) for a in attempts if not a.rolled_up),
        gone,
        _summary_rows(summary) if summary is not None else None,
    )


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
    return fold_many(rollup, [item(job, attempts, gone=gone, summary=summary)])


def fold_many(rollup: CostRollup, items: Iterable[FoldItem]) -> CostRollup:
    """``rollup`` with every item folded in (as :func:`fold` each, in order), the rollup's lists
    made anew once for all of them: thousands of deletions in one step stay linear. A deleted job
    (``gone``) leaves no pending key: its digest and last attempt go to ``gone``."""
    pending = {p.uid: p for p in rollup.pending}
    gone = _gone_entries(rollup)
    buried = False  # ``gone`` changed
    marks: dict[str, Pending | None] = {}  # None: the job's pending key goes (it is in ``gone``)
    changed: dict[tuple[str, str, str, CapacityType], ledger.Figures] = {}
    summaries = {j.uid for j in rollup.jobs}
    new_jobs: list[JobSummary] = []
    for it in items:
        job = it.job
        old = marks[job.uid] if job.uid in marks else pending.get(job.uid)
        done = set(old.attempts) if old is not None else set()
        d = digest(job.uid) if gone or it.gone is not None else ""
        upto, hour = gone.get(d, (-1, "")) if d else (-1, "")
        added = False
        for attempt, rows in it.attempts:
            if attempt in done or attempt <= upto:
                continue
            for (day, pool, capacity), f in rows.items():
                key = (day, job.team, pool, capacity)
                changed[key] = changed.get(key, ledger.Figures()) + f
            done.add(attempt)
            added = True
        if it.gone is not None:
            # Every attempt of the job is in the rollup now: kept as (digest, last attempt).
            last = max([upto, *done])
            if last >= 0 and last != upto:
                gone[d] = (last, hour or it.gone.astimezone(dt.UTC).strftime("%Y-%m-%dT%H"))
                buried = True
            if old is not None:
                marks[job.uid] = None
            # A deletion seen again (the job already in ``gone``) adds no second report row.
            if it.summary is not None and job.uid not in summaries and upto < 0:
                summaries.add(job.uid)
                new_jobs.append(_summary(job, it.summary, it.gone))
            continue
        if not added:
            continue
        marks[job.uid] = Pending(uid=job.uid, attempts=sorted(done)[-64:], gone=old.gone if old is not None else None)
    if not marks and not buried and not new_jobs:
        return rollup
    # Only the buckets the folds touch are made anew (a rollup holds thousands).
    buckets: dict[tuple[str, str, str, CapacityType], Bucket] = {
        (b.day, b.team, b.pool, b.capacity_type): b for b in rollup.buckets
    }
    grew = False
    for key, f in changed.items():
        old_bucket = buckets.get(key)
        grew = grew or old_bucket is None
        total = f if old_bucket is None else figures(old_bucket.f) + f
        d, t, p, c = key
        buckets[key] = Bucket(day=d, team=t, pool=p, capacity_type=c, f=wire(total))
    kept = [p for p in rollup.pending if p.uid not in marks]
    return rollup.model_copy(
        update={
            # A new key is put in order; otherwise the order stands.
            "buckets": [buckets[k] for k in sorted(buckets)] if grew else list(buckets.values()),
            "pending": [*kept, *(m for m in marks.values() if m is not None)],
            "gone": _gone_groups(gone) if buried else rollup.gone,
            "jobs": [*rollup.jobs, *new_jobs][-ROLLUP_JOBS:],
            "revision": rollup.revision + 1,
        }
    )


def _job_days(rows: Mapping[Row, ledger.Figures]) -> list[JobDay]:
    """``rows`` as at most ``ROLLUP_JOB_DAYS`` job days: older days merge into the first kept
    one (the money stays)."""
    ordered = sorted(rows.items())
    if len(ordered) > ROLLUP_JOB_DAYS:
        n = ROLLUP_JOB_DAYS
        head = ledger.Figures()
        for _, f in ordered[: len(ordered) - n + 1]:
            head = head + f
        ordered = [(ordered[len(ordered) - n][0], head), *ordered[len(ordered) - n + 1 :]]
    return [JobDay(day=d, pool=p, capacity_type=c, f=wire(f)) for (d, p, c), f in ordered]


def _who(job: JobId) -> dict[str, Any]:
    """The fields that name ``job`` in a summary or an open attempt (``JobFigures``)."""
    return {
        "uid": job.uid,
        "namespace": job.namespace,
        "name": job.name,
        "team": job.team,
        "forecast_usd": job.forecast_usd,
    }


def _summary(job: JobId, rows: Mapping[Row, ledger.Figures], gone: dt.datetime) -> JobSummary:
    return JobSummary(**_who(job), deleted=stamp_exact(gone), days=_job_days(rows))


# --- open attempts ---------------------------------------------------------------------------------


def open_attempts(job: JobId, cost: CostStatus, pending: Collection[int], now: dt.datetime) -> list[OpenAttempt]:
    """The job's attempts not in the rollup, as accrued so far (kept beside the rollup, so that a
    job deleted while no operator runs is folded by the next one)."""
    out = []
    for entry in unfolded(cost, pending):
        rows = attempt_rows(entry)
        if not rows:
            continue
        ends = [parse_time_strict(iv.end) for iv in entry.intervals]
        through = min(max(ends), now) if ends else now
        out.append(OpenAttempt(**_who(job), attempt=entry.attempt, through=stamp_exact(through), days=_job_days(rows)))
    return out


def vanished(entries: Iterable[OpenAttempt], existing: Collection[str], skip: Collection[str]) -> list[FoldItem]:
    """Fold items for the open attempts whose job no longer exists (deleted while no operator
    saw it: closed as of their last accrual) — not for jobs in ``skip`` (folded from their ledger)."""
    by_uid: dict[str, list[OpenAttempt]] = {}
    for e in entries:
        if e.uid not in existing and e.uid not in skip:
            by_uid.setdefault(e.uid, []).append(e)
    out = []
    for uid, group in sorted(by_uid.items()):
        first = group[0]
        who = JobId(uid, first.namespace, first.name, first.team, first.forecast_usd)
        per_attempt: list[tuple[int, Mapping[Row, ledger.Figures]]] = []
        summary: dict[Row, ledger.Figures] = {}
        for e in group:
            rows = {(d.day, d.pool, d.capacity_type): figures(d.f) for d in e.days}
            per_attempt.append((e.attempt, rows))
            for key, f in rows.items():
                summary[key] = summary.get(key, ledger.Figures()) + f
        gone = max(parse_time_strict(e.through) for e in group)
        out.append(FoldItem(who, tuple(per_attempt), gone, summary))
    return out


def _json_size(model: OpenAttempt) -> int:
    return len(stored_json(model)) + 1


def pack(entries: Iterable[OpenAttempt]) -> tuple[list[OpenShard], int]:
    """The open attempts in ``ROLLUP_OPEN_SHARDS`` shards, each within its bounds, and how many did
    not fit (the smallest spent go first: only their protection against a deletion while no
    operator runs is lost; their money is still in their jobs' status)."""
    ordered = sorted(entries, key=lambda e: (-sum(figures(d.f).spent_usd for d in e.days), e.uid, e.attempt))
    shards: list[list[OpenAttempt]] = [[] for _ in range(ROLLUP_OPEN_SHARDS)]
    used = [0] * ROLLUP_OPEN_SHARDS
    i, dropped = 0, 0
    for e in ordered:
        n = _json_size(e)
        while i < ROLLUP_OPEN_SHARDS and (
            used[i] + n > ROLLUP_OPEN_BYTES - 64 or len(shards[i]) >= ROLLUP_OPEN_PER_SHARD
        ):
            i += 1
        if i == ROLLUP_OPEN_SHARDS:
            dropped += 1
            continue
        shards[i].append(e)
        used[i] += n
    return [OpenShard(attempts=s) for s in shards], dropped


def prune(
    rollup: CostRollup,
    marked: Mapping[str, Collection[int]],
    existing: Collection[str],
    now: dt.datetime,
    *,
    held: Collection[str] = (),
    gone_max: int = ROLLUP_GONE,
) -> CostRollup:
    """``rollup`` without the keys it no longer needs: attempts the job's status marks
    ``rolledUp``; a gone job's keys once it has been gone for ``GONE_KEEP`` (a job that vanished
    without being folded is marked gone now), and beyond the last ``gone_max`` deletions the
    oldest; never the key of a job in ``held`` (uids the open attempts beside the rollup still
    hold: the next leader would fold them again from there)."""
    buried = _prune_gone(rollup, now, held, gone_max)
    if buried is not None:
        rollup = rollup.model_copy(update={"gone": buried, "revision": rollup.revision + 1})
    out: list[Pending] = []
    for p in rollup.pending:
        if p.uid in existing:
            left = [a for a in p.attempts if a not in marked.get(p.uid, ())]
            if left:
                out.append(p if len(left) == len(p.attempts) else p.model_copy(update={"attempts": left}))
            continue
        gone = parse_time_strict(p.gone) if p.gone is not None else now
        if now - gone < GONE_KEEP:
            out.append(p if p.gone is not None else p.model_copy(update={"gone": stamp_exact(now)}))
    if out == list(rollup.pending):
        return rollup
    return rollup.model_copy(update={"pending": out, "revision": rollup.revision + 1})


def _prune_gone(rollup: CostRollup, now: dt.datetime, held: Collection[str], most: int) -> list[GoneHour] | None:
    """``gone`` without the deletions older than ``GONE_KEEP``, then the oldest beyond ``most``,
    those of ``held`` kept; None: no change."""
    if not rollup.gone:
        return None
    cutoff = (now.astimezone(dt.UTC) - GONE_KEEP).strftime("%Y-%m-%dT%H")
    old = [g for g in rollup.gone if g.hour < cutoff]
    excess = gone_count(rollup) - most
    if not old and excess <= 0:
        return None
    keep = {digest(uid) for uid in held}
    entries = _gone_entries(rollup)
    out = {d: e for d, e in entries.items() if e[1] >= cutoff or d in keep}
    excess = len(out) - most
    if excess > 0:  # oldest first (hours in order, each hour in the order its deletions came)
        for d in list(out):
            if excess <= 0:
                break
            if d not in keep:
                del out[d]
                excess -= 1
    return _gone_groups(out) if len(out) != len(entries) else None


def size(rollup: CostRollup) -> int:
    return len(stored_json(rollup))


def bound(rollup: CostRollup, now: dt.datetime) -> CostRollup:
    """``rollup`` within its bounds: days older than ``ROLLUP_DAYS`` and the oldest days beyond
    ``ROLLUP_BUCKETS`` fold into ``before``; over ``ROLLUP_BYTES``, the oldest job summaries go,
    then the oldest days fold too. The money (the counters' figures) is kept throughout. Hour
    buckets of days older than ``ROLLUP_HOUR_DAYS`` become day buckets first, and so do the
    oldest hours' days while hours are more than half of ``ROLLUP_BUCKETS``; over
    ``ROLLUP_BYTES``, every hour before yesterday becomes days before any day leaves."""
    coarse = _coarsened(rollup.buckets, now)
    if coarse is not None:
        rollup = rollup.model_copy(update={"buckets": coarse, "revision": rollup.revision + 1})
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
    if excess > 0:  # over the size: the hours before yesterday become days before any day goes
        coarse = _coarsened(out.buckets, now, keep_days=1)
        if coarse is not None:
            out = out.model_copy(update={"buckets": coarse, "revision": out.revision + 1})
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


def _coarsened(buckets: Sequence[Bucket], now: dt.datetime, keep_days: int = ROLLUP_HOUR_DAYS) -> list[Bucket] | None:
    """``buckets`` with the hour buckets of days before the last ``ROLLUP_HOUR_DAYS`` summed into
    day buckets, and further days' (oldest first) while the hours take more than half of
    ``ROLLUP_BUCKETS`` (the rest is for days: beyond it the oldest days go to ``before``); None:
    no change."""
    hourly: dict[str, list[Bucket]] = {}
    for b in buckets:
        if len(b.day) > DAY_LENGTH:
            hourly.setdefault(b.day[:DAY_LENGTH], []).append(b)
    keep_from = (now.astimezone(dt.UTC) - dt.timedelta(days=keep_days)).date().isoformat()
    days = {(b.day, b.team, b.pool, b.capacity_type): figures(b.f) for b in buckets if len(b.day) == DAY_LENGTH}
    hours = sum(len(group) for group in hourly.values())
    merged = False
    for day in sorted(hourly):
        if day >= keep_from and hours <= ROLLUP_BUCKETS // 2:
            break
        for b in hourly.pop(day):
            key = (day, b.team, b.pool, b.capacity_type)
            days[key] = days.get(key, ledger.Figures()) + figures(b.f)
            hours -= 1
        merged = True
    if not merged:
        return None
    out = [Bucket(day=d, team=t, pool=p, capacity_type=c, f=wire(f)) for (d, t, p, c), f in days.items()]
    out.extend(b for group in hourly.values() for b in group)
    return sorted(out, key=lambda b: (b.day, b.team, b.pool, b.capacity_type))


def _item_size(item: Bucket | JobSummary) -> int:
    return len(stored_json(item)) + 1


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


def span(period: str) -> tuple[dt.datetime, dt.datetime]:
    """The [start, end) of a bucket's period: a UTC day ``YYYY-MM-DD`` or hour ``YYYY-MM-DDTHH``."""
    lo = dt.datetime.combine(dt.date.fromisoformat(period[:DAY_LENGTH]), dt.time(), dt.UTC)
    if len(period) > DAY_LENGTH:
        lo += dt.timedelta(hours=int(period[DAY_LENGTH + 1 :]))
        return lo, lo + HOUR
    return lo, lo + dt.timedelta(days=1)


def in_window(day: str, start: dt.datetime, end: dt.datetime) -> bool:
    """Whether the UTC day or hour overlaps [start, end): folded money is kept per whole hour for
    the last ``ROLLUP_HOUR_DAYS`` days, per whole day before."""
    lo, hi = span(day)
    return lo < end and hi > start
