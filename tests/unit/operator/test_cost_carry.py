"""The accountant's carry of the stable jobs (``Accountant.stable``: finished, their ledger final
and shown; their counters' figures summed once into ``carry_sum``) against the full recompute
that stays the truth: a fresh accountant, with nothing in memory, stepping the same world. Over
random runs of jobs that finish, are shown, are seen again with a new view (any event), have
their ledger rewritten by another writer, are deleted, or an accountant that restarts, the two
export the same cost counters (to a millionth of a dollar) after every step: a stable job
counted twice, left out, or counted with a ledger it no longer has fails it. Until a job is
deleted (a deletion seen by the accountant that ran is charged up to it, beyond what the job's
status shows a fresh one), the two also give every team the same budget spending, to the bit;
and every policy step, with ledgers written each step or left unwritten between steps, equals
the same step with nothing kept: the figures a step keeps of a ledger (an attempt's totals by
its inputs, a shown ledger's windows, a carried entry) must be those of the ledger it is given."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus, CostTotals
from accel_api.policy import AcceleratorPolicy, AcceleratorPolicyStatus
from accel_operator.accounting import teamspend
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine.accountant import Accountant
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World

HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)
JOBS = ("a", "b", "c")
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(1, 5400)),
        st.tuples(st.just("finish"), st.sampled_from(JOBS)),
        st.tuples(st.just("touch"), st.sampled_from(JOBS)),  # a new view, the same status
        st.tuples(st.just("rewrite"), st.sampled_from(JOBS)),  # another writer's ledger
        st.tuples(st.just("delete"), st.sampled_from(JOBS)),
        st.tuples(st.just("restart"), st.just("")),
    ),
    max_size=25,
)


TEAMS = {"a": "research", "b": "research", "c": "infra"}
BUDGETS = [
    {"team": "research", "limitUsd": 60, "period": "daily"},
    {"team": "research", "limitUsd": 5000, "period": "monthly"},
    {"team": "infra", "limitUsd": 40, "period": "daily"},
]


def _world() -> World:
    world = World().pool("spot", capacityType="spot", price={"spotPerDeviceHour": 3.6})
    world.pool("od", capacityType="on-demand", price={"onDemandPerDeviceHour": 8.0})
    world.policy("budgets", budgets=BUDGETS)
    for i, name in enumerate(JOBS):
        pool = "od" if i == 1 else "spot"
        status = {
            "phase": "Running",
            "attempt": 0,
            "admittedTime": "2026-11-26T12:00:00Z",
            "plan": {"pool": pool, "devices": 2, "nodes": 1, "capacityType": "spot", "costUsd": 20.0},
        }
        world.job(name, pool, devices=2, status=status, team=TEAMS[name])
        world.pod(name, 0, 0, node=f"{pool}-0", devices=2)
    return world


def _accountant(world: World, write_every: float = 0.0) -> Accountant:
    # The World changes its indexes without watch events: the snapshot is read whole each step.
    # ``write_every``: a long one leaves the running jobs' ledgers unwritten between steps (the
    # policy carries the shown one, the budgets count the one computed).
    setattr(world.scheduler, "current", world.scheduler.observe)  # noqa: B010
    world.scheduler.settings = OperatorSettings(
        cost_interval_seconds=1.0, cost_write_seconds=write_every, cost_rollup=""
    )
    return Accountant(scheduler=world.scheduler, writer=FakeJobWriter(), costs=FakeCostWriter(), prices=PriceBook())


def _set_status(world: World, name: str, **changes: Any) -> None:
    (view,) = world.jobs[("ns", name)]
    status = {**view.status.model_dump(by_alias=True, mode="json", exclude_none=True), **changes}
    world.jobs[("ns", name)] = [dataclasses.replace(view, status=AcceleratorJobStatus.model_validate(status))]


def _show(world: World, acc: Accountant) -> None:
    """What the watch delivers after the writes: each job with the status the writer holds."""
    assert isinstance(acc.writer, FakeJobWriter)
    for (_, name), patch in acc.writer.statuses.items():
        if ("ns", name) in world.jobs:
            _set_status(world, name, **patch)
    acc.writer.statuses.clear()


def _show_policy(world: World, acc: Accountant) -> None:
    """What the policies' watch delivers after the step: the spend and ledger written."""
    assert isinstance(acc.costs, FakeCostWriter)
    status = acc.costs.policies.get("budgets")
    if status is not None:
        (pol,) = world.policies["budgets"]
        assert isinstance(pol, AcceleratorPolicy)
        parsed = AcceleratorPolicyStatus.model_validate(status)
        world.policies["budgets"] = [pol.model_copy(update={"status": parsed})]


