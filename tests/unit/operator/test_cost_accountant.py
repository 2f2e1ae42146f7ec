"""The accrual step as the operator runs it (handlers.cost.Accountant) on a small world of views
with fake writers: job ledgers and policy spending written, counters derived from the ledgers
so that a restarted operator counts nothing twice, one OverBudget event and the job left running,
idle devices from node reports, and a failing live price falling back with a condition."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_api.policy import AcceleratorPolicy
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine.accountant import Accountant
from accel_operator.reconcile.common.reports import DeviceReport, ReportView
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World

HOUR = dt.timedelta(hours=1)
LABELS = {"team": "research", "pool": "spot", "capacity_type": "spot"}


def _running(pool: str = "spot") -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "admittedTime": "2026-11-26T12:00:00Z",
        "plan": {"pool": pool, "devices": 2, "nodes": 1, "capacityType": "spot", "costUsd": 20.0},
    }


def _world(**pool: Any) -> World:
    world = World().pool("spot", capacityType="spot", **{"price": {"spotPerDeviceHour": 3.6}, **pool})
    world.policy("budgets", budgets=[{"team": "research", "limitUsd": 10}])
    world.job(
        "a",
        "spot",
        devices=2,
        status=_running(),
        spot={"policy": "require", "maxPreemptions": 1},
        checkpoint={"uri": "s3://b/a", "intervalMinutes": 10},
    )
    world.pod("a", 0, 0, node="spot-0", devices=2)
    return world


def _accountant(world: World, writer: FakeJobWriter, costs: FakeCostWriter, **kw: Any) -> Accountant:
    # The World changes its indexes without the watch events that tell the scheduler what
    # changed, so the accountant's incremental read is a full fold here (that the two agree is
    # test_observed.py's).
    setattr(world.scheduler, "current", world.scheduler.observe)  # noqa: B010
    world.scheduler.settings = OperatorSettings(
        cost_interval_seconds=1.0, cost_write_seconds=kw.pop("write_every", 0.0), cost_rollup=""
    )
    return Accountant(scheduler=world.scheduler, writer=writer, costs=costs, prices=kw.pop("prices", PriceBook()))


def _show(world: World, writer: FakeJobWriter) -> None:
    """What the watch delivers after the writes: the job with the status the writer holds."""
    (view,) = world.jobs[("ns", "a")]
    status = {**view.status.model_dump(by_alias=True, mode="json", exclude_none=True), **writer.statuses[("ns", "a")]}
    world.jobs[("ns", "a")] = [dataclasses.replace(view, status=AcceleratorJobStatus.model_validate(status))]


def _spent(acc: Accountant) -> float | None:
    return acc.metrics.registry.get_sample_value("accel_cost_usd_total", LABELS)


def test_ledger_spend_and_counters_survive_a_restart_without_double_counting() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    first = _accountant(world, writer, costs)
    asyncio.run(first.step(T0 + HOUR))
    cost = writer.statuses[("ns", "a")]["cost"]
    assert cost["spentUsd"] == pytest.approx(2 * 3.6)
    assert cost["forecastUsd"] == 20.0
    assert _spent(first) == pytest.approx(7.2)
    assert costs.policies["budgets"]["spend"][0]["spentUsd"] == pytest.approx(7.2)
    _show(world, writer)
    # A new process (a restart, a new leader): counters from the ledgers in status, not from zero
    # plus increments, and nothing written again for the same instant.
    second = _accountant(world, writer, costs)
    revision = writer.revision
    asyncio.run(second.step(T0 + HOUR))
    assert _spent(second) == pytest.approx(7.2)
    assert writer.revision == revision  # the ledger already says this: no write
    asyncio.run(second.step(T0 + 2 * HOUR))
    assert _spent(second) == pytest.approx(14.4)
    assert writer.statuses[("ns", "a")]["cost"]["spentUsd"] == pytest.approx(14.4)


def test_over_budget_gives_one_event_and_a_status_entry_never_a_stop() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + 2 * HOUR))  # $14.40 of a $10 monthly budget
    over = writer.statuses[("ns", "a")]["cost"]["overBudget"]
    assert (over["policy"], over["limitUsd"]) == ("budgets", 10.0)
    assert [e[2] for e in writer.events] == ["OverBudget"]
    assert "keeps running" in writer.events[0][3]
    _show(world, writer)
    asyncio.run(acc.step(T0 + 3 * HOUR))
    assert [e[2] for e in writer.events] == ["OverBudget"]  # once
    assert "phase" not in writer.statuses[("ns", "a")]  # the ledger never touches the phase
    used = acc.metrics.registry.get_sample_value(
        "accel_cost_budget_used_ratio", {"policy": "budgets", "team": "research", "period": "monthly"}
    )
    assert used == pytest.approx(3 * 7.2 / 10)


def test_idle_devices_from_node_reports() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    pod = frozenset({("ns", "a-a0-0")})
    devices = (
        DeviceReport(index=0, utilization=0.0, pods=pod),
        DeviceReport(index=1, utilization=87.0, pods=pod),
        DeviceReport(index=2, utilization=0.0),  # not the job's
    )
    # The scheduler's own index of node reports (no second copy for accounting).
    world.scheduler.indices.reports["spot-0"] = [ReportView("spot-0", T0 + HOUR - dt.timedelta(seconds=5), devices)]  # type: ignore[index, union-attr]
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    cost = writer.statuses[("ns", "a")]["cost"]
    assert cost["idleUsd"] == pytest.approx(3.6)  # one of two devices idle for the hour
    idle = acc.metrics.registry.get_sample_value("accel_cost_idle_usd_total", LABELS)
    assert idle == pytest.approx(3.6)


def test_a_failing_live_price_falls_back_with_a_condition_and_a_metric() -> None:
    world = _world(price={"source": "live", "spotPerDeviceHour": 3.6}, instanceType="p5.48xlarge", zone="us-east-1a")
    writer, costs = FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)  # no EC2 source configured: the live price cannot come
    asyncio.run(acc.step(T0 + HOUR))
    assert writer.statuses[("ns", "a")]["cost"]["spentUsd"] == pytest.approx(7.2)  # the pool's static price
    (condition,) = costs.pools["spot"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PriceLive",
        "False",
        "FellBackToStaticPrice",
    )
    assert acc.metrics.registry.get_sample_value("accel_cost_price_fallbacks_total", {"pool": "spot"}) == 1
    asyncio.run(acc.step(T0 + 2 * HOUR))
    assert costs.calls.count(("pool", "spot")) == 1  # the condition is written on a change only


def test_a_running_job_is_written_at_most_every_write_interval_but_its_end_at_once() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs, write_every=3600.0)
    asyncio.run(acc.step(T0 + HOUR / 2))  # the first sight of a job: written
    _show(world, writer)
    revision = writer.revision
    asyncio.run(acc.step(T0 + HOUR))  # only more of the same attempt (under budget): not written yet ...
    assert writer.revision == revision
    assert _spent(acc) == pytest.approx(7.2)  # ... but the counters and the team's spending follow
    assert costs.policies["budgets"]["spend"][0]["spentUsd"] == pytest.approx(7.2)
    (view,) = world.jobs[("ns", "a")]
    done = {"phase": "Succeeded", "completionTime": "2026-11-26T14:30:00Z"}
    status = {**view.status.model_dump(by_alias=True, mode="json", exclude_none=True), **done}
    world.jobs[("ns", "a")] = [dataclasses.replace(view, status=AcceleratorJobStatus.model_validate(status))]
    asyncio.run(acc.step(T0 + 3 * HOUR))  # the attempt ended: written at once, up to its end
    cost = writer.statuses[("ns", "a")]["cost"]
    assert cost["attempts"][0]["end"] == "2026-11-26T14:30:00Z"
    assert cost["spentUsd"] == pytest.approx(2.5 * 7.2)


def _show_policy(world: World, costs: FakeCostWriter) -> None:
    """What the watch delivers after the policy's status write."""
    (pol,) = world.policies["budgets"]
    assert isinstance(pol, AcceleratorPolicy)
    doc = {**pol.model_dump(by_alias=True, mode="json", exclude_none=True), "status": costs.policies["budgets"]}
    world.policies["budgets"] = [AcceleratorPolicy.model_validate(doc)]
    world.scheduler.policies_changed()


