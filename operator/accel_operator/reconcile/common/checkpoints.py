"""Which checkpoint a new attempt resumes from: pure choices over what a store or the job reported.

The layout (docs/concepts.md, "The checkpoint contract"): checkpoint N lives under ``<uri>/step-<N>/``
(N in decimal, zero-padding allowed, compared as a number); its data is written first and the
empty marker ``<uri>/step-<N>/COMPLETE`` last. Only a step whose marker exists is complete: a
writer killed mid-write leaves data without a marker, and that step is never chosen. Among
complete steps the highest wins; equal steps (``step-5`` and ``step-05``) go to the newer marker.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from accel_api import bounds
from accel_api import vocabulary as v
from accel_api.durations import parse_time
from accel_api.job import AcceleratorJobStatus, CheckpointStatus


@dataclass(frozen=True)
class Checkpoint:
    uri: str  # the step's directory or prefix, no trailing slash: what ACCEL_RESUME_FROM carries
    step: int
    time: dt.datetime  # when it became complete (its marker's modification time)


def step_of(name: str) -> int | None:
    """``step-120`` (optionally with a trailing ``/``) -> 120; anything else -> None. A step above
    ``bounds.GENERATION_MAX`` (2^53, what ``status.lastCheckpoint.step`` holds) is not plausible:
    None, so it is never chosen (a status write of it would be refused, and the job never resume)."""
    name = name.rstrip("/")
    digits = name.removeprefix(v.CHECKPOINT_STEP_PREFIX)
    if digits == name or not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        return None
    step = int(digits)
    return step if step <= bounds.GENERATION_MAX else None


def newest(candidates: Iterable[Checkpoint]) -> Checkpoint | None:
    """The complete checkpoint to resume from: the highest step; equal steps by the newer time."""
    return max(candidates, key=lambda c: (c.step, c.time), default=None)


def by_step_descending(names: Iterable[str]) -> list[list[str]]:
    """Step directory names grouped by step number, highest first (non-steps dropped): the order
    in which a store checks markers, stopping at the first group with a complete member."""
    groups: dict[int, list[str]] = {}
    for name in names:
        step = step_of(name)
        if step is not None:
            groups.setdefault(step, []).append(name)
    return [sorted(groups[s]) for s in sorted(groups, reverse=True)]


def reported(annotations: Mapping[str, str], now: dt.datetime) -> Checkpoint | None:
    """What the job reported through ``accel.dev/last-checkpoint`` (and ``-step``): the way to know
    the latest checkpoint on a PVC, which the operator does not mount. ``now`` stands for the time
    when the report carries none."""
    uri = annotations.get(v.ANNOTATION_CHECKPOINT, "").strip()
    if not uri:
        return None
    step_text = annotations.get(v.ANNOTATION_CHECKPOINT_STEP, "").strip()
    step = int(step_text) if step_text.isascii() and step_text.isdigit() and len(step_text) <= 18 else None
    if step is not None and step > bounds.GENERATION_MAX:
        step = None
    if step is None:
        step = step_of(uri.rstrip("/").rsplit("/", 1)[-1])
    return Checkpoint(uri=uri.rstrip("/"), step=step if step is not None else 0, time=now)


# --- whether a checkpoint was written since a request ---------------------------------------
#
# Whether a job wrote a checkpoint after the operator asked it for one: one rule for every path
# that asks for a checkpoint before it ends an attempt (a move off a failing device, an idle stop, a
# consolidation move).
#
# Status times have whole seconds, so a checkpoint written a fraction of a second *before* the
# request, in the same second, would pass ``saved >= requested``, and the attempt would end on the
# old checkpoint. Steps do not have that blind spot: a checkpoint is new when its step is later than
# the step the job had reported when it was asked. With no step on record at the request (the job
# had no checkpoint then, or the request was recorded before steps were kept) the times decide: a
# checkpoint with a step counts from the request's own second on (the operator stamps a reported
# checkpoint when it sees it, so one seen in that second came with or after the request), one
# without a step (a status written by hand) only from a later second.


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
