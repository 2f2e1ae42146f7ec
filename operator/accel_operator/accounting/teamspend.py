"""Team totals that outlive the jobs, pure: one step of an AcceleratorPolicy's ``status.ledger``
and the ``status.spend`` it gives.

A team's spending in a budget period is what its deleted jobs spent in that period (``settled``)
plus what its live jobs spent in it (from their ledgers as this step computed them). Each step
*carries* every live job's figures of the current periods in the policy's status, as the job's
own status holds them (its last written ledger: a job's status is written less often than the
ledger moves). A job that is gone (deleted while the operator ran, or while it was down) is
folded
into ``settled`` and its uid recorded in ``settledUids`` in the same value that stops carrying it,
so the one status write that stores the step either does both or neither: a replayed step, or a
deletion seen twice, adds nothing, and a job is never in both places. A stale view that still
shows a folded job (its uid in ``settledUids``) counts it no more.

Periods roll over: ``settled`` keeps only the current period of each (team, period); a job's
carried figures of an older period fold into nothing (they are not in the current period).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from accel_api.durations import parse_time_strict, stamp_exact
from accel_api.enums import BudgetPeriod
from accel_api.job import CostStatus
from accel_api.policy import (
    LEDGER_CARRIED_JOBS,
    LEDGER_SETTLED_UIDS,
    AcceleratorPolicySpec,
    CarriedJob,
    PeriodFigures,
    SettledSpend,
    SpendLedger,
    TeamSpend,
)
from accel_operator.accounting import ledger

Key = tuple[str, BudgetPeriod]  # (team, period)


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job that exists, with its ledger as this step computed it."""

    uid: str
    team: str
    cost: CostStatus  # as this step computed it: what counts while the job lives
    written: CostStatus | None = None  # as its status holds it: what the policy carries (None: ``cost``)


@dataclass(frozen=True, slots=True)
class _Sum:
    """A team's money in one budget period, as the ledger's figures (spent, lost and idle are the
    ones budgets read), and how many jobs spent it."""

    figures: ledger.Figures = field(default_factory=ledger.Figures)
    jobs: int = 0

    def plus(self, f: PeriodFigures, jobs: int = 1) -> _Sum:
        money = ledger.Figures(
            spent_usd=f.spent_usd, lost_to_preemption_usd=f.lost_to_preemption_usd, idle_usd=f.idle_usd
        )
        return self + _Sum(money, jobs)

    def __add__(self, o: _Sum) -> _Sum:
        return _Sum(self.figures + o.figures, self.jobs + o.jobs)


@dataclass(frozen=True, slots=True)
class Step:
    ledger: SpendLedger
    spend: list[TeamSpend]
    folded: tuple[str, ...]  # uids folded into settled by this step


# A job whose every attempt has ended has figures that no longer change: the caller may keep
# them between steps (uid -> (its ledger, the periods and their starts, the figures, and once a
# step has carried them as they stand, its team and what the policy carries of it)).
Memo = dict[str, tuple[CostStatus, tuple[object, ...], list[PeriodFigures], tuple[str, CarriedJob | None] | None]]


def _key(periods: list[BudgetPeriod], starts: dict[BudgetPeriod, dt.datetime]) -> tuple[object, ...]:
    """What a job's kept figures were summed for: the periods by name as well as by start (two
    policies may budget one team over different periods that start at the same time)."""
    return (*periods, *(starts[p] for p in periods))


@dataclass(frozen=True, slots=True)
class _Counted:
    """A period's figures of a ledger that is counted and not carried (a running job's ledger as
    this step computed it, new at every step): the fields ``_spend`` reads, with no model built."""

    period: BudgetPeriod
    spent_usd: float
    lost_to_preemption_usd: float
    idle_usd: float


def _figures(
    uid: str,
    cost: CostStatus,
    periods: list[BudgetPeriod],
    starts: dict[BudgetPeriod, dt.datetime],
    *,
    now: dt.datetime,
    memo: Memo,
    stamps: Mapping[BudgetPeriod, str] | None = None,
    shown: bool = False,
) -> list[PeriodFigures]:
    """The ledger's figures in each of ``periods``, remembered in ``memo`` (by the ledger object)
    when they cannot change: every attempt ended, or ``shown`` (the ledger a job's status holds:
    accrued up to a time before now, so any later step windows it alike)."""
    key = _key(periods, starts)
    known = memo.get(uid)
    if known is not None and known[0] is cost and known[1] == key:
        return known[2]
    figures = [
        PeriodFigures(
            period=p,
            period_start=stamps[p] if stamps is not None else stamp_exact(starts[p]),
            spent_usd=round(t.spent_usd, 6),
            lost_to_preemption_usd=round(t.lost_to_preemption_usd, 6),
            idle_usd=round(t.idle_usd, 6),
        )
        for p, t in zip(periods, ledger.windows(cost, [starts[p] for p in periods], now), strict=True)
    ]
    if shown or (cost.attempts and all(a.end is not None for a in cost.attempts)):
        memo[uid] = (cost, key, figures, None)
    return figures


