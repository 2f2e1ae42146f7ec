"""Charging what Kubernetes recorded (reconcile.accrual): an attempt the ledger never saw running
is charged from its failure record (``lastFailure.held``), idempotently with the ledger's
watermark; an attempt ends when Kubernetes says it ended when that is earlier than when the
operator noticed (it was down)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from accel_api.job import AcceleratorJobStatus
from accel_operator.accounting import accrual, ledger
from accel_operator.reconcile.common.snapshot import WorkloadView
from tests.support.reconcile import T0, World

H = dt.timedelta(hours=1)
PRICE = accrual.Price(3.6, 9.0)  # USD per device-hour: spot, on demand
ODP = accrual.Price(9.0, 9.0)


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _held(**kw: Any) -> dict[str, Any]:
    return {"pool": "spot", "devices": 2, "capacityType": "spot", "admittedTime": _ts(T0), **kw}


def _job(status: dict[str, Any]) -> Any:
    return World().pool("spot").job("a", "spot", devices=2, status=status)


def _resumed(failure: dict[str, Any]) -> dict[str, Any]:
    """Attempt 1 admitted at T0+2h after attempt 0 ended as ``failure`` says."""
    return {
        "phase": "Running",
        "attempt": 1,
        "admittedTime": _ts(T0 + 2 * H),
        "plan": {"pool": "od", "devices": 4, "nodes": 1, "capacityType": "on-demand"},
        "lastFailure": {"kind": "Preemption", "attempt": 0, "reason": "Terminated", **failure},
    }


def test_an_attempt_never_seen_running_is_charged_from_its_failure_record() -> None:
    # Attempt 0 ran from T0 to T0+1h (Kubernetes' record) while the operator was down; it noticed
    # at T0+1.5h, and attempt 1 (another pool) was admitted at T0+2h.
    job = _job(_resumed({"time": _ts(T0 + 1.5 * H), "held": _held(endTime=_ts(T0 + H))}))
    cost = accrual.accrue(job, None, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=PRICE))
    first, second = cost.attempts
    assert (second.attempt, second.pool, second.devices) == (1, "od", 4)
    assert (first.attempt, first.pool, first.devices, first.end, first.preempted) == (
        0,
        "spot",
        2,
        "2026-11-26T13:00:00Z",
        True,
    )
    assert ledger.totals(cost).spent_usd == pytest.approx(2 * 3.6 + 4 * 9.0)
    assert first.lost_device_seconds == pytest.approx(2 * 3600)  # no checkpoint: all of it is done again
    # Replayed (the same status, what this process wrote as known): nothing more.
    again = accrual.accrue(job, cost, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=PRICE))
    assert ledger.totals(again) == ledger.totals(cost)
    # A restarted process reads the watermark from status: nothing more either.
    shown = job.status.model_copy(update={"cost": cost})
    restarted = accrual.accrue(_with(job, shown), None, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=PRICE))
    assert ledger.totals(restarted).spent_usd == pytest.approx(ledger.totals(cost).spent_usd)


def _with(job: Any, status: AcceleratorJobStatus) -> Any:
    from dataclasses import replace

    return replace(job, status=status)


def test_without_a_record_or_a_price_nothing_is_invented() -> None:
    no_record = _job(_resumed({"time": _ts(T0 + H)}))  # a status from before the record existed
    cost = accrual.accrue(no_record, None, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=PRICE))
    assert [a.attempt for a in cost.attempts] == [1]
    pool_gone = _job(_resumed({"time": _ts(T0 + H), "held": _held()}))
    cost = accrual.accrue(pool_gone, None, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=None))
    assert [a.attempt for a in cost.attempts] == [1]


def test_without_kubernetes_end_the_failure_time_stands() -> None:
    job = _job(_resumed({"time": _ts(T0 + H), "held": _held(admittedTime=None, startTime=_ts(T0 + H / 2))}))
    cost = accrual.accrue(job, None, accrual.Tick(ODP, 0.0, T0 + 2 * H, failed_price=PRICE))
    (first,) = [a for a in cost.attempts if a.attempt == 0]
    assert first.intervals[0].start == "2026-11-26T12:30:00Z"  # no admission recorded: the batch Job's start
    assert first.end == "2026-11-26T13:00:00Z"


def test_a_seen_attempt_ends_when_kubernetes_recorded_it_not_when_the_operator_came_back() -> None:
    running = {
        "phase": "Running",
        "attempt": 0,
        "admittedTime": _ts(T0),
        "plan": {"pool": "spot", "devices": 2, "nodes": 1, "capacityType": "spot"},
    }
    seen = accrual.accrue(_job(running), None, accrual.Tick(PRICE, 0.0, T0 + H / 2))  # a tick while it ran
    assert ledger.totals(seen).spent_usd == pytest.approx(3.6)
    # Down from T0+0.5h; the attempt ended at T0+1h; the operator noticed at T0+3h.
    job = _job({**_resumed({"time": _ts(T0 + 3 * H), "held": _held(endTime=_ts(T0 + H))}), "cost": seen.to_wire()})
    cost = accrual.accrue(job, None, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=PRICE))
    first = cost.attempts[0]
    assert first.end == "2026-11-26T13:00:00Z"
    assert ledger.window(cost, T0, T0 + 2 * H).spent_usd == pytest.approx(2 * 3.6)  # attempt 1 starts at +2h


def test_a_finished_job_is_charged_to_its_batch_jobs_completion() -> None:
    done = {
        "phase": "Succeeded",
        "attempt": 0,
        "workload": "a-a0",
        "admittedTime": _ts(T0),
        "completionTime": _ts(T0 + 5 * H),  # the operator came back then
        "plan": {"pool": "spot", "devices": 2, "nodes": 1, "capacityType": "spot"},
    }
    job = _job(done)
    wl = WorkloadView("ns", "a-a0", ("ns", "a"), 0, succeeded=1, complete=True, end_time=T0 + 2 * H)
    cost = accrual.accrue(job, None, accrual.Tick(PRICE, 0.0, T0 + 6 * H, workload=wl))
    assert cost.attempts[0].end == "2026-11-26T14:00:00Z"
    assert ledger.totals(cost).spent_usd == pytest.approx(2 * 2 * 3.6)
    # Another attempt's workload says nothing about this one.
    other = WorkloadView("ns", "a-a1", ("ns", "a"), 1, end_time=T0 + H)
    assert ledger.totals(accrual.accrue(job, None, accrual.Tick(PRICE, 0.0, T0 + 6 * H, workload=other))).spent_usd == (
        pytest.approx(5 * 2 * 3.6)
    )


def test_two_attempts_that_ended_between_two_ticks_are_both_charged() -> None:
    # Attempt 0 (spot, 2 devices) ran T0..T0+1h and attempt 1 (on demand, 4 devices) T0+1h..T0+2h,
    # both between two ticks; attempt 2 was admitted at T0+2h. The status keeps attempt 0's
    # failure in earlierFailures and attempt 1's in lastFailure.
    status = {
        "phase": "Running",
        "attempt": 2,
        "admittedTime": _ts(T0 + 2 * H),
        "plan": {"pool": "od", "devices": 4, "nodes": 1, "capacityType": "on-demand"},
        "earlierFailures": [
            {"kind": "Preemption", "attempt": 0, "reason": "Terminated", "time": _ts(T0 + H), "held": _held()}
        ],
        "lastFailure": {
            "kind": "Failure",
            "attempt": 1,
            "reason": "Error",
            "time": _ts(T0 + 2 * H),
            "held": {"pool": "od", "devices": 4, "capacityType": "on-demand", "admittedTime": _ts(T0 + H)},
        },
    }
    job = _job(status)
    prices = {"spot": PRICE}
    cost = accrual.accrue(job, None, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=ODP, held_prices=prices))
    assert [a.attempt for a in cost.attempts] == [0, 1, 2]
    zero, one, _ = cost.attempts
    assert (zero.pool, zero.end, zero.preempted) == ("spot", "2026-11-26T13:00:00Z", True)
    assert (one.pool, one.end, one.preempted) == ("od", "2026-11-26T14:00:00Z", False)
    assert ledger.totals(cost).spent_usd == pytest.approx(2 * 3.6 + 4 * 9.0 + 4 * 9.0)
    # Replayed: nothing more.
    again = accrual.accrue(job, cost, accrual.Tick(ODP, 0.0, T0 + 3 * H, failed_price=ODP, held_prices=prices))
    assert ledger.totals(again).spent_usd == pytest.approx(ledger.totals(cost).spent_usd)


def test_a_new_failure_keeps_the_previous_one_in_earlier_failures() -> None:
    from accel_operator.reconcile.common import attempt_held

    st = AcceleratorJobStatus.model_validate(
        {
            "attempt": 10,
            "lastFailure": {"kind": "Preemption", "attempt": 9, "reason": "Terminated", "message": "x" * 500},
            "earlierFailures": [{"kind": "Failure", "attempt": i, "reason": "Error"} for i in range(1, 9)],
        }
    )
    kept = attempt_held.earlier(st)
    assert [f.attempt for f in kept] == list(range(2, 10)) and kept[-1].message is None
    again = st.model_copy(update={"earlier_failures": list(kept)})
    assert attempt_held.earlier(again) == kept  # the same failure is not added twice
