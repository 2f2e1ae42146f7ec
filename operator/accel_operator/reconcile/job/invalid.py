"""A job whose stored spec does not parse: pure decisions over the snapshot.

A spec can stop parsing after the job was admitted: an edit made while the admission webhook was
unreachable, or an operator upgrade that tightens a rule. What the job runs then is no longer what
its spec says, so its attempt ends, but never silently:

- a job holding no devices is **Failed** at once (``Valid=False/InvalidSpec``, one event);
- a job holding devices keeps them (and is charged: the cost ledger reads its status and its
  ledger's recorded team, not the spec) while its pods get the checkpoint-now request
  (``Valid=False/InvalidSpec``, an ``InvalidSpec`` event saying the attempt ends); once a checkpoint
  newer than the request is reported, or after the checkpoint grace, or at once when none of its
  pods runs, the attempt ends (its batch Job deleted, the attempt counter moved on) and the job is
  **Failed** with ``Valid=False/InvalidSpec``.

A Failed job whose spec parses again is planned as a new attempt that resumes from its latest
complete checkpoint (``decide``: "a spec that was invalid and is valid now"); it never adopts the
batch Job of the attempt that ended.
"""

from __future__ import annotations

import datetime as dt

from accel_api.durations import parse_time
from accel_api.durations import stamp as _ts
from accel_api.enums import JobPhase
from accel_api.job import HealthStatus
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import stop
from accel_operator.reconcile.common.decision import ADMITTED, CLEAR, VALID, Cond, Decision, StatusPatch
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.snapshot import HOLDING, JobView, Snapshot

REASON = "InvalidSpec"
REQUEST = "invalid-spec"  # the checkpoint request's reason (a metrics label)


def problems(job: JobView) -> str:
    """What is wrong with the stored spec, each problem located in the job."""
    return "; ".join(_in_spec(p) for p in job.spec_problems)


def _in_spec(problem: str) -> str:
    """A problem of the spec model, located in the job: a rule across the spec's fields is the spec's."""
    if problem.startswith("(document)"):
        return "spec" + problem.removeprefix("(document)")
    return problem if problem.startswith("spec") else f"spec.{problem}"


def holds(job: JobView) -> bool:
    """Whether the job holds devices (an admitted attempt, its batch Job made or about to be)."""
    return job.spec is None and job.phase in HOLDING


def decide(job: JobView, snapshot: Snapshot, now: dt.datetime, *, grace: float) -> Decision:
    """The next step of a job whose spec does not parse (``job.spec`` is None)."""
    if not holds(job):
        return _failed(job, problems(job))
    st = job.status
    health = st.health or HealthStatus()
    running = [
        p
        for p in snapshot.pods_by_job.get(job.key, ())
        if p.attempt == st.attempt and p.node is not None and not p.ended
    ]
    why = problems(job)
    requested = parse_time(health.stop_requested_time)
    if not running:
        return _end(job, health, why, "none of its pods was running", now)
    if requested is None:
        message = _clip(
            f"the stored spec does not parse ({why}): attempt {st.attempt} is asked to checkpoint and ends within "
            f"{grace:.0f}s; fix the spec to run the job again (it resumes from its latest checkpoint)"
        )
        health = stop.requested(health, st, now)
        return Decision(
            phase=st.phase or JobPhase.RUNNING,
            conditions=(Cond(VALID, False, REASON, message),),
            status=StatusPatch(message=message, health=health),
            actions=(
                act.RecordEvent("Warning", REASON, message),
                act.RequestCheckpoint(tuple((p.namespace, p.name) for p in running), _ts(now), REQUEST),
            ),
            reason=message,
        )
    how = stop.due(st, health, requested, now, grace=grace, none_yet="no checkpoint reported")
    if how is not None:
        return _end(job, health, why, how, now)
    message = _clip(f"the stored spec does not parse ({why}): checkpoint requested at {_ts(requested)}")
    return Decision(
        phase=st.phase or JobPhase.RUNNING,
        conditions=(Cond(VALID, False, REASON, message),),
        status=StatusPatch(message=message),
        reason=message,
    )


def _failed(job: JobView, why: str) -> Decision:
    """Failed at once: the job holds nothing (an event on a change only)."""
    current = {c.reason for c in job.status.conditions}
    new = not (job.phase is JobPhase.FAILED and REASON in current)
    return Decision(
        phase=JobPhase.FAILED,
        conditions=(Cond(VALID, False, REASON, why),),
        status=StatusPatch(plan=CLEAR, message=_clip(why), workload=CLEAR),
        actions=(act.RecordEvent("Warning", REASON, _clip(why)),) if new else (),
        reason=why,
    )


def _end(job: JobView, health: HealthStatus, why: str, how: str, now: dt.datetime) -> Decision:
    """The attempt ends (its batch Job deleted) and the job is Failed until its spec parses."""
    st = job.status
    old = st.workload or act.workload_name(job.name, st.attempt)
    message = _clip(
        f"attempt {st.attempt} ended ({how}): the stored spec does not parse ({why}). Fix the spec to run the "
        "job again as a new attempt (it resumes from its latest complete checkpoint)"
    )
    return Decision(
        phase=JobPhase.FAILED,
        conditions=(Cond(VALID, False, REASON, message), Cond(ADMITTED, False, REASON, message)),
        status=StatusPatch(
            attempt=st.attempt + 1,
            plan=CLEAR,
            workload=CLEAR,
            message=message,
            health=health.ended(stop_requested_time=None, stop_checkpoint_step=None),
        ),
        actions=(act.DeleteWorkload(old, "spec invalid"), act.RecordEvent("Warning", REASON, message)),
        reason=message,
    )
