"""Whether a job wrote a checkpoint after the operator asked it for one: one rule for every path
that asks for a checkpoint before it ends an attempt (a move off a failing device, an idle stop, a
consolidation move).

Status times have whole seconds, so a checkpoint written a fraction of a second *before* the
request, in the same second, would pass ``saved >= requested``, and the attempt would end on the
old checkpoint. Steps do not have that blind spot: a checkpoint is new when its step is later than
the step the job had reported when it was asked. Only when a step is unknown (the job reported
none, or had no checkpoint then) do the times decide, and then only a later second counts.
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
    return saved is not None and asked is not None and saved > asked
