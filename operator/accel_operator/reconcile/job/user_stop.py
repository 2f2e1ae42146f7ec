"""A user's stop: the ``accel.dev/stop`` annotation (``kubectl accel stop JOB``), pure decisions.

A user sets ``accel.dev/stop`` on an AcceleratorJob to a value it was not stopped with (a
timestamp): the operator keeps only a digest of the value (``status.health.stopSeen``), never
echoes it.

- A job that holds no devices (Pending, Queued, waiting for capacity) is **Stopped** at once.
- A job that holds devices and has ``spec.checkpoint``, with a pod of the attempt on a node: its
  pods get the checkpoint-now request (``UserStop=False/CheckpointRequested``, a
  ``StopRequested`` event, ``status.health.stopRequestedTime``); once a checkpoint newer than the
  request is reported, or after the checkpoint grace, the attempt ends and the job is Stopped.
- A job that holds devices without ``spec.checkpoint`` (or before any pod of the attempt is on a
  node) is Stopped at once; the message says what is lost.

A Stopped job holds no devices; it is resumed the way a job stopped for
idleness is, by a new value of ``accel.dev/resume`` (``kubectl accel resume JOB``), as a new
attempt from its latest complete checkpoint. A job that finishes (or fails) while its checkpoint
is awaited ends as it would have: the stop no longer applies.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from accel_api import vocabulary as v
from accel_api.durations import parse_time
from accel_api.durations import stamp as _ts
from accel_api.enums import JobPhase
from accel_api.job import HealthStatus
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import decision as d
from accel_operator.reconcile.common import stop
from accel_operator.reconcile.common.decision import Cond, Decision, StatusPatch
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.snapshot import JobView, Snapshot

USER_STOP = "UserStop"  # the condition type
REASON = "user-stop"  # the checkpoint request's reason (a metrics label)


def requested(job: JobView) -> bool:
    """Whether a user set ``accel.dev/stop`` to a value the job was not stopped with."""
    return job.stop_requested


def waiting(job: JobView, now: dt.datetime) -> Decision:
    """A job that holds no devices: Stopped at once."""
    return _stop(job, job.status.health or HealthStatus(), "it held no devices", now, workload=False)


def holding(job: JobView, snapshot: Snapshot, held: Decision, now: dt.datetime, *, grace: float) -> Decision:
    """A job that holds devices, ``held`` being what it would become without the stop (still
    holding: the caller checked): the checkpoint request, the wait for it, or the stop."""
    st = job.status
    health = job.status.health or HealthStatus()
    if job.spec is None or job.spec.checkpoint is None:
        return _stop(job, health, "the job has no spec.checkpoint: the work of this attempt is lost", now)
    pods = [p for p in snapshot.pods_by_job.get(job.key, ()) if p.attempt == st.attempt and p.node and not p.ended]
    requested_at = parse_time(health.stop_requested_time)
    if requested_at is None:
        if not pods:
            return _stop(job, health, "no pod of the attempt was running yet", now)
        health = stop.requested(health, st, now)
        message = _clip(
            f"stop requested by the {v.ANNOTATION_STOP} annotation: checkpoint requested; the job stops within "
            f"{grace:.0f}s"
        )
        request = act.RequestCheckpoint(tuple((p.namespace, p.name) for p in pods), _ts(now), REASON)
        return _pending(held, health, message, (act.RecordEvent("Normal", "StopRequested", message), request))
    why = stop.due(st, health, requested_at, now, grace=grace)
    if why is not None:
        return _stop(job, health, why, now)
    message = _clip(f"stop requested: checkpoint requested at {_ts(requested_at)}")
    return _pending(held, health, message, ())


def _pending(held: Decision, health: HealthStatus, message: str, actions: tuple[act.Action, ...]) -> Decision:
    """``held`` (the job as it runs on) with the stop's markers, condition and actions."""
    base = held.status.health or health
    kept = base.model_copy(
        update={"stop_requested_time": health.stop_requested_time, "stop_checkpoint_step": health.stop_checkpoint_step}
    )
    conditions = (
        *(c for c in held.conditions if c.type != USER_STOP),
        Cond(USER_STOP, False, "CheckpointRequested", message),
    )
    return replace(
        held,
        conditions=conditions,
        status=replace(held.status, health=kept),
        actions=(*held.actions, *actions),
    )


def _stop(job: JobView, health: HealthStatus, why: str, now: dt.datetime, *, workload: bool = True) -> Decision:
    st = job.status
    message = _clip(
        f"stopped by the {v.ANNOTATION_STOP} annotation: {why}. To resume it (from its latest complete checkpoint), "
        f"set the annotation {v.ANNOTATION_RESUME} to a new value (kubectl accel resume {job.name})"
    )
    new_health = stop.stopped(health, job, now, stop_seen=job.stop_request)
    actions: tuple[act.Action, ...] = (act.RecordEvent("Normal", "Stopped", message),)
    if workload:
        old = st.workload or act.workload_name(job.name, st.attempt)
        actions = (act.DeleteWorkload(old, "stopped by a user"), *actions)
        patch = StatusPatch(attempt=st.attempt + 1, workload=d.CLEAR, message=message, health=new_health)
    else:
        patch = StatusPatch(message=message, health=new_health)
    return Decision(
        phase=JobPhase.STOPPED,
        conditions=(
            *d.SPEC_VALID_AND_PLANNED,
            Cond(d.ADMITTED, False, "StoppedByUser", message),
            Cond(USER_STOP, True, "Stopped", message),
        ),
        status=patch,
        actions=actions,
        reason=message,
    )
