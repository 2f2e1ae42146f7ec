"""Repeated Events coalesced per (job, type, reason), as client-go's recorder does
(engine/events.py): the first creates the Event, the second patches its series, later ones
within the refresh interval are counted only; a flapping job's writes stay bounded."""

from __future__ import annotations

import asyncio

from accel_operator.adapters.kube.jobs import FakeJobWriter, JobRef
from accel_operator.engine.clock import ManualClock
from accel_operator.engine.events import EventSeries, Write
from accel_operator.reconcile.common import actions as act
from tests.support.reconcile import World

KEY = ("ns", "j", "uid-1", "Normal", "QueuedBehind")


def test_the_first_creates_the_second_starts_a_series_later_ones_are_counted() -> None:
    s = EventSeries(window=600, refresh=60)
    assert s.record(KEY, 0.0) == (Write.CREATE, 1)
    assert s.record(KEY, 1.0) == (Write.SERIES, 2)
    assert s.record(KEY, 2.0) == (Write.SUPPRESS, 3)
    assert s.record(KEY, 30.0) == (Write.SUPPRESS, 4)
    assert s.record(KEY, 61.5) == (Write.SERIES, 5)  # a minute after the last series write
    assert s.record(KEY, 62.0) == (Write.SUPPRESS, 6)
    # Another reason, type or job is another series.
    assert s.record(("ns", "j", "uid-1", "Normal", "WaitingForCapacity"), 62.0) == (Write.CREATE, 1)
    assert s.record(("ns", "j", "uid-2", "Normal", "QueuedBehind"), 62.0) == (Write.CREATE, 1)
    # Ten minutes without a recurrence end the series: the next is a new Event.
    assert s.record(KEY, 62.0 + 600.5) == (Write.CREATE, 1)


def test_the_table_is_bounded_and_a_failed_write_starts_over() -> None:
    s = EventSeries(limit=3)
    for i in range(5):
        s.record(("ns", f"j{i}", "u", "Normal", "R"), float(i))
    assert len(s) == 3
    assert s.record(("ns", "j0", "u", "Normal", "R"), 5.0) == (Write.CREATE, 1)  # dropped: a new Event
    s.forget(("ns", "j0", "u", "Normal", "R"))
    assert s.record(("ns", "j0", "u", "Normal", "R"), 6.0) == (Write.CREATE, 1)


def test_a_flapping_job_writes_two_events_per_reason_not_one_per_flap() -> None:
    """A queued job whose reason alternates 20 times in a minute (the queue's head moving): four
    writes (each reason's Event and its series) instead of twenty, every flap still logged and
    counted; the operator's writes counter says what went out."""
    world = World()
    clock = ManualClock()
    world.clock = clock
    sched = world.scheduler
    writer = sched.applier.writer
    assert isinstance(writer, FakeJobWriter)
    job = world.job("j", "p")
    ref = JobRef(job.namespace, job.name, job.uid)

    async def run() -> None:
        for i in range(20):
            reason = "QueuedBehind" if i % 2 else "WaitingForCapacity"
            await sched.applier._record(job, ref, [act.RecordEvent("Normal", reason, f"flap {i}")])
            clock.advance(3)

    asyncio.run(run())
    assert [e[2] for e in writer.events] == ["WaitingForCapacity", "QueuedBehind"]
    assert [(s[2], s[3]) for s in writer.series] == [("WaitingForCapacity", 2), ("QueuedBehind", 2)]
    metrics = sched.metrics
    assert metrics.api_writes.labels("event")._value.get() == 2
    assert metrics.api_writes.labels("event_series")._value.get() == 2
    assert metrics.events_coalesced._value.get() == 16


def test_a_failed_event_is_created_again_at_its_next_occurrence() -> None:
    world = World()
    world.clock = ManualClock()
    sched = world.scheduler
    writer = sched.applier.writer
    assert isinstance(writer, FakeJobWriter)
    job = world.job("j", "p")
    ref = JobRef(job.namespace, job.name, job.uid)
    from accel_operator.adapters.kube.client import ClusterUnavailable

    async def run() -> None:
        writer.fail_next = ClusterUnavailable("down")
        await sched.applier._record(job, ref, [act.RecordEvent("Warning", "Hung", "first")])
        await sched.applier._record(job, ref, [act.RecordEvent("Warning", "Hung", "second")])

    asyncio.run(run())
    assert [e[3] for e in writer.events] == ["second"] and writer.series == []
