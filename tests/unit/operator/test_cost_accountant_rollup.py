"""The accrual step with the durable cost rollup (handlers.cost.Accountant on a small world of
views, fake writers): an ended attempt is folded into the rollup and then marked in the job's
ledger; a deleted job's money stays in the counters, also after a restart; an operator killed
between the rollup write and the mark counts nothing twice."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

import pytest

from accel_api.job import AcceleratorJobStatus
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.costs import FakeCostWriter, RollupConflict
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine.accountant import Accountant
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World

HOUR = dt.timedelta(hours=1)
LABELS = {"team": "research", "pool": "spot", "capacity_type": "spot"}
NS, NAME = "ops", "accel-cost-rollup"


def _world() -> World:
    world = World().pool("spot", capacityType="spot", price={"spotPerDeviceHour": 3.6})
    world.policy("budgets", budgets=[{"team": "research", "limitUsd": 1000}])
    status = {
        "phase": "Running",
        "attempt": 0,
        "admittedTime": "2026-11-26T12:00:00Z",
        "plan": {"pool": "spot", "devices": 2, "nodes": 1, "capacityType": "spot", "costUsd": 20.0},
    }
    world.job("a", "spot", devices=2, status=status)
    world.pod("a", 0, 0, node="spot-0", devices=2)
    return world


def _accountant(world: World, writer: FakeJobWriter, costs: FakeCostWriter) -> Accountant:
    # The World changes its indexes without the watch events that tell the scheduler what
    # changed, so the accountant's incremental read is a full fold here (that the two agree is
    # test_observed.py's).
    setattr(world.scheduler, "current", world.scheduler.observe)  # noqa: B010
    world.scheduler.settings = OperatorSettings(
        cost_interval_seconds=1.0, cost_write_seconds=0.0, cost_rollup_namespace=NS, cost_rollup=NAME
    )
    return Accountant(scheduler=world.scheduler, writer=writer, costs=costs, prices=PriceBook())


def _rate(acc: Accountant, per_second: float) -> None:
    """The running jobs' status.cost writes a second at most (settings.cost_writes_per_second)."""
    acc.scheduler.settings = acc.settings.model_copy(update={"cost_writes_per_second": per_second})


def _show(world: World, writer: FakeJobWriter, **extra: Any) -> None:
    """What the watch delivers after the writes: the job with the status the writer holds."""
    (view,) = world.jobs[("ns", "a")]
    status = {
        **view.status.model_dump(by_alias=True, mode="json", exclude_none=True),
        **writer.statuses.get(("ns", "a"), {}),
        **extra,
    }
    world.jobs[("ns", "a")] = [dataclasses.replace(view, status=AcceleratorJobStatus.model_validate(status))]


def _four_running() -> tuple[World, FakeJobWriter, FakeCostWriter, dict[str, Any]]:
    """Jobs a, b, c and d running on the spot pool, and the status they started with."""
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    (view,) = world.jobs[("ns", "a")]
    status = view.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    for name in ("b", "c", "d"):
        world.job(name, "spot", devices=2, status=status)
        world.pod(name, 0, 0, node="spot-0", devices=2)
    return world, writer, costs, status


def _show_all(world: World, writer: FakeJobWriter, status: dict[str, Any]) -> None:
    """What the watch delivers after the writes, for jobs a to d."""
    for name in ("a", "b", "c", "d"):
        (job,) = world.jobs[("ns", name)]
        shown = {**status, **writer.statuses[("ns", name)]}
        world.jobs[("ns", name)] = [dataclasses.replace(job, status=AcceleratorJobStatus.model_validate(shown))]


def _finish(world: World, writer: FakeJobWriter, at: str = "2026-11-26T14:00:00Z") -> None:
    _show(world, writer, phase="Succeeded", completionTime=at)


def _spent(acc: Accountant) -> float | None:
    return acc.metrics.registry.get_sample_value("accel_cost_usd_total", LABELS)


