"""The accountant's shortcut for a running job (``accrual.step``: its open interval extended
while nothing but the time moved) against the full recompute (``accrual.accrue``) that stays the
truth: over random pod starts and ends, price and idle changes, ledger writes the watch shows or
not, restarts of the accountant (no memo, nothing known) and the job's end, the two give the same
ledger, byte for byte, at every step — and so the same writes, which are decided from the
ledgers alone."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.durations import stamp_exact
from accel_api.enums import BudgetPeriod, JobPhase
from accel_api.job import CostStatus, OverBudget
from accel_operator.accounting import accrual
from accel_operator.reconcile.common.snapshot import JobView, PodView
from tests.support.reconcile import T0, World

HOUR = dt.timedelta(hours=1)
OPS = st.lists(
    st.one_of(
        # Time moving most often: the shortcut's case, with the rest between.
        *[st.tuples(st.just("tick"), st.integers(0, 7200))] * 4,
        st.tuples(st.just("start"), st.integers(0, 2)),
        st.tuples(st.just("start"), st.integers(0, 2)),
        st.tuples(st.just("end"), st.integers(0, 2)),
        st.tuples(st.just("price"), st.sampled_from([3.6, 2.0, 3.6000001])),
        st.tuples(st.just("idle"), st.sampled_from([0.0, 0.5, 1.0])),
        # The step's ledger written (with a budget crossed, as the accountant sets it after the
        # accrual, or not); shown by the watch at once or not.
        st.tuples(st.just("write"), st.tuples(st.booleans(), st.booleans())),
        st.tuples(st.just("show"), st.just(0)),  # the watch shows the last write
        st.tuples(st.just("restart"), st.just(0)),  # a new process: no memo, nothing known
        st.tuples(st.just("finish"), st.just(0)),  # the job succeeded
        st.tuples(st.just("run"), st.just(0)),  # an admitted job seen running
    ),
    max_size=60,
)


def _job(phase: str = "Running", pods_in_view: int = 3) -> tuple[JobView, list[PodView]]:
    world = World().pool("spot", capacityType="spot", price={"spotPerDeviceHour": 3.6})
    status = {
        "phase": phase,
        "attempt": 0,
        "admittedTime": "2026-11-26T12:00:00Z",
        "plan": {"pool": "spot", "devices": 3, "nodes": 3, "capacityType": "spot", "costUsd": 20.0},
    }
    job = world.job("a", "spot", devices=3, status=status)
    pods = [
        PodView("ns", f"a-a0-{i}", f"spot-{i}", "Running", 1, ("ns", "a"), 0, uid=f"p{i}") for i in range(pods_in_view)
    ]
    return job, pods


def _wire(cost: CostStatus) -> str:
    return cost.model_dump_json(by_alias=True, exclude_none=True)


# Admitted or running, its pods in view or not (none in view: after their grace its batch Job's
# start or its admission stands in for them, so the time matters to a job whose pods never ran).
SHAPES = [("Running", 3), ("Admitted", 3), ("Admitted", 1), ("Running", 0), ("Admitted", 0)]


@pytest.mark.parametrize(("phase", "in_view"), SHAPES)
@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_extending_the_open_interval_gives_the_full_recomputes_ledger(
    phase: str, in_view: int, ops: list[tuple[str, Any]]
) -> None:
    job, pods = _job(phase, in_view)
    now = T0 + dt.timedelta(seconds=10)  # 10 s after its admission: its pods' grace runs
    price = accrual.Price(3.6, 8.0)
    idle = 0.0
    known: CostStatus | None = None
    written: CostStatus | None = None
    memo: accrual.Memo | None = None
    for op, arg in [*ops, ("tick", 60)]:
        if op == "tick":
            now += dt.timedelta(seconds=arg)
        elif op in ("start", "end") and arg >= len(pods):
            pass  # fewer pods in view
        elif op == "start" and pods[arg].started is None:
            pods[arg] = dataclasses.replace(pods[arg], started=now - dt.timedelta(seconds=7))
        elif op == "end" and pods[arg].started is not None and pods[arg].finished is None:
            pods[arg] = dataclasses.replace(pods[arg], finished=now)
        elif op == "price":
            price = accrual.Price(arg, 8.0)
        elif op == "idle":
            idle = arg
        elif op == "restart":
            memo, known = None, None
        elif op == "show" and written is not None:
            # As the watch delivers it: parsed from the wire, a copy equal to what was written.
            copy = CostStatus.model_validate_json(_wire(written))
            job = dataclasses.replace(job, status=job.status.model_copy(update={"cost": copy}))
        elif op == "run" and job.phase is JobPhase.ADMITTED:
            job = dataclasses.replace(job, status=job.status.model_copy(update={"phase": JobPhase.RUNNING}))
        elif op == "finish" and job.phase is JobPhase.RUNNING:
            done = {"phase": JobPhase.SUCCEEDED, "completion_time": stamp_exact(now)}
            job = dataclasses.replace(job, status=job.status.model_copy(update=done))
        full = accrual.accrue(job, known, accrual.Tick(price, idle, now, pods=pods))
        out, memo = accrual.step(memo, job, known, accrual.Tick(price, idle, now, pods=pods))
        assert _wire(out) == _wire(full), (op, arg)
        final = out
        if op == "write" and arg[1]:
            # The accountant sets the budget entry after the accrual: the ledger it writes differs.
            over = OverBudget(
                policy="p", period=BudgetPeriod.MONTHLY, spent_usd=1.0, limit_usd=1.0, since=stamp_exact(T0)
            )
            final = out.model_copy(update={"over_budget": over})
        if memo is not None:
            memo.final = final
        if op == "write":
            known = written = final
            if arg[0]:
                job = dataclasses.replace(job, status=job.status.model_copy(update={"cost": final}))


def _count_accrues(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The arguments of every full ``accrual.accrue`` from now on (the recompute a shortcut skips)."""
    calls: list[object] = []
    real = accrual.accrue

    def counting(*a: Any, **kw: Any) -> CostStatus:
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(accrual, "accrue", counting)
    return calls


