"""Where a new attempt resumes, and what the preemption before it threw away: pure choices.

A new attempt (after a preemption, a retry or a released gang) starts from the latest *complete*
checkpoint under ``spec.checkpoint.uri``, or from scratch when there is none. Finding it may need
I/O (listing S3), which the scheduler does outside the decision and hands in as a
:class:`Lookup`; a PVC's checkpoint is what the job reported on its pods
(``accel.dev/last-checkpoint``), mirrored into ``status.lastCheckpoint`` while the attempt ran
(:func:`reported_newer`), because the operator does not mount the volume and the pods of a
preempted node are gone by the time the next attempt is planned.

The answer (:class:`ResumeDecision`) is written to ``status.resume`` before the attempt's workload
exists, together with the lost work, in one status write: a restarted operator sees it and creates
the same workload with the same ``ACCEL_RESUME_FROM``, and the lost work is counted once.

Lost work: the devices of the preempted attempt × the seconds from its last complete checkpoint
(or from its start, when the checkpoint is older or there is none) to the preemption.

Tenant input is hostile: a reported checkpoint is accepted only when it is exactly
``<spec.checkpoint.uri>/step-<N>``, so nothing else ever reaches ``ACCEL_RESUME_FROM``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from accel_api import bounds
from accel_api import vocabulary as v
from accel_api.durations import parse_time as _time
from accel_api.durations import stamp as _ts
from accel_api.enums import FailureKind
from accel_api.job import CheckpointStatus, ResumeStatus, SpotStatus
from accel_operator.reconcile.common import attempt_held
from accel_operator.reconcile.common.checkpoints import Checkpoint, step_of
from accel_operator.reconcile.common.decision import StatusPatch
from accel_operator.reconcile.common.snapshot import JobView, PodView

# The only shape a resume point may have below the job's checkpoint URI.
_STEP: Final = re.compile(rf"^{re.escape(v.CHECKPOINT_STEP_PREFIX)}[0-9]{{1,18}}$")
Source = Literal["s3", "reported", "none"]
# A failed lookup (S3 unreachable) is asked again this often; the job waits, others go on.
RETRY_SECONDS: Final = 10.0


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the scheduler found for one attempt's resume point (or why it could not look)."""

    attempt: int
    uri: str
    checkpoint: Checkpoint | None
    error: str | None
    at: dt.datetime


@dataclass(frozen=True, slots=True)
class ResumeDecision:
    """Where attempt ``attempt`` starts, and the work the preemption before it lost."""

    attempt: int
    resume_from: str | None  # a complete step's URI, or None: from scratch
    source: Source
    checkpoint: Checkpoint | None
    lost_device_seconds: float | None  # None: the attempt before did not end by preemption
    message: str
    lost_message: str = ""  # the lost work in words (the LostWork event)

    def patch(self, job: JobView) -> StatusPatch:
        """The status fields this decision sets (merged into the decision that applies it)."""
        st = job.status
        resume = ResumeStatus(attempt=self.attempt, resume_from=self.resume_from, source=self.source)
        checkpoint = checkpoint_status(self.checkpoint) if self.checkpoint is not None else None
        if self.lost_device_seconds is None or st.last_failure is None:
            return StatusPatch(resume=resume, last_checkpoint=checkpoint)
        spot = st.spot or SpotStatus()
        total = min(bounds.STATUS_SECONDS_MAX, spot.lost_device_seconds + self.lost_device_seconds)
        return StatusPatch(
            resume=resume,
            last_checkpoint=checkpoint,
            last_failure=st.last_failure.model_copy(update={"lost_device_seconds": round(self.lost_device_seconds, 3)}),
            spot=spot.model_copy(update={"lost_device_seconds": round(total, 3)}),
        )


def checkpoint_status(c: Checkpoint) -> CheckpointStatus:
    return CheckpointStatus(uri=c.uri, step=c.step, time=_ts(c.time))


def needs_resume(job: JobView) -> bool:
    """Whether the current attempt's start point is still to be decided (attempt 0 starts empty)."""
    st = job.status
    return st.attempt > 0 and (st.resume is None or st.resume.attempt != st.attempt)


def resume_from(job: JobView) -> str | None:
    """``ACCEL_RESUME_FROM`` for the current attempt, as recorded in the status, and only if it
    still lies under the job's checkpoint URI (a status edited by hand never reaches a pod)."""
    r = job.status.resume
    if r is None or r.attempt != job.status.attempt or not r.resume_from:
        return None
    spec_ckpt = job.spec.checkpoint if job.spec is not None else None
    return r.resume_from if spec_ckpt is not None and under(spec_ckpt.uri, r.resume_from) else None


