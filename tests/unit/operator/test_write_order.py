"""How the scheduler applies decisions: the state before the events, admissions before "still
waiting" conditions, and the slots that order them (engine/calls.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from accel_operator.adapters.kube.jobs import FakeJobWriter, JobRef
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.engine import calls
from accel_operator.engine.scheduler import Scheduler
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import World


@dataclass
class Calls:
    """The writers' calls, in the order they reached the 'API server'."""

    seen: list[tuple[str, ...]] = field(default_factory=list)


class RecordingWriter(FakeJobWriter):
    def __init__(self, log: Calls) -> None:
        super().__init__()
        self.log = log

    def patch_status(self, ref: JobRef, status: dict[str, Any]) -> str:
        self.log.seen.append(("status", ref.name))
        return super().patch_status(ref, status)

    def event(self, ref: JobRef, type_: str, reason: str, message: str) -> None:
        self.log.seen.append(("event", ref.name, reason))
        super().event(ref, type_, reason, message)


class RecordingWorkloads(FakeWorkloadClient):
    def __init__(self, log: Calls) -> None:
        super().__init__()
        self.log = log

    def create(self, job: dict[str, Any], service: dict[str, Any] | None) -> bool:
        self.log.seen.append(("workload", job["metadata"]["labels"]["accel.dev/job"]))
        return super().create(job, service)


def _world(threads: int = 16, held: float = 0.0) -> tuple[World, Scheduler, Calls]:
    """``held``: the settings' ``admitted_status_seconds`` (0: an admission's status is written
    at once, before its batch Job)."""
    w = World()
    log = Calls()
    sched = w.scheduler
    sched.settings = OperatorSettings(api_threads=threads, admitted_status_seconds=held)
    sched.applier.slots = calls.Slots(threads)
    sched.applier.writer = RecordingWriter(log)
    sched.applier.workloads = RecordingWorkloads(log)
    return w, sched, log


async def _drain(sched: Scheduler) -> None:
    while sched.applier.in_flight:  # a write's events are posted by a task it starts
        await asyncio.gather(*list(sched.applier.in_flight))


def test_an_admission_creates_its_workload_before_its_events() -> None:
    w, sched, log = _world()
    w.pool("p", nodes=1)
    w.job("j", "p")

    async def run() -> None:
        await sched.step()
        await _drain(sched)

    asyncio.run(run())
    assert log.seen[:2] == [("status", "j"), ("workload", "j")]
    assert ("event", "j", "Admitted") in log.seen[2:]
    assert [e[2] for e in sched.applier.writer.events] == ["Admitted"]  # type: ignore[attr-defined]


def test_an_admission_writes_before_a_backlog_of_waiting_jobs() -> None:
    """One write slot, busy when the pass runs: the admission queued after three waiting jobs'
    conditions still writes first."""
    w, sched, log = _world(threads=1)
    w.pool("full", nodes=1, free=[0])
    w.pool("open", nodes=1)
    for i in range(3):
        w.job(f"w{i}", "full")
    w.job("a", "open")  # submitted last: decided last in the pass

    async def run() -> None:
        assert sched.applier.slots is not None
        await sched.applier.slots.acquire(calls.URGENT)  # an earlier decision still writing
        await sched.step()
        await asyncio.sleep(0)  # every decision's writer is queued for the slot
        assert not log.seen
        sched.applier.slots.release()
        await _drain(sched)

    asyncio.run(run())
    writes = [c for c in log.seen if c[0] != "event"]
    assert writes[:2] == [("status", "a"), ("workload", "a")]
    assert sorted(writes[2:]) == [("status", "w0"), ("status", "w1"), ("status", "w2")]


def test_slots_go_by_priority_then_arrival() -> None:
    async def run() -> list[str]:
        slots = calls.Slots(1)
        order: list[str] = []

        async def take(name: str, priority: int) -> None:
            async with slots.slot(priority):
                order.append(name)
                await asyncio.sleep(0)

        await slots.acquire(calls.URGENT)
        tasks = [
            asyncio.create_task(take("wait-1", calls.WAITING)),
            asyncio.create_task(take("urgent-1", calls.URGENT)),
            asyncio.create_task(take("wait-2", calls.WAITING)),
            asyncio.create_task(take("urgent-2", calls.URGENT)),
        ]
        await asyncio.sleep(0)
        slots.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(run()) == ["urgent-1", "urgent-2", "wait-1", "wait-2"]


def test_a_cancelled_waiter_takes_no_slot() -> None:
    async def run() -> int:
        slots = calls.Slots(1)
        await slots.acquire(calls.URGENT)
        gone = asyncio.create_task(slots.acquire(calls.URGENT))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        slots.release()
        # The slot is free again: the next two acquire one after the other without waiting.
        await asyncio.wait_for(slots.acquire(calls.WAITING), timeout=1)
        assert slots.waiting == 0
        slots.release()
        return slots._free

    assert asyncio.run(run()) == 1


def test_a_waiter_cancelled_as_it_is_handed_the_slot_passes_it_on() -> None:
    async def run() -> list[str]:
        slots = calls.Slots(1)
        got: list[str] = []
        await slots.acquire(calls.URGENT)
        first = asyncio.create_task(slots.acquire(calls.URGENT))

        async def second() -> None:
            await slots.acquire(calls.WAITING)
            got.append("second")

        other = asyncio.create_task(second())
        await asyncio.sleep(0)
        slots.release()  # hands the slot to `first` ...
        first.cancel()  # ... which is cancelled before it runs: `second` must get it
        await asyncio.wait_for(other, timeout=1)
        return got

    assert asyncio.run(run()) == ["second"]


