"""When a spot job gives up on spot capacity and runs on on-demand pools: a pure choice.

A job with ``spot.policy: prefer`` falls back to on-demand after ``spot.maxPreemptions`` (instead of
failing), or earlier when the spot pools keep failing it: ``SpotRules.preemptions_in_window``
preemptions within ``SpotRules.window_seconds``. ``require`` never falls back (the job asked for
spot only: it fails at the limit); ``never`` runs on on-demand already. Once fallen back,
``status.spot.onDemand`` holds and the planner sees the job as ``spot.policy: never``
(:func:`effective_spec`), so it picks only on-demand candidates.

``status.preemptions`` stays the job's total. Once fallen back, ``spot.maxPreemptions`` counts the
preemptions since the fallback (``status.spot.preemptionsAtFallback`` keeps the total then): an
on-demand node can still be disrupted (maintenance, eviction), and a job that fell back *instead of
failing* must not fail at its first disruption there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from accel_api.durations import parse_time as _time
from accel_api.enums import SpotPolicy
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
    included) moves the job to on-demand pools now."""
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
        inside = [t for t in (_time(r) for r in recent) if t is not None and t >= since]
        if len(inside) >= n:
            return Fallback(
                "PreemptedTooOften",
                f"{len(inside)} preemptions within {rules.window_seconds:.0f}s (the operator's limit is {n}): "
                "the spot pools keep failing; falling back to on-demand pools (spot.policy prefer)",
            )
    return None


def counted(status: AcceleratorJobStatus, count: int) -> int:
    """Of ``count`` preemptions in all, those that count against ``spot.maxPreemptions``: all of
    them before the fallback, those since it after."""
    at = status.spot.preemptions_at_fallback if status.spot is not None else None
    return count - at if on_demand(status) and at is not None else count


def effective_spec(spec: AcceleratorJobSpec, status: AcceleratorJobStatus) -> AcceleratorJobSpec:
    """The spec the planner plans: ``spot.policy never`` once the job fell back to on-demand."""
    if not on_demand(status) or spec.spot.policy is SpotPolicy.NEVER:
        return spec
    return spec.model_copy(update={"spot": spec.spot.model_copy(update={"policy": SpotPolicy.NEVER})})
