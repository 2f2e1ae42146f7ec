"""decide(): resuming a new attempt from the latest complete checkpoint, the work a preemption lost,
and the fallback from spot to on-demand pools, as tables of small worlds."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import CheckpointStatus, ResumeStatus, SpotStatus
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.checkpoints import Checkpoint
from accel_operator.reconcile.common.decision import Decision
from accel_operator.reconcile.job import fallback, resume
from accel_operator.reconcile.job.decide import decide
from tests.support.decisions import failure_of, plan_of, spot_of
from tests.support.reconcile import T0, World

S3_URI = "s3://ckpt/team/run"
S3 = {"uri": S3_URI, "intervalMinutes": 5}
PVC = {"uri": "pvc://claim/run", "intervalMinutes": 5}
PREFER = {"policy": "prefer", "maxPreemptions": 3}


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


START = T0 + dt.timedelta(seconds=10)  # attempt 0 ran from here
PREEMPTED = T0 + dt.timedelta(seconds=100)
NOW = T0 + dt.timedelta(seconds=105)


def _kinds(d: Decision) -> list[str]:
    return [a.reason if isinstance(a, act.RecordEvent) else type(a).__name__ for a in d.actions]


def _cond(d: Decision, type_: str) -> tuple[bool, str] | None:
    c = next((c for c in d.conditions if c.type == type_), None)
    return None if c is None else (c.ok, c.reason)


def _creates(d: Decision) -> list[act.CreateWorkload]:
    """The creates, without the admission their Job records."""
    return [replace(a, admission=None) for a in d.actions if isinstance(a, act.CreateWorkload)]


def _running(**extra: Any) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "workload": "a-a0",
        "admittedTime": _ts(T0),
        "startTime": _ts(START),
        "attemptStartTime": _ts(START),
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "durationSeconds": 3600},
        **extra,
    }


def _preempted(kind: str = "Preemption", **extra: Any) -> dict[str, Any]:
    """Attempt 0 ended by a preemption at PREEMPTED: what _after_failure wrote."""
    return {
        **_running(),
        "phase": "Pending",
        "attempt": 1,
        "workload": None,
        "preemptions": 1 if kind == "Preemption" else 0,
        "retries": 0 if kind == "Preemption" else 1,
        "lastFailure": {"kind": kind, "attempt": 0, "reason": "PodFailurePolicy", "time": _ts(PREEMPTED)},
        **extra,
    }


def _disrupt(w: World) -> None:
    message = "Pod ns/a-a0-0 has condition DisruptionTarget matching FailJob rule at index 0"
    w.workload("a", 0, failed=1, failed_condition=True, failure_reason="PodFailurePolicy", failure_message=message)
    w.pod("a", 0, 0, node="p-0", phase="Failed", exit_code=143, disrupted=True)


def _lookup(checkpoint: Checkpoint | None, *, attempt: int = 1, error: str | None = None) -> resume.Lookup:
    return resume.Lookup(attempt, S3_URI, checkpoint, error, NOW)


STEP_1 = Checkpoint("s3://ckpt/team/run/step-1", 1, T0 + dt.timedelta(seconds=70))


# --- the preemption itself -------------------------------------------------------------------------


def test_a_preemption_records_its_time_and_asks_nothing_yet() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running(), checkpoint=S3)
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED)
    assert d.phase is JobPhase.PENDING and d.status.attempt == 1
    assert spot_of(d) == SpotStatus(recent_preemptions=[_ts(PREEMPTED)], on_demand=False)
    assert _kinds(d) == ["DeleteWorkload", "Retrying"]


def test_a_new_attempt_asks_for_its_checkpoint_before_it_is_admitted() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted(), checkpoint=S3)
    d = decide(job, w.snapshot(), NOW)
    assert d.phase is JobPhase.PENDING and not _creates(d)
    assert _cond(d, "Resumed") == (False, "ResolvingCheckpoint")
    assert d.actions == (act.ResolveCheckpoint(1, S3_URI),)
    # A lookup made for another attempt is not this attempt's answer.
    again = decide(job, w.snapshot(), NOW, lookup=_lookup(STEP_1, attempt=0))
    assert again.actions == (act.ResolveCheckpoint(1, S3_URI),)


def test_the_latest_complete_checkpoint_is_resumed_and_the_lost_work_counted_once() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted(), checkpoint=S3)
    d = decide(job, w.snapshot(), NOW, lookup=_lookup(STEP_1))
    assert d.phase is JobPhase.ADMITTED
    assert _creates(d) == [act.CreateWorkload(1, "a-a1", "p", 8, 1, "s3://ckpt/team/run/step-1")]
    assert d.status.resume == ResumeStatus(attempt=1, resume_from="s3://ckpt/team/run/step-1", source="s3")
    # The resume point is decided with the admission: its status goes before the Job, as ever.
    assert not d.status_after_workload
    assert d.status.last_checkpoint == CheckpointStatus(uri="s3://ckpt/team/run/step-1", step=1, time=_ts(STEP_1.time))
    lost = 8 * (PREEMPTED - STEP_1.time).total_seconds()  # 8 devices × 30 s
    assert failure_of(d).lost_device_seconds == lost == 240
    assert spot_of(d).lost_device_seconds == lost
    assert _cond(d, "Resumed") == (True, "FromCheckpoint")
    assert _kinds(d) == ["ResumingFromCheckpoint", "LostWork", "Admitted", "CreateWorkload"]
    # The next decision sees the resume recorded: no second lookup, no second count.
    merged = {**_preempted(), **d.status.to_wire(), "phase": "Admitted"}
    w2 = World().pool("p")
    job2 = w2.job("a", "p", devices=8, status=merged, checkpoint=S3)
    d2 = decide(job2, w2.snapshot(), NOW, lookup=_lookup(STEP_1))
    assert not any(isinstance(a, act.ResolveCheckpoint) for a in d2.actions)
    assert d2.status.spot is None and d2.status.last_failure is None


def test_without_a_complete_checkpoint_the_attempt_restarts_from_scratch_and_says_so() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted(), checkpoint=S3)
    d = decide(job, w.snapshot(), NOW, lookup=_lookup(None))
    assert _creates(d)[0].resume_from is None
    assert d.status.resume == ResumeStatus(attempt=1, resume_from=None, source="none")
    assert d.status.last_checkpoint is None
    # Everything since the attempt started is lost: 8 × 90 s.
    assert failure_of(d).lost_device_seconds == 8 * 90
    assert _cond(d, "Resumed") == (False, "FromScratch")
    message = next(c.message for c in d.conditions if c.type == "Resumed")
    assert "restarts from scratch: no complete checkpoint under s3://ckpt/team/run" in message
    assert "RestartingFromScratch" in _kinds(d)


def test_a_checkpoint_older_than_the_attempt_counts_from_the_attempt_start() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted(), checkpoint=S3)
    old = Checkpoint("s3://ckpt/team/run/step-0", 0, T0)
    d = decide(job, w.snapshot(), NOW, lookup=_lookup(old))
    assert _creates(d)[0].resume_from == "s3://ckpt/team/run/step-0"
    assert failure_of(d).lost_device_seconds == 8 * 90


def test_an_attempt_preempted_before_it_ran_lost_nothing() -> None:
    # attemptStartTime is the attempt before's: older than this attempt's admission.
    st = _preempted(admittedTime=_ts(T0 + dt.timedelta(seconds=50)))
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=st, checkpoint=S3)
    d = decide(job, w.snapshot(), NOW, lookup=_lookup(STEP_1))
    assert failure_of(d).lost_device_seconds == 0
    assert "LostWork" not in _kinds(d)


def test_a_real_failure_resumes_too_but_loses_nothing_to_preemption() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted(kind="Failure"), checkpoint=S3, maxRetries=1)
    d = decide(job, w.snapshot(), NOW, lookup=_lookup(STEP_1))
    assert _creates(d)[0].resume_from == "s3://ckpt/team/run/step-1"
    assert d.status.last_failure is None and d.status.spot is None


def test_an_unreadable_store_holds_only_this_job_and_is_asked_again_later() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted(), checkpoint=S3)
    failed = _lookup(None, error="endpoint not reachable")
    d = decide(job, w.snapshot(), NOW + dt.timedelta(seconds=1), lookup=failed)
    assert d.phase is JobPhase.PENDING and not _creates(d)
    assert _cond(d, "Resumed") == (False, "CheckpointStoreUnavailable")
    assert "endpoint not reachable" in d.reason
    assert _kinds(d) == ["CheckpointStoreUnavailable"]  # not asked again before RETRY_SECONDS
    later = decide(job, w.snapshot(), NOW + dt.timedelta(seconds=resume.RETRY_SECONDS), lookup=failed)
    assert act.ResolveCheckpoint(1, S3_URI) in later.actions


def test_a_job_without_a_checkpoint_restarts_from_scratch_without_a_lookup() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_preempted())
    d = decide(job, w.snapshot(), NOW)
    assert d.phase is JobPhase.ADMITTED and _creates(d)[0].resume_from is None
    assert "the job has no spec.checkpoint" in next(c.message for c in d.conditions if c.type == "Resumed")


# --- PVC: what the job reported --------------------------------------------------------------------


def test_a_pvc_job_resumes_from_the_checkpoint_its_pods_reported() -> None:
    w = World().pool("p")
    reported = {"uri": "pvc://claim/run/step-7", "step": 7, "time": _ts(T0 + dt.timedelta(seconds=90))}
    job = w.job("a", "p", devices=8, status=_preempted(lastCheckpoint=reported), checkpoint=PVC)
    d = decide(job, w.snapshot(), NOW)
    assert _creates(d)[0].resume_from == "pvc://claim/run/step-7"
    assert d.status.resume is not None and d.status.resume.source == "reported"
    assert failure_of(d).lost_device_seconds == 8 * 10


@pytest.mark.parametrize(
    ("annotation", "recorded"),
    [
        ("pvc://claim/run/step-12", "pvc://claim/run/step-12"),
        ("pvc://claim/run/step-12/", "pvc://claim/run/step-12"),
        ("pvc://claim/run/step-3", None),  # older than the recorded step 5
        ("pvc://claim/run/step-5", None),  # the recorded one: nothing to write
        ("pvc://other/run/step-99", None),  # another claim
        ("pvc://claim/run/../x/step-99", None),
        ("pvc://claim/run/step-99/../../y", None),
        ("pvc://claim/run/step-1e9", None),
        ("pvc://claim/run/step-" + "9" * 19, None),  # beyond the 18 digits a step may have
        ("pvc://claim/run/" + "a" * 2000, None),
        ("", None),
    ],
)
def test_a_running_attempt_mirrors_only_a_valid_newer_reported_checkpoint(
    annotation: str, recorded: str | None
) -> None:
    w = World().pool("p")
    last = {"uri": "pvc://claim/run/step-5", "step": 5, "time": _ts(T0)}
    job = w.job("a", "p", devices=8, status=_running(lastCheckpoint=last), checkpoint=PVC)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0", reported_checkpoint=annotation[:1025])
    d = decide(job, w.snapshot(), NOW)
    assert d.phase is JobPhase.RUNNING
    got = d.status.last_checkpoint
    assert (got.uri if got else None) == recorded
    if got:
        assert got == CheckpointStatus(uri=recorded, step=12, time=_ts(NOW))


def test_an_admitted_attempt_whose_workload_is_missing_is_created_with_its_recorded_resume_point() -> None:
    w = World().pool("p")
    st = {
        **_preempted(),
        "phase": "Admitted",
        "workload": "a-a1",
        "admittedTime": _ts(NOW),
        "resume": {"attempt": 1, "resumeFrom": "s3://ckpt/team/run/step-1", "source": "s3"},
    }
    job = w.job("a", "p", devices=8, status=st, checkpoint=S3)
    d = decide(job, w.snapshot(), NOW)
    assert _creates(d) == [act.CreateWorkload(1, "a-a1", "p", 8, 1, "s3://ckpt/team/run/step-1")]


@pytest.mark.parametrize(
    ("recorded", "used"),
    [("s3://ckpt/team/run/step-1", "s3://ckpt/team/run/step-1"), ("s3://elsewhere/secrets/step-1", None)],
)
def test_a_recorded_resume_point_is_used_only_under_the_jobs_checkpoint_uri(recorded: str, used: str | None) -> None:
    w = World().pool("p")
    st = {
        **_preempted(),
        "phase": "Admitted",
        "workload": "a-a1",
        "admittedTime": _ts(NOW),
        "resume": {"attempt": 1, "resumeFrom": recorded, "source": "s3"},
    }
    job = w.job("a", "p", devices=8, status=st, checkpoint=S3)
    assert _creates(decide(job, w.snapshot(), NOW))[0].resume_from == used


def test_a_resume_point_forged_into_the_status_is_not_used() -> None:
    w = World().pool("p")
    forged = {"uri": "pvc://someone-else/secrets/step-1", "step": 1, "time": _ts(T0)}
    job = w.job("a", "p", devices=8, status=_preempted(lastCheckpoint=forged), checkpoint=PVC)
    d = decide(job, w.snapshot(), NOW)
    assert _creates(d)[0].resume_from is None


# --- fallback to on-demand ---------------------------------------------------------------------------


def _two_pools() -> World:
    return (
        World()
        .pool("spot", capacityType="spot", price={"spotPerDeviceHour": 2.0})
        .pool("od", price={"onDemandPerDeviceHour": 6.0})
    )


@pytest.mark.parametrize(
    ("policy", "preemptions", "phase", "fell_back"),
    [
        ("prefer", 0, JobPhase.PENDING, False),  # 1 of 1: a plain new attempt
        ("prefer", 1, JobPhase.PENDING, True),  # 2 of 1: on-demand instead of Failed
        ("require", 1, JobPhase.FAILED, False),  # spot only: no fallback
    ],
)
def test_after_max_preemptions_a_prefer_job_falls_back_to_on_demand(
    policy: str, preemptions: int, phase: JobPhase, fell_back: bool
) -> None:
    w = _two_pools()
    st = {**_running(preemptions=preemptions), "plan": {**_running()["plan"], "pool": "spot"}}
    job = w.job("a", "spot", devices=8, status=st, checkpoint=S3, spot={"policy": policy, "maxPreemptions": 1})
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED)
    assert d.phase is phase
    assert spot_of(d).on_demand is fell_back
    assert (_cond(d, "SpotFallback") == (True, "MaxPreemptions")) is fell_back
    assert ("FellBackToOnDemand" in _kinds(d)) is fell_back


def test_the_fallback_keeps_the_preemption_total_and_where_the_count_starts_again() -> None:
    w = _two_pools()
    st = {**_running(preemptions=1), "plan": {**_running()["plan"], "pool": "spot"}}
    job = w.job("a", "spot", devices=8, status=st, checkpoint=S3, spot={"policy": "prefer", "maxPreemptions": 1})
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED)
    assert d.status.preemptions == 2  # the total, as the printer column shows it
    assert spot_of(d).on_demand is True and spot_of(d).preemptions_at_fallback == 2


@pytest.mark.parametrize(
    ("total", "at_fallback", "phase"),
    [
        (2, 2, JobPhase.PENDING),  # the first disruption on on-demand: 1 of spot.maxPreemptions 1
        (3, 2, JobPhase.FAILED),  # the second: 2 of 1, and no second fallback
        (2, 1, JobPhase.FAILED),
        (5, 5, JobPhase.PENDING),  # fell back early (the window rule), counted from there
    ],
)
def test_a_fallen_back_job_counts_its_preemptions_from_the_fallback(
    total: int, at_fallback: int, phase: JobPhase
) -> None:
    """spot.maxPreemptions is what a job bears before it fails; a prefer job falls back *instead of*
    failing, so the on-demand attempts get the limit afresh (the total stays in status.preemptions)."""
    w = _two_pools()
    spot = {"onDemand": True, "preemptionsAtFallback": at_fallback}
    st = {**_running(preemptions=total, spot=spot), "plan": {**_running()["plan"], "pool": "od"}}
    job = w.job("a", "od", devices=8, status=st, checkpoint=S3, spot={"policy": "prefer", "maxPreemptions": 1})
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED)
    assert d.phase is phase
    assert d.status.preemptions == total + 1
    assert spot_of(d).on_demand is True and spot_of(d).preemptions_at_fallback == at_fallback
    assert _cond(d, "SpotFallback") is None and "FellBackToOnDemand" not in _kinds(d)
    if phase is JobPhase.PENDING:
        assert f"({total + 1 - at_fallback} of spot.maxPreemptions 1)" in d.reason


def test_a_spot_pool_that_keeps_failing_within_the_window_sends_the_job_to_on_demand() -> None:
    w = _two_pools()
    recent = [_ts(PREEMPTED - dt.timedelta(minutes=m)) for m in (50, 20)]
    st = {**_running(preemptions=2, spot={"recentPreemptions": recent}), "plan": {**_running()["plan"], "pool": "spot"}}
    job = w.job("a", "spot", devices=8, status=st, checkpoint=S3, spot=PREFER)
    _disrupt(w)
    rules = fallback.SpotRules(window_seconds=3600, preemptions_in_window=3)
    d = decide(job, w.snapshot(), PREEMPTED, rules=rules)
    assert _cond(d, "SpotFallback") == (True, "PreemptedTooOften")
    assert spot_of(d).recent_preemptions == [*recent, _ts(PREEMPTED)]
    # The same three preemptions spread over more than the window: no fallback.
    narrow = fallback.SpotRules(window_seconds=1800, preemptions_in_window=3)
    assert _cond(decide(job, w.snapshot(), PREEMPTED, rules=narrow), "SpotFallback") is None
    off = fallback.SpotRules(preemptions_in_window=0)
    assert _cond(decide(job, w.snapshot(), PREEMPTED, rules=off), "SpotFallback") is None


def _three_pools() -> World:
    """A cheap spot pool that is often preempted, a dearer steadier one, and on-demand."""
    return (
        World()
        .pool("spot-flaky", capacityType="spot", price={"spotPerDeviceHour": 2.0}, preemptionRatePerHour=0.1)
        .pool("spot-steady", capacityType="spot", price={"spotPerDeviceHour": 2.4}, preemptionRatePerHour=0.02)
        .pool("od", price={"onDemandPerDeviceHour": 6.0})
    )


def _on_spot(pool: str, recent: list[str], **spot: Any) -> dict[str, Any]:
    plan = {**_running()["plan"], "pool": pool, "capacityType": "spot"}
    return {**_running(preemptions=len(recent), spot={"recentPreemptions": recent, **spot}), "plan": plan}


WINDOW = fallback.SpotRules(window_seconds=3600, preemptions_in_window=3)


def test_a_spot_pool_that_keeps_failing_within_the_window_is_left_for_the_jobs_other_pools() -> None:
    """The window rule moves the job off the spot pool that failed it, not straight to on-demand:
    the planner then weighs a steadier spot pool against on-demand (the next test)."""
    w = _three_pools()
    recent = [_ts(PREEMPTED - dt.timedelta(minutes=m)) for m in (50, 20)]
    job = w.job("a", "spot-flaky", devices=8, status=_on_spot("spot-flaky", recent), checkpoint=S3, spot=PREFER)
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED, rules=WINDOW)
    assert d.phase is JobPhase.PENDING
    assert spot_of(d).left_pools == ["spot-flaky"] and spot_of(d).left_time == _ts(PREEMPTED)
    assert spot_of(d).on_demand is False and spot_of(d).preemptions_at_fallback is None
    assert _cond(d, "SpotFallback") is None
    assert "LeftSpotPool" in _kinds(d) and "FellBackToOnDemand" not in _kinds(d)
    assert "leaving it" in d.reason


def test_a_job_preempted_too_often_again_on_a_pool_it_left_falls_back_to_on_demand() -> None:
    w = _three_pools()
    recent = [_ts(PREEMPTED - dt.timedelta(minutes=m)) for m in (50, 20)]
    st = _on_spot("spot-flaky", recent, leftPools=["spot-flaky"], leftTime=_ts(PREEMPTED - dt.timedelta(hours=2)))
    job = w.job("a", "spot-flaky", devices=8, status=st, checkpoint=S3, spot=PREFER)
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED, rules=WINDOW)
    assert _cond(d, "SpotFallback") == (True, "PreemptedTooOften")
    assert spot_of(d).on_demand is True and spot_of(d).left_pools == ["spot-flaky"]


def test_the_window_counts_from_the_move_to_another_spot_pool() -> None:
    """Two preemptions on the pool it left and one on the new pool are not three on the new one."""
    w = _three_pools()
    moved = PREEMPTED - dt.timedelta(minutes=15)
    recent = [_ts(PREEMPTED - dt.timedelta(minutes=m)) for m in (30, 15)]  # the second made it leave
    st = _on_spot("spot-steady", recent, leftPools=["spot-flaky"], leftTime=_ts(moved))
    job = w.job("a", "spot-steady", devices=8, status=st, checkpoint=S3, spot=PREFER)
    _disrupt(w)
    d = decide(job, w.snapshot(), PREEMPTED, rules=WINDOW)
    assert d.phase is JobPhase.PENDING and "Retrying" in _kinds(d)
    assert spot_of(d).left_pools == ["spot-flaky"] and spot_of(d).on_demand is False


@pytest.mark.parametrize(("left", "pool"), [([], "spot-flaky"), (["spot-flaky"], "spot-steady")])
def test_a_job_that_left_a_spot_pool_is_planned_on_a_steadier_spot_pool_before_on_demand(
    left: list[str], pool: str
) -> None:
    w = _three_pools()
    st = _preempted(spot={"leftPools": left}, resume={"attempt": 1, "source": "none"})
    job = w.job("a", "spot-flaky", devices=8, status=st, pinned=False, checkpoint=S3, spot=PREFER)
    d = decide(job, w.snapshot(), NOW)
    assert d.phase is JobPhase.ADMITTED
    assert _creates(d)[0].pool == pool
    assert plan_of(d).capacity_type == "spot"


def test_a_job_that_left_every_spot_pool_is_planned_on_on_demand() -> None:
    w = _three_pools()
    st = _preempted(spot={"leftPools": ["spot-flaky", "spot-steady"]}, resume={"attempt": 1, "source": "none"})
    job = w.job("a", "spot-flaky", devices=8, status=st, pinned=False, checkpoint=S3, spot=PREFER)
    d = decide(job, w.snapshot(), NOW)
    assert _creates(d)[0].pool == "od"


def test_the_pools_a_job_left_are_taken_out_of_its_own_list_or_of_every_pool() -> None:
    w = _three_pools()
    job = w.job("a", "spot-flaky", devices=8, pinned=False, checkpoint=S3, spot=PREFER)
    assert job.spec is not None
    st = job.status.model_copy(update={"spot": SpotStatus(left_pools=["spot-flaky"])})
    every = ["od", "spot-flaky", "spot-steady"]
    assert fallback.effective_spec(job.spec, st, every).placement.pools == ["od", "spot-steady"]
    own = job.spec.model_copy(
        update={"placement": job.spec.placement.model_copy(update={"pools": ["spot-flaky", "od"]})}
    )
    assert fallback.effective_spec(own, st, every).placement.pools == ["od"]
    only = own.model_copy(update={"placement": own.placement.model_copy(update={"pools": ["spot-flaky"]})})
    assert fallback.effective_spec(only, st, every).placement.pools == ["spot-flaky"]  # nothing else: its own
    assert fallback.effective_spec(job.spec, job.status, every) is job.spec  # nothing left: unchanged


@pytest.mark.parametrize(("on_demand", "pool"), [(False, "spot"), (True, "od")])
def test_a_fallen_back_job_is_planned_on_on_demand_pools_only(on_demand: bool, pool: str) -> None:
    w = _two_pools()
    st = _preempted(spot={"onDemand": on_demand}, resume={"attempt": 1, "source": "none"})
    job = w.job("a", "spot", devices=8, status=st, pinned=False, checkpoint=S3, spot=PREFER)
    d = decide(job, w.snapshot(), NOW)
    assert d.phase is JobPhase.ADMITTED
    assert _creates(d)[0].pool == pool
    assert plan_of(d).capacity_type == ("on-demand" if on_demand else "spot")


def test_the_resume_and_fallback_conditions_outlive_the_decisions_that_wrote_them() -> None:
    w = World().pool("p")
    sticky = [
        {"type": "Resumed", "status": "True", "reason": "FromCheckpoint", "message": "attempt 1 resumes from …"},
        {"type": "SpotFallback", "status": "True", "reason": "MaxPreemptions", "message": "…"},
    ]
    job = w.job("a", "p", devices=8, status=_running(conditions=sticky), checkpoint=S3)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    d = decide(job, w.snapshot(), NOW)
    assert _cond(d, "Resumed") == (True, "FromCheckpoint")
    assert _cond(d, "SpotFallback") == (True, "MaxPreemptions")


def test_admitted_to_running_records_when_the_attempt_started() -> None:
    w = World().pool("p")
    st = {**_running(), "phase": "Admitted", "attemptStartTime": None}
    job = w.job("a", "p", devices=8, status=st, checkpoint=S3)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    d = decide(job, w.snapshot(), NOW)
    assert d.phase is JobPhase.RUNNING and d.status.attempt_start_time == _ts(NOW)


def test_lost_work_ends_when_kubernetes_recorded_the_end_not_when_the_operator_noticed() -> None:
    """The operator was down when the attempt ended: its failure record keeps the batch Job's
    end, earlier than the recorded time; the work lost runs from the checkpoint to that end."""
    w = World().pool("p")
    ended = PREEMPTED - dt.timedelta(seconds=20)
    failure = {
        "kind": "Preemption",
        "attempt": 0,
        "reason": "PodFailurePolicy",
        "time": _ts(PREEMPTED),
        "held": {"pool": "p", "devices": 8, "endTime": _ts(ended)},
    }
    job = w.job("a", "p", devices=8, status=_preempted(lastFailure=failure), checkpoint=S3)
    d = decide(job, w.snapshot(), NOW, lookup=_lookup(STEP_1))
    assert failure_of(d).lost_device_seconds == 8 * (ended - STEP_1.time).total_seconds() == 80
