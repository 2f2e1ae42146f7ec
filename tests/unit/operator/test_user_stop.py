"""reconcile/job/user_stop.py: a user's accel.dev/stop (``kubectl accel stop``) stops a job, at a
checkpoint when it holds devices and has one; a new accel.dev/resume starts it again. Tables over
small worlds, through ``decide`` and the node reports' amendment as the scheduler runs them."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import CLEAR
from accel_operator.reconcile.common.snapshot import JobView
from accel_operator.reconcile.job.decide import decide
from tests.support import decisions
from tests.support.decisions import health_of
from tests.support.reconcile import T0, World

RULES = decisions.RULES
CHECKPOINT = {"uri": "s3://ckpt/a", "intervalMinutes": 10}


def _running(
    w: World, *, checkpoint: bool = True, stop: str | None = "s1", health: dict[str, Any] | None = None, **status: Any
) -> JobView:
    """Job ``a`` running on p-0 with busy devices (nothing idle: only the user's stop acts)."""
    st = {
        "phase": "Running",
        "attempt": 0,
        "workload": "a-a0",
        "admittedTime": decisions.ago(3600),
        "startTime": decisions.ago(3600),
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "costUsd": 100.0},
        **({"health": health} if health else {}),
        **status,
    }
    spec: dict[str, Any] = {"checkpoint": CHECKPOINT} if checkpoint else {}
    job = w.job("a", "p", devices=8, status=st, **spec)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    w.report("p-0", util=80.0, memory=0.5, pods=dict.fromkeys(range(8), ("a-a0-0",)))
    job = replace(job, stop_request=stop, resume_request="r1")
    w.jobs[("ns", "a")] = [job]
    return job


def _world() -> World:
    return World().pool("p", nodes=2)


def test_a_running_job_with_a_checkpoint_is_asked_to_save_first() -> None:
    w = _world()
    d, moved = decisions.run(w, _running(w))
    assert moved is None and d.phase is JobPhase.RUNNING
    assert decisions.cond(d, "UserStop") == (False, "CheckpointRequested")
    assert decisions.requests(d) == [act.RequestCheckpoint((("ns", "a-a0-0"),), decisions.ago(0), "user-stop")]
    assert "StopRequested" in decisions.events(d)
    assert health_of(d).stop_requested_time == decisions.ago(0)
    assert not [a for a in d.actions if isinstance(a, act.DeleteWorkload)]


def test_while_it_waits_busy_devices_do_not_withdraw_the_request() -> None:
    """The idle-stop rule withdraws its own request when the devices are busy again; a user's
    stop is not about idleness and must hold (else it would ask again on every pass)."""
    w = _world()
    d, _ = decisions.run(w, _running(w, health={"stopRequestedTime": decisions.ago(30)}))
    assert d.phase is JobPhase.RUNNING and not decisions.requests(d)
    assert decisions.cond(d, "UserStop") == (False, "CheckpointRequested")
    stored = d.status.health if d.status.health is not None else None
    assert stored is None or stored.stop_requested_time == decisions.ago(30)


def _stopped_by(d: Any, reason_in: str) -> None:
    assert d.phase is JobPhase.STOPPED
    assert decisions.cond(d, "Admitted") == (False, "StoppedByUser")
    assert decisions.cond(d, "UserStop") == (True, "Stopped")
    assert d.status.attempt == 1 and d.status.workload is CLEAR
    assert [a for a in d.actions if isinstance(a, act.DeleteWorkload)] == [
        act.DeleteWorkload("a-a0", "stopped by a user")
    ]
    h = health_of(d)
    assert h.stop_seen == "s1" and h.resume_seen == "r1" and h.stopped_time == decisions.ago(0)
    assert h.stop_requested_time is None
    assert reason_in in d.reason and v.ANNOTATION_RESUME in d.reason


def test_it_stops_once_a_checkpoint_newer_than_the_request_is_reported() -> None:
    w = _world()
    job = _running(
        w,
        health={"stopRequestedTime": decisions.ago(30)},
        lastCheckpoint={"uri": "s3://ckpt/a/step-9", "time": decisions.ago(10)},
    )
    d, _ = decisions.run(w, job)
    _stopped_by(d, "checkpoint written")


def test_it_stops_after_the_grace_without_a_checkpoint() -> None:
    w = _world()
    d, _ = decisions.run(w, _running(w, health={"stopRequestedTime": decisions.ago(RULES.checkpoint_grace + 1)}))
    _stopped_by(d, "no checkpoint within")


def test_a_job_without_a_checkpoint_stops_at_once_and_says_what_is_lost() -> None:
    w = _world()
    d, _ = decisions.run(w, _running(w, checkpoint=False))
    _stopped_by(d, "the work of this attempt is lost")
    assert not decisions.requests(d)


def test_a_stop_value_already_seen_stops_nothing() -> None:
    w = _world()
    d, _ = decisions.run(w, _running(w, health={"stopSeen": "s1"}))
    assert d.phase is JobPhase.RUNNING and decisions.cond(d, "UserStop") is None and not decisions.requests(d)


def test_a_queued_job_is_stopped_at_once_with_nothing_to_delete() -> None:
    w = World().pool("p", nodes=0)
    job = replace(w.job("a", "p", devices=8), stop_request="s1")
    w.jobs[("ns", "a")] = [job]
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.STOPPED and decisions.cond(d, "UserStop") == (True, "Stopped")
    assert not [a for a in d.actions if isinstance(a, act.DeleteWorkload)] and d.status.attempt is None
    assert health_of(d).stop_seen == "s1"


def test_a_job_that_finishes_while_its_checkpoint_is_awaited_ends_as_it_would() -> None:
    w = _world()
    job = _running(w, health={"stopRequestedTime": decisions.ago(30)})
    w.workload("a", 0, succeeded=1, complete=True, end_time=T0 - dt.timedelta(seconds=5))
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.SUCCEEDED


def test_resumed_after_a_user_stop_it_runs_and_the_old_stop_value_does_not_stop_it_again() -> None:
    w = _world()
    st = {
        "phase": "Stopped",
        "attempt": 1,
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1},
        "health": {"stoppedTime": decisions.ago(600), "resumeSeen": "r1", "stopSeen": "s1"},
        "conditions": [{"type": "Admitted", "status": "False", "reason": "StoppedByUser", "message": "stopped"}],
    }
    job = replace(w.job("a", "p", devices=8, status=st, checkpoint=CHECKPOINT), resume_request="r2", stop_request="s1")
    w.jobs[("ns", "a")] = [job]
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.PENDING and decisions.events(d)[0] == "Resumed"
    assert not job.stop_requested


def test_the_stop_annotation_is_kept_as_a_digest() -> None:
    body = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u", "annotations": {v.ANNOTATION_STOP: "x" * 5000}},
        "spec": {},
    }
    view = views.job_view(body)
    assert view.stop_request is not None and len(view.stop_request) == 16
    assert views.job_view({**body, "metadata": {"name": "a", "namespace": "ns"}}).stop_request is None
