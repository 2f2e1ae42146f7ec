"""The cost ledger: what a job really cost, from what really ran. Pure arithmetic, no I/O.

Unit of account: an *interval* of one attempt — ``devices`` held from ``start`` to ``end`` at the
price in force then, with the share of the devices that node reports showed idle. A job's
``status.cost`` keeps each attempt's intervals (its watermark); every total is derived from them.
Recording an observation adds only the part of its time that no interval of that attempt covers
yet, so replayed, overlapping or reordered observations never count twice, and an operator that
restarts reads the watermark from status and goes on: nothing lost, nothing doubled.

Three figures per job (and, summed, per team): *spent* (everything), *lost to preemption* (the
tail of a preempted attempt that the resume does again: the device-seconds the attempt reports,
else the time since its last checkpoint) and *idle* (devices that node reports showed at ~0%).
Lost and idle are parts of spent. *On demand* is what the same device-seconds would have cost
on demand, so spot savings are ``onDemand - spent``.

Bounds: at most ``COST_INTERVALS`` intervals per attempt (the two closest neighbours merge,
keeping their cost; a gap between them then counts as covered) and ``COST_ATTEMPTS`` attempts
(the oldest ended ones fold into ``folded`` totals).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from accel_api.base import ApiModel
from accel_api.durations import parse_time_strict, stamp_exact
from accel_api.enums import CapacityType
from accel_api.job import (
    COST_ATTEMPTS,
    COST_INTERVALS,
    AttemptCost,
    CostInterval,
    CostStatus,
    CostTotals,
)

HOUR = 3600.0
M = TypeVar("M", bound=ApiModel)


@dataclass(frozen=True, slots=True)
class Observation:
    """``devices`` of one attempt held from ``start`` to ``end`` at ``usd_per_device_hour``."""

    attempt: int
    pool: str
    capacity_type: CapacityType
    devices: int
    start: dt.datetime
    end: dt.datetime
    usd_per_device_hour: float
    on_demand_usd_per_device_hour: float
    idle_fraction: float = 0.0
    team: str | None = None  # recorded on the attempt when it is first accrued


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """An attempt ended at ``end``; when preempted, the work since ``checkpoint`` (or the
    device-seconds the attempt reports lost) is done again by the next attempt."""

    attempt: int
    end: dt.datetime
    preempted: bool = False
    checkpoint: dt.datetime | None = None
    reported_lost_device_seconds: float | None = None


# --- intervals ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Iv:
    start: dt.datetime
    end: dt.datetime
    price: float
    idle: float

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


# A ledger's interval bounds are read (and written) again at every step that walks them: a
# running job's ledger is totalled, windowed by the budgets and summed by pool each step, and the
# same few strings and times recur step after step. Parsing and stamping them was a fifth of the
# accountant's step. Both are pure over immutable values; the caches are bounded (a miss costs
# only the parse).
TIMES_CACHED = 1 << 16
_parse = functools.lru_cache(maxsize=TIMES_CACHED)(parse_time_strict)
_stamp_utc = functools.lru_cache(maxsize=TIMES_CACHED)(stamp_exact)


def _stamp(t: dt.datetime) -> str:
    """``stamp_exact(t)``, remembered for UTC times (equal UTC times are the same instant and
    stamp alike; any other zone is stamped afresh)."""
    return _stamp_utc(t) if t.tzinfo is dt.UTC else stamp_exact(t)


def _ivs(a: AttemptCost) -> list[_Iv]:
    return [_Iv(_parse(i.start), _parse(i.end), i.usd_per_device_hour, i.idle_fraction) for i in a.intervals]


def _wire(ivs: list[_Iv]) -> list[CostInterval]:
    return [
        CostInterval(start=_stamp(i.start), end=_stamp(i.end), usd_per_device_hour=i.price, idle_fraction=i.idle)
        for i in ivs
    ]


def _uncovered(start: dt.datetime, end: dt.datetime, ivs: list[_Iv]) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    """The parts of [start, end) that no interval covers (``ivs`` sorted, disjoint)."""
    cursor = start
    for iv in ivs:
        if iv.end <= cursor:
            continue
        if iv.start >= end:
            break
        if iv.start > cursor:
            yield cursor, iv.start
        cursor = max(cursor, iv.end)
        if cursor >= end:
            return
    if cursor < end:
        yield cursor, end


def _merge_touching(ivs: list[_Iv]) -> list[_Iv]:
    out: list[_Iv] = []
    for iv in sorted(ivs, key=lambda i: i.start):
        last = out[-1] if out else None
        if last is not None and last.end == iv.start and last.price == iv.price and last.idle == iv.idle:
            out[-1] = _Iv(last.start, iv.end, last.price, last.idle)
        else:
            out.append(iv)
    return out


def _bounded(ivs: list[_Iv]) -> list[_Iv]:
    """At most COST_INTERVALS: merge the closest neighbours, keeping their cost and idle cost."""
    while len(ivs) > COST_INTERVALS:
        k = min(range(len(ivs) - 1), key=lambda j: ((ivs[j + 1].start - ivs[j].end), j))
        a, b = ivs[k], ivs[k + 1]
        span = (b.end - a.start).total_seconds()
        cost = a.price * a.seconds + b.price * b.seconds
        idle_cost = a.price * a.seconds * a.idle + b.price * b.seconds * b.idle
        idle_time = a.seconds * a.idle + b.seconds * b.idle
        idle = idle_cost / cost if cost > 0 else (idle_time / span if span > 0 else 0.0)
        ivs[k : k + 2] = [_Iv(a.start, b.end, cost / span if span > 0 else 0.0, min(1.0, idle))]
    return ivs


# --- recording ------------------------------------------------------------------------------------


def _stops(entry: AttemptCost) -> list[dt.datetime]:  # (its pods' start bounds it below: _record)
    """The times after which nothing of ``entry`` accrues: its recorded end, its pods' end."""
    return [parse_time_strict(t) for t in (entry.end, entry.pods_end) if t is not None]