def _counted(
    cost: CostStatus, periods: list[BudgetPeriod], starts: dict[BudgetPeriod, dt.datetime], now: dt.datetime
) -> list[_Counted]:
    """``_figures``' sums (rounded alike) for a ledger only counted: no model, nothing kept."""
    return [
        _Counted(p, round(t.spent_usd, 6), round(t.lost_to_preemption_usd, 6), round(t.idle_usd, 6))
        for p, t in zip(periods, ledger.windows(cost, [starts[p] for p in periods], now), strict=True)
    ]


def _current(f: PeriodFigures, starts: dict[BudgetPeriod, dt.datetime]) -> bool:
    start = starts.get(f.period)
    return start is not None and parse_time_strict(f.period_start) == start


def step(
    policy: AcceleratorPolicySpec,
    previous: SpendLedger | None,
    live: Iterable[LiveJob],
    existing: Collection[str],
    now: dt.datetime,
    *,
    memo: Memo | None = None,
    final: Mapping[str, LiveJob] | None = None,
) -> Step:
    """The policy's ledger after this step and each budget's spending. ``previous``: the newest
    ledger known (what this process wrote, or the policy's status); ``live``: the jobs with a
    ledger; ``existing``: the uids of every job that exists (a carried job not among them is gone);
    ``final``: jobs this process saw deleted, with their ledgers closed at the deletion — folded
    with those figures (newer than what the policy carries), carried or not."""
    prev = previous or SpendLedger()
    keys: set[Key] = {(b.team, b.period) for b in policy.budgets}
    periods_of: dict[str, list[BudgetPeriod]] = {}
    for team, period in sorted(keys):
        periods_of.setdefault(team, []).append(period)
    starts = {p: ledger.period_start(p.value, now) for _, p in keys}
    stamps = {p: stamp_exact(t) for p, t in starts.items()}  # once a step, not once a job and period
    done = list(prev.settled_uids)
    seen = set(done)

    # What the deleted jobs spent this period: the current period's entries only.
    settled: dict[Key, _Sum] = {}
    for s in prev.settled:
        key = (s.team, s.period)
        if key in keys and _current(s, starts):
            settled[key] = _Sum().plus(s, jobs=s.jobs)

    # Jobs carried last time that are gone now: folded once, with what was carried.
    memo = memo if memo is not None else {}
    final = final or {}
    folded: list[str] = []
    gone: list[tuple[str, str, list[PeriodFigures]]] = [(c.uid, c.team, c.periods) for c in prev.carried]
    carried_uids = {c.uid for c in prev.carried}
    # A job beyond the carried bound that this process saw deleted is folded too.
    gone += [
        (uid, job.team, []) for uid, job in sorted(final.items()) if uid not in carried_uids and job.team in periods_of
    ]
    for uid, team, carried_periods in gone:
        if uid in existing or uid in seen:
            continue
        last = final.get(uid)
        kept_figures = carried_periods
        if last is not None and team in periods_of:
            kept_figures = _figures(uid, last.cost, periods_of[team], starts, now=now, memo={})
        for f in kept_figures:
            key = (team, f.period)
            if key in keys and _current(f, starts):
                settled[key] = settled.get(key, _Sum()).plus(f, jobs=1 if f.spent_usd > 0 else 0)
        folded.append(uid)
        seen.add(uid)
    done.extend(folded)

    # The live jobs' figures in their team's current periods: counted as computed now, carried
    # as their status holds them.
    counted: list[tuple[str, Sequence[PeriodFigures | _Counted]]] = []
    carried: list[CarriedJob] = []
    keys_of = {team: _key(periods, starts) for team, periods in periods_of.items()}
    for job in live:
        if job.uid in seen or job.team not in periods_of:
            continue
        written = job.cost if job.written is None else job.written
        known = memo.get(job.uid)
        if (
            known is not None
            and known[0] is job.cost
            and written is job.cost
            and known[3] is not None
            and known[3][0] == job.team
            and known[1] == keys_of[job.team]
        ):
            # A settled job, its ledger the same object as it was written: its figures and what
            # the policy carries of it are the ones an earlier step made (no model built again).
            counted.append((job.team, known[2]))
            if known[3][1] is not None:
                carried.append(known[3][1])
            continue
        periods = periods_of[job.team]
        if written is job.cost or (job.cost.attempts and all(a.end is not None for a in job.cost.attempts)):
            figures: Sequence[PeriodFigures | _Counted] = _figures(
                job.uid, job.cost, periods, starts, now=now, memo=memo, stamps=stamps
            )
        else:
            # A running job's ledger as this step computed it (a new one each step): counted
            # only; what is carried is its shown ledger's, kept while that ledger is the same.
            figures = _counted(job.cost, periods, starts, now)
        counted.append((job.team, figures))
        kept = (
            figures
            if written is job.cost
            else _figures(job.uid, written, periods, starts, now=now, memo=memo, stamps=stamps, shown=True)
        )
        known = memo.get(job.uid)
        if known is not None and known[2] is kept and known[3] is not None and known[3][0] == job.team:
            entry = known[3][1]  # the same figures of the same team: the same carried entry
        else:
            shown_figures = cast(list[PeriodFigures], kept)  # _figures' own: models
            entry = (
                CarriedJob(uid=job.uid, team=job.team, periods=shown_figures)
                if any(f.spent_usd > 0 for f in shown_figures)
                else None
            )
            if known is not None and known[2] is kept:
                memo[job.uid] = (known[0], known[1], shown_figures, (job.team, entry))
        if entry is not None:
            carried.append(entry)

    spend = _spend(policy, settled, counted, starts)
    # Bounded: the biggest spenders are carried (ties by uid, so the order is stable).
    carried.sort(key=lambda c: (-max(f.spent_usd for f in c.periods), c.uid))
    out = SpendLedger(
        revision=prev.revision,
        settled=[
            SettledSpend(
                team=team,
                period=period,
                period_start=stamp_exact(starts[period]),
                spent_usd=round(s.figures.spent_usd, 6),
                lost_to_preemption_usd=round(s.figures.lost_to_preemption_usd, 6),
                idle_usd=round(s.figures.idle_usd, 6),
                jobs=s.jobs,
            )
            for (team, period), s in sorted(settled.items())
        ],
        carried=carried[:LEDGER_CARRIED_JOBS],
        settled_uids=done[-LEDGER_SETTLED_UIDS:],
    )
    if out.model_dump(exclude={"revision"}) != prev.model_dump(exclude={"revision"}):
        out = out.model_copy(update={"revision": prev.revision + 1})
    return Step(out, spend, tuple(folded))