def test_the_shortcut_is_taken_when_only_the_time_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property above holds trivially if the shortcut never runs: it does, for a running job
    whose ledger this process computed, and not after a price change or a restart."""
    job, pods = _job()
    pods = [dataclasses.replace(p, started=T0) for p in pods]
    price = accrual.Price(3.6, 8.0)
    now = T0 + dt.timedelta(hours=1)
    first, memo = accrual.step(None, job, None, accrual.Tick(price, 0.0, now, pods=pods))
    assert memo is not None
    memo.final = first
    calls = _count_accrues(monkeypatch)
    later = now + HOUR
    second, memo2 = accrual.step(memo, job, first, accrual.Tick(price, 0.0, later, pods=pods))
    assert calls == []  # extended
    assert second.spent_usd == 2 * first.spent_usd
    assert memo2 is not None
    memo2.final = second
    accrual.step(memo2, job, second, accrual.Tick(accrual.Price(2.0, 8.0), 0.0, later + HOUR, pods=pods))
    assert len(calls) == 1  # a new price: the full recompute
    accrual.step(None, job, second, accrual.Tick(price, 0.0, later + HOUR, pods=pods))
    assert len(calls) == 2  # no memo (a restart): the full recompute


def test_a_job_whose_pods_have_not_started_is_not_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admitted (or running with its pods in view) and none of its pods started: nothing accrues
    to it at any time, and a step whose inputs did not move restamps the last ledger instead of
    the full recompute, which it still is for a running job with no pod in view (the grace)."""
    price = accrual.Price(3.6, 8.0)
    real = accrual.accrue
    calls = _count_accrues(monkeypatch)
    for phase, in_view, shortcut in [("Admitted", 3, True), ("Running", 3, True), ("Running", 0, False)]:
        calls.clear()
        job, pods = _job(phase, in_view)
        now = dt.datetime(2026, 11, 26, 12, 0, 10, tzinfo=dt.UTC)  # 10 s after its admission: in the grace
        first, memo = accrual.step(None, job, None, accrual.Tick(price, 0.0, now, pods=pods))
        assert memo is not None and len(calls) == 1
        memo.final = first
        later = now + HOUR
        second, _ = accrual.step(memo, job, None, accrual.Tick(price, 0.0, later, pods=pods))
        assert len(calls) == (1 if shortcut else 2), phase
        assert _wire(second) == _wire(real(job, None, accrual.Tick(price, 0.0, later, pods=pods)))
        assert second.updated == stamp_exact(later)
