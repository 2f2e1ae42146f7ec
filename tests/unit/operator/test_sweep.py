"""The sweep (reconcile/job/sweep.py) as a table: which of our batch Jobs and pods it deletes, why,
and when it looks again at what is too young to judge; then the scheduler applying it through
the workload port (once per object, an event on the job that exists, a log line and a metric
for one that does not)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

import pytest

from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.reconcile.common.snapshot import JobView, PodView, WorkloadView
from accel_operator.reconcile.job import sweep
from tests.support.jobs import job_doc
from tests.support.reconcile import T0, World

GRACE = 60.0
OLD = T0 - dt.timedelta(seconds=600)  # created long before now
YOUNG = T0 - dt.timedelta(seconds=5)  # created a moment ago


def _job(name: str = "j", attempt: int = 1, uid: str | None = None, **kw: Any) -> JobView:
    doc = job_doc("ns", "p", devices=1, name=name)
    return JobView(
        namespace="ns",
        name=name,
        uid=uid or f"uid-{name}",
        created=OLD,
        generation=1,
        spec=AcceleratorJobSpec.model_validate(doc["spec"]),
        spec_problems=(),
        status=AcceleratorJobStatus.model_validate({"phase": "Running", "attempt": attempt}),
        **kw,
    )


def _wl(
    job: str = "j", attempt: int = 0, owner: str | None = "uid-j", created: dt.datetime | None = OLD, **kw: Any
) -> WorkloadView:
    return WorkloadView(
        "ns", f"{job}-a{attempt}", ("ns", job), attempt, owner_uid=owner, created=created, active=1, **kw
    )


def _pod(job: str = "j", attempt: int = 0, created: dt.datetime | None = OLD, phase: str = "Running") -> PodView:
    return PodView("ns", f"{job}-a{attempt}-0", "n0", phase, 8, ("ns", job), attempt, created=created)


CASES: list[tuple[str, list[JobView], list[WorkloadView], list[PodView], list[tuple[str, str, sweep.Reason]]]] = [
    ("the current attempt's workload and pods stay", [_job(attempt=1)], [_wl(attempt=1)], [_pod(attempt=1)], []),
    (
        "an earlier attempt's workload goes (its pods with it)",
        [_job(attempt=1)],
        [_wl(attempt=0), _wl(attempt=1)],
        [_pod(attempt=0), _pod(attempt=1)],
        [("workload", "j-a0", sweep.Reason.OLD_ATTEMPT)],
    ),
    (
        "an earlier attempt needs no grace (the job's status already moved past it)",
        [_job(attempt=2)],
        [_wl(attempt=1, created=YOUNG)],
        [],
        [("workload", "j-a1", sweep.Reason.OLD_ATTEMPT)],
    ),
    ("a later attempt (a lagging watch of the job) is never touched", [_job(attempt=0)], [_wl(attempt=1)], [], []),
    (
        "the job is gone: its orphaned workload goes",
        [],
        [_wl(attempt=0, owner=None)],
        [_pod(attempt=0)],
        [("workload", "j-a0", sweep.Reason.JOB_GONE)],
    ),
    (
        "the job and its workload gone: the pods left running go",
        [],
        [],
        [_pod(attempt=0), _pod(attempt=0, phase="Succeeded")],
        [("pod", "j-a0-0", sweep.Reason.JOB_GONE)],
    ),
    (
        "a pod of an earlier attempt whose workload is gone goes",
        [_job(attempt=1)],
        [_wl(attempt=1)],
        [_pod(attempt=0), _pod(attempt=1)],
        [("pod", "j-a0-0", sweep.Reason.OLD_ATTEMPT)],
    ),
    (
        "a pod whose deletion was asked for already is not deleted again (a finalizer holds it a while)",
        [],
        [],
        [dataclasses.replace(_pod(attempt=0), finished=OLD)],
        [],
    ),
    ("a young workload of a job not seen yet waits", [], [_wl(created=YOUNG)], [_pod(created=YOUNG)], []),
    ("an object without a creation time is never judged by age", [], [_wl(created=None)], [_pod(created=None)], []),
    (
        "a job of the same name created again: the earlier one's workload goes",
        [_job(attempt=0, uid="uid-new")],
        [_wl(attempt=0, owner=None)],
        [],
        [("workload", "j-a0", sweep.Reason.OTHER_OWNER)],
    ),
    (
        "a job being deleted is the garbage collector's",
        [_job(attempt=1, deleting=True)],
        [_wl(attempt=0)],
        [],
        [],
    ),
    ("other jobs' objects are not this job's", [_job("k", attempt=3), _job(attempt=0)], [_wl(attempt=0)], [], []),
]


@pytest.mark.parametrize(("jobs", "workloads", "pods", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_sweep(
    jobs: list[JobView],
    workloads: list[WorkloadView],
    pods: list[PodView],
    want: list[tuple[str, str, sweep.Reason]],
) -> None:
    found = sweep.sweep(
        {j.key: j for j in jobs}, workloads, pods, [(w.namespace, w.name) for w in workloads], T0, grace=GRACE
    )
    assert [(s.kind.value, s.name, s.reason) for s in found.strays] == want
    for s in found.strays:
        assert s.message and s.name in s.message
        assert (s.job is None) == (s.reason is sweep.Reason.JOB_GONE)


def test_what_is_too_young_is_looked_at_again_when_it_is_not() -> None:
    found = sweep.sweep({}, [_wl(created=YOUNG)], [_pod(created=T0)], [], T0, grace=GRACE)
    assert found.strays == ()
    assert found.recheck == ((("ns", "j"), YOUNG + dt.timedelta(seconds=GRACE)),)
    later = sweep.sweep({}, [_wl(created=YOUNG)], [], [], YOUNG + dt.timedelta(seconds=GRACE), grace=GRACE)
    assert [s.name for s in later.strays] == ["j-a0"] and later.recheck == ()


# --- the scheduler applies it ---------------------------------------------------------------------


def _world() -> World:
    world = World().pool("p", nodes=2)
    world.job("j", "p", status={"phase": "Running", "attempt": 1, "plan": {"pool": "p", "devices": 8, "nodes": 1}})
    world.workloads[("ns", "j-a1")] = [_wl(attempt=1)]
    world.pod("j", 1, 0, node="p-0", created=OLD)
    return world


async def _step(world: World) -> None:
    sched = world.scheduler
    sched.marks.ready = True
    await sched.step()
    await asyncio.gather(*list(sched.applier.in_flight))


def test_a_stale_attempt_left_by_a_refused_delete_is_deleted_once_with_an_event() -> None:
    world = _world()
    world.workloads[("ns", "j-a0")] = [_wl(attempt=0)]  # the release's delete was refused
    sched = world.scheduler
    fake = sched.applier.workloads
    writer = sched.applier.writer
    assert isinstance(fake, FakeWorkloadClient) and isinstance(writer, FakeJobWriter)

    async def run() -> None:
        await _step(world)
        await _step(world)  # the watch has not shown it gone yet: not sent twice
        sched.mark(("ns", "j"))
        await _step(world)

    asyncio.run(run())
    assert [c for c in fake.calls if c[0] != "create"] == [("delete", "ns", "j-a0")]
    reasons = [e[2] for e in writer.events]
    assert reasons.count("StrayDeleted") == 1, writer.events
    assert sched.metrics.registry.get_sample_value(
        "accel_operator_swept_total", {"kind": "workload", "reason": "old-attempt"}
    )


def test_a_deleted_jobs_orphans_are_deleted_with_a_log_line_and_remembered_for_the_ledger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = _world()
    del world.jobs[("ns", "j")]  # deleted with --cascade=orphan: its workload and pod remain
    world.workloads[("ns", "j-a1")] = [dataclasses.replace(world.workloads[("ns", "j-a1")][0], owner_uid=None)]
    world.pod("j", 0, 0, node="p-1", created=OLD)  # an earlier attempt's pod, its workload gone
    sched = world.scheduler
    fake = sched.applier.workloads
    assert isinstance(fake, FakeWorkloadClient)
    asyncio.run(_step(world))
    assert sorted(c for c in fake.calls if c[0] != "create") == [
        ("delete", "ns", "j-a1"),
        ("delete_pod", "ns", "j-a0-0"),
    ]
    assert ("ns", "j") in sched.applier.swept_gone
    assert "runs without its AcceleratorJob j (deleted)" in caplog.text


def test_a_failed_sweep_delete_is_tried_again() -> None:
    world = _world()
    world.workloads[("ns", "j-a0")] = [_wl(attempt=0)]
    sched = world.scheduler
    fake = sched.applier.workloads
    assert isinstance(fake, FakeWorkloadClient)
    fake.fail_next = RuntimeError("refused")

    async def run() -> None:
        for _ in range(4):
            await _step(world)
            sched.mark(("ns", "j"))  # what the retry's timer does, 5 s later

    asyncio.run(run())
    # The first pass leaves it to the job's own status write; then refused once, then deleted.
    assert [c for c in fake.calls if c[0] == "delete"] == [("delete", "ns", "j-a0")] * 2
    assert sched.metrics.registry.get_sample_value("accel_operator_reconcile_errors_total", {"kind": "sweep"}) == 1
