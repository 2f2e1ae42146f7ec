"""reconcile/nodes/idle_stop.py: a policy stops (or warns about) a chronically idle job, at a checkpoint;
a Stopped job waits for a user's accel.dev/resume. Tables over small worlds."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from accel_api import vocabulary as v
from accel_api.enums import IdleAction, JobPhase
from accel_api.policy import AcceleratorPolicy, IdleRules
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import CLEAR
from accel_operator.reconcile.common.snapshot import JobView
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import health, idle_stop
from tests.support import decisions
from tests.support.decisions import health_of
from tests.support.reconcile import T0, World

RULES = decisions.RULES
CHECKPOINT = {"uri": "s3://ckpt/a", "intervalMinutes": 10}
IDLE_2H = (T0 - dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _world(idle: dict[str, Any] | None = None) -> World:
    w = World().pool("p", nodes=2)
    if idle is not None:
        w.policy("idle", idle=idle)
    return w


def _job(w: World, *, checkpoint: bool = True, health_status: dict[str, Any] | None = None, **status: Any) -> JobView:
    st = {
        "phase": "Running",
        "attempt": 0,
        "workload": "a-a0",
        "admittedTime": decisions.ago(4 * 3600),
        "startTime": decisions.ago(4 * 3600),
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "costUsd": 100.0},
        "health": {"idleSince": IDLE_2H, **(health_status or {})},
        **status,
    }
    spec: dict[str, Any] = {"checkpoint": CHECKPOINT} if checkpoint else {}
    job = w.job("a", "p", devices=8, status=st, **spec)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    # Every device quiet and empty: idle, not hung (a hung collective keeps its memory).
    w.report("p-0", util=0.0, memory=0.0, pods=dict.fromkeys(range(8), ("a-a0-0",)))
    return job


# --- the policy's rule ------------------------------------------------------------------------------


def _pol(name: str, **idle: Any) -> AcceleratorPolicy:
    return AcceleratorPolicy.model_validate({"metadata": {"name": name}, "spec": {"idle": idle}})


@pytest.mark.parametrize(
    ("policies", "team", "expected"),
    [
        ([], "ml", None),
        ([_pol("a", stopAfterMinutes=60)], "ml", ("a", 3600.0, IdleAction.WARN)),
        # A stop beats a warning, whatever the windows.
        (
            [_pol("a", stopAfterMinutes=30), _pol("b", stopAfterMinutes=90, action="stop")],
            "ml",
            ("b", 5400.0, IdleAction.STOP),
        ),
        # Then the shorter window.
        (
            [_pol("a", stopAfterMinutes=90, action="stop"), _pol("b", stopAfterMinutes=60, action="stop")],
            "ml",
            ("b", 3600.0, IdleAction.STOP),
        ),
        # Teams: the rule applies to the teams it names only.
        ([_pol("a", stopAfterMinutes=60, action="stop", teams=["vision"])], "ml", None),
        ([_pol("a", stopAfterMinutes=60, action="stop", teams=["vision", "ml"])], "ml", ("a", 3600.0, IdleAction.STOP)),
    ],
)
def test_the_strictest_rule_applies(
    policies: list[AcceleratorPolicy], team: str, expected: tuple[str, float, IdleAction] | None
) -> None:
    rule = idle_stop.rule_for(team, policies)
    assert (None if rule is None else (rule.policy, rule.after_seconds, rule.action)) == expected


@pytest.mark.parametrize(
    "idle",
    [{"stopAfterMinutes": 4}, {"stopAfterMinutes": 43_201}, {"action": "kill"}, {"teams": ["x" * 64]}],
)
def test_the_idle_rule_is_bounded(idle: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        IdleRules.model_validate(idle)


# --- a running, idle job ----------------------------------------------------------------------------


def test_without_a_policy_an_idle_job_is_only_flagged() -> None:
    w = _world()
    d, moved = decisions.run(w, _job(w))
    assert moved is None and d.phase is JobPhase.RUNNING
    assert decisions.cond(d, "Idle") == (True, "IdleReservation") and decisions.cond(d, "IdleStop") is None
    assert not decisions.requests(d)


def test_a_warn_policy_warns_once() -> None:
    w = _world({"stopAfterMinutes": 60, "action": "warn"})
    d, moved = decisions.run(w, _job(w))
    assert moved is None and d.phase is JobPhase.RUNNING
    assert (
        decisions.cond(d, "IdleStop") == (False, "WouldStop")
        and "IdleLimit" in decisions.events(d)
        and not decisions.requests(d)
    )
    w2 = _world({"stopAfterMinutes": 60, "action": "warn"})
    warned = [{"type": "IdleStop", "status": "False", "reason": "WouldStop"}]
    d2, _ = decisions.run(w2, _job(w2, conditions=warned))
    assert decisions.cond(d2, "IdleStop") == (False, "WouldStop") and "IdleLimit" not in decisions.events(d2)


def test_within_the_window_nothing_happens() -> None:
    w = _world({"stopAfterMinutes": 180, "action": "stop"})
    d, moved = decisions.run(w, _job(w, health_status={"stopRequestedTime": decisions.ago(30)}))
    assert moved is None and decisions.cond(d, "IdleStop") is None and not decisions.requests(d)
    assert health_of(d).stop_requested_time is None


def test_a_stop_policy_asks_for_a_checkpoint_first() -> None:
    w = _world({"stopAfterMinutes": 60, "action": "stop"})
    d, moved = decisions.run(w, _job(w))
    assert moved is None and d.phase is JobPhase.RUNNING
    assert decisions.cond(d, "IdleStop") == (False, "CheckpointRequested")
    assert decisions.requests(d) == [act.RequestCheckpoint((("ns", "a-a0-0"),), decisions.ago(0), "idle-stop")]
    assert "IdleStopRequested" in decisions.events(d)
    assert health_of(d).stop_requested_time == decisions.ago(0)
    message = next(a.message for a in d.actions if isinstance(a, act.RecordEvent) and a.reason == "IdleStopRequested")
    assert "policy idle" in message and "120 min" in message


@pytest.mark.parametrize(
    ("requested_ago", "checkpoint_ago", "stops"),
    [
        (30, None, False),  # within the grace, no checkpoint yet: wait
        (30, 60, False),  # the latest checkpoint predates the request: wait
        (30, 10, True),  # checkpointed after the request: stop now
        (RULES.checkpoint_grace + 1, None, True),  # the grace is over: stop anyway
    ],
)
def test_the_stop_waits_for_the_checkpoint_or_the_grace(
    requested_ago: float, checkpoint_ago: float | None, stops: bool
) -> None:
    w = _world({"stopAfterMinutes": 60, "action": "stop"})
    extra: dict[str, Any] = {}
    if checkpoint_ago is not None:
        extra["lastCheckpoint"] = {"uri": "s3://ckpt/a/step-9", "time": decisions.ago(checkpoint_ago)}
    job = replace(
        _job(w, health_status={"stopRequestedTime": decisions.ago(requested_ago)}, **extra), resume_request="r1"
    )
    d, moved = decisions.run(w, job)
    if not stops:
        assert moved is None and d.phase is JobPhase.RUNNING and not decisions.requests(d)
        assert decisions.cond(d, "IdleStop") == (False, "CheckpointRequested")
        return
    assert moved is health.MoveReason.IDLE_STOP and d.phase is JobPhase.STOPPED
    assert decisions.cond(d, "Admitted") == (False, "StoppedIdle") and decisions.cond(d, "IdleStop") == (
        True,
        "Stopped",
    )
    assert d.status.attempt == 1 and d.status.workload is CLEAR
    assert health_of(d).stopped_time == decisions.ago(0) and health_of(d).resume_seen == "r1"
    assert health_of(d).stop_requested_time is None and health_of(d).idle_since is None
    assert [a for a in d.actions if isinstance(a, act.DeleteWorkload)] == [act.DeleteWorkload("a-a0", "stopped: idle")]
    assert decisions.events(d) == ["StoppedIdle"] and v.ANNOTATION_RESUME in d.reason


@pytest.mark.parametrize(
    ("step_then", "step_later", "later_at", "stops"),
    [
        (9, 9, T0, False),  # step 9 written 0.3 s before the request, in its second: not the asked-for one
        (9, 10, T0, True),  # a later step in the same second is
        ("absent", 3, T0, True),  # no checkpoint at the request: the first one is new, in the same second too
        (None, None, T0, False),  # no steps reported: times decide, and the same second is not later
        (None, None, T0 + dt.timedelta(seconds=1), True),
    ],
)
def test_the_stop_compares_checkpoint_steps_not_whole_second_times(
    step_then: int | str | None, step_later: int | None, later_at: dt.datetime, stops: bool
) -> None:
    def ckpt(step: int | str | None, at: dt.datetime) -> dict[str, Any]:
        out: dict[str, Any] = {"uri": "s3://ckpt/a/step-9", "time": decisions.stamp(at)}
        return out if step is None else {**out, "step": step}

    policy = {"stopAfterMinutes": 60, "action": "stop"}
    w = _world(policy)
    on_record: dict[str, Any] = {} if step_then == "absent" else {"lastCheckpoint": ckpt(step_then, T0)}
    asked, _ = decisions.run(w, _job(w, **on_record), T0 + dt.timedelta(milliseconds=700))
    assert decisions.cond(asked, "IdleStop") == (False, "CheckpointRequested")
    assert health_of(asked).stop_checkpoint_step == (None if step_then == "absent" else step_then)
    w = _world(policy)
    job = _job(w, health_status=asked.status.to_wire()["health"], lastCheckpoint=ckpt(step_later, later_at))
    d, moved = decisions.run(w, job, T0 + dt.timedelta(seconds=2))
    assert (moved is health.MoveReason.IDLE_STOP) is stops
    assert d.phase is (JobPhase.STOPPED if stops else JobPhase.RUNNING)


def test_a_job_without_checkpoint_is_not_stopped_unless_the_policy_says_so() -> None:
    w = _world({"stopAfterMinutes": 60, "action": "stop"})
    d, moved = decisions.run(w, _job(w, checkpoint=False))
    assert moved is None and d.phase is JobPhase.RUNNING and not decisions.requests(d)
    assert decisions.cond(d, "IdleStop") == (False, "NoCheckpoint") and "IdleLimit" in decisions.events(d)
    w2 = _world({"stopAfterMinutes": 60, "action": "stop", "stopWithoutCheckpoint": True})
    d2, moved2 = decisions.run(w2, _job(w2, checkpoint=False))
    assert moved2 is health.MoveReason.IDLE_STOP and d2.phase is JobPhase.STOPPED and not decisions.requests(d2)
    assert "its work is lost" in d2.reason


def test_devices_busy_again_withdraw_the_request() -> None:
    w = _world({"stopAfterMinutes": 60, "action": "stop"})
    job = _job(w, health_status={"stopRequestedTime": decisions.ago(30)})
    w.report("p-0", util=80.0, memory=0.5, pods=dict.fromkeys(range(8), ("a-a0-0",)))
    d, moved = decisions.run(w, job)
    assert moved is None and d.phase is JobPhase.RUNNING
    assert health_of(d).stop_requested_time is None and health_of(d).idle_since is None


def test_a_stale_report_stops_nothing() -> None:
    w = _world({"stopAfterMinutes": 60, "action": "stop"})
    job = _job(w)
    w.report("p-0", util=0.0, memory=0.0, pods=dict.fromkeys(range(8), ("a-a0-0",)), age=RULES.stale_after + 1)
    d, moved = decisions.run(w, job)
    assert moved is None and not decisions.requests(d) and decisions.cond(d, "NodeReports") == (False, "ReportStale")


# --- a Stopped job ----------------------------------------------------------------------------------


def _stopped(w: World, resume: str | None, seen: str | None = "r1") -> JobView:
    st = {
        "phase": "Stopped",
        "attempt": 1,
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1},
        "health": {"stoppedTime": decisions.ago(600), "resumeSeen": seen},
        "conditions": [{"type": "Admitted", "status": "False", "reason": "StoppedIdle", "message": "stopped"}],
    }
    job = replace(w.job("a", "p", devices=8, status=st, checkpoint=CHECKPOINT), resume_request=resume)
    w.jobs[("ns", "a")] = [job]
    return job


@pytest.mark.parametrize(("resume", "seen"), [(None, None), ("r1", "r1"), (None, "r1")])
def test_a_stopped_job_stays_stopped_without_a_new_resume_request(resume: str | None, seen: str | None) -> None:
    w = _world()
    job = _stopped(w, resume, seen)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.STOPPED and d.actions == () and d.status.empty
    assert decisions.cond(d, "Admitted") == (False, "StoppedIdle")


@pytest.mark.parametrize(("resume", "seen"), [("r2", "r1"), ("r1", None)])
def test_a_new_resume_request_plans_the_job_again_from_its_checkpoint(resume: str, seen: str | None) -> None:
    w = _world()
    job = _stopped(w, resume, seen)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.PENDING
    assert decisions.events(d)[0] == "Resumed" and any(isinstance(a, act.ResolveCheckpoint) for a in d.actions)
    assert health_of(d).stopped_time is None


def test_the_resume_annotation_is_kept_as_a_digest() -> None:
    body = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u", "annotations": {v.ANNOTATION_RESUME: "x" * 5000}},
        "spec": {},
    }
    view = views.job_view(body)
    assert view.resume_request is not None and len(view.resume_request) == 16
    assert views.job_view({**body, "metadata": {"name": "a", "namespace": "ns"}}).resume_request is None
