"""What a scheduling pass costs whatever it decides: passes gather the marks of a burst of
events (engine/loop.py, ``pass_interval_seconds``), and the incremental sweep finds the workloads
of the jobs it looks at by name instead of scanning every workload (engine/scheduler.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from accel_operator.adapters.kube.lease import AlwaysLeader
from accel_operator.engine import calls, loop
from accel_operator.engine.clock import SystemClock
from accel_operator.engine.loop import Marks
from accel_operator.engine.scheduler import _workloads_of
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.snapshot import WorkloadView
from accel_operator.settings import OperatorSettings


class _Engine:
    def __init__(self, interval: float) -> None:
        self.marks = Marks(full_pass=False)
        self.settings = OperatorSettings(pass_interval_seconds=interval, resync_seconds=3600)
        self.metrics = OperatorMetrics()
        self.elector = AlwaysLeader()
        self.clock = SystemClock()
        self.call_pools = calls.CallPools(1)
        self.passes: list[set[tuple[str, str]]] = []
        self.done = False

    def closed(self) -> bool:
        return self.done

    def can_act(self) -> bool:
        return True

    def lead(self) -> None:
        pass

    async def step(self) -> None:
        dirty, self.marks.dirty = self.marks.dirty, set()
        self.passes.append(dirty)


def _burst(interval: float) -> list[set[tuple[str, str]]]:
    engine = _Engine(interval)

    async def run() -> None:
        runner = asyncio.create_task(loop.run(cast(Any, engine)))
        for i in range(20):  # 20 events over about 0.2 s
            engine.marks.mark(("ns", f"j{i}"))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)
        engine.done = True
        engine.marks.wake.set()
        await runner
        engine.call_pools.shutdown()

    asyncio.run(run())
    return engine.passes


def test_a_burst_of_events_gathers_into_few_passes() -> None:
    passes = _burst(0.2)
    assert set().union(*passes) == {("ns", f"j{i}") for i in range(20)}  # every mark decided
    assert len(passes) <= 3, [len(p) for p in passes]
    assert len(_burst(0.0)) >= 10  # 0: a pass per wake, as before


def _wl(job: str, attempt: int, owner: str | None = None) -> tuple[tuple[str, str], WorkloadView]:
    name = act.workload_name(job, attempt)
    return ("ns", name), WorkloadView("ns", name, ("ns", owner or job), attempt)


def test_the_incremental_sweep_finds_the_workloads_of_its_jobs_by_name() -> None:
    jobs = {
        ("ns", "a"): SimpleNamespace(status=SimpleNamespace(attempt=2)),
        ("ns", "b"): SimpleNamespace(status=SimpleNamespace(attempt=0)),
    }
    workloads = dict(
        [
            _wl("a", 0),
            _wl("a", 1),
            _wl("a", 3),  # the attempt after the current one (its status write not seen yet)
            _wl("b", 0),
            _wl("gone", 4),  # a deleted job's: found by a scan
            _wl("c", 0),  # a job not asked about
        ]
    )
    snap = cast(Any, SimpleNamespace(jobs=jobs, workloads=workloads))
    got = _workloads_of(snap, {("ns", "a"), ("ns", "gone")})
    assert sorted(w.name for w in got) == ["a-a0", "a-a1", "a-a3", "gone-a4"]
    assert [w.name for w in _workloads_of(snap, {("ns", "b")})] == ["b-a0"]
    # As many keys as workloads: one scan, the same answer.
    many = {("ns", "a"), ("ns", "gone"), ("ns", "x"), ("ns", "y")}
    assert sorted(w.name for w in _workloads_of(snap, many)) == ["a-a0", "a-a1", "a-a3", "gone-a4"]