def _team_spent(costs: FakeCostWriter) -> float:
    return float(costs.policies["budgets"]["spend"][0]["spentUsd"])


@pytest.mark.parametrize("restart", [False, True])
def test_a_deleted_jobs_money_stays_in_the_team_total_once(restart: bool) -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    assert _team_spent(costs) == pytest.approx(7.2)
    (carried,) = costs.policies["budgets"]["ledger"]["carried"]
    assert carried["uid"] == "uid-a"
    _show(world, writer)
    _show_policy(world, costs)
    del world.jobs[("ns", "a")]  # deleted (while the operator ran, or while it was down)
    world.pods.pop(("ns", "a"), None)
    if restart:
        acc = _accountant(world, writer, costs)  # knows only what the policy's status says
    else:
        acc.deleted_at["uid-a"] = T0 + 1.5 * HOUR  # the DELETED event's time
    asyncio.run(acc.step(T0 + 2 * HOUR))
    ledger_ = costs.policies["budgets"]["ledger"]
    assert ledger_["carried"] == [] and ledger_["settledUids"] == ["uid-a"]
    # Seen deleted: charged up to the deletion (not only to its last status write); deleted
    # while the operator was down: what its status and the policy last held.
    expected = 7.2 if restart else 1.5 * 7.2
    assert _team_spent(costs) == pytest.approx(expected)
    assert costs.policies["budgets"]["spend"][0]["jobs"] == 1
    # Later ticks, the watch caught up: nothing moves.
    revision = ledger_["revision"]
    asyncio.run(acc.step(T0 + 3 * HOUR))
    _show_policy(world, costs)
    asyncio.run(acc.step(T0 + 4 * HOUR))
    assert _team_spent(costs) == pytest.approx(expected)
    assert costs.policies["budgets"]["ledger"]["revision"] == revision


