"""A new job's first "still waiting" status and Event are held back ``waiting_status_seconds``
from its creation (engine/apply.py): a job admitted within them writes neither; one still waiting
then writes them once; a job whose status was written shows a new wait at once."""

from __future__ import annotations

import asyncio
import datetime as dt

from accel_operator.engine import calls
from accel_operator.engine.clock import ManualClock
from accel_operator.engine.scheduler import Scheduler
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World
from tests.unit.operator.test_write_order import Calls, RecordingWorkloads, RecordingWriter, _drain

QUIET = 5.0


def _world(*, quiet: float = QUIET, admitted: float = 0.0) -> tuple[World, Scheduler, Calls, ManualClock]:
    """A full one-node pool ``p`` (its eight devices used by another pod) and the scheduler, on a
    clock at ``T0``; ``quiet``: ``waiting_status_seconds``, ``admitted``: ``admitted_status_seconds``."""
    w = World()
    w.clock = clock = ManualClock(T0)
    log = Calls()
    sched = w.scheduler
    sched.settings = OperatorSettings(admitted_status_seconds=admitted, waiting_status_seconds=quiet)
    sched.applier.slots = calls.Slots(16)
    sched.applier.writer = RecordingWriter(log)
    sched.applier.workloads = RecordingWorkloads(log)
    w.pool("p", nodes=1, free=[0])
    w.created = T0 - dt.timedelta(seconds=1)  # the next job is created at T0
    return w, sched, log, clock


def _free(w: World, sched: Scheduler) -> None:
    """The other pod on p-0 ends: its eight devices are free."""
    (other,) = w.pods.pop("p-0")
    sched.pods_changed(other, None)


async def _pass(sched: Scheduler) -> None:
    await sched.step()
    await _drain(sched)


def test_a_job_admitted_soon_after_it_arrives_writes_no_waiting_status_or_event() -> None:
    """Before: the job's first pass wrote Pending (a status patch) and posted WaitingForCapacity,
    then its admission wrote again. Now the waiting write is held, and the admission takes it."""
    w, sched, log, clock = _world()
    w.job("j", "p", devices=8)

    async def run() -> None:
        await _pass(sched)
        assert log.seen == []  # waiting, not written yet
        view = sched.applier.job_view(sched.observed.jobs[("ns", "j")])
        assert view.status.phase is not None and view.status.phase.value == "Pending"  # this process knows
        clock.advance(2.0)
        _free(w, sched)
        await _pass(sched)
        clock.advance(QUIET)
        assert sched.applier.release_due() == 0  # nothing held is left

    asyncio.run(run())
    assert [c for c in log.seen if c[0] != "event"] == [("status", "j"), ("workload", "j")]
    assert [c[2] for c in log.seen if c[0] == "event"] == ["Admitted"]
    st = sched.applier.writer.statuses[("ns", "j")]  # type: ignore[attr-defined]
    assert st["phase"] == "Admitted"
    assert {c["type"]: c["reason"] for c in st["conditions"]}["Admitted"] == "Admitted"


def test_with_the_admission_held_too_a_job_admitted_soon_costs_the_clean_path_only() -> None:
    """Both holds on (the defaults): the batch Job, its Admitted Event, and one status with Running."""
    w, sched, log, clock = _world(admitted=30.0)
    w.job("j", "p", devices=8)

    async def run() -> None:
        await _pass(sched)
        clock.advance(1.0)
        _free(w, sched)
        await _pass(sched)
        w.pod("j", 0, 0, node="p-0")
        sched.observed.touch_pods(("ns", "j"), "p-0")
        sched.mark(("ns", "j"))
        await _pass(sched)

    asyncio.run(run())
    assert log.seen == [("workload", "j"), ("event", "j", "Admitted"), ("status", "j")]
    assert sched.applier.writer.statuses[("ns", "j")]["phase"] == "Running"  # type: ignore[attr-defined]


def test_a_job_still_waiting_when_due_writes_its_status_and_event_once() -> None:
    w, sched, log, clock = _world()
    w.job("j", "p", devices=8)

    async def run() -> None:
        await _pass(sched)
        clock.advance(QUIET - 1)
        sched.mark(("ns", "j"))
        await _pass(sched)  # decided again, still waiting: still held
        assert sched.applier.release_due() == 0 and log.seen == []
        clock.advance(1.0)
        assert sched.applier.release_due() == 1
        await _drain(sched)
        sched.mark(("ns", "j"))
        await _pass(sched)  # the same wait: nothing more to write

    asyncio.run(run())
    assert log.seen == [("status", "j"), ("event", "j", "WaitingForCapacity")]
    st = sched.applier.writer.statuses[("ns", "j")]  # type: ignore[attr-defined]
    assert st["phase"] == "Pending" and "waiting for capacity" in st["message"]


def test_a_job_older_than_the_wait_or_already_written_is_written_at_once() -> None:
    w, sched, log, clock = _world()
    clock.advance(QUIET)  # created QUIET seconds ago (an operator restarted onto a queue)
    w.job("old", "p", devices=8)
    w.job("shown", "p", devices=8, status={"phase": "Running", "attempt": 0})  # written before

    async def run() -> None:
        await _pass(sched)

    asyncio.run(run())
    assert ("status", "old") in log.seen and ("event", "old", "WaitingForCapacity") in log.seen
    assert sched.applier.release_due() == 0


def test_off_writes_the_waiting_status_at_once() -> None:
    w, sched, log, _clock = _world(quiet=0.0)
    w.job("j", "p", devices=8)
    asyncio.run(_pass(sched))
    assert log.seen == [("status", "j"), ("event", "j", "WaitingForCapacity")]
