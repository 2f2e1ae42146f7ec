"""What the table tests of the decisions (``reconcile/job/decide.py``, ``reconcile/nodes/health.py``,
``reconcile/nodes/idle_stop.py``) read off a decision: one amended decision for a small world, its
conditions, events and checkpoint requests, the status fields it writes (typed; each helper fails
when the decision does not write that field), and status timestamps relative to ``T0``."""

from __future__ import annotations

import datetime as dt

from accel_api.job import AttemptFailure, HealthStatus, PlanStatus, SpotStatus
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import Decision, PlanWrite
from accel_operator.reconcile.common.snapshot import JobView
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import health
from tests.support.reconcile import T0, World

RULES = health.Rules()


def stamp(t: dt.datetime) -> str:
    """A status timestamp (whole seconds, UTC)."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(seconds: float) -> str:
    """The status timestamp ``seconds`` before ``T0``."""
    return stamp(T0 - dt.timedelta(seconds=seconds))


def run(
    w: World, job: JobView, now: dt.datetime = T0, rules: health.Rules = RULES
) -> tuple[Decision, health.MoveReason | None]:
    """``decide`` for ``job`` in ``w``'s snapshot at ``now``, amended by what the node reports say."""
    snap = w.snapshot(now)
    return health.amend(decide(job, snap, now), job, snap, now, rules)


def cond(d: Decision, type_: str) -> tuple[bool, str] | None:
    """The decision's condition ``type_`` as (ok, reason), or None when it sets none."""
    c = next((c for c in d.conditions if c.type == type_), None)
    return None if c is None else (c.ok, c.reason)


def events(d: Decision) -> list[str]:
    """The reasons of the events the decision records, in order."""
    return [a.reason for a in d.actions if isinstance(a, act.RecordEvent)]


def requests(d: Decision) -> list[act.RequestCheckpoint]:
    """The checkpoint-now requests the decision makes."""
    return [a for a in d.actions if isinstance(a, act.RequestCheckpoint)]


def health_of(d: Decision) -> HealthStatus:
    """The ``status.health`` the decision writes."""
    assert d.status.health is not None, d.status
    return d.status.health


def failure_of(d: Decision) -> AttemptFailure:
    """The ``status.lastFailure`` the decision writes."""
    assert d.status.last_failure is not None, d.status
    return d.status.last_failure


def spot_of(d: Decision) -> SpotStatus:
    """The ``status.spot`` the decision writes."""
    assert d.status.spot is not None, d.status
    return d.status.spot


def plan_of(d: Decision) -> PlanStatus:
    """The ``status.plan`` the decision writes (not cleared)."""
    assert isinstance(d.status.plan, PlanWrite), d.status
    return d.status.plan.value()
