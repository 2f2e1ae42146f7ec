"""The batch Job as the admission record (docs/scale.md): an admission's Job is created first,
carrying the admission in its ``accel.dev/admission`` annotation; the job's status follows with
Running when the pods have their nodes in time (one status write, not two), else Admitted by
itself. The Job's admission holds its devices for every pass, and a restarted operator that finds
it under a waiting status adopts it as it stands."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_operator.adapters.kube import views, workloads
from accel_operator.engine.apply import compose
from accel_operator.engine.clock import ManualClock
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.snapshot import Admission
from accel_operator.reconcile.job.decide import decide
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World
from tests.unit.operator.test_workloads import spec
from tests.unit.operator.test_write_order import Calls, RecordingWorkloads, RecordingWriter, _drain, _world

ADMISSION = Admission(
    attempt=0,
    pool="p",
    devices=8,
    nodes=1,
    admitted_time="2026-11-26T11:59:30Z",
    accelerator="h100-80gb",
    capacity_type="on-demand",
    duration_seconds=600.0,
    cost_usd=10.0,
)


def _writes(log: Calls) -> list[tuple[str, ...]]:
    return [c for c in log.seen if c[0] != "event"]


def _statuses(log: Calls) -> int:
    return sum(1 for c in log.seen if c[0] == "status")


def test_an_admission_creates_its_batch_job_first_and_writes_admitted_and_running_as_one_status() -> None:
    """Before: the status (Admitted), then the Job, then a second status (Running). Now: the Job
    (with the admission in its annotation), then one status that says Admitted and Running."""
    w, sched, log = _world(held=30.0)
    w.pool("p", nodes=1)
    w.job("j", "p", devices=8)

    async def run() -> None:
        await sched.step()
        await _drain(sched)
        assert _writes(log) == [("workload", "j")]  # no status yet: the Job records the admission
        view = sched.applier.job_view(sched.observed.jobs[("ns", "j")])
        assert view.phase is JobPhase.ADMITTED  # this process holds it as admitted meanwhile
        assert ("ns", "j") in sched.observe(T0).reservations
        w.pod("j", 0, 0, node="p-0")
        sched.observed.touch_pods(("ns", "j"), "p-0")
        sched.mark(("ns", "j"))
        await sched.step()
        await _drain(sched)

    asyncio.run(run())
    assert _writes(log) == [("workload", "j"), ("status", "j")]
    assert [e[2] for e in sched.applier.writer.events] == ["Admitted"]  # type: ignore[attr-defined]
    created = sched.applier.workloads.jobs[("ns", "j-a0")]  # type: ignore[attr-defined]
    note = views.admission_of(created["metadata"]["annotations"][v.ANNOTATION_ADMISSION])
    assert note is not None and (note.attempt, note.pool, note.devices, note.nodes) == (0, "p", 8, 1)
    st = sched.applier.writer.statuses[("ns", "j")]  # type: ignore[attr-defined]
    assert st["phase"] == "Running" and st["workload"] == "j-a0" and st["plan"]["pool"] == "p"
    assert st["admittedTime"] == note.admitted_time and st["startTime"]
    conds = {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}
    assert conds["Admitted"] == ("True", "Admitted") and conds["Running"] == ("True", "Running")


def test_an_admission_whose_pods_do_not_get_their_nodes_in_time_is_written_by_itself() -> None:
    """``kubectl get acceleratorjobs`` must not say Pending for long while the Job waits for nodes."""
    w, sched, log = _world(held=0.05)
    w.pool("p", nodes=1)
    w.job("j", "p", devices=8)

    async def run() -> None:
        await sched.step()
        await _drain(sched)
        assert _statuses(log) == 0
        await asyncio.sleep(0.2)
        await _drain(sched)

    asyncio.run(run())
    assert _writes(log) == [("workload", "j"), ("status", "j")]
    st = sched.applier.writer.statuses[("ns", "j")]  # type: ignore[attr-defined]
    assert st["phase"] == "Admitted" and st["plan"]["pool"] == "p" and st["workload"] == "j-a0"
    assert sched.applier.overlay[("ns", "j")].held is None


def test_a_held_admission_is_due_on_the_engine_clock_so_a_replay_releases_it_at_its_virtual_time() -> None:
    """The simulator replays the hold on a virtual clock: the held status goes out when the
    engine's clock says it is due (``release_due``, which the replay calls as its clock moves),
    never when the event loop's real-time timer fires first. Before, the timer alone wrote it,
    after 30 real seconds whatever the replay's clock said, and ``release_due`` did not exist."""
    w = World()
    w.clock = clock = ManualClock(T0)
    log = Calls()
    sched = w.scheduler
    sched.settings = OperatorSettings(admitted_status_seconds=0.05)
    sched.applier.writer = RecordingWriter(log)
    sched.applier.workloads = RecordingWorkloads(log)
    w.pool("p", nodes=1)
    w.job("j", "p", devices=8)

    async def run() -> None:
        await sched.step()
        await _drain(sched)
        due = sched.applier.next_release()
        assert due == pytest.approx(clock.monotonic() + 0.05)
        await asyncio.sleep(0.2)  # the loop's timer fired: not due on the engine's clock
        await _drain(sched)
        assert _statuses(log) == 0 and sched.applier.release_due() == 0
        clock.advance(0.05)
        assert sched.applier.release_due() == 1
        await _drain(sched)
        assert sched.applier.next_release() is None

    asyncio.run(run())
    assert _writes(log) == [("workload", "j"), ("status", "j")]
    assert sched.applier.writer.statuses[("ns", "j")]["phase"] == "Admitted"


