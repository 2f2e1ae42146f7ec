"""Cost report rows from the jobs' ledgers and the durable cost rollup: figures per team, job or
pool over a window, and per day per team (for the charts). Pure: the CLI reads the objects and
renders what this returns.

With a rollup, an attempt folded into it (marked ``rolledUp`` in its job's ledger, or pending in
the rollup) counts from the rollup's daily buckets in team and pool rows, and a deleted job's row
comes from its summary there; the money of deleted jobs is kept per whole UTC day, so their part
of a window counts every day the window touches."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from accel_api.costrollup import CostRollup
from accel_api.job import CostStatus
from accel_operator.accounting import ledger, rollup


class By(StrEnum):
    TEAM = "team"
    JOB = "job"
    POOL = "pool"


@dataclass(frozen=True, slots=True)
class JobCost:
    namespace: str
    name: str
    team: str
    cost: CostStatus
    uid: str = ""


@dataclass
class Row:
    key: str
    totals: ledger.Figures = field(default_factory=ledger.Figures)
    # Whole jobs, not the window: the planner's forecast for the whole job and what the job spent
    # to date over all its attempts (each split over the rows it spent in, in the window, as its
    # in-window spending is). Put side by side, they compare like with like.
    forecast_usd: float = 0.0
    spent_to_date_usd: float = 0.0
    jobs: set[str] = field(default_factory=set)

    @property
    def savings_usd(self) -> float:
        return max(0.0, self.totals.on_demand_usd - self.totals.spent_usd)

    def as_dict(self) -> dict[str, float | int | str]:
        t = self.totals
        return {
            "key": self.key,
            "spentUsd": round(t.spent_usd, 4),
            "lostToPreemptionUsd": round(t.lost_to_preemption_usd, 4),
            "idleUsd": round(t.idle_usd, 4),
            "onDemandUsd": round(t.on_demand_usd, 4),
            "spotSavingsUsd": round(self.savings_usd, 4),
            "deviceHours": round(t.device_seconds / 3600, 4),
            "jobs": len(self.jobs),
            "spentToDateWholeJobUsd": round(self.spent_to_date_usd, 4),
            "forecastWholeJobUsd": round(self.forecast_usd, 4),
        }


COLUMNS = (
    "key",
    "spentUsd",
    "lostToPreemptionUsd",
    "idleUsd",
    "onDemandUsd",
    "spotSavingsUsd",
    "deviceHours",
    "jobs",
    "spentToDateWholeJobUsd",
    "forecastWholeJobUsd",
)
# The figures of the window (summed in a totals row) and of the whole jobs (also summed: each job
# counts once over the rows, its share split as its spending in the window).
WINDOW_MONEY = COLUMNS[1:6]
WHOLE_JOB_NOTE = (
    "SPENT TO DATE and FORECAST are for the whole job (every attempt, all time; the forecast is the "
    "planner's estimate for the whole run), not the window: compare them with each other, not with SPENT."
)
WHOLE_JOB_MONEY = COLUMNS[8:10]


def total(rows: Iterable[Row]) -> Row:
    """The totals row: every figure summed over ``rows`` (jobs counted once)."""
    out = Row("TOTAL")
    for r in rows:
        out.totals = ledger.add(out.totals, r.totals)
        out.forecast_usd += r.forecast_usd
        out.spent_to_date_usd += r.spent_to_date_usd
        out.jobs |= r.jobs
    return out


def rows(
    jobs: Iterable[JobCost],
    by: By,
    start: dt.datetime,
    end: dt.datetime,
    folded: CostRollup | None = None,
    *,
    buckets_hold_live: bool = True,
) -> list[Row]:
    """One row per team, job or pool with the figures of [start, end), most spent first. A job's
    forecast counts for the rows it spent in (split by pool in proportion to its spending).
    ``folded``: the durable rollup (deleted jobs, and the attempts folded into it);
    ``buckets_hold_live``: whether its team and pool buckets hold the live jobs' folded attempts
    (False for one namespace's view, whose buckets are its deleted jobs' only: the live jobs'
    attempts are then all counted from their own ledgers)."""
    out: dict[str, Row] = {}
    pending = rollup.pending_of(folded)
    live: set[str] = set()
    for job in jobs:
        ident = f"{job.namespace}/{job.name}"
        live.add(job.uid)
        mine = pending.get(job.uid, frozenset())
        parts: list[tuple[str, ledger.Figures, bool]] = []
        for entry in job.cost.attempts:
            t = ledger.Figures()
            for seg in ledger.segments(entry):
                if seg.end > start and seg.start < end:
                    t = ledger.add(t, seg.totals(start, end))
            if t.device_seconds > 0 or t.spent_usd > 0:
                key = job.team if by is By.TEAM else ident if by is By.JOB else entry.pool
                # In team and pool rows a folded attempt counts from the rollup's buckets.
                counted = folded is None or by is By.JOB or not buckets_hold_live or not rollup.is_folded(entry, mine)
                parts.append((key, t, counted))
        spent = sum(t.spent_usd for _, t, _ in parts)
        to_date = ledger.totals(job.cost).spent_usd if parts else 0.0
        for key, t, counted in parts:
            row = out.setdefault(key, Row(key))
            if counted:
                row.totals = ledger.add(row.totals, t)
            row.jobs.add(ident)
            share = t.spent_usd / spent if spent > 0 else 1.0 / len(parts)
            row.spent_to_date_usd += to_date * share
            if job.cost.forecast_usd is not None:
                row.forecast_usd += job.cost.forecast_usd * share
    if folded is not None:
        _folded_rows(out, folded, by, (start, end), live)
    return sorted(out.values(), key=lambda r: (-r.totals.spent_usd, r.key))


def _folded_rows(
    out: dict[str, Row], folded: CostRollup, by: By, window: tuple[dt.datetime, dt.datetime], live: set[str]
) -> None:
    start, end = window
    if by is not By.JOB:
        for b in folded.buckets:
            if rollup.in_window(b.day, start, end):
                row = out.setdefault(b.team if by is By.TEAM else b.pool, Row(b.team if by is By.TEAM else b.pool))
                row.totals = ledger.add(row.totals, rollup.figures(b.f))
    for s in folded.jobs:
        if s.uid in live:
            continue
        ident = f"{s.namespace}/{s.name}"
        days = [d for d in s.days if rollup.in_window(d.day, start, end)]
        spent = sum(d.f[0] for d in days)
        to_date = sum(d.f[0] for d in s.days)  # the days its summary keeps
        for d in days:
            key = s.team if by is By.TEAM else ident if by is By.JOB else d.pool
            row = out.setdefault(key, Row(key))
            if by is By.JOB:
                row.totals = ledger.add(row.totals, rollup.figures(d.f))
            row.jobs.add(ident)
            share = d.f[0] / spent if spent > 0 else 1.0 / len(days)
            row.spent_to_date_usd += to_date * share
            if s.forecast_usd is not None:
                row.forecast_usd += s.forecast_usd * share


SHORT_WINDOW = dt.timedelta(days=2)  # a window this short or shorter is charted per hour


def over_time(
    jobs: Iterable[JobCost], start: dt.datetime, end: dt.datetime, folded: CostRollup | None = None
) -> tuple[dt.timedelta, dict[str, dict[dt.datetime, ledger.Figures]]]:
    """Per team, the figures of each UTC hour (a window of at most ``SHORT_WINDOW``) or UTC day
    in [start, end), the rollup's buckets included; and the step used. A bucket at the window's
    edges holds only the part inside it."""
    step = dt.timedelta(hours=1) if end - start <= SHORT_WINDOW else dt.timedelta(days=1)
    out: dict[str, dict[dt.datetime, ledger.Figures]] = {}
    pending = rollup.pending_of(folded)
    for job in jobs:
        team = out.setdefault(job.team, {})
        cost = job.cost if folded is None else rollup.live_cost(job.cost, pending.get(job.uid, frozenset()))
        for entry in cost.attempts:
            for seg in ledger.segments(entry):
                lo, hi = max(seg.start, start), min(seg.end, end)
                at = floor(lo, step)
                while at < hi:
                    piece = seg.totals(max(at, lo), min(at + step, hi))
                    if piece.device_seconds > 0 or piece.spent_usd > 0:
                        team[at] = team.get(at, ledger.Figures()) + piece
                    at += step
    for b in folded.buckets if folded is not None else ():
        if rollup.in_window(b.day, start, end):
            team = out.setdefault(b.team, {})
            # A bucket of an hour goes to its hour (or its day); a bucket of a day to its day
            # (or, in an hourly chart, to its first hour: the rollup keeps hours for recent days).
            at = floor(dt.datetime.fromisoformat(b.day).replace(tzinfo=dt.UTC), step)
            team[at] = team.get(at, ledger.Figures()) + rollup.figures(b.f)
    return step, out


def floor(t: dt.datetime, step: dt.timedelta) -> dt.datetime:
    t = t.astimezone(dt.UTC)
    return (
        t.replace(minute=0, second=0, microsecond=0)
        if step < dt.timedelta(days=1)
        else dt.datetime.combine(t.date(), dt.time(), dt.UTC)
    )
