"""A stop that waits for a checkpoint: the request's markers, the wait, and the stopped job's markers.

One rule for every path that ends an attempt at a checkpoint and leaves the job holding nothing (a
user's stop, an idle stop, a spec that no longer parses): the request is stamped in
``status.health`` with the step the job had then; the attempt ends once a checkpoint newer than
the request is reported (:func:`checkpoints.written_since`) or after the checkpoint grace.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from accel_api.durations import parse_time, stamp
from accel_api.job import AcceleratorJobStatus, HealthStatus
from accel_operator.reconcile.common import checkpoints
from accel_operator.reconcile.common.snapshot import JobView


def requested(health: HealthStatus, status: AcceleratorJobStatus, now: dt.datetime) -> HealthStatus:
    """``health`` with the stop's checkpoint request made at ``now`` recorded."""
    return health.model_copy(
        update={"stop_requested_time": stamp(now), "stop_checkpoint_step": checkpoints.step_at_request(status)}
    )


def due(
    status: AcceleratorJobStatus,
    health: HealthStatus,
    asked: dt.datetime,
    now: dt.datetime,
    *,
    grace: float,
    none_yet: str = "no checkpoint reported yet",
) -> str | None:
    """Why the attempt asked for a checkpoint at ``asked`` ends now (a checkpoint written since,
    or the grace passed), or None: it waits on. ``none_yet`` is said when no checkpoint was ever
    reported."""
    checkpoint = status.last_checkpoint
    saved = parse_time(checkpoint.time if checkpoint is not None else None)
    if checkpoints.written_since(checkpoint, health.stop_checkpoint_step, asked):
        at = f" at {stamp(saved)}" if saved is not None else ""
        return f"checkpoint written{at}"
    if (now - asked).total_seconds() >= grace:
        last = f"its latest checkpoint ({stamp(saved)})" if saved is not None else none_yet
        return f"no checkpoint within {grace:.0f}s of the request, {last}"
    return None


def stopped(health: HealthStatus, job: JobView, now: dt.datetime, **update: Any) -> HealthStatus:
    """The markers of a job Stopped at ``now``: the request is done, and the resume value it was
    stopped with is kept, so that only a new one resumes it (``update`` applied on top)."""
    return health.ended(
        stop_requested_time=None,
        stop_checkpoint_step=None,
        stopped_time=stamp(now),
        resume_seen=job.resume_request,
        **update,
    )