def test_no_cost_write_goes_before_a_held_admission() -> None:
    """The ledger's write would take the watch's version and the job's phase before the
    admission: it waits (its next step writes it) while the admission is held back."""
    w, sched, log = _world(held=30.0)
    w.pool("p", nodes=1)
    w.job("j", "p", devices=8)

    async def run() -> bool:
        await sched.step()
        await _drain(sched)
        job = sched.observed.jobs[("ns", "j")]
        writer = sched.applier.writer
        return await sched.applier.background_status(writer.patch_status, job, {"cost": {"spentUsd": 0.01}}, {})

    assert asyncio.run(run()) is False
    assert _statuses(log) == 0


def _restarted(*, other: bool = True) -> World:
    """A job whose batch Job records its admission while its status says nothing of it (the
    operator was killed between the Job's create and the status write), and, with ``other``, a
    second job for the same eight devices submitted after it."""
    w = World().pool("p", nodes=1)
    w.job("a", "p", devices=8)
    w.workload("a", 0, admission=ADMISSION, owner_uid="uid-a")
    if other:
        w.job("b", "p", devices=8)
    return w


def test_a_jobs_recorded_admission_holds_its_devices_while_its_status_does_not_say_it() -> None:
    """Before: reservations came from the jobs' statuses only, so the devices of a Job created
    before its status were free to the next pass, and went to another job."""
    w = _restarted()
    snap = w.observe()
    r = snap.reservations[("ns", "a")]
    assert (r.pool, r.nodes, r.per_node, r.bound_nodes) == ("p", 1, 8, 0)
    assert snap.capacity["p"].free_devices == 0
    result = w.schedule_pass()
    phases = {wr.job.name: wr.decision.phase for wr in result.writes}
    assert phases == {"a": JobPhase.ADMITTED, "b": JobPhase.PENDING}
    assert not [a for wr in result.writes for a in wr.decision.actions if isinstance(a, act.CreateWorkload)]


def test_a_restarted_operator_adopts_the_admission_its_batch_job_records() -> None:
    """The admission is written as the Job records it (pool, shape, admitted time: the gang
    clock's start), with no new plan and no second Job; before, the job was planned and
    admitted again from scratch, its admitted time the restart's."""
    w = _restarted(other=False)
    d = decide(w.snapshot().jobs[("ns", "a")], w.snapshot(), T0 + dt.timedelta(seconds=5))
    assert d.phase is JobPhase.ADMITTED
    assert d.status.admitted_time == ADMISSION.admitted_time and d.status.workload == "a-a0"
    assert d.status.attempt == 0
    assert not [a for a in d.actions if isinstance(a, act.CreateWorkload)]
    assert d.admitted is None  # its reservation is counted already (the Job's annotation)
    assert [a.reason for a in d.actions if isinstance(a, act.RecordEvent)] == ["Admitted"]


