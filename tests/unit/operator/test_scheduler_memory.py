"""What the scheduling loop keeps while its writes wait (bench/mem_cost.py measures how much).

At full size thousands of decisions are applied in one pass and their writes queue behind a busy
API server: whatever each queued write and each unseen status holds is multiplied by thousands.
"""

from __future__ import annotations

import asyncio

import pytest

from accel_api.job import AcceleratorJobStatus
from accel_operator.reconcile.common.snapshot import Snapshot
from tests.support.reconcile import World


def _burst(jobs: int) -> World:
    w = World().pool("p", nodes=2)
    for i in range(jobs):
        w.job(f"j{i}", "p", devices=1)
        w.scheduler.mark(("ns", f"j{i}"))
    return w


def test_statuses_written_and_not_seen_yet_share_their_plan_and_conditions() -> None:
    async def run() -> None:
        w = _burst(6)
        await w.scheduler.step()
        pending = [w.scheduler.applier.overlay[("ns", f"j{i}")].status for i in range(6)]
        # Equal to a parse of the whole status ...
        for status in pending:
            whole = AcceleratorJobStatus.model_validate(status.model_dump(by_alias=True, mode="json"))
            assert status == whole
        # ... with one plan object for the jobs of one spec, one object per condition text.
        assert all(s.plan is not None for s in pending)
        assert len({id(s.plan) for s in pending}) == 1
        first = {c.type: c for c in pending[0].conditions}
        for s in pending[1:]:
            for c in s.conditions:
                if c == first.get(c.type):
                    assert c is first[c.type]
        await asyncio.gather(*w.scheduler.applier.in_flight)

    asyncio.run(run())


def test_a_queued_write_does_not_keep_the_pass_snapshot() -> None:
    # Each admission makes a new snapshot (its reservation added); a write that kept its own would
    # keep every one of them, each with the reservations before it, until the write was done.
    async def run() -> None:
        w = _burst(6)
        await w.scheduler.step()
        tasks = list(w.scheduler.applier.in_flight)
        assert len(tasks) == 6
        for task in tasks:
            coro = task.get_coro()
            frame = getattr(coro, "cr_frame", None)
            assert frame is not None
            assert not any(isinstance(value, Snapshot) for value in frame.f_locals.values())
        await asyncio.gather(*tasks)

    asyncio.run(run())


def test_the_plans_kept_stay_bounded_by_the_waiting_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    # A link per job ever planned and a plan per spec ever seen grew with the fleet's history
    # (3.0 GB at 10k nodes, 100k jobs): the jobs admitted and deleted, round after round, must
    # leave only the links of the jobs still waiting and the plans those name.
    monkeypatch.setattr("accel_operator.engine.plans.KEEP_SLACK", 0)

    async def run() -> None:
        w = World()
        for p in range(8):
            w.pool(f"p{p}", nodes=1)
        sched = w.scheduler
        w.job("big", "p0", devices=64)  # never fits: waits throughout
        sched.mark(("ns", "big"))
        for r in range(6):
            names = [f"j{r}-{p}" for p in range(8)]
            for p, name in enumerate(names):
                w.job(name, f"p{p}", devices=1 + r)  # a spec of its own each round and pool
                sched.mark(("ns", name))
            await sched.step()
            await asyncio.gather(*sched.applier.in_flight)
            for name in names:
                del w.jobs[("ns", name)]
                sched.forget(("ns", name))
        await sched.step()
        await asyncio.gather(*sched.applier.in_flight)
        waiting = sched.observed.waiting
        assert waiting == {("ns", "big")}
        assert 4 * len(sched.plans.by_job) <= 5 * len(waiting)
        assert len(sched.plans.by_spec) <= len(sched.plans.by_job)
        assert sched.plans.entry(w.jobs[("ns", "big")][0]) is not None  # the waiting job keeps its plan

    asyncio.run(run())


def test_no_pass_keeps_its_snapshot_so_the_cache_keeps_no_history() -> None:
    # A snapshot is a frozen view of the cache's maps (engine/versioned.py): while one is alive, each
    # change keeps the value it replaced. Nothing the loop keeps may hold a pass's snapshot, or that
    # history would grow with every change for as long as it is held.
    async def run() -> None:
        w = _burst(6)
        sched = w.scheduler
        await sched.step()
        await asyncio.gather(*sched.applier.in_flight)
        for i in range(3):  # jobs come and go between passes
            w.job(f"n{i}", "p", devices=1)
            sched.mark(("ns", f"n{i}"))
            del w.jobs[("ns", f"j{i}")]
            sched.forget(("ns", f"j{i}"))
            await sched.step()
            await asyncio.gather(*sched.applier.in_flight)
        o = sched.observed
        maps = (o.jobs, o.workloads, o.pods_by_job, o.reservations, o.nodes, o.used)
        assert all(not m._views for m in maps)
        assert all(not m._undo for m in maps)

    asyncio.run(run())


def test_policy_memo_keys_share_one_set_of_pool_names() -> None:
    # Every job a pass judges against the policies is judged over the same pools: the memo of
    # evaluations keeps one frozenset of their names for all its keys, not a copy per job (at 100
    # pools a copy is 8 KB, and the memo keeps up to 50,000 keys). Also across passes with equal pools.
    async def run() -> None:
        w = World().pool("p", nodes=1).pool("q", nodes=1).pool("r", nodes=1)
        w.policy("rules", maxDevicesPerJob=64)
        for i in range(6):
            w.job(f"j{i}", "p", devices=8)
            w.scheduler.mark(("ns", f"j{i}"))
        sched = w.scheduler
        await sched.step()
        await asyncio.gather(*sched.applier.in_flight)
        w.job("late", "q", devices=8)
        sched.mark(("ns", "late"))
        await sched.step()
        assert sched.folded_policies is not None
        memo = sched.folded_policies[1].memo
        assert len(memo) >= 7
        names = {id(key[2]) for key in memo}
        assert len(names) == 1
        assert next(iter(memo))[2] == frozenset({"p", "q", "r"})

    asyncio.run(run())
