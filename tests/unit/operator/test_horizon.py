"""A job of absurd size never stops the scheduler (tenant-proofing, finding 1): the planner's
horizon makes it unschedulable with a sentence that says why, time arithmetic on an estimate is
clamped, a job whose decision raises is isolated to itself, and huge figures in sentences are
written in engineering notation."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from accel_api import bounds
from accel_api.durations import later
from accel_api.enums import JobPhase
from accel_operator.engine import schedule
from accel_operator.planning import explain
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.job import decide as decide_mod
from tests.support.reconcile import T0, World

# A small model, one token a step, a quadrillion tokens: thousands of years on one device.
FOREVER = {"mode": "training", "tokens": 10**15, "microBatch": 1, "seqLen": 1}


def _admitted(p: schedule.Pass) -> list[str]:
    return [job.name for job, d in p.decisions if d.phase is JobPhase.ADMITTED]


def test_a_job_planned_for_millennia_is_unschedulable_and_the_queue_behind_it_is_admitted() -> None:
    w = World().pool("p", nodes=1)
    w.job("forever", "p", devices=1, priority=1000, workload=FOREVER)
    w.job("normal", "p", devices=8)
    p = w.schedule_pass(T0, [("ns", "forever"), ("ns", "normal")])
    assert p.failed == ()
    assert _admitted(p) == ["normal"]
    [d] = [d for job, d in p.decisions if job.name == "forever"]
    assert d.phase is JobPhase.UNSCHEDULABLE
    assert "beyond the planning horizon of 365 days" in d.reason, d.reason
    assert "workload.tokens" in d.reason
    # No run of digits nobody reads: the duration is in engineering notation.
    assert "e" in d.reason.split("takes ")[1].split("h,")[0], d.reason


def test_one_job_whose_decision_raises_is_isolated_and_the_pass_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World().pool("p", nodes=2)
    w.job("bad", "p", devices=8, priority=10)
    w.job("good", "p", devices=8)
    real = decide_mod.decide

    def decide(job: Any, *args: Any, **kwargs: Any) -> Any:
        if job.name == "bad":
            raise OverflowError("date value out of range")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(schedule, "decide", decide)
    p = w.schedule_pass(T0, [("ns", "bad"), ("ns", "good")])
    assert _admitted(p) == ["good"]
    assert p.failed == (((("ns", "bad")), "OverflowError: date value out of range"),)
    [d] = [d for job, d in p.decisions if job.name == "bad"]
    cond = next(c for c in d.conditions if c.type == "DecisionFailed")
    assert cond.ok and "OverflowError: date value out of range" in cond.message
    assert [a.reason for a in d.actions if isinstance(a, act.RecordEvent)] == ["DecisionFailed"]  # an event, once
    assert len(d.actions) == 1
    assert d.status.empty  # nothing else of the job is touched


def test_a_failed_decision_posts_its_event_once() -> None:
    w = World().pool("p", nodes=1)
    job = w.job(
        "bad",
        "p",
        status={
            "phase": "Pending",
            "conditions": [{"type": "DecisionFailed", "status": "True", "reason": "DecisionFailed"}],
        },
    )
    d = decide_mod.failed(job, ValueError("x" * 5000))
    assert d.actions == ()
    assert d.phase is JobPhase.PENDING
    assert len(next(c for c in d.conditions if c.type == "DecisionFailed").message) < 500


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (60.0, T0 + dt.timedelta(seconds=60)),
        (-5.0, T0),
        (1e15, T0 + dt.timedelta(seconds=bounds.TIMEDELTA_SECONDS_MAX)),
        (float("inf"), T0 + dt.timedelta(seconds=bounds.TIMEDELTA_SECONDS_MAX)),
        (float("nan"), T0 + dt.timedelta(seconds=bounds.TIMEDELTA_SECONDS_MAX)),
    ],
)
def test_later_clamps_an_estimate(seconds: float, expected: dt.datetime) -> None:
    assert later(T0, seconds) == expected


def test_a_stored_plan_of_1e15_seconds_does_not_overflow_the_cache() -> None:
    w = World().pool("p", nodes=1)
    w.job(
        "held",
        "p",
        devices=8,
        status={
            "phase": "Running",
            "attempt": 0,
            "workload": "held-a0",
            "admittedTime": "2026-01-01T00:00:00Z",
            "startTime": "2026-01-01T00:00:00Z",
            "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "durationSeconds": 1e15},
        },
    )
    w.job("next", "p", devices=8)
    p = w.schedule_pass(T0, [("ns", "held"), ("ns", "next")])
    assert p.failed == ()


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (5.0, "5"),
        (999_999.0, "999,999"),
        (1e6, "1.00e6"),
        (123_456_789.0, "123e6"),
        (999.96e6, "1.00e9"),
        (2_285_214_182_894_563_328.0, "2.29e18"),
        (5_189_894_129_030_168.0, "5.19e15"),
    ],
)
def test_engineering_notation(x: float, text: str) -> None:
    assert explain.eng(x) == text


def test_money_and_duration_in_sentences_never_print_a_run_of_digits() -> None:
    assert explain.money(2_285_214_182_894_563_328.0) == "$2.29e18"
    assert explain.duration(5_189_894_129_030_168.0 * 3600) == "5.19e15h"
    assert explain.money(1234.5) == "$1,234"