def test_a_recorded_admission_of_another_attempt_or_owner_is_not_adopted() -> None:
    w = World().pool("p", nodes=1)
    w.job("a", "p", devices=8, status={"phase": "Pending", "attempt": 1})
    w.workload("a", 0, admission=ADMISSION)  # attempt 0's: the sweep's, not an admission
    w.job("c", "p", devices=8)
    w.workload("c", 0, admission=ADMISSION, owner_uid="uid-of-an-earlier-c")
    snap = w.snapshot()
    assert ("ns", "a") not in snap.reservations and ("ns", "c") not in snap.reservations
    for key in (("ns", "a"), ("ns", "c")):
        d = decide(snap.jobs[key], snap, T0)
        assert d.status.admitted_time != ADMISSION.admitted_time, key  # not adopted
    d = decide(snap.jobs[("ns", "c")], snap, T0)
    assert [a.name for a in d.actions if isinstance(a, act.CreateWorkload)] == ["c-a0"]  # planned afresh


def test_the_admission_annotation_goes_with_the_batch_job_and_back() -> None:
    job, _ = workloads.build(replace(spec(devices=8), admission=ADMISSION))
    assert v.ANNOTATION_ADMISSION not in job["spec"]["template"]["metadata"]["annotations"]  # not the pods'
    wl = views.workload_view(job)
    assert wl is not None and wl.admission == ADMISSION
    plain, _ = workloads.build(spec(devices=8))
    seen = views.workload_view(plain)
    assert seen is not None and seen.admission is None


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"attempt": 0, "pool": "p", "devices": 8, "nodes": 0, "admittedTime": "2026-11-26T11:59:30Z"}',
        '{"attempt": -1, "pool": "p", "devices": 8, "nodes": 1, "admittedTime": "2026-11-26T11:59:30Z"}',
        '{"attempt": true, "pool": "p", "devices": 8, "nodes": 1, "admittedTime": "2026-11-26T11:59:30Z"}',
        '{"attempt": 0, "pool": "", "devices": 8, "nodes": 1, "admittedTime": "2026-11-26T11:59:30Z"}',
        '{"attempt": 0, "pool": "p", "devices": 8, "nodes": 1, "admittedTime": "yesterday"}',
        '{"attempt": 0, "pool": "p", "devices": 8, "nodes": 1}',
    ],
)
def test_an_annotation_the_operator_did_not_write_is_no_admission(text: str) -> None:
    assert views.admission_of(text) is None


@pytest.mark.parametrize(
    ("first", "then", "both"),
    [
        ({"a": 1, "b": 2}, {"b": 3}, {"a": 1, "b": 3}),
        ({"plan": {"pool": "p", "devices": 8}}, {"plan": {"devices": 4}}, {"plan": {"pool": "p", "devices": 4}}),
        ({"workload": None}, {"workload": "x"}, {"workload": "x"}),
        ({"conditions": [1, 2]}, {"conditions": [3]}, {"conditions": [3]}),
        ({"plan": {"pool": "p"}}, {"plan": None}, {"plan": None}),
    ],
)
def test_two_merge_patches_compose_into_one(first: Any, then: Any, both: Any) -> None:
    assert compose(first, then) == both


def test_a_recorded_admission_is_kept_apart_for_passes_woken_by_capacity() -> None:
    """A pass woken by capacity looks only at the waiting jobs the index by pool and shape gives
    (engine/waiting.py), filed by their status; a job whose batch Job records an admission its
    status does not say yet is kept in ``Observed.held`` and decided on such a pass whatever the
    index says, and leaves it once its status holds the devices."""
    w = _restarted(other=False)
    sched = w.scheduler
    sched.observe(T0)
    assert sched.observed.held == {("ns", "a")}
    w.job(
        "a", "p", devices=8, status={"phase": "Admitted", "attempt": 0, "plan": {"pool": "p", "devices": 8, "nodes": 1}}
    )
    sched.observed.invalidate()
    sched.observe(T0)
    assert sched.observed.held == set()
