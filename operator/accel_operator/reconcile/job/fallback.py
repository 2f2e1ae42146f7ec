"""When a spot job leaves a spot pool, or gives up on spot capacity and runs on on-demand pools: a
pure choice.

A job with ``spot.policy: prefer`` falls back to on-demand after ``spot.maxPreemptions`` (instead of
failing). When one spot pool keeps failing it (``SpotRules.preemptions_in_window`` preemptions
within ``SpotRules.window_seconds``), it first *leaves that pool*: the pool goes into
``status.spot.leftPools`` and the planner plans the job without it (:func:`effective_spec`), so it
weighs the job's other pools, a steadier spot pool and on-demand, by their expected cost
(preemptions priced in) and the deadline, instead of going straight to the dearest capacity. The
window then counts from the move (``status.spot.leftTime``). A job preempted too often again, on a
pool it already left or with no spot pool left to try, falls back to on-demand as before.
``require`` never falls back (the job asked for spot only: it fails at the limit); ``never`` runs
on on-demand already. Once fallen back, ``status.spot.onDemand`` holds and the planner sees the job
as ``spot.policy: never`` (:func:`effective_spec`), so it picks only on-demand candidates.

``status.preemptions`` stays the job's total. Once fallen back, ``spot.maxPreemptions`` counts the
preemptions since the fallback (``status.spot.preemptionsAtFallback`` keeps the total then): an
on-demand node can still be disrupted (maintenance, eviction), and a job that fell back *instead of
failing* must not fail at its first disruption there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from accel_api import bounds
from accel_api.durations import parse_time as _time
from accel_api.enums import CapacityType, SpotPolicy
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus


@dataclass(frozen=True, slots=True)
class SpotRules:
    """The operator's fallback window (settings ``SPOT_FALLBACK_*``); 0 preemptions: no window rule."""

    window_seconds: float = 3600.0
    preemptions_in_window: int = 3


DEFAULT_RULES: Final = SpotRules()


@dataclass(frozen=True, slots=True)
class Fallback:
    reason: str  # MaxPreemptions | PreemptedTooOften
    message: str
    leave: str | None = None  # a spot pool the job leaves for its other pools (not on-demand yet)


def on_demand(status: AcceleratorJobStatus) -> bool:
    return status.spot is not None and status.spot.on_demand


def check(
    spec: AcceleratorJobSpec,
    status: AcceleratorJobStatus,
    *,
    count: int,
    recent: Sequence[str],
    now: dt.datetime,
    rules: SpotRules,
) -> Fallback | None:
    """Whether the preemption that made ``count`` preemptions (``recent``: their times, this one
    included) moves the job off its spot pool (``leave``) or to on-demand pools now."""
    if spec.spot.policy is not SpotPolicy.PREFER or on_demand(status):
        return None
    limit = spec.spot.max_preemptions
    if count > limit:
        return Fallback(
            "MaxPreemptions",
            f"{count} preemption(s), more than spot.maxPreemptions {limit}: falling back to on-demand pools "
            "(spot.policy prefer)",
        )
    n = rules.preemptions_in_window
    if n > 0:
        since = now - dt.timedelta(seconds=rules.window_seconds)
        moved = _time(status.spot.left_time) if status.spot is not None and status.spot.left_time else None
        if moved is not None and moved >= since:
            # The preemptions on the pool it left (the one that made it leave too) count against
            # that pool, not against the one it moved to.
            since = moved + dt.timedelta(microseconds=1)
        inside = [t for t in (_time(r) for r in recent) if t is not None and t >= since]
        if len(inside) < n:
            return None
        pool = _spot_pool_to_leave(status)
        if pool is not None:
            return Fallback(
                "PreemptedTooOften",
                f"{len(inside)} preemptions within {rules.window_seconds:.0f}s on spot pool {pool} (the operator's "
                f"limit is {n}): leaving it; the planner weighs the job's other pools, steadier spot or on-demand "
                "(spot.policy prefer)",
                leave=pool,
            )
        return Fallback(
            "PreemptedTooOften",
            f"{len(inside)} preemptions within {rules.window_seconds:.0f}s (the operator's limit is {n}): "
            "the spot pools keep failing; falling back to on-demand pools (spot.policy prefer)",
        )
    return None


def left_pools(status: AcceleratorJobStatus) -> tuple[str, ...]:
    """The spot pools the job left for preempting it too often (part of its plan's key)."""
    return tuple(status.spot.left_pools) if status.spot is not None else ()


def _spot_pool_to_leave(status: AcceleratorJobStatus) -> str | None:
    """The spot pool of the attempt just preempted, when the job has not left it yet and has room
    to leave one more; None: fall back to on-demand instead."""
    plan = status.plan
    if plan is None or plan.pool is None or plan.capacity_type is not CapacityType.SPOT:
        return None
    left = left_pools(status)
    if plan.pool in left or len(left) >= bounds.STATUS_LEFT_POOLS:
        return None
    return plan.pool


def counted(status: AcceleratorJobStatus, count: int) -> int:
    """Of ``count`` preemptions in all, those that count against ``spot.maxPreemptions``: all of
    them before the fallback, those since it after."""
    at = status.spot.preemptions_at_fallback if status.spot is not None else None
    return count - at if on_demand(status) and at is not None else count


def effective_spec(
    spec: AcceleratorJobSpec, status: AcceleratorJobStatus, pools: Iterable[str] = ()
) -> AcceleratorJobSpec:
    """The spec the planner plans: ``spot.policy never`` once the job fell back to on-demand;
    before that, its pools (``placement.pools``, else ``pools``: every pool there is) without the
    spot pools it left. Left with no pool at all (it named only pools it left), it keeps its own:
    the next window falls back to on-demand."""
    if on_demand(status) and spec.spot.policy is not SpotPolicy.NEVER:
        return spec.model_copy(update={"spot": spec.spot.model_copy(update={"policy": SpotPolicy.NEVER})})
    left = left_pools(status)
    if not left or spec.spot.policy is not SpotPolicy.PREFER:
        return spec
    allowed = [p for p in (spec.placement.pools or sorted(pools)) if p not in left]
    if not allowed:
        return spec
    return spec.model_copy(update={"placement": spec.placement.model_copy(update={"pools": allowed})})
