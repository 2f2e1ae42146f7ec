"""Cost report rows from the jobs' ledgers: figures per team, job or pool over a window, and per
day per team (for the charts). Pure: the CLI reads the objects and renders what this returns."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from accel_api.job import CostStatus
from accel_operator.reconcile import ledger


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


@dataclass
class Row:
    key: str
    totals: ledger.Figures = field(default_factory=ledger.Figures)
    forecast_usd: float = 0.0
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
            "forecastUsd": round(self.forecast_usd, 4),
            "deviceHours": round(t.device_seconds / 3600, 4),
            "jobs": len(self.jobs),
        }


COLUMNS = (
    "key",
    "spentUsd",
    "lostToPreemptionUsd",
    "idleUsd",
    "onDemandUsd",
    "spotSavingsUsd",
    "forecastUsd",
    "deviceHours",
    "jobs",
)


def rows(jobs: Iterable[JobCost], by: By, start: dt.datetime, end: dt.datetime) -> list[Row]:
    """One row per team, job or pool with the figures of [start, end), most spent first. A job's
    forecast counts for the rows it spent in (split by pool in proportion to its spending)."""
    out: dict[str, Row] = {}
    for job in jobs:
        ident = f"{job.namespace}/{job.name}"
        parts: list[tuple[str, ledger.Figures]] = []
        for entry in job.cost.attempts:
            t = ledger.Figures()
            for seg in ledger.segments(entry):
                if seg.end > start and seg.start < end:
                    t = ledger.add(t, seg.totals(start, end))
            if t.device_seconds > 0 or t.spent_usd > 0:
                key = job.team if by is By.TEAM else ident if by is By.JOB else entry.pool
                parts.append((key, t))
        spent = sum(t.spent_usd for _, t in parts)
        for key, t in parts:
            row = out.setdefault(key, Row(key))
            row.totals = ledger.add(row.totals, t)
            row.jobs.add(ident)
            if job.cost.forecast_usd is not None:
                share = t.spent_usd / spent if spent > 0 else 1.0 / len(parts)
                row.forecast_usd += job.cost.forecast_usd * share
    return sorted(out.values(), key=lambda r: (-r.totals.spent_usd, r.key))


def daily(jobs: Iterable[JobCost], start: dt.datetime, end: dt.datetime) -> dict[str, dict[dt.date, ledger.Figures]]:
    """Per team, the figures of each UTC day in [start, end)."""
    out: dict[str, dict[dt.date, ledger.Figures]] = {}
    for job in jobs:
        team = out.setdefault(job.team, {})
        for day, t in ledger.days(job.cost).items():
            lo = dt.datetime.combine(day, dt.time(), dt.UTC)
            if lo + dt.timedelta(days=1) <= start or lo >= end:
                continue
            team[day] = ledger.add(team.get(day, ledger.Figures()), t)
    return out