def mark_pods_end(cost: CostStatus, attempt: int, end: dt.datetime, *, totals: bool = True) -> CostStatus:
    """``cost`` with ``attempt``'s pods' end kept (the first one seen stays; docs/cost.md, "When an
    attempt is charged"), and nothing of it after that end. ``totals=False`` leaves the top-level
    figures as they were (a caller that derives them once at the end: :func:`with_totals`)."""
    entry = _find(cost, attempt)
    if entry is None or entry.pods_end is not None:
        return cost
    ivs = [_Iv(i.start, min(i.end, end), i.price, i.idle) for i in _ivs(entry) if i.start < end]
    entry = copy(entry, {"pods_end": stamp_exact(end), "intervals": _wire(ivs)})
    return _totalled(_replace(cost, entry), totals)


def mark_pods_start(cost: CostStatus, attempt: int, start: dt.datetime, *, totals: bool = True) -> CostStatus:
    """``cost`` with ``attempt``'s pods' start kept (the first one seen stays: a pod's startTime
    never changes), and nothing of it before that start: what stood in for it (its batch Job's
    start, its admission: no pod of it was in view) is taken back. ``totals``: as
    :func:`mark_pods_end`."""
    entry = _find(cost, attempt)
    if entry is None or entry.pods_start is not None:
        return cost
    ivs = [_Iv(max(i.start, start), i.end, i.price, i.idle) for i in _ivs(entry) if i.end > start]
    entry = copy(entry, {"pods_start": stamp_exact(start), "intervals": _wire(ivs)})
    return _totalled(_replace(cost, entry), totals)


def _find(cost: CostStatus, attempt: int) -> AttemptCost | None:
    return next((a for a in cost.attempts if a.attempt == attempt), None)


def _replace(cost: CostStatus, entry: AttemptCost) -> CostStatus:
    others = [a for a in cost.attempts if a.attempt != entry.attempt]
    attempts = sorted([*others, entry], key=lambda a: a.attempt)
    return _fold(copy(cost, {"attempts": attempts}))


def record(cost: CostStatus | None, obs: Observation, *, totals: bool = True) -> CostStatus:
    """``cost`` with ``obs`` accrued: only the time no interval of that attempt covers yet, and
    nothing after the attempt's end. ``totals``: as :func:`mark_pods_end`."""
    return _totalled(_record(cost or CostStatus(), obs), totals)