def _spend(acc: Accountant) -> list[tuple[str, str, float, float, float]]:
    """Each budget's spending as the step wrote it."""
    assert isinstance(acc.costs, FakeCostWriter)
    spend = acc.costs.policies["budgets"]["spend"]
    return [
        (s["team"], s["period"], s["spentUsd"], s.get("lostToPreemptionUsd", 0.0), s.get("idleUsd", 0.0)) for s in spend
    ]


def _counters(acc: Accountant) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The counters as exported (the scheduler's metrics: shared by every accountant on it)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in acc.metrics.cost.collect()
        for s in family.samples
    }


def _step_checked(*args: Any, **kwargs: Any) -> teamspend.Step:
    """``teamspend.step`` with what the accountant keeps between steps, checked against the same
    step with nothing kept: the same ledger, carried entries and spending, to the bit."""
    got = _TEAMSPEND_STEP(*args, **kwargs)
    assert got == _TEAMSPEND_STEP(*args, **{**kwargs, "memo": {}})
    return got


_TEAMSPEND_STEP = teamspend.step


@settings(max_examples=40, deadline=None)
@given(ops=OPS, write_every=st.sampled_from([0.0, 3000.0]))
def test_the_carried_stable_jobs_count_as_a_full_recompute(ops: list[tuple[str, Any]], write_every: float) -> None:
    world = _world()
    acc = _accountant(world, write_every)
    # Half an hour before midnight: a tick past it starts a new daily budget period inside the
    # running attempts (their figures of the day are a part of what they hold).
    now = T0 + 11 * HOUR + 30 * MINUTE
    asyncio.run(acc.step(now))  # the jobs' pods' time so far on the ledgers, written and shown
    _show(world, acc)
    _show_policy(world, acc)
    deleted = False
    steps: list[tuple[str, Any]] = [*ops, ("tick", 60)]
    for op, arg in steps:
        key = ("ns", arg)
        if op == "tick":
            now += dt.timedelta(seconds=int(arg))
        elif op == "restart":
            acc = _accountant(world, write_every)
        elif key not in world.jobs:
            continue
        elif op == "finish" and world.jobs[key][0].phase is JobPhase.RUNNING:
            _set_status(world, arg, phase="Succeeded")
            world.pods.pop(key, None)
        elif op == "touch":
            (view,) = world.jobs[key]
            world.jobs[key] = [dataclasses.replace(view, generation=view.generation + 1)]
        elif op == "rewrite" and world.jobs[key][0].uid in acc.stable:
            # A finished job's ledger changed under the carry (a running job's is merged with
            # what this process wrote, which a fresh one does not know: not the carry's case).
            (view,) = world.jobs[key]
            cost = view.status.cost
            assert cost is not None
            extra = (cost.folded.spent_usd if cost.folded else 0.0) + 1.25
            other = cost.model_copy(update={"folded": CostTotals(spent_usd=extra)})
            world.jobs[key] = [dataclasses.replace(view, status=view.status.model_copy(update={"cost": other}))]
            acc.known[view.uid] = other  # as if this process wrote it (one a fresh process accepts too)
        elif op == "delete":
            del world.jobs[key]
            world.pods.pop(key, None)
        deleted = deleted or op == "delete"
        with mock.patch.object(teamspend, "step", _step_checked):
            asyncio.run(acc.step(now))
        _show(world, acc)
        mine = _counters(acc)  # read before the fresh one sets the metrics both are built on
        spend = _spend(acc)
        fresh = _accountant(world, write_every)
        asyncio.run(fresh.step(now))
        truth = _counters(fresh)
        if not deleted:
            assert spend == _spend(fresh), (op, arg)
        _show_policy(world, acc)
        assert mine.keys() == truth.keys(), (op, arg)
        for k, value in truth.items():
            assert mine[k] == pytest.approx(value, abs=1e-6), (op, arg, k)
    # The property holds trivially if nothing is ever carried: the finished jobs are.
    assert all(uid in acc.carry for uid in acc.stable)


def test_a_finished_shown_job_is_carried_and_not_walked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from accel_operator.accounting import accrual, rollup

    world = _world()
    acc = _accountant(world)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, acc)
    for name in JOBS:
        _set_status(world, name, phase="Succeeded")
        world.pods.pop(("ns", name), None)
    asyncio.run(acc.step(T0 + 2 * HOUR))  # the attempts close
    _show(world, acc)
    asyncio.run(acc.step(T0 + 3 * HOUR))  # shown: stable, carried
    assert set(acc.stable) == {f"uid-{n}" for n in JOBS}
    walks: list[object] = []
    monkeypatch.setattr(rollup, "live_by_pool", lambda *a: walks.append(a))
    monkeypatch.setattr(accrual, "step", lambda *a, **kw: walks.append(a))
    asyncio.run(acc.step(T0 + 4 * HOUR))
    assert walks == []  # neither accrued, nor summed again
    assert sum(v[0] for v in acc.carry_sum.values()) > 0