def _stored(costs: FakeCostWriter) -> Any:
    rollup, _ = costs.read_rollup(NS, NAME)
    return rollup


def _delete(world: World) -> None:
    del world.jobs[("ns", "a")]
    world.pods.pop(("ns", "a"), None)


def test_an_ended_attempt_is_folded_marked_and_outlives_its_job_and_a_restart() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    assert _spent(acc) == pytest.approx(7.2) and _stored(costs).buckets == []  # running: counted live
    _show(world, writer)
    _finish(world, writer)  # ended at T0+2h: $14.40
    asyncio.run(acc.step(T0 + 3 * HOUR))
    buckets = _stored(costs).buckets  # one per UTC hour it ran
    assert {(b.team, b.pool) for b in buckets} == {("research", "spot")}
    assert sum(b.f[0] for b in buckets) == pytest.approx(14.4)
    assert writer.statuses[("ns", "a")]["cost"]["attempts"][0]["rolledUp"] is True
    assert _spent(acc) == pytest.approx(14.4)  # counted once: from the rollup, not live too
    _show(world, writer)
    _delete(world)
    asyncio.run(acc.step(T0 + 4 * HOUR))
    assert _spent(acc) == pytest.approx(14.4)
    (row,) = _stored(costs).jobs
    assert (row.namespace, row.name, row.forecast_usd) == ("ns", "a", 20.0)
    restarted = _accountant(world, writer, costs)
    asyncio.run(restarted.step(T0 + 5 * HOUR))
    assert _spent(restarted) == pytest.approx(14.4)


def test_a_running_job_deleted_is_charged_up_to_its_deletion_and_kept() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    _delete(world)
    acc.deleted_at["uid-a"] = T0 + 1.25 * HOUR  # the DELETED event
    asyncio.run(acc.step(T0 + 2 * HOUR))
    assert _spent(acc) == pytest.approx(1.25 * 7.2)
    restarted = _accountant(world, writer, costs)
    asyncio.run(restarted.step(T0 + 3 * HOUR))
    assert _spent(restarted) == pytest.approx(1.25 * 7.2)
    assert sum(b.f[0] for b in _stored(costs).buckets) == pytest.approx(1.25 * 7.2)


@pytest.mark.parametrize("swept", [True, False])
def test_a_job_deleted_with_its_workload_orphaned_is_charged_until_the_workload_stops(swept: bool) -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    world.workload("a", 0, active=1)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    _delete(world)  # --cascade=orphan: the garbage collector drops the owner reference, the Job runs on
    (wl,) = world.workloads[("ns", "a-a0")]
    world.workloads[("ns", "a-a0")] = [dataclasses.replace(wl, owner_uid=None)]
    acc.deleted_at["uid-a"] = T0 + 1.25 * HOUR  # the DELETED event
    asyncio.run(acc.step(T0 + 2 * HOUR))  # still running: not closed at the deletion, not folded
    assert _spent(acc) == pytest.approx(2.0 * 7.2)  # charged up to this step, which saw it run
    assert sum(b.f[0] for b in _stored(costs).buckets) == 0
    # The sweep deletes it (its time noted for the ledger), or someone else does (last seen running).
    if swept:
        world.scheduler.applier.swept_gone[("ns", "a")] = T0 + 2.5 * HOUR
    del world.workloads[("ns", "a-a0")]
    asyncio.run(acc.step(T0 + 3 * HOUR))
    charged = (2.5 if swept else 2.0) * 7.2
    assert _spent(acc) == pytest.approx(charged)
    assert sum(b.f[0] for b in _stored(costs).buckets) == pytest.approx(charged)
    asyncio.run(acc.step(T0 + 4 * HOUR))
    assert _spent(acc) == pytest.approx(charged)


