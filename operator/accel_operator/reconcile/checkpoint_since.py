"""Whether a job wrote a checkpoint after the operator asked it for one: one rule for every path
that asks for a checkpoint before it ends an attempt (a move off a failing device, an idle stop, a
consolidation move).

Status times have whole seconds, so a checkpoint written a fraction of a second *before* the
request, in the same second, would pass ``saved >= requested``, and the attempt would end on the
old checkpoint. Steps do not have that blind spot: a checkpoint is new when its step is later than
the step the job had reported when it was asked. With no step on record at the request (the job
had no checkpoint then, or the request was recorded before steps were kept) the times decide: a
checkpoint with a step counts from the request's own second on (the operator stamps a reported
checkpoint when it sees it, so one seen in that second came with or after the request), one
without a step (a status written by hand) only from a later second.
"""

from __future__ import annotations

import datetime as dt

from accel_api.job import AcceleratorJobStatus, CheckpointStatus
from accel_operator.reconcile.times import parse_time


def step_at_request(status: AcceleratorJobStatus) -> int | None:
    """The step of the job's latest checkpoint, to keep beside the request."""
    return status.last_checkpoint.step if status.last_checkpoint is not None else None


def written_since(last: CheckpointStatus | None, step_then: int | None, asked: dt.datetime | None) -> bool:
    """Whether ``last`` (the job's latest checkpoint now) is newer than the request made at
    ``asked`` when the job's latest step was ``step_then``."""
    if last is None:
        return False
    if last.step is not None and step_then is not None:
        return last.step > step_then
    saved = parse_time(last.time)
    if saved is None or asked is None:
        return False
    return saved >= asked if last.step is not None else saved > asked