def test_a_lagging_watch_of_the_policy_loses_no_job_this_process_carried() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show_policy(world, costs)
    before = world.policies["budgets"]  # carries job a only
    world.job("b", "spot", devices=2, status={**_running(), "admittedTime": "2026-11-26T13:00:00Z"})
    asyncio.run(acc.step(T0 + 2 * HOUR))  # carries a and b; the watch does not show it yet
    assert len(costs.policies["budgets"]["ledger"]["carried"]) == 2
    del world.jobs[("ns", "a")], world.jobs[("ns", "b")]
    acc.deleted_at.update({"uid-a": T0 + 2 * HOUR, "uid-b": T0 + 2 * HOUR})  # deleted right after that step
    world.policies["budgets"] = before
    asyncio.run(acc.step(T0 + 3 * HOUR))
    # Built on the newer copy this process wrote, not on the watch's older one (which has no b).
    assert _team_spent(costs) == pytest.approx(2 * 7.2 + 7.2)
    assert sorted(costs.policies["budgets"]["ledger"]["settledUids"]) == ["uid-a", "uid-b"]


def test_the_policy_carries_a_job_as_its_status_holds_it() -> None:
    """The team's spending counts the ledger as computed now; what survives the job is what its
    status holds (written at most every write interval, and not when the write failed)."""
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs, write_every=3600.0)
    asyncio.run(acc.step(T0 + HOUR / 2))  # written: $3.60
    _show(world, writer)

    def carried() -> float:
        (job,) = costs.policies["budgets"]["ledger"]["carried"]
        return float(job["periods"][0]["spentUsd"])

    asyncio.run(acc.step(T0 + HOUR))  # not due: the status still says $3.60
    assert writer.statuses[("ns", "a")]["cost"]["spentUsd"] == pytest.approx(3.6)
    assert _team_spent(costs) == pytest.approx(7.2) and carried() == pytest.approx(3.6)
    (view,) = world.jobs[("ns", "a")]
    done = {"phase": "Succeeded", "completionTime": "2026-11-26T14:00:00Z"}
    status = {**view.status.model_dump(by_alias=True, mode="json", exclude_none=True), **done}
    world.jobs[("ns", "a")] = [dataclasses.replace(view, status=AcceleratorJobStatus.model_validate(status))]
    writer.fail_next = ClusterUnavailable("the API server is away")
    asyncio.run(acc.step(T0 + 4 * HOUR))  # the end is written at once ... but that write fails
    assert "cost" in writer.statuses[("ns", "a")] and _team_spent(costs) == pytest.approx(2 * 7.2)
    assert carried() == pytest.approx(3.6)
    del world.jobs[("ns", "a")]
    asyncio.run(acc.step(T0 + 5 * HOUR))
    # Seen deleted by this process: folded with the ledger it computed (to the job's end), not
    # only what the job's status said last ($3.60).
    assert _team_spent(costs) == pytest.approx(2 * 7.2)


def _samples(acc: Accountant) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in acc.metrics.registry.collect()
        if family.name.startswith("accel_cost_") and family.name.endswith("_usd")
        for s in family.samples
    }


def _succeed(world: World) -> None:
    (view,) = world.jobs[("ns", "a")]
    done = view.status.model_copy(update={"phase": JobPhase.SUCCEEDED})
    world.jobs[("ns", "a")] = [dataclasses.replace(view, status=done)]


def test_the_counters_reuse_a_settled_ledgers_figures_and_export_what_a_fresh_sum_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accel_operator.accounting import rollup

    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    _succeed(world)
    world.pods.clear()
    asyncio.run(acc.step(T0 + 2 * HOUR))  # the attempt closes
    _show(world, writer)
    _succeed(world)
    asyncio.run(acc.step(T0 + 3 * HOUR))
    walks: list[object] = []
    real = rollup.live_by_pool

    def counted(cost: Any, pending: Any) -> Any:
        walks.append(cost)
        return real(cost, pending)

    monkeypatch.setattr(rollup, "live_by_pool", counted)
    asyncio.run(acc.step(T0 + 4 * HOUR))
    assert walks == []  # the settled ledger's figures were not walked again
    # Both accountants export through the scheduler's one registry: read this one's figures
    # before the fresh one writes its own there, or the comparison is of a value with itself.
    exported = _samples(acc)
    fresh = _accountant(world, FakeJobWriter(), FakeCostWriter())
    asyncio.run(fresh.step(T0 + 4 * HOUR))
    assert walks  # the fresh accountant summed them itself
    assert exported == _samples(fresh)
    assert exported[("accel_cost_usd_total", tuple(sorted(LABELS.items())))] > 0