def test_killed_between_the_rollup_write_and_the_mark_counts_nothing_twice() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    _finish(world, writer)
    writer.fail_next = ClusterUnavailable("killed before the mark was written")
    asyncio.run(acc.step(T0 + 3 * HOUR))
    assert [p.uid for p in _stored(costs).pending] == ["uid-a"]  # folded; the job does not say so yet
    assert not writer.statuses[("ns", "a")]["cost"]["attempts"][0]["rolledUp"]
    restarted = _accountant(world, writer, costs)  # knows only the rollup and the job's status
    asyncio.run(restarted.step(T0 + 3 * HOUR))
    assert _spent(restarted) == pytest.approx(14.4)
    assert sum(b.f[0] for b in _stored(costs).buckets) == pytest.approx(14.4)  # not folded again
    assert writer.statuses[("ns", "a")]["cost"]["attempts"][0]["rolledUp"] is True  # the mark, made again
    _show(world, writer)
    asyncio.run(restarted.step(T0 + 4 * HOUR))
    assert _stored(costs).pending == []  # the status shows the mark: the key is no longer needed
    assert _spent(restarted) == pytest.approx(14.4)


def test_a_rollup_written_by_another_process_is_read_again_not_overwritten() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    _finish(world, writer)
    costs.fail_next = RollupConflict("changed meanwhile")
    asyncio.run(acc.step(T0 + 3 * HOUR))  # the read ... then the write conflicts: nothing marked
    assert not writer.statuses[("ns", "a")]["cost"]["attempts"][0]["rolledUp"]
    assert _spent(acc) == pytest.approx(14.4)  # counted live meanwhile
    asyncio.run(acc.step(T0 + 3 * HOUR))  # read again, folded, marked
    assert sum(b.f[0] for b in _stored(costs).buckets) == pytest.approx(14.4)
    assert writer.statuses[("ns", "a")]["cost"]["attempts"][0]["rolledUp"] is True
    assert _spent(acc) == pytest.approx(14.4)


class _OpenWritesFail(FakeCostWriter):
    """Killed after the rollup write, before the open attempts' shards are rewritten."""

    failing = False

    def write_open(self, namespace: str, name: str, shard: Any, version: str | None) -> str | None:
        if self.failing:
            raise ClusterUnavailable("killed before the open attempts were rewritten")
        return super().write_open(namespace, name, shard, version)


def test_a_job_deleted_while_no_operator_runs_is_charged_up_to_the_last_tick() -> None:
    world, writer, costs = _world(), FakeJobWriter(), _OpenWritesFail()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))  # $7.20 accrued; kept beside the rollup, not folded
    assert _stored(costs).buckets == []
    assert ("write-open", f"{NAME}-open-0") in costs.calls
    _show(world, writer)
    _delete(world)  # while the operator is down: no DELETED event, no ``previous`` in a new process
    restarted = _accountant(world, writer, costs)
    costs.failing = True
    asyncio.run(restarted.step(T0 + 3 * HOUR))
    assert _spent(restarted) == pytest.approx(7.2)  # up to the last tick, not to now, not lost
    (row,) = _stored(costs).jobs
    assert (row.name, row.deleted) == ("a", "2026-11-26T13:00:00Z")
    # Killed before the shard was rewritten: the next process folds nothing twice.
    costs.failing = False
    again = _accountant(world, writer, costs)
    asyncio.run(again.step(T0 + 4 * HOUR))
    assert _spent(again) == pytest.approx(7.2)
    assert sum(b.f[0] for b in _stored(costs).buckets) == pytest.approx(7.2)
    shard, _ = costs.read_open(NS, f"{NAME}-open-0")
    assert shard.attempts == []  # rewritten without it


def test_an_open_attempt_of_a_job_that_still_exists_is_not_folded_by_a_new_leader() -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    restarted = _accountant(world, writer, costs)
    asyncio.run(restarted.step(T0 + 2 * HOUR))
    assert _stored(costs).buckets == [] and _spent(restarted) == pytest.approx(14.4)
    shard, _ = costs.read_open(NS, f"{NAME}-open-0")
    (entry,) = shard.attempts
    assert (entry.uid, entry.through) == ("uid-a", "2026-11-26T14:00:00Z")


