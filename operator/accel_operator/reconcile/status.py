"""A plan as the job's ``status.plan``: the winner's figures and at most 20 alternatives."""

from __future__ import annotations

import math

from accel_api.enums import CapacityType
from accel_api.job import Alternative, PlanStatus
from accel_operator.planning import explain
from accel_operator.planning.candidates import Plan, best_per_pool

# PlanStatus carries at most this many alternatives (one per pool), to keep status small.
STATUS_ALTERNATIVES = 20


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def plan_status(plan: Plan) -> PlanStatus:
    """The value the operator writes into ``status.plan``."""
    alternatives = []
    for c in best_per_pool(plan.candidates):
        if c is plan.winner:
            continue
        ce = c.cost
        usd = _finite(ce.expected_usd) if ce is not None else None
        alternatives.append(
            Alternative(
                pool=c.pool,
                accelerator=c.accelerator,
                devices=c.devices,
                capacity_type=c.capacity_type,
                cost_usd=round(usd, 2) if usd is not None else None,
                duration_seconds=_finite(ce.expected_seconds) if ce is not None else None,
                reason="; ".join(explain.reasons(c)) or "not ranked",
            )
        )
        if len(alternatives) >= STATUS_ALTERNATIVES:
            break
    win = plan.winner
    if win is None or win.memory is None or win.speed is None or win.cost is None:
        return PlanStatus(reason=plan.reason, alternatives=alternatives)
    return PlanStatus(
        pool=win.pool,
        accelerator=win.accelerator,
        devices=win.devices,
        nodes=win.nodes,
        capacity_type=win.capacity_type,
        spot=win.capacity_type is CapacityType.SPOT,
        peak_allocated_bytes_per_device=win.memory.peak_allocated_bytes,
        footprint_bytes_per_device=win.memory.footprint_bytes,
        step_seconds=win.speed.step_seconds,
        tokens_per_second=win.speed.tokens_per_second,
        duration_seconds=win.cost.expected_seconds,
        cost_usd=round(win.cost.expected_usd, 2),
        reason=plan.reason,
        alternatives=alternatives,
    )