def under(spec_uri: str, uri: str) -> bool:
    """Whether ``uri`` is exactly ``<spec_uri>/step-<N>``: the only resume point accepted."""
    base = spec_uri.rstrip("/") + "/"
    return len(uri) <= bounds.URI_LENGTH and uri.startswith(base) and _STEP.match(uri[len(base) :]) is not None


def lost_work(job: JobView, checkpoint: Checkpoint | None) -> tuple[float, str] | None:
    """Device-seconds the preemption that ended the previous attempt threw away, with the words
    that explain them; None when that attempt did not end by preemption."""
    st = job.status
    failure = st.last_failure
    if failure is None or failure.kind is not FailureKind.PREEMPTION or failure.attempt != st.attempt - 1:
        return None
    preempted = attempt_held.failure_end(failure)  # the operator may have noticed it later
    started = _time(st.attempt_start_time)
    admitted = _time(st.admitted_time)
    devices = st.plan.devices if st.plan is not None and st.plan.devices else 0
    if preempted is None or started is None or (admitted is not None and started < admitted):
        return 0.0, f"attempt {failure.attempt} was preempted before it ran: no work lost"
    since, what = started, f"its start at {_ts(started)}"
    if checkpoint is not None and checkpoint.time > started:
        since, what = checkpoint.time, f"{checkpoint.uri.rsplit('/', 1)[-1]} at {_ts(checkpoint.time)}"
    seconds = max(0.0, (preempted - since).total_seconds())
    lost = min(bounds.STATUS_SECONDS_MAX, seconds * devices)
    return lost, (
        f"the preemption of attempt {failure.attempt} lost {lost:,.0f} device-seconds "
        f"({devices} device(s) × {seconds:,.0f}s since {what})"
    )


def decide_resume(job: JobView, lookup: Lookup | None) -> ResumeDecision | None:
    """Where the current attempt resumes; None while an S3 lookup is still needed (none yet, one
    for another attempt, or one that failed: the caller retries it)."""
    assert job.spec is not None
    st = job.status
    spec_ckpt = job.spec.checkpoint
    checkpoint: Checkpoint | None = None
    source: Source = "none"
    if spec_ckpt is None:
        why = "the job has no spec.checkpoint"
    elif spec_ckpt.scheme == "s3":
        if lookup is None or lookup.attempt != st.attempt or lookup.uri != spec_ckpt.uri or lookup.error:
            return None
        if lookup.checkpoint is not None and under(spec_ckpt.uri, lookup.checkpoint.uri):
            checkpoint, source = lookup.checkpoint, "s3"
        why = f"no complete checkpoint under {spec_ckpt.uri}"
    else:
        last = st.last_checkpoint
        if last is not None and under(spec_ckpt.uri, last.uri):
            time = _time(last.time) or dt.datetime.fromtimestamp(0, dt.UTC)
            step = last.step if last.step is not None else (step_of(last.uri.rsplit("/", 1)[-1]) or 0)
            checkpoint, source = Checkpoint(uri=last.uri, step=step, time=time), "reported"
        why = f"the job reported no checkpoint under {spec_ckpt.uri} (it may find one on its volume)"
    lost = lost_work(job, checkpoint)
    if checkpoint is not None:
        message = f"attempt {st.attempt} resumes from {checkpoint.uri} (step {checkpoint.step})"
    else:
        message = f"attempt {st.attempt} restarts from scratch: {why}"
    if lost is not None:
        message += f"; {lost[1]}"
    return ResumeDecision(
        attempt=st.attempt,
        resume_from=checkpoint.uri if checkpoint is not None else None,
        source=source,
        checkpoint=checkpoint,
        lost_device_seconds=lost[0] if lost is not None else None,
        message=message,
        lost_message=lost[1] if lost is not None else "",
    )


def reported_newer(job: JobView, pods: Iterable[PodView], now: dt.datetime) -> CheckpointStatus | None:
    """``status.lastCheckpoint`` from what the current attempt's pods report, when it is newer
    than the recorded one and lies under the job's checkpoint URI; None otherwise."""
    if job.spec is None or job.spec.checkpoint is None:
        return None
    base = job.spec.checkpoint.uri
    best: tuple[int, str] | None = None
    for p in pods:
        uri = (p.reported_checkpoint or "").strip().rstrip("/")
        if not uri or not under(base, uri):
            continue
        step = step_of(uri.rsplit("/", 1)[-1])
        if step is not None and (best is None or step > best[0]):
            best = (step, uri)
    if best is None:
        return None
    last = job.status.last_checkpoint
    if last is not None and last.uri == best[1]:
        return None
    if last is not None and last.step is not None and under(base, last.uri) and last.step > best[0]:
        return None
    return CheckpointStatus(uri=best[1], step=best[0], time=_ts(now))