def test_a_cost_write_waits_behind_an_admission() -> None:
    """The cost ledger's writes (handlers.cost) go after every decision that waits for a slot."""
    w, sched, log = _world(threads=1)
    w.pool("open", nodes=1)
    w.job("a", "open")
    ref = JobRef("ns", "ledger", "uid-ledger")

    async def run() -> None:
        assert sched.applier.slots is not None
        await sched.applier.slots.acquire(calls.URGENT)
        cost = asyncio.create_task(sched.background_write(sched.applier.writer.patch_status, ref, {"cost": {}}))
        await asyncio.sleep(0)  # queued first
        await sched.step()
        await asyncio.sleep(0)
        sched.applier.slots.release()
        await cost
        await _drain(sched)

    asyncio.run(run())
    writes = [c for c in log.seen if c[0] != "event"]
    assert writes == [("status", "a"), ("workload", "a"), ("status", "ledger")]


def test_closing_cancels_the_writes_in_flight_and_starts_nothing_new() -> None:
    """At the operator's stop, a decision still waiting for its slot is cancelled, and its events
    are not sent to the shut-down pools (that raised "cannot schedule new futures after shutdown")."""
    w, sched, log = _world(threads=1)
    w.pool("open", nodes=1)
    w.job("a", "open")

    async def run() -> None:
        assert sched.applier.slots is not None
        await sched.applier.slots.acquire(calls.URGENT)
        await sched.step()
        await asyncio.sleep(0)
        tasks = list(sched.applier.in_flight)
        assert tasks
        await sched.close()
        assert all(t.done() for t in tasks)
        await asyncio.sleep(0)
        assert not sched.applier.in_flight
        sched.mark(("ns", "a"))
        await sched.step()  # a pass after the stop writes nothing
        assert not sched.applier.in_flight

    asyncio.run(run())
    assert log.seen == []


class LosingWake(asyncio.Event):
    """A wake event whose wait loses a cancellation, as ``asyncio.wait_for`` did before Python
    3.12 when the event fired at the moment the operator stopped the loop."""

    async def wait(self) -> Literal[True]:
        try:
            return await super().wait()
        except asyncio.CancelledError:
            return True


def test_closing_ends_the_scheduling_loop_first_even_when_its_cancellation_is_lost() -> None:
    """The loop went on past a lost cancellation and sent a pass's writes to the shut pools
    ("cannot schedule new futures after shutdown", raised from the operator's stop)."""
    w, sched, log = _world()
    w.pool("open", nodes=1)
    sched.marks.wake = LosingWake()

    async def run() -> None:
        runner = asyncio.create_task(sched.run())
        for _ in range(5):
            await asyncio.sleep(0)  # the loop waits for a mark
        w.job("a", "open")
        sched.mark(("ns", "a"))  # the wake fires as the operator stops
        await sched.close(runner)
        assert runner.done()
        assert runner.cancelled() or runner.exception() is None
        assert not sched.applier.in_flight

    asyncio.run(run())
    assert log.seen == []


def test_a_pass_sets_aside_the_jobs_whose_writes_are_still_queued(monkeypatch: Any) -> None:
    """Jobs marked while their decisions are still being written are not handed to the next pass
    (it could only skip them), and the pass after their writes end decides them. Carried in the
    marks instead, every pass of a burst ordered, skipped and swept the whole backlog of writes
    again (about 2,000 jobs a pass on the scale benchmark at 300 nodes)."""
    from accel_operator.engine import schedule

    w, sched, log = _world(threads=1)
    w.pool("full", nodes=1, free=[0])
    w.pool("open", nodes=1)
    for i in range(5):
        w.job(f"w{i}", "full")
    w.job("a", "open")
    handed: list[set[tuple[str, str]]] = []
    real = schedule.schedule_pass

    def spy(snap: Any, keys: Any, *args: Any, **kw: Any) -> Any:
        keys = set(keys)
        handed.append(keys)
        return real(snap, keys, *args, **kw)

    monkeypatch.setattr(schedule, "schedule_pass", spy)
    every = {("ns", n) for n in ("w0", "w1", "w2", "w3", "w4", "a")}

    async def run() -> None:
        assert sched.applier.slots is not None
        await sched.applier.slots.acquire(calls.URGENT)  # the writes queue behind this one
        await sched.step()  # the first pass decides every job; their writes wait for the slot
        await asyncio.sleep(0)
        assert sched.applier.acting == every and not log.seen
        for key in every:  # events about each (their own statuses, pods ...) mark them again
            sched.mark(key)
        await sched.step()
        await sched.step()
        assert handed[1] == handed[2] == set()  # none of them handed to a pass while busy
        assert sched.marks.pending()  # the loop still runs passes while they wait, as before
        sched.applier.slots.release()
        await _drain(sched)
        assert not sched.applier.acting and sched.marks.dirty == every  # put back: due next pass
        await sched.step()
        assert handed[3] == every  # decided once their writes ended
        await _drain(sched)

    asyncio.run(run())
    assert [c for c in log.seen if c[0] != "event"][:2] == [("status", "a"), ("workload", "a")]
