"""Stopping a chronically idle job by policy: pure decisions over the snapshot.

An AcceleratorPolicy's ``spec.idle`` (``stopAfterMinutes``, ``action: warn|stop``,
``stopWithoutCheckpoint``, ``teams``) says what happens to a running job whose devices the node
agents' fresh reports show near 0% (``health.amend`` measures how long: ``status.health.idleSince``):

- ``warn``: after the window, ``IdleStop=False/WouldStop`` and one ``IdleLimit`` event;
- ``stop``, the job has ``spec.checkpoint``: after the window, the job's pods get the
  checkpoint-now request (``IdleStop=False/CheckpointRequested``, an ``IdleStopRequested`` event,
  ``status.health.stopRequestedTime``); once a checkpoint newer than the request is reported, or
  after the checkpoint grace, the attempt ends and the job is **Stopped** (phase ``Stopped``,
  ``Admitted=False/StoppedIdle``, a ``StoppedIdle`` event), holding no devices;
- ``stop``, no checkpoint: only when the policy says ``stopWithoutCheckpoint: true`` (at once, the
  message says the work is lost); otherwise ``IdleStop=False/NoCheckpoint`` and one event.

A Stopped job stays so (no devices, no plan) until a user sets the ``accel.dev/resume``
annotation to a value it was not stopped with (``kubectl annotate aj NAME accel.dev/resume=$(date
+%s) --overwrite``): it is then planned again as a new attempt that resumes from its latest
complete checkpoint, like a move (:mod:`resume`). Devices that become busy before the stop clear
the request. Where several policies apply, the strictest rule wins: a stop before a warning, then
the shorter window, then the policy's name.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accel_api import vocabulary as v
from accel_api.durations import parse_time
from accel_api.durations import stamp as _ts
from accel_api.enums import IdleAction, JobPhase
from accel_api.job import HealthStatus
from accel_api.policy import AcceleratorPolicy
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import decision as d
from accel_operator.reconcile.common import stop
from accel_operator.reconcile.common.decision import Cond, Decision, StatusPatch
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.snapshot import JobView, PodView

IDLE, IDLE_STOP = "Idle", "IdleStop"
REASON = "idle-stop"  # the checkpoint request's reason (a metrics label)


@dataclass(frozen=True, slots=True)
class IdleRule:
    policy: str
    after_seconds: float
    action: IdleAction
    without_checkpoint: bool

    def describe(self) -> str:
        return f"policy {self.policy} ({self.action.value} after {self.after_seconds / 60:.0f} min idle)"


def rule_for(team: str, policies: Iterable[AcceleratorPolicy]) -> IdleRule | None:
    """The strictest ``spec.idle`` rule that applies to ``team`` (None: no policy says anything)."""
    rules = [
        IdleRule(
            p.metadata.name or "?",
            p.spec.idle.stop_after_minutes * 60.0,
            p.spec.idle.action,
            p.spec.idle.stop_without_checkpoint,
        )
        for p in policies
        if p.spec.idle is not None and (not p.spec.idle.teams or team in p.spec.idle.teams or "*" in p.spec.idle.teams)
    ]
    if not rules:
        return None
    return min(rules, key=lambda r: (r.action is not IdleAction.STOP, r.after_seconds, r.policy))


def _had(job: JobView, type_: str, reason: str) -> bool:
    return any(c.type == type_ and c.reason == reason for c in job.status.conditions)


def clear(health: HealthStatus) -> HealthStatus:
    """The devices are busy again: a pending stop request is withdrawn."""
    return health.model_copy(update={"stop_requested_time": None, "stop_checkpoint_step": None})


def step(
    job: JobView,
    pods: Sequence[PodView],
    rule: IdleRule | None,
    idle_seconds: float,
    *,
    now: dt.datetime,
    health: HealthStatus,
    grace: float,
    conds: list[Cond],
    events: list[act.Action],
) -> tuple[Decision | None, HealthStatus]:
    """The policy's part for a job idle for ``idle_seconds``: conditions and events added to
    ``conds``/``events``, and the ``health`` markers updated; or the Decision that stops the job."""
    assert job.spec is not None
    if rule is None or idle_seconds < rule.after_seconds:
        return None, clear(health)
    idle = f"devices idle for {idle_seconds / 60:.0f} min (≥ {rule.after_seconds / 60:.0f} min of {rule.describe()})"
    if rule.action is IdleAction.WARN:
        conds.append(Cond(IDLE_STOP, False, "WouldStop", _clip(f"{idle}: warning only")))
        if not _had(job, IDLE_STOP, "WouldStop"):
            events.append(act.RecordEvent("Warning", "IdleLimit", _clip(f"{idle}: warning only")))
        return None, health
    if job.spec.checkpoint is None:
        if not rule.without_checkpoint:
            message = _clip(
                f"{idle}: not stopped, the job has no spec.checkpoint (the policy stops such jobs only with "
                "stopWithoutCheckpoint: true)"
            )
            conds.append(Cond(IDLE_STOP, False, "NoCheckpoint", message))
            if not _had(job, IDLE_STOP, "NoCheckpoint"):
                events.append(act.RecordEvent("Warning", "IdleLimit", message))
            return None, health
        return _stop(job, health, f"{idle}; the job has no checkpoint: its work is lost", now), health
    requested = parse_time(health.stop_requested_time)
    if requested is None:
        health = stop.requested(health, job.status, now)
        message = _clip(f"{idle}: checkpoint requested; the job stops within {grace:.0f}s")
        conds.append(Cond(IDLE_STOP, False, "CheckpointRequested", message))
        events.append(act.RecordEvent("Warning", "IdleStopRequested", message))
        events.append(act.RequestCheckpoint(tuple((p.namespace, p.name) for p in pods), _ts(now), REASON))
        return None, health
    why = stop.due(job.status, health, requested, now, grace=grace)
    if why is not None:
        return _stop(job, health, f"{idle}; {why}", now), health
    conds.append(
        Cond(IDLE_STOP, False, "CheckpointRequested", _clip(f"{idle}: checkpoint requested at {_ts(requested)}"))
    )
    return None, health


def _stop(job: JobView, health: HealthStatus, why: str, now: dt.datetime) -> Decision:
    st = job.status
    old = st.workload or act.workload_name(job.name, st.attempt)
    message = _clip(
        f"attempt {st.attempt} ended, the job is Stopped: {why}. To resume it (from its latest complete "
        f"checkpoint), set the annotation {v.ANNOTATION_RESUME} to a new value"
    )
    new_health = stop.stopped(health, job, now)
    return Decision(
        phase=JobPhase.STOPPED,
        conditions=(
            *d.SPEC_VALID_AND_PLANNED,
            Cond(d.ADMITTED, False, "StoppedIdle", message),
            Cond(IDLE, True, "StoppedIdle", _clip(why)),
            Cond(IDLE_STOP, True, "Stopped", message),
        ),
        status=StatusPatch(attempt=st.attempt + 1, workload=d.CLEAR, message=message, health=new_health),
        actions=(act.DeleteWorkload(old, "stopped: idle"), act.RecordEvent("Warning", "StoppedIdle", message)),
        reason=message,
    )
