"""What an ending attempt held, recorded with its failure (``status.lastFailure.held``), pure.

The attempt's workload is deleted when the next attempt starts and ``status.admittedTime`` and
``status.plan`` are overwritten by the next admission, so the cost ledger could not charge an
attempt it never saw running (it started and ended between two accrual ticks, or while the
operator was down). Kept with the failure: the pool, devices and capacity type of its plan, its
admission, and what Kubernetes recorded of it — its batch Job's start and end times.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from accel_api.durations import parse_time, stamp
from accel_api.enums import CapacityType
from accel_api.job import EARLIER_FAILURES, AcceleratorJobStatus, AttemptFailure, AttemptHeld
from accel_operator.reconcile.common.snapshot import JobView, PodView, WorkloadView


@dataclass(frozen=True, slots=True)
class PodSpan:
    """What an attempt's pods' own timestamps say of it (docs/cost.md, "When an attempt is
    charged"): ``start``, its first pod's ``status.startTime``; ``end``, once every pod that
    started has ended, the last one's end (its containers' ``finishedAt``, or when its deletion
    was asked for). None: no pod of it has started / not every started pod has ended."""

    start: dt.datetime | None = None
    end: dt.datetime | None = None


def pod_span(pods: Iterable[PodView], attempt: int) -> PodSpan:
    """The span of ``attempt`` from those of ``pods`` that belong to it."""
    mine = [p for p in pods if p.attempt == attempt]
    started = [p for p in mine if p.started is not None]
    if not started:
        return PodSpan()
    start = min(p.started for p in started if p.started is not None)
    # Ended once every pod of it has: a pod yet to start (a gang's late member) may still run.
    ends = [p.finished for p in mine]
    end = max(e for e in ends if e is not None) if all(e is not None for e in ends) else None
    return PodSpan(start, max(end, start) if end is not None else None)


def of(job: JobView, workload: WorkloadView | None, pods: Iterable[PodView] = ()) -> AttemptHeld | None:
    """What ``job``'s current attempt held (None when its status shows no placed plan): its run as
    its pods' timestamps say when they are there, else as its batch Job's do."""
    st = job.status
    plan = st.plan
    if plan is None or not plan.pool or not plan.devices:
        return None
    span = pod_span(pods, st.attempt)
    start = span.start or (workload.start_time if workload is not None else None)
    end = span.end or (workload.end_time if workload is not None else None)
    return AttemptHeld(
        pool=plan.pool,
        devices=plan.devices,
        capacity_type=plan.capacity_type or CapacityType.ON_DEMAND,
        admitted_time=st.admitted_time,
        start_time=stamp(start) if start is not None else None,
        end_time=stamp(end) if end is not None else None,
    )


def failure_end(failure: AttemptFailure) -> dt.datetime | None:
    """When the failed attempt really ended: the time the operator recorded, or the earlier end
    Kubernetes recorded (its batch Job's), e.g. when the operator was down as it ended."""
    found = [t for t in (parse_time(failure.time), _held_end(failure)) if t is not None]
    return min(found) if found else None


def _held_end(failure: AttemptFailure) -> dt.datetime | None:
    return parse_time(failure.held.end_time) if failure.held is not None else None


def earlier(st: AcceleratorJobStatus) -> tuple[AttemptFailure, ...]:
    """``status.earlierFailures`` once a new failure replaces ``lastFailure``: the old one joins the
    list (its message dropped), the latest ``EARLIER_FAILURES`` kept."""
    kept = list(st.earlier_failures)
    if st.last_failure is not None and all(f.attempt != st.last_failure.attempt for f in kept):
        kept.append(st.last_failure.model_copy(update={"message": None}))
    return tuple(kept[-EARLIER_FAILURES:])


def failures(st: AcceleratorJobStatus) -> list[AttemptFailure]:
    """Every failure the status keeps, oldest first (one per attempt: the latest record wins)."""
    out = {f.attempt: f for f in st.earlier_failures}
    if st.last_failure is not None:
        out[st.last_failure.attempt] = st.last_failure
    return [out[a] for a in sorted(out)]