def _record(cost: CostStatus, obs: Observation) -> CostStatus:
    entry = _find(cost, obs.attempt)
    if entry is None:
        if any(a.attempt > obs.attempt for a in cost.attempts) and len(cost.attempts) >= COST_ATTEMPTS:
            return cost  # an attempt old enough to have been folded already
        entry = AttemptCost(
            attempt=obs.attempt,
            pool=obs.pool,
            team=obs.team,
            capacity_type=obs.capacity_type,
            devices=obs.devices,
            on_demand_usd_per_device_hour=obs.on_demand_usd_per_device_hour,
        )
    end = min([obs.end, *_stops(entry)])
    start = max(obs.start, parse_time_strict(entry.pods_start)) if entry.pods_start is not None else obs.start
    if end <= start:
        return _replace(cost, entry)
    ivs = _ivs(entry)
    price = min(max(obs.usd_per_device_hour, 0.0), 1000.0)
    idle = min(max(obs.idle_fraction, 0.0), 1.0)
    new = [_Iv(s, e, price, idle) for s, e in _uncovered(start, end, ivs)]
    if not new:
        return _replace(cost, entry)
    entry = copy(entry, {"intervals": _wire(_bounded(_merge_touching(ivs + new)))})
    return _replace(cost, entry)


def close(cost: CostStatus | None, ended: AttemptEnd) -> CostStatus:
    """``cost`` with an attempt ended: nothing accrues after ``ended.end``; a preempted attempt's
    lost device-seconds are fixed. Idempotent; a later close of the same attempt keeps the first."""
    cost = cost or CostStatus()
    entry = _find(cost, ended.attempt)
    if entry is None or entry.end is not None:
        return with_totals(cost)
    if entry.pods_end is not None:  # its pods said when it ended: the recorded end cannot be later
        ended = replace(ended, end=min(ended.end, parse_time_strict(entry.pods_end)))
    ivs = [_Iv(i.start, min(i.end, ended.end), i.price, i.idle) for i in _ivs(entry) if i.start < ended.end]
    lost = 0.0
    if ended.preempted and ivs:
        held = sum(i.seconds for i in ivs) * entry.devices
        if ended.reported_lost_device_seconds is not None:
            lost = ended.reported_lost_device_seconds
        else:
            since = max(ivs[0].start, ended.checkpoint) if ended.checkpoint is not None else ivs[0].start
            lost = max(0.0, (ended.end - since).total_seconds()) * entry.devices
        lost = min(max(lost, 0.0), held)
    entry = copy(
        entry,
        {
            "intervals": _wire(ivs),
            "end": stamp_exact(ended.end),
            "preempted": ended.preempted,
            "lost_device_seconds": lost,
        },
    )
    return with_totals(_replace(cost, entry))


def merge(a: CostStatus | None, b: CostStatus | None, *, totals: bool = True) -> CostStatus:
    """Both ledgers' knowledge in one (e.g. what this process wrote and what the watch shows).
    ``totals``: as :func:`mark_pods_end`."""
    if a is None or b is None or a is b or a == b:
        return _totalled(a or b or CostStatus(), totals)
    out = a
    for entry in b.attempts:
        for iv in _ivs(entry):
            out = _record(
                out,
                Observation(
                    entry.attempt,
                    entry.pool,
                    entry.capacity_type,
                    entry.devices,
                    iv.start,
                    iv.end,
                    iv.price,
                    entry.on_demand_usd_per_device_hour,
                    iv.idle,
                ),
            )
        if entry.pods_start is not None:
            out = mark_pods_start(out, entry.attempt, parse_time_strict(entry.pods_start))
        if entry.pods_end is not None:
            out = mark_pods_end(out, entry.attempt, parse_time_strict(entry.pods_end))
        if entry.end is not None:
            out = _close_as(out, entry)
        if entry.rolled_up:
            out = mark_rolled_up(out, [entry.attempt])
    if out.forecast_usd is None and b.forecast_usd is not None:
        out = copy(out, {"forecast_usd": b.forecast_usd})
    return _totalled(out, totals)


def mark_rolled_up(cost: CostStatus, attempts: Iterable[int]) -> CostStatus:
    """``cost`` with ``attempts`` marked as folded into the durable cost rollup (kept by merges)."""
    wanted = set(attempts)
    if not any(a.attempt in wanted and not a.rolled_up for a in cost.attempts):
        return cost
    marked = [copy(a, {"rolled_up": True}) if a.attempt in wanted else a for a in cost.attempts]
    return copy(cost, {"attempts": marked})


