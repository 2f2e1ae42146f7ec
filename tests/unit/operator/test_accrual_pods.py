"""When an attempt is charged (docs/cost.md): from its first pod's ``status.startTime`` to its last
pod's end (``finishedAt``, or when its deletion was asked for), the pods' own timestamps, whatever
the operator saw or missed in between; and how the pod view reads those timestamps."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from accel_api.enums import CapacityType
from accel_operator.accounting import accrual, ledger
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common import attempt_held
from accel_operator.reconcile.common.snapshot import PodView, WorkloadView
from tests.support.reconcile import T0, World

S = dt.timedelta(seconds=1)
PRICE = accrual.Price(3.6, 9.0)  # USD per device-hour: 0.001 USD per device-second


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _job(phase: str, devices: int = 2, **status: Any) -> Any:
    st = {
        "phase": phase,
        "attempt": 0,
        "workload": "a-a0",
        "admittedTime": _ts(T0),
        "plan": {"pool": "spot", "devices": devices, "nodes": 1, "capacityType": "spot"},
        **status,
    }
    return World().pool("spot").job("a", "spot", devices=devices, status=st)


def _pod(index: int = 0, *, devices: int = 2, attempt: int = 0, **kw: Any) -> PodView:
    return PodView("ns", f"a-a{attempt}-{index}", "n0", kw.pop("phase", "Running"), devices, ("ns", "a"), attempt, **kw)


def _seconds(cost: Any) -> float:
    return ledger.totals(cost).device_seconds


def test_nothing_is_charged_before_a_pod_starts_and_then_from_its_start_not_the_admission() -> None:
    pending = _pod(phase="Pending")
    cost = accrual.accrue(_job("Running"), None, accrual.Tick(PRICE, 0.0, T0 + 10 * S, pods=[pending]))
    assert cost.attempts == []
    started = _pod(started=T0 + 4 * S)
    cost = accrual.accrue(_job("Running"), cost, accrual.Tick(PRICE, 0.0, T0 + 10 * S, pods=[started]))
    assert _seconds(cost) == pytest.approx(2 * 6)  # 2 devices from +4 s to +10 s
    assert cost.attempts[0].intervals[0].start == _ts(T0 + 4 * S)


def test_a_finished_attempt_ends_at_its_pods_finish_not_when_anyone_noticed() -> None:
    # The pod ran +3..+20 s; the batch Job completed at +22 s; the operator (down) noticed at +90 s.
    job = _job("Succeeded", completionTime=_ts(T0 + 90 * S))
    wl = WorkloadView("ns", "a-a0", ("ns", "a"), 0, succeeded=1, complete=True, end_time=T0 + 22 * S)
    pod = _pod(phase="Succeeded", started=T0 + 3 * S, finished=T0 + 20 * S)
    cost = accrual.accrue(job, None, accrual.Tick(PRICE, 0.0, T0 + 100 * S, workload=wl, pods=[pod]))
    assert _seconds(cost) == pytest.approx(2 * 17)
    assert cost.attempts[0].end == _ts(T0 + 20 * S)
    # Replayed, or read back by a restarted operator: the same.
    assert _seconds(
        accrual.accrue(job, cost, accrual.Tick(PRICE, 0.0, T0 + 200 * S, workload=wl, pods=[pod]))
    ) == _seconds(cost)


def test_a_gang_is_charged_with_all_its_devices_from_its_first_pod_to_its_last() -> None:
    job = _job("Succeeded", devices=16, completionTime=_ts(T0 + 60 * S))
    pods = [
        _pod(0, devices=8, phase="Succeeded", started=T0 + 2 * S, finished=T0 + 30 * S),
        _pod(1, devices=8, phase="Succeeded", started=T0 + 3 * S, finished=T0 + 31 * S),
    ]
    cost = accrual.accrue(job, None, accrual.Tick(PRICE, 0.0, T0 + 60 * S, pods=pods))
    assert _seconds(cost) == pytest.approx(16 * 29)
    # While one pod still runs, the attempt has not ended.
    assert attempt_held.pod_span([pods[0], _pod(1, devices=8, started=T0 + 3 * S)], 0).end is None
    # A member yet to start may still run: no end either.
    assert attempt_held.pod_span([pods[0], _pod(1, devices=8, phase="Pending")], 0).end is None


def test_a_pod_deleted_while_running_stops_the_charge_at_its_deletion_even_once_it_is_gone() -> None:
    # Seen deleting at +12 s (a spot node's drain): nothing accrues after, though the operator
    # records the failure only at +70 s, when the pod and its batch Job are long gone.
    deleting = _pod(started=T0 + 2 * S, finished=T0 + 12 * S)
    cost = accrual.accrue(_job("Running"), None, accrual.Tick(PRICE, 0.0, T0 + 13 * S, pods=[deleting]))
    assert _seconds(cost) == pytest.approx(2 * 10)
    cost = accrual.accrue(
        _job("Running"), cost, accrual.Tick(PRICE, 0.0, T0 + 40 * S, pods=[])
    )  # gone, not yet noticed
    assert _seconds(cost) == pytest.approx(2 * 10)
    failed = _job(
        "Admitted",
        attempt=1,
        admittedTime=_ts(T0 + 70 * S),
        lastFailure={"kind": "Preemption", "attempt": 0, "reason": "Terminated", "time": _ts(T0 + 70 * S)},
        cost=cost.to_wire(),
    )
    after = accrual.accrue(failed, None, accrual.Tick(PRICE, 0.0, T0 + 71 * S, pods=[]))
    (first,) = [a for a in after.attempts if a.attempt == 0]
    assert first.end == _ts(T0 + 12 * S)
    assert _seconds(after) == pytest.approx(2 * 10)


def test_a_failure_record_keeps_the_pods_times() -> None:
    job = _job("Running")
    pod = _pod(phase="Failed", started=T0 + 5 * S, finished=T0 + 9 * S)
    wl = WorkloadView(
        "ns", "a-a0", ("ns", "a"), 0, failed=1, failed_condition=True, start_time=T0 + S, end_time=T0 + 11 * S
    )
    held = attempt_held.of(job, wl, [pod])
    assert held is not None and (held.start_time, held.end_time) == (_ts(T0 + 5 * S), _ts(T0 + 9 * S))
    held = attempt_held.of(job, wl, [])  # the pods gone: the batch Job's times
    assert held is not None and (held.start_time, held.end_time) == (_ts(T0 + S), _ts(T0 + 11 * S))


def _pod_body(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "a-a0-0",
            "namespace": "ns",
            "labels": {
                "app.kubernetes.io/managed-by": "accel-operator",
                "accel.dev/job": "a",
                "accel.dev/attempt": "0",
            },
            **status.pop("meta", {}),
        },
        "spec": {"nodeName": "n0", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": status,
    }


def test_the_pod_view_reads_the_start_the_finish_and_the_deletion() -> None:
    running = views.pod_view(_pod_body(phase="Running", startTime="2026-11-26T12:00:05Z"))
    assert running is not None and running.started == T0 + 5 * S and running.finished is None
    done = views.pod_view(
        _pod_body(
            phase="Succeeded",
            startTime="2026-11-26T12:00:05Z",
            containerStatuses=[
                {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-26T12:00:30Z"}}}
            ],
        )
    )
    assert done is not None and done.finished == T0 + 30 * S and done.exit_code == 0
    meta = {"deletionTimestamp": "2026-11-26T12:01:00Z", "deletionGracePeriodSeconds": 30}
    deleting = views.pod_view(_pod_body(phase="Running", startTime="2026-11-26T12:00:05Z", meta=meta))
    assert deleting is not None and deleting.finished == T0 + 30 * S  # asked at +30 s, 30 s of grace


# --- the ledger finalizer: an ended attempt's pods stay in view until the ledger holds their times ---


def test_a_stand_in_start_is_taken_back_once_the_pods_are_seen() -> None:
    # No pod in view 40 s after the attempt ended (a replica's watch still listing): its batch
    # Job's start stood in. The pods, kept by the finalizer, then show: their own times win.
    job = _job("Succeeded", completionTime=_ts(T0 + 22 * S))
    wl = WorkloadView("ns", "a-a0", ("ns", "a"), 0, succeeded=1, complete=True, start_time=T0, end_time=T0 + 22 * S)
    stand_in = accrual.accrue(job, None, accrual.Tick(PRICE, 0.0, T0 + 70 * S, workload=wl, pods=[]))
    assert _seconds(stand_in) == pytest.approx(2 * 22)
    pod = _pod(phase="Succeeded", started=T0 + 3 * S, finished=T0 + 20 * S)
    seen = accrual.accrue(job, stand_in, accrual.Tick(PRICE, 0.0, T0 + 71 * S, workload=wl, pods=[pod]))
    assert _seconds(seen) == pytest.approx(2 * 17)
    (entry,) = seen.attempts
    assert (entry.pods_start, entry.pods_end) == (_ts(T0 + 3 * S), _ts(T0 + 20 * S))
    # A replica that still holds the stand-in merges it back in: the marks keep it out.
    assert _seconds(ledger.merge(seen, stand_in)) == pytest.approx(2 * 17)
    assert _seconds(ledger.merge(stand_in, seen)) == pytest.approx(2 * 17)


def test_an_earlier_attempt_closes_at_its_last_pods_end_not_its_batch_jobs_failure() -> None:
    # A gang of two: one pod failed at +8 s (the batch Job failed then), the other was deleted by
    # the Job controller at +9 s. The retry's admission recorded the failure from the batch Job.
    pods = [
        _pod(0, devices=1, attempt=0, phase="Failed", started=T0 + S, finished=T0 + 8 * S, held=True),
        _pod(1, devices=1, attempt=0, phase="Running", started=T0 + 2 * S, finished=T0 + 9 * S, held=True),
    ]
    failed = _job(
        "Admitted",
        attempt=1,
        admittedTime=_ts(T0 + 30 * S),
        lastFailure={
            "kind": "Failure",
            "attempt": 0,
            "reason": "PodFailurePolicy",
            "time": _ts(T0 + 30 * S),
            "held": {
                "pool": "spot",
                "devices": 2,
                "capacityType": "spot",
                "startTime": _ts(T0),
                "endTime": _ts(T0 + 8 * S),
            },
        },
    )
    cost = accrual.accrue(failed, None, accrual.Tick(PRICE, 0.0, T0 + 31 * S, failed_price=PRICE, pods=pods))
    (first,) = [a for a in cost.attempts if a.attempt == 0]
    assert (first.pods_start, first.pods_end, first.end) == (_ts(T0 + S), _ts(T0 + 9 * S), _ts(T0 + 9 * S))
    assert _seconds(cost) == pytest.approx(2 * 8)
    # Both pods may now be released, once the status holds these marks; not before.
    assert accrual.releasable(None, pods, T0 + 31 * S, job_gone=False) == []
    assert accrual.releasable(cost, pods, T0 + 31 * S, job_gone=False) == pods


def test_which_held_pods_may_be_released() -> None:
    now = T0 + 100 * S
    running = _pod(0, started=T0, held=True)
    ended = _pod(1, phase="Succeeded", started=T0, finished=T0 + 50 * S, held=True)
    never = _pod(2, phase="Pending", finished=T0 + 50 * S, held=True)  # deleted before it started
    free = _pod(3, phase="Succeeded", started=T0, finished=T0 + 50 * S)  # no finalizer: nothing to do
    pods = [running, ended, never, free]
    assert accrual.releasable(None, pods, now, job_gone=False) == [never]
    # The job is gone (its deletion closed its ledger): every ended pod goes, a running one stays.
    assert accrual.releasable(None, pods, now, job_gone=True) == [ended, never]
    # An entry without both marks (its start stood in) keeps the pod ...
    cost = accrual.accrue(_job("Running"), None, accrual.Tick(PRICE, 0.0, T0 + 60 * S, pods=[ended]))
    half = cost.model_copy(update={"attempts": [cost.attempts[0].model_copy(update={"pods_end": None})]})
    assert accrual.releasable(half, [ended], now, job_gone=False) == []
    assert accrual.releasable(cost, [ended], now, job_gone=False) == [ended]
    # ... but never for good.
    late = T0 + 50 * S + dt.timedelta(seconds=accrual.RELEASE_AFTER_SECONDS + 1)
    assert accrual.releasable(half, [ended], late, job_gone=False) == [ended]


def test_the_pod_view_reads_the_ledger_finalizer_on_our_pods_only() -> None:
    ours = views.pod_view(
        _pod_body(phase="Running", meta={"finalizers": ["accel.dev/ledger", "batch.kubernetes.io/job-tracking"]})
    )
    assert ours is not None and ours.held
    assert not (views.pod_view(_pod_body(phase="Running")) or ours).held


def test_an_earlier_attempt_no_record_kept_is_charged_from_its_pods() -> None:
    # A gang released for its bind timeout on a view that did not show its late pod: the pod ran
    # +10..+17 s on 4 devices; the status moved to attempt 1 with no failure record of attempt 0.
    late = _pod(0, devices=4, attempt=0, phase="Failed", started=T0 + 10 * S, finished=T0 + 17 * S, held=True)
    late = dataclasses.replace(late, pool="spot")
    job = _job("Admitted", attempt=1, admittedTime=_ts(T0 + 20 * S))
    pools = {"spot": accrual.PoolPrice("spot", CapacityType.SPOT, PRICE)}
    cost = accrual.accrue(job, None, accrual.Tick(PRICE, 0.0, T0 + 21 * S, pods=[late], pool_of=pools.get))
    (entry,) = cost.attempts
    assert (entry.attempt, entry.pool, entry.devices, entry.end) == (0, "spot", 4, _ts(T0 + 17 * S))
    assert _seconds(cost) == pytest.approx(4 * 7)
    assert accrual.releasable(cost, [late], T0 + 21 * S, job_gone=False) == [late]
    # Its pool unknown (gone): nothing is made up.
    assert (
        accrual.accrue(
            job, None, accrual.Tick(PRICE, 0.0, T0 + 21 * S, pods=[late], pool_of=lambda _label: None)
        ).attempts
        == []
    )


def _preempted(**status: Any) -> Any:
    """Attempt 0 (2 devices, pods +1..+60 s, S3 checkpoints) preempted at +60 s; attempt 1 admitted."""
    failure = {
        "kind": "Preemption",
        "attempt": 0,
        "reason": "PodFailurePolicy",
        "time": _ts(T0 + 61 * S),
        "held": {
            "pool": "spot",
            "devices": 2,
            "capacityType": "spot",
            "startTime": _ts(T0),
            "endTime": _ts(T0 + 60 * S),
        },
    }
    failure.update(status.pop("failure", {}))
    st = {"phase": "Admitted", "attempt": 1, "workload": "a-a1", "admittedTime": _ts(T0 + 62 * S)}
    st |= {"plan": {"pool": "spot", "devices": 2, "nodes": 1, "capacityType": "spot"}, "lastFailure": failure}
    checkpoint = {"uri": "s3://b/run", "intervalMinutes": 1}
    return World().pool("spot").job("a", "spot", devices=2, status=st | status, checkpoint=checkpoint)


def test_a_preempted_attempt_closes_with_the_lost_work_its_resume_decided_not_before() -> None:
    # An S3 checkpoint is found by the resume's lookup, after the retry is admitted: until that
    # decision is recorded, closing attempt 0 would count all of its 59 s as lost, for good.
    pods = [_pod(0, attempt=0, phase="Failed", started=T0 + S, finished=T0 + 60 * S, held=True)]
    early = accrual.accrue(_preempted(), None, accrual.Tick(PRICE, 0.0, T0 + 62 * S, failed_price=PRICE, pods=pods))
    (first,) = [a for a in early.attempts if a.attempt == 0]
    assert first.end is None and _seconds(early) == pytest.approx(2 * 59)
    resumed = _preempted(
        failure={"lostDeviceSeconds": 30.0},
        resume={"attempt": 1, "resumeFrom": "s3://b/run/step-3", "source": "s3"},
    )
    cost = accrual.accrue(resumed, early, accrual.Tick(PRICE, 0.0, T0 + 64 * S, failed_price=PRICE, pods=pods))
    (first,) = [a for a in cost.attempts if a.attempt == 0]
    assert first.end == _ts(T0 + 60 * S) and first.lost_device_seconds == pytest.approx(30.0)
    assert ledger.totals(cost).lost_device_seconds == pytest.approx(30.0)