def _spend(
    policy: AcceleratorPolicySpec,
    settled: dict[Key, _Sum],
    counted: list[tuple[str, Sequence[PeriodFigures | _Counted]]],
    starts: dict[BudgetPeriod, dt.datetime],
) -> list[TeamSpend]:
    # Plain floats, added in the same order as ``_Sum.plus`` would (the same sums to the last bit):
    # no object built per job and period, every step, for every live job.
    live: dict[Key, list[float]] = {}
    for team, figures in counted:
        for f in figures:
            key = (team, f.period)
            acc = live.get(key)
            if acc is None:
                acc = live[key] = [0.0, 0.0, 0.0, 0]
            acc[0] += f.spent_usd
            acc[1] += f.lost_to_preemption_usd
            acc[2] += f.idle_usd
            if f.spent_usd > 0:
                acc[3] += 1
    out = []
    for budget in policy.budgets:
        key = (budget.team, budget.period)
        acc = live.get(key)
        summed = _Sum() if acc is None else _Sum(ledger.Figures(acc[0], acc[1], acc[2]), int(acc[3]))
        total = settled.get(key, _Sum()) + summed
        money = total.figures
        lost = 0.0 if budget.include_lost_work else money.lost_to_preemption_usd
        spent = max(0.0, money.spent_usd - lost)
        out.append(
            TeamSpend(
                team=budget.team,
                period=budget.period,
                spent_usd=round(spent, 6),
                limit_usd=budget.limit_usd,
                lost_to_preemption_usd=round(money.lost_to_preemption_usd, 6),
                idle_usd=round(money.idle_usd, 6),
                period_start=stamp_exact(starts[budget.period]),
                used_fraction=round(spent / budget.limit_usd, 6),
                jobs=total.jobs,
            )
        )
    return out


def newest(a: SpendLedger | None, b: SpendLedger | None) -> SpendLedger | None:
    """The later of two copies of one policy's ledger (by revision; ``a`` on a tie)."""
    if a is None or b is None:
        return a or b
    return b if b.revision > a.revision else a