def _close_as(cost: CostStatus, entry: AttemptCost) -> CostStatus:
    assert entry.end is not None
    mine = _find(cost, entry.attempt)
    if mine is None or mine.end is not None:
        return cost
    return close(
        cost,
        AttemptEnd(entry.attempt, parse_time_strict(entry.end), entry.preempted, None, entry.lost_device_seconds),
    )


def _fold(cost: CostStatus) -> CostStatus:
    if len(cost.attempts) <= COST_ATTEMPTS:
        return cost
    attempts = list(cost.attempts)
    folded = Figures.of(cost.folded)
    rolled = Figures.of(cost.rolled_up_folded)
    while len(attempts) > COST_ATTEMPTS:
        old = next((a for a in attempts if a.end is not None), attempts[0])
        attempts.remove(old)
        if old.rolled_up:  # in the rollup already: the counters must not count it again
            rolled = rolled + _attempt_totals(old)
        else:
            folded = folded + _attempt_totals(old)
    return copy(
        cost,
        {
            "attempts": attempts,
            "folded": folded.wire() if cost.folded is not None or folded != Figures() else None,
            "rolled_up_folded": rolled.wire() if cost.rolled_up_folded is not None or rolled != Figures() else None,
        },
    )


def copy(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)`` without pydantic's generic copy (a ``copy.copy`` of each
    of the model's dicts): the same values, and, as with ``model_copy``, nothing validated. A
    running job's accrual copied its ledger's models a dozen times; this is most of that time."""
    cls = type(model)
    out = cls.__new__(cls)
    values = dict(model.__dict__)
    values.update(update)
    object.__setattr__(out, "__dict__", values)
    extra = model.__pydantic_extra__
    object.__setattr__(out, "__pydantic_extra__", None if extra is None else dict(extra))
    object.__setattr__(out, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    private = getattr(model, "__pydantic_private__", None)
    object.__setattr__(out, "__pydantic_private__", None if private is None else dict(private))
    return out


def stamp(t: dt.datetime) -> str:
    """``stamp_exact(t)``, remembered for UTC times (as the ledger's own intervals are stamped)."""
    return _stamp(t)


@dataclass(slots=True)
class Entry:
    """One attempt of a :class:`Draft`: its model as read (or as first made), the fields changed
    since (``changed``), and its intervals parsed once (``parsed``), stamped again only when
    they moved (``moved``: the model functions restamp an attempt's intervals whenever they change
    any of them, and only then)."""

    model: AttemptCost
    changed: dict[str, Any] = field(default_factory=dict)
    parsed: list[_Iv] | None = None
    moved: bool = False

    @property
    def attempt(self) -> int:
        return self.model.attempt  # never changed

    def get(self, name: str) -> Any:
        """The field as it stands (changed, else as read)."""
        return self.changed[name] if name in self.changed else self.model.__dict__[name]

    @property
    def ivs(self) -> list[_Iv]:
        """The intervals as they stand (never changed in place: each change sets a new list)."""
        if self.parsed is None:
            self.parsed = _ivs(self.model)
        return self.parsed

    def any_interval(self) -> bool:
        return bool(self.parsed) if self.parsed is not None else bool(self.model.intervals)

    def set_ivs(self, ivs: list[_Iv]) -> None:
        self.parsed, self.moved = ivs, True

    def build(self) -> AttemptCost:
        """The model, made once for all the changes since the last build."""
        if self.moved:
            assert self.parsed is not None
            self.changed["intervals"] = _wire(self.parsed)
            self.moved = False
        if self.changed:
            self.model = copy(self.model, self.changed)
            self.changed = {}
        return self.model


@dataclass(slots=True)
class Draft:
    """A ledger changed by several steps in a row (an accrual: the pods' marks, the records, the
    closes), as plain values: what :func:`record`, :func:`close`, :func:`mark_pods_start` and
    :func:`mark_pods_end` do to a ``CostStatus``, done with no model copied or validated between
    the steps; :meth:`build` makes the models once. Each method is its function's arithmetic on
    the same values in the same order, so the ledger built is the one the functions give, to
    the last bit (``tests/unit/operator/test_accrual_draft.py`` holds them side by side over
    random ledgers and pods)."""

    base: CostStatus
    entries: list[Entry]
    changed: dict[str, Any] = field(default_factory=dict)  # top-level fields changed

    @classmethod
    def of(cls, cost: CostStatus) -> Draft:
        return cls(cost, [Entry(a) for a in cost.attempts])

    def get(self, name: str) -> Any:
        return self.changed[name] if name in self.changed else self.base.__dict__[name]

    def find(self, attempt: int) -> Entry | None:
        return next((e for e in self.entries if e.attempt == attempt), None)

    def _put(self, entry: Entry) -> None:
        """As ``_replace``: the attempt's entry in its place (others of its number dropped), the
        entries sorted by attempt, the oldest folded past ``COST_ATTEMPTS``."""
        others = [e for e in self.entries if e.attempt != entry.attempt]
        self.entries = sorted([*others, entry], key=lambda e: e.attempt)
        if len(self.entries) > COST_ATTEMPTS:
            # Rare (a job past its 16th attempt): the models, folded by ``_fold`` itself.
            folded = _fold(copy(self.base, {**self.changed, "attempts": [e.build() for e in self.entries]}))
            self.base, self.changed = folded, {}
            self.entries = [Entry(a) for a in folded.attempts]

    def mark_pods_start(self, attempt: int, start: dt.datetime) -> None:
        """As :func:`mark_pods_start`."""
        entry = self.find(attempt)
        if entry is None or entry.get("pods_start") is not None:
            return
        entry.set_ivs([_Iv(max(i.start, start), i.end, i.price, i.idle) for i in entry.ivs if i.end > start])
        entry.changed["pods_start"] = _stamp(start)
        self._put(entry)

    def mark_pods_end(self, attempt: int, end: dt.datetime) -> None:
        """As :func:`mark_pods_end`."""
        entry = self.find(attempt)
        if entry is None or entry.get("pods_end") is not None:
            return
        entry.set_ivs([_Iv(i.start, min(i.end, end), i.price, i.idle) for i in entry.ivs if i.start < end])
        entry.changed["pods_end"] = _stamp(end)
        self._put(entry)

    def record(self, obs: Observation) -> None:
        """As :func:`record`."""
        entry = self.find(obs.attempt)
        if entry is None:
            if any(e.attempt > obs.attempt for e in self.entries) and len(self.entries) >= COST_ATTEMPTS:
                return  # an attempt old enough to have been folded already
            entry = Entry(
                AttemptCost(
                    attempt=obs.attempt,
                    pool=obs.pool,
                    team=obs.team,
                    capacity_type=obs.capacity_type,
                    devices=obs.devices,
                    on_demand_usd_per_device_hour=obs.on_demand_usd_per_device_hour,
                )
            )
        stops = [_parse(t) for t in (entry.get("end"), entry.get("pods_end")) if t is not None]
        end = min([obs.end, *stops])
        pods_start = entry.get("pods_start")
        start = max(obs.start, _parse(pods_start)) if pods_start is not None else obs.start
        if end <= start:
            self._put(entry)
            return
        ivs = entry.ivs
        price = min(max(obs.usd_per_device_hour, 0.0), 1000.0)
        idle = min(max(obs.idle_fraction, 0.0), 1.0)
        new = [_Iv(s, e, price, idle) for s, e in _uncovered(start, end, ivs)]
        if new:
            entry.set_ivs(_bounded(_merge_touching(ivs + new)))
        self._put(entry)

    def close(self, ended: AttemptEnd) -> None:
        """As :func:`close`."""
        entry = self.find(ended.attempt)
        if entry is None or entry.get("end") is not None:
            return
        pods_end = entry.get("pods_end")
        if pods_end is not None:  # its pods said when it ended: the recorded end cannot be later
            ended = replace(ended, end=min(ended.end, _parse(pods_end)))
        ivs = [_Iv(i.start, min(i.end, ended.end), i.price, i.idle) for i in entry.ivs if i.start < ended.end]
        devices = entry.get("devices")
        lost = 0.0
        if ended.preempted and ivs:
            held = sum(i.seconds for i in ivs) * devices
            if ended.reported_lost_device_seconds is not None:
                lost = ended.reported_lost_device_seconds
            else:
                since = max(ivs[0].start, ended.checkpoint) if ended.checkpoint is not None else ivs[0].start
                lost = max(0.0, (ended.end - since).total_seconds()) * devices
            lost = min(max(lost, 0.0), held)
        entry.set_ivs(ivs)
        entry.changed.update(end=_stamp(ended.end), preempted=ended.preempted, lost_device_seconds=lost)
        self._put(entry)

    def build(self, update: dict[str, Any]) -> CostStatus:
        """The ledger with ``update`` (its own fields: when it was updated) and its top-level
        figures derived, as ``with_totals`` gives them, in one copy."""
        attempts = [e.build() for e in self.entries]
        return with_totals(self.base, {**self.changed, "attempts": attempts, **update})


# --- figures ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Figures:
    """The seven figures as plain floats (sums run over every segment: no validation per add)."""

    spent_usd: float = 0.0
    lost_to_preemption_usd: float = 0.0
    idle_usd: float = 0.0
    on_demand_usd: float = 0.0
    device_seconds: float = 0.0
    lost_device_seconds: float = 0.0
    idle_device_seconds: float = 0.0

    def __add__(self, o: Figures) -> Figures:
        return Figures(
            self.spent_usd + o.spent_usd,
            self.lost_to_preemption_usd + o.lost_to_preemption_usd,
            self.idle_usd + o.idle_usd,
            self.on_demand_usd + o.on_demand_usd,
            self.device_seconds + o.device_seconds,
            self.lost_device_seconds + o.lost_device_seconds,
            self.idle_device_seconds + o.idle_device_seconds,
        )

    @classmethod
    def of(cls, t: CostTotals | None) -> Figures:
        return cls() if t is None else cls(**t.model_dump())

    def wire(self) -> CostTotals:
        return CostTotals(**{f: getattr(self, f) for f in self.__slots__})


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of an attempt's time with its figures, lost or not (for sums over windows)."""

    start: dt.datetime
    end: dt.datetime
    devices: int
    price: float
    on_demand_price: float
    idle: float
    lost: bool

    def totals(self, start: dt.datetime | None = None, end: dt.datetime | None = None) -> Figures:
        s = self.start if start is None else max(self.start, start)
        e = self.end if end is None else min(self.end, end)
        seconds = max(0.0, (e - s).total_seconds())
        ds = seconds * self.devices
        usd = ds / HOUR * self.price
        return Figures(
            spent_usd=usd,
            lost_to_preemption_usd=usd if self.lost else 0.0,
            idle_usd=usd * self.idle,
            on_demand_usd=ds / HOUR * self.on_demand_price,
            device_seconds=ds,
            lost_device_seconds=ds if self.lost else 0.0,
            idle_device_seconds=ds * self.idle,
        )


def segments(entry: AttemptCost) -> Iterator[Segment]:
    """The attempt's intervals, with the lost tail (the last ``lostDeviceSeconds / devices``
    seconds of held time) split out."""
    ivs = _ivs(entry)
    tail = entry.lost_device_seconds / entry.devices if entry.devices else 0.0
    od = entry.on_demand_usd_per_device_hour
    for iv in reversed(ivs):
        if tail <= 0:
            yield Segment(iv.start, iv.end, entry.devices, iv.price, od, iv.idle, False)
            continue
        cut = max(iv.start, iv.end - dt.timedelta(seconds=tail))
        tail -= (iv.end - cut).total_seconds()
        yield Segment(cut, iv.end, entry.devices, iv.price, od, iv.idle, True)
        if cut > iv.start:
            yield Segment(iv.start, cut, entry.devices, iv.price, od, iv.idle, False)


def add(a: Figures, b: Figures) -> Figures:
    return a + b


# One attempt's figures, by what they are made of (its devices, lost device-seconds, on-demand
# price and intervals: all ``segments`` reads): a running job's ledger is totalled by its
# accrual, then summed by pool for the counters and windowed by the budgets in the same step, each
# a walk of the same attempts; an ended attempt is the same step after step. The key is read
# without parsing a time or building a figure. Bounded (emptied when full: a miss costs one walk).
_TOTALS: dict[tuple[object, ...], Figures] = {}


def attempt_totals(entry: AttemptCost) -> Figures:
    """The attempt's figures: each segment's, added in order (remembered by their inputs)."""
    key = (
        entry.devices,
        entry.lost_device_seconds,
        entry.on_demand_usd_per_device_hour,
        *((i.start, i.end, i.usd_per_device_hour, i.idle_fraction) for i in entry.intervals),
    )
    kept = _TOTALS.get(key)
    if kept is not None:
        return kept
    out = Figures()
    for seg in segments(entry):
        out = add(out, seg.totals())
    if len(_TOTALS) >= TIMES_CACHED:
        _TOTALS.clear()
    _TOTALS[key] = out
    return out


_attempt_totals = attempt_totals


def totals(cost: CostStatus | None) -> Figures:
    if cost is None:
        return Figures()
    return _sum(cost.folded, cost.rolled_up_folded, cost.attempts)


def _sum(folded: CostTotals | None, rolled: CostTotals | None, attempts: Iterable[AttemptCost]) -> Figures:
    out = Figures.of(folded) + Figures.of(rolled)
    for entry in attempts:
        out = add(out, _attempt_totals(entry))
    return out


def window(cost: CostStatus | None, start: dt.datetime, end: dt.datetime) -> Figures:
    """The figures of the time in [start, end) (folded attempts are not in any window)."""
    out = Figures()
    for entry in cost.attempts if cost is not None else ():
        for seg in segments(entry):
            if seg.end > start and seg.start < end:
                out = add(out, seg.totals(start, end))
    return out


def windows(cost: CostStatus | None, starts: list[dt.datetime], end: dt.datetime) -> list[Figures]:
    """``window(cost, start, end)`` for each of ``starts``, in one pass over the segments."""
    out = [Figures() for _ in starts]
    touched = [False for _ in starts]
    for entry in cost.attempts if cost is not None else ():
        ivs = entry.intervals
        if ivs and not any(touched) and _parse(ivs[-1].end) <= end:
            # Every segment of the entry ends by ``end``: inside a window that starts at or
            # before its first, each segment counts whole, added to nothing yet, in the order
            # its totals add them: the same figures, to the last bit, without the walk.
            first = _parse(ivs[0].start)
            whole = [start <= first for start in starts]
            if all(whole):
                t = attempt_totals(entry)
                out = [t for _ in starts]
                touched = [True for _ in starts]
                continue
        for seg in segments(entry):
            if seg.start >= end:
                continue
            for i, start in enumerate(starts):
                if seg.end > start:
                    out[i] = out[i] + seg.totals(start, end)
                    touched[i] = True
    return out


def days(cost: CostStatus | None) -> dict[dt.date, Figures]:
    """The figures per UTC day."""
    out: dict[dt.date, Figures] = {}
    for entry in cost.attempts if cost is not None else ():
        for seg in segments(entry):
            day = seg.start.date()
            while True:
                lo = dt.datetime.combine(day, dt.time(), dt.UTC)
                hi = lo + dt.timedelta(days=1)
                if lo >= seg.end:
                    break
                piece = seg.totals(lo, hi)
                if piece.device_seconds > 0 or piece.spent_usd > 0:
                    out[day] = out.get(day, Figures()) + piece
                day += dt.timedelta(days=1)
    return out


def _totalled(cost: CostStatus, totals: bool) -> CostStatus:
    return with_totals(cost) if totals else cost


def with_totals(cost: CostStatus, update: dict[str, Any] | None = None) -> CostStatus:
    """``cost`` with ``update`` (fields of its own: its attempts, when it was updated) and its
    top-level figures derived from its attempts as updated, in one copy."""
    update = update or {}
    t = _sum(
        update.get("folded", cost.folded),
        update.get("rolled_up_folded", cost.rolled_up_folded),
        update.get("attempts", cost.attempts),
    )
    # Rounded to a millionth: exact enough for any sum of cents, short in `kubectl get`. (Named
    # one by one: a comprehension over the slots was a third of this function, called for every
    # ledger a step computes.)
    return copy(
        cost,
        {
            **update,
            "spent_usd": round(t.spent_usd, 6),
            "lost_to_preemption_usd": round(t.lost_to_preemption_usd, 6),
            "idle_usd": round(t.idle_usd, 6),
            "on_demand_usd": round(t.on_demand_usd, 6),
            "device_seconds": round(t.device_seconds, 6),
            "lost_device_seconds": round(t.lost_device_seconds, 6),
            "idle_device_seconds": round(t.idle_device_seconds, 6),
        },
    )


def period_start(period: str, now: dt.datetime) -> dt.datetime:
    """The start of the budget period (UTC) that ``now`` is in: day, ISO week (Monday) or month."""
    day = dt.datetime.combine(now.astimezone(dt.UTC).date(), dt.time(), dt.UTC)
    if period == "daily":
        return day
    if period == "weekly":
        return day - dt.timedelta(days=day.weekday())
    return day.replace(day=1)