def test_with_many_running_jobs_each_ledger_is_written_less_often() -> None:
    """The ledger writes at most ``write_rate`` running jobs' statuses a second on average: with N
    running, each is written every N / write_rate seconds (the counters follow every tick)."""
    world, writer, costs, status = _four_running()
    acc = _accountant(world, writer, costs)
    _rate(acc, 4.0)  # 4 running: each written every second at most, 4 a tick
    asyncio.run(acc.step(T0 + HOUR))
    first = writer.revision
    assert first == 4  # never written: due
    _show_all(world, writer, status)  # the watch shows what was written
    asyncio.run(acc.step(T0 + 1.5 * HOUR))
    assert writer.revision == first  # not due yet
    assert _spent(acc) == pytest.approx(4 * 1.5 * 7.2)  # the counters do not wait
    _rate(acc, 1e6)
    asyncio.run(acc.step(T0 + 2 * HOUR))
    assert writer.revision == first + 4


def test_a_burst_of_new_jobs_is_written_over_several_ticks() -> None:
    """At most ``write_rate`` x the tick's interval ledgers that are only due (not urgent) are
    written a tick, the longest unwritten first; an ended attempt is written at once regardless."""
    world, writer, costs, _ = _four_running()
    acc = _accountant(world, writer, costs)
    _rate(acc, 2.0)  # a 1 s tick: 2 a tick
    asyncio.run(acc.step(T0 + HOUR))
    assert len(writer.statuses) == 2
    asyncio.run(acc.step(T0 + 1.5 * HOUR))
    assert len(writer.statuses) == 4  # the two never written go next, not the two just written
    assert writer.revision == 4
    _finish(world, writer)  # "a" ended: written at once, whatever the room
    asyncio.run(acc.step(T0 + 3 * HOUR))
    assert writer.statuses[("ns", "a")]["cost"]["attempts"][0]["end"] == "2026-11-26T14:00:00Z"


def test_a_job_with_no_stored_ledger_goes_before_a_restarted_operators_backlog() -> None:
    """After a restart every job is new to the process; those whose status already holds a ledger
    (written by the previous process) are aged from its ``updated`` time, so a job with none is
    written first."""
    world, writer, costs, status = _four_running()
    acc = _accountant(world, writer, costs)
    _rate(acc, 4.0)
    asyncio.run(acc.step(T0 + HOUR))  # the previous process wrote all four
    _show_all(world, writer, status)
    world.job("new", "spot", devices=2, status=status)
    world.pod("new", 0, 0, node="spot-1", devices=2)
    restarted = _accountant(world, writer, costs)
    _rate(restarted, 1.0)  # room for one a tick
    asyncio.run(restarted.step(T0 + 2 * HOUR))
    assert ("ns", "new") in writer.statuses


def test_a_failed_rollup_write_is_a_warning_and_a_metric_and_the_money_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world, writer, costs = _world(), FakeJobWriter(), FakeCostWriter()
    acc = _accountant(world, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    _show(world, writer)
    _delete(world)
    # The API server refuses the ConfigMap (too large before the pending keys were bounded).
    costs.fail_next = ClusterUnavailable("configmap ops/accel-cost-rollup: 422 Unprocessable Entity")
    with caplog.at_level("INFO", logger="accel_operator.cost"):
        asyncio.run(acc.step(T0 + 2 * HOUR))
    failed = acc.metrics.registry.get_sample_value("accel_operator_cost_rollup_write_failures_total")
    assert failed == 1
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "not written" in warning.getMessage() and "1 deleted job(s) held in memory only" in warning.getMessage()
    assert _spent(acc) == pytest.approx(14.4)  # counted from memory meanwhile (charged up to the step)
    assert _stored(costs).buckets == []
    asyncio.run(acc.step(T0 + 3 * HOUR))  # the next write goes through
    assert sum(b.f[0] for b in _stored(costs).buckets) == pytest.approx(14.4)
    assert acc.metrics.registry.get_sample_value("accel_operator_cost_rollup_write_failures_total") == 1
