"""reconcile/nodes/health.py: what the node reports make of a running job and of the nodes, as tables of
small worlds (the engine's own cache, ``Observed``, folds the reports into the snapshot)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_api.job import RightSize
from accel_operator.adapters.kube.nodes import FakeNodeWriter
from accel_operator.engine.clock import ManualClock
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import CLEAR
from accel_operator.reconcile.common.snapshot import JobView, NodeView
from accel_operator.reconcile.job import resume
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import health
from tests.support import decisions
from tests.support.decisions import health_of
from tests.support.reconcile import T0, World

RULES = decisions.RULES
CHECKPOINT = {"uri": "s3://ckpt/a", "intervalMinutes": 10}
ECC = "uncorrectable ECC errors since the driver loaded: 2"


def _running(name: str, *, devices: int = 8, nodes: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "workload": f"{name}-a0",
        "admittedTime": decisions.ago(3600),
        "startTime": decisions.ago(3600),
        "plan": {
            "pool": "p",
            "accelerator": "h100-80gb",
            "devices": devices,
            "nodes": nodes,
            "durationSeconds": 36000,
            "costUsd": 100.0,
        },
        **extra,
    }


def _world(*, nodes: int = 2) -> World:
    return World().pool("p", nodes=nodes)


def _one_node_job(
    w: World, *, checkpoint: bool = True, health_status: dict[str, Any] | None = None, **status: Any
) -> JobView:
    extra = {"health": health_status} if health_status else {}
    spec: dict[str, Any] = {"checkpoint": CHECKPOINT} if checkpoint else {}
    job = w.job("a", "p", devices=8, status={**_running("a"), **extra, **status}, **spec)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    return job


def _two_node_job(w: World, *, checkpoint: bool = True, health_status: dict[str, Any] | None = None) -> JobView:
    extra = {"health": health_status} if health_status else {}
    spec: dict[str, Any] = {"checkpoint": CHECKPOINT} if checkpoint else {}
    job = w.job("g", "p", devices=16, status={**_running("g", devices=16, nodes=2), **extra}, **spec)
    w.workload("g", 0, active=2)
    w.pod("g", 0, 0, node="p-0")
    w.pod("g", 0, 1, node="p-1")
    return job


def _mine(pod: str) -> dict[int, tuple[str, ...]]:
    return dict.fromkeys(range(8), (pod,))


# --- (a) a failing device ----------------------------------------------------------------------


def test_a_busy_healthy_job_gets_conditions_and_nothing_else() -> None:
    w = _world()
    job = _one_node_job(w)
    w.report("p-0", pods=_mine("a-a0-0"))
    d, moved = decisions.run(w, job)
    assert moved is None and d.phase is JobPhase.RUNNING
    assert decisions.cond(d, "NodeReports") == (True, "Fresh")
    assert decisions.cond(d, "DevicesHealthy") == (True, "Healthy")
    assert decisions.cond(d, "Idle") == (False, "Busy")
    assert d.actions == () and d.status.health is None


@pytest.mark.parametrize("reported", [True, False])
def test_the_decision_that_starts_a_job_carries_the_report_conditions(reported: bool) -> None:
    # Admitted -> Running is amended too: the conditions go out with that status write, not
    # with a second write at the job's next event.
    w = _world()
    admitted = {**_running("a"), "phase": "Admitted"}
    admitted.pop("startTime")
    job = w.job("a", "p", devices=8, status=admitted)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    if reported:
        w.report("p-0", pods=_mine("a-a0-0"))
    d, moved = decisions.run(w, job)
    assert moved is None and d.phase is JobPhase.RUNNING and d.status.start_time
    assert decisions.cond(d, "NodeReports") == ((True, "Fresh") if reported else (False, "ReportStale"))
    assert decisions.events(d) == []  # the phase and condition say it: no Event


def test_a_failing_device_asks_for_a_checkpoint_first_naming_the_device_and_error() -> None:
    w = _world()
    job = _one_node_job(w)
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC})
    d, moved = decisions.run(w, job)
    assert moved is None and d.phase is JobPhase.RUNNING
    assert decisions.cond(d, "DevicesHealthy") == (False, "DeviceUnhealthy")
    assert [a for a in d.actions if isinstance(a, act.RequestCheckpoint)] == [
        act.RequestCheckpoint((("ns", "a-a0-0"),), decisions.stamp(T0), "device-unhealthy")
    ]
    assert decisions.events(d) == ["DeviceUnhealthy"]
    message = next(a.message for a in d.actions if isinstance(a, act.RecordEvent))
    assert "node p-0: device 3 (uncorrectable ECC" in message
    assert health_of(d).move_requested_time == decisions.stamp(T0)


def test_a_report_that_knows_the_jobs_pod_only_by_uid_finds_its_devices() -> None:
    """An agent without the pod list reports its processes' pod UIDs: the job's device is found
    through the UID of its pod in the operator's own cache, and only that device is held against it."""
    w = _world()
    job = w.job("a", "p", devices=1, status=_running("a", devices=1), checkpoint=CHECKPOINT)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0", devices=1, uid="0f0e0d0c-0b0a-0908-0706-050403020100")
    w.report("p-0", pod_uids={3: ("0f0e0d0c-0b0a-0908-0706-050403020100",)}, sick={3: ECC, 5: ECC})
    d, _ = decisions.run(w, job)
    assert decisions.cond(d, "DevicesHealthy") == (False, "DeviceUnhealthy")
    message = next(a.message for a in d.actions if isinstance(a, act.RecordEvent))
    assert "device 3 (" in message and "device 5" not in message


@pytest.mark.parametrize(
    ("requested_ago", "checkpoint_ago", "moves"),
    [
        (30, None, False),  # within the grace, no checkpoint yet: wait
        (30, 60, False),  # the latest checkpoint is older than the request: wait
        (30, 10, True),  # checkpointed after the request: move now
        (RULES.checkpoint_grace + 1, None, True),  # grace over: move anyway
    ],
)
def test_the_move_waits_for_the_checkpoint_or_the_grace(
    requested_ago: float, checkpoint_ago: float | None, moves: bool
) -> None:
    w = _world()
    extra: dict[str, Any] = {}
    if checkpoint_ago is not None:
        extra["lastCheckpoint"] = {"uri": "s3://ckpt/a/step-9", "time": decisions.ago(checkpoint_ago)}
    job = _one_node_job(
        w, health_status={"moveRequestedTime": decisions.ago(requested_ago), "moveReason": "x"}, **extra
    )
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC})
    d, moved = decisions.run(w, job)
    if not moves:
        assert moved is None and d.phase is JobPhase.RUNNING and d.actions == ()
        return
    assert moved is health.MoveReason.DEVICE_UNHEALTHY
    assert d.phase is JobPhase.PENDING
    assert decisions.cond(d, "Admitted") == (False, "Moved")
    assert d.status.attempt == 1 and d.status.workload is CLEAR
    assert health_of(d).moves == 1 and health_of(d).move_requested_time is None
    assert [a for a in d.actions if isinstance(a, act.DeleteWorkload)] == [
        act.DeleteWorkload("a-a0", "moved: device-unhealthy")
    ]
    assert "from its latest checkpoint" in d.reason and "device 3" in d.reason


SUB = dt.timedelta(milliseconds=700)  # the request is made 0.7 s into T0's second


def _ckpt(step: int | None, at: dt.datetime) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uri": f"s3://ckpt/a/step-{step or 0}",
        "time": decisions.stamp(at),
    }  # whole seconds, as status holds
    return out if step is None else {**out, "step": step}


@pytest.mark.parametrize(
    ("then", "later", "moves"),
    [
        # step 9 written at T0+0.4 s, before the request at T0+0.7 s; status says T0 for both, so
        # a comparison of times (saved >= requested) took it for the asked-for checkpoint.
        ((9, T0), (9, T0), False),
        ((9, T0), (10, T0), True),  # a later step in the request's own second is new
        ((9, T0 - dt.timedelta(minutes=5)), (10, T0 + dt.timedelta(seconds=1)), True),
        (None, (3, T0), True),  # no checkpoint at the request: any one since is new, in the same second too
        ((None, T0), (None, T0), False),  # the job reports no steps: times decide, strictly later
        ((None, T0), (None, T0 + dt.timedelta(seconds=1)), True),
    ],
)
def test_the_move_compares_checkpoint_steps_not_whole_second_times(
    then: tuple[int | None, dt.datetime] | None, later: tuple[int | None, dt.datetime], moves: bool
) -> None:
    # The request, made with the checkpoint ``then`` on record.
    w = _world()
    on_record: dict[str, Any] = {"lastCheckpoint": _ckpt(*then)} if then is not None else {}
    job = _one_node_job(w, **on_record)
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC})
    asked, moved = decisions.run(w, job, T0 + SUB)
    assert moved is None and health_of(asked).move_requested_time == decisions.stamp(T0)
    assert health_of(asked).move_checkpoint_step == (then[0] if then is not None else None)
    # The next decision, within the grace, with the checkpoint ``later`` on record.
    w = _world()
    job = _one_node_job(w, health_status=asked.status.to_wire()["health"], lastCheckpoint=_ckpt(*later))
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC})
    d, moved = decisions.run(w, job, T0 + dt.timedelta(seconds=2))
    assert (moved is health.MoveReason.DEVICE_UNHEALTHY) is moves
    assert d.phase is (JobPhase.PENDING if moves else JobPhase.RUNNING)


def test_a_job_without_checkpoint_on_a_failing_device_moves_at_once_from_the_start() -> None:
    w = _world()
    job = _one_node_job(w, checkpoint=False)
    w.report("p-0", pods=_mine("a-a0-0"), sick={0: "fallen off the bus"})
    d, moved = decisions.run(w, job)
    assert moved is health.MoveReason.DEVICE_UNHEALTHY
    assert not [a for a in d.actions if isinstance(a, act.RequestCheckpoint)]
    assert "from the start" in d.reason


@pytest.mark.parametrize("age", [RULES.stale_after + 1, None])
def test_a_stale_or_missing_report_decides_nothing_and_says_so(age: float | None) -> None:
    w = _world()
    job = _one_node_job(w)
    if age is not None:
        w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC}, util=0.0, age=age)
    d, moved = decisions.run(w, job)
    assert moved is None and d.phase is JobPhase.RUNNING and d.actions == ()
    assert decisions.cond(d, "NodeReports") == (False, "ReportStale")
    assert decisions.cond(d, "DevicesHealthy") is None and decisions.cond(d, "Idle") is None
    snap = w.snapshot()
    assert health.node_actions(snap, RULES) == ()
    assert snap.capacity["p"].usable_nodes == 2


def test_a_requested_move_goes_ahead_when_the_report_goes_stale_after_the_grace() -> None:
    w = _world()
    job = _one_node_job(w, health_status={"moveRequestedTime": decisions.ago(200), "moveReason": "node p-0: device 3"})
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC}, age=RULES.stale_after + 1)
    d, moved = decisions.run(w, job)
    assert moved is health.MoveReason.DEVICE_UNHEALTHY and "node p-0: device 3" in d.reason


def test_a_device_that_recovers_before_the_move_cancels_it() -> None:
    w = _world()
    job = _one_node_job(w, health_status={"moveRequestedTime": decisions.ago(30), "moveReason": "x"})
    w.report("p-0", pods=_mine("a-a0-0"))
    d, moved = decisions.run(w, job)
    assert moved is None and health_of(d).move_requested_time is None


def test_a_job_moved_too_often_is_flagged_and_left() -> None:
    w = _world()
    job = _one_node_job(w, health_status={"moves": RULES.max_moves})
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC})
    d, moved = decisions.run(w, job)
    assert moved is None and d.phase is JobPhase.RUNNING
    assert decisions.cond(d, "DevicesHealthy") == (False, "DeviceUnhealthyMoveLimit")
    assert decisions.events(d) == ["DeviceUnhealthy"] and not [
        a for a in d.actions if isinstance(a, act.RequestCheckpoint)
    ]
    assert "moved 5 time(s) already" in next(a.message for a in d.actions if isinstance(a, act.RecordEvent))
    w2 = _world()
    hung = _two_node_job(
        w2, health_status={"moves": RULES.max_moves, "hungSince": decisions.ago(RULES.hung_window + 1)}
    )
    w2.report("p-0", util=0.0, pods=_mine("g-a0-0"))
    w2.report("p-1", util=0.0, pods=_mine("g-a0-1"))
    d2, moved2 = decisions.run(w2, hung)
    assert moved2 is None and decisions.cond(d2, "Hung") == (True, "Hung") and decisions.events(d2) == ["Hung"]


# --- nodes: taints and capacity ----------------------------------------------------------------


def _nodes(w: World, tainted: set[str]) -> None:
    for name, store in w.nodes.items():
        n: NodeView = store[0]
        from dataclasses import replace

        store[0] = replace(n, health_taint=name in tainted)


@pytest.mark.parametrize(
    ("sick", "age", "tainted", "expected"),
    [
        ({3: ECC}, 10.0, set(), [act.TaintNode("p-0", v.TAINT_DEVICE_UNHEALTHY, "3", f"device 3 ({ECC})")]),
        (
            {1: "x", 3: "y"},
            10.0,
            set(),
            [act.TaintNode("p-0", v.TAINT_DEVICE_UNHEALTHY, "1-3", "device 1 (x); device 3 (y)")],
        ),
        ({3: ECC}, 10.0, {"p-0"}, []),  # already tainted
        ({3: ECC}, RULES.stale_after + 1, set(), []),  # stale: never condemned
        ({}, 10.0, {"p-0"}, [act.UntaintNode("p-0", v.TAINT_DEVICE_UNHEALTHY, "every device is healthy again")]),
        ({}, RULES.stale_after + 1, {"p-0"}, []),  # stale: the taint stays until a fresh report
        ({}, 10.0, set(), []),
    ],
)
def test_node_actions(sick: dict[int, str], age: float, tainted: set[str], expected: list[act.NodeAction]) -> None:
    w = _world()
    _nodes(w, tainted)
    w.report("p-0", sick=sick, age=age)
    assert list(health.node_actions(w.snapshot(), RULES)) == expected


def test_a_condemned_or_tainted_node_is_not_usable_capacity() -> None:
    w = _world()
    w.report("p-0", sick={3: ECC})
    cap = w.snapshot().capacity["p"]
    assert cap.usable_nodes == 1 and cap.free_devices == 8
    w2 = _world()
    _nodes(w2, {"p-1"})
    assert w2.snapshot().capacity["p"].usable_nodes == 1


def test_the_moved_job_is_admitted_again_on_the_healthy_node() -> None:
    w = _world()
    w.report("p-0", sick={3: ECC})
    job = w.job("a", "p", devices=8, status={"phase": "Pending", "attempt": 1}, checkpoint=CHECKPOINT)
    # The new attempt first looks for the checkpoint it resumes from, then is admitted elsewhere.
    first = decide(job, w.snapshot(), T0)
    assert first.phase is JobPhase.PENDING
    assert [type(a) for a in first.actions] == [act.ResolveCheckpoint]
    found = resume.Lookup(1, "s3://ckpt/a", None, None, T0)
    d = decide(job, w.snapshot(), T0, lookup=found)
    assert d.phase is JobPhase.ADMITTED and d.status.attempt == 1
    w2 = _world(nodes=1)
    w2.report("p-0", sick={3: ECC})
    job2 = w2.job("a", "p", devices=8, status={"phase": "Pending", "attempt": 1}, checkpoint=CHECKPOINT)
    assert decide(job2, w2.snapshot(), T0, lookup=found).phase is JobPhase.PENDING  # the only node is condemned


# --- (c) a hung distributed job ----------------------------------------------------------------


def test_a_quiet_two_node_job_starts_the_hung_window() -> None:
    w = _world()
    job = _two_node_job(w)
    w.report("p-0", util=0.0, pods=_mine("g-a0-0"))
    w.report("p-1", util=0.0, pods=_mine("g-a0-1"))
    d, moved = decisions.run(w, job)
    assert moved is None and decisions.cond(d, "Hung") == (False, "Stalling")
    assert health_of(d).hung_since == decisions.stamp(T0) and d.actions == ()


def test_a_hung_two_node_job_is_restarted_from_its_checkpoint_naming_the_nodes() -> None:
    w = _world()
    job = _two_node_job(w, health_status={"hungSince": decisions.ago(RULES.hung_window + 1)})
    w.report("p-0", util=0.0, pods=_mine("g-a0-0"))
    w.report("p-1", util=0.0, pods=_mine("g-a0-1"))
    d, moved = decisions.run(w, job)
    assert moved is health.MoveReason.HUNG and d.phase is JobPhase.PENDING
    assert "p-0, p-1" in d.reason and "hung" in d.reason and "from its latest checkpoint" in d.reason
    assert act.DeleteWorkload("g-a0", "moved: hung") in d.actions


def test_a_hung_job_without_checkpoint_is_flagged_once() -> None:
    w = _world()
    job = _two_node_job(w, checkpoint=False, health_status={"hungSince": decisions.ago(RULES.hung_window + 1)})
    w.report("p-0", util=0.0, pods=_mine("g-a0-0"))
    w.report("p-1", util=0.0, pods=_mine("g-a0-1"))
    d, moved = decisions.run(w, job)
    assert moved is None and decisions.cond(d, "Hung") == (True, "Hung") and decisions.events(d) == ["Hung"]
    flagged = w.job(
        "g",
        "p",
        devices=16,
        status={
            **_running("g", devices=16, nodes=2),
            "health": {"hungSince": decisions.ago(RULES.hung_window + 1)},
            "conditions": [{"type": "Hung", "status": "True", "reason": "Hung"}],
        },
    )
    d2, _ = decisions.run(w, flagged)
    assert decisions.events(d2) == []


@pytest.mark.parametrize(
    "case",
    ["one device busy", "a pod not running", "a node not mapped"],
)
def test_not_hung(case: str) -> None:
    w = _world()
    job = w.job(
        "g",
        "p",
        devices=16,
        status={**_running("g", devices=16, nodes=2), "health": {"hungSince": decisions.ago(9999)}},
    )
    w.workload("g", 0, active=2)
    w.pod("g", 0, 0, node="p-0")
    w.pod("g", 0, 1, node="p-1", phase="Pending" if case == "a pod not running" else "Running")
    w.report("p-0", util=0.0, pods=_mine("g-a0-0"))
    busy = {1: ("g-a0-1",)} if case == "one device busy" else {}
    p1 = {} if case == "a node not mapped" else _mine("g-a0-1")
    w.report("p-1", util=0.0, pods=p1)
    if busy:
        snap_reports: Any = w.indices.reports
        r = snap_reports["p-1"][0]
        from dataclasses import replace

        devs = tuple(replace(d, utilization=80.0) if d.index == 1 else d for d in r.devices)
        snap_reports["p-1"] = [replace(r, devices=devs)]
    d, moved = decisions.run(w, job)
    assert moved is None
    if case == "a node not mapped":
        assert d.status.health is None  # nothing judged: markers kept
    else:
        assert health_of(d).hung_since is None


# --- (b) an idle reservation -------------------------------------------------------------------


def test_an_idle_job_starts_the_window_then_is_flagged_with_a_suggestion() -> None:
    w = _world()
    job = _one_node_job(w)
    w.report("p-0", util=0.0, memory=0.01, pods=_mine("a-a0-0"))
    d, _ = decisions.run(w, job)
    assert decisions.cond(d, "Idle") == (False, "Quiet") and health_of(d).idle_since == decisions.stamp(T0)
    later = T0 + dt.timedelta(seconds=RULES.idle_window)
    w2 = _world()
    job2 = _one_node_job(w2, health_status={"idleSince": decisions.stamp(T0)})
    w2.report("p-0", util=0.0, memory=0.01, pods=_mine("a-a0-0"), now=later)
    d2, moved = decisions.run(w2, job2, later)
    assert moved is None and d2.phase is JobPhase.RUNNING
    assert decisions.cond(d2, "Idle") == (True, "IdleReservation") and decisions.events(d2) == ["IdleReservation"]
    assert health_of(d2).right_size == RightSize(
        accelerator="h100-80gb",
        devices=4,
        reason="8 × h100-80gb sat idle: try 4 (check the memory fit with accelctl plan)",
    )
    assert health_of(d2).idle_since == decisions.stamp(T0)  # the marker holds


@pytest.mark.parametrize(
    ("memory", "mode", "hung", "idle"),
    [
        (0.75, "training", True, False),  # quiet but holding its memory: a stuck collective
        (0.01, "training", False, True),  # quiet and empty: a reservation nobody uses
        (0.75, "inference", False, True),  # a server waiting for requests is not hung
    ],
)
def test_hung_or_idle(memory: float, mode: str, hung: bool, idle: bool) -> None:
    w = _world()
    st = {**_running("a"), "health": {"hungSince": decisions.ago(99_999), "idleSince": decisions.ago(99_999)}}
    job = w.job("a", "p", devices=8, status=st, checkpoint=CHECKPOINT)
    if mode == "inference":
        assert job.spec is not None
        from dataclasses import replace

        job = replace(
            job, spec=job.spec.model_copy(update={"workload": job.spec.workload.model_copy(update={"mode": mode})})
        )
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    w.report("p-0", util=0.0, memory=memory, pods=_mine("a-a0-0"))
    d, moved = decisions.run(w, job)
    assert (moved is health.MoveReason.HUNG) is hung
    assert (decisions.cond(d, "Idle") == (True, "IdleReservation")) is idle


def test_a_busy_job_clears_the_idle_marker() -> None:
    w = _world()
    job = _one_node_job(w, health_status={"idleSince": decisions.ago(5000), "rightSize": {"devices": 4}})
    w.report("p-0", util=50.0, pods=_mine("a-a0-0"))
    d, _ = decisions.run(w, job)
    assert decisions.cond(d, "Idle") == (False, "Busy")
    assert health_of(d).idle_since is None and health_of(d).right_size is None


def _planned(devices: int, alternatives: list[dict[str, Any]]) -> JobView:
    w = _world()
    st = _running("a", devices=devices)
    st["plan"]["alternatives"] = alternatives
    return w.job("a", "p", devices=devices, status=st)


@pytest.mark.parametrize(
    ("devices", "alternatives", "expected"),
    [
        (
            8,
            [
                {"pool": "q", "accelerator": "l4", "devices": 8, "costUsd": 40.0, "reason": "r"},
                {"pool": "r", "accelerator": "h100-80gb", "devices": 2, "costUsd": 30.0, "reason": "r"},
                {"pool": "s", "accelerator": "h100-80gb", "devices": 8, "costUsd": 10.0, "reason": "same shape"},
                {"pool": "t", "accelerator": "a100-40gb", "devices": 4, "costUsd": 500.0, "reason": "dearer"},
            ],
            ("h100-80gb", 2),
        ),
        (8, [], ("h100-80gb", 4)),
        (1, [], ("h100-80gb", 1)),
    ],
)
def test_right_size(devices: int, alternatives: list[dict[str, Any]], expected: tuple[str, int]) -> None:
    s = health.right_size(_planned(devices, alternatives))
    assert (s.accelerator, s.devices) == expected and s.reason


# --- applied by the scheduler ------------------------------------------------------------------


def test_the_scheduler_taints_the_node_and_annotates_the_pods() -> None:
    w = _world()
    _one_node_job(w)
    w.report("p-0", pods=_mine("a-a0-0"), sick={3: ECC})
    fake = FakeNodeWriter()
    # The world's reports are written at T0: the scheduler's clock reads T0 too, so they are fresh.
    w.clock = ManualClock(T0)
    sched = w.scheduler
    sched.applier.node_writer = fake
    sched.marks.ready = True

    async def one_pass() -> None:
        await sched.step()
        while sched.applier.in_flight:
            await asyncio.gather(*list(sched.applier.in_flight))

    asyncio.run(one_pass())
    assert fake.taints == {"p-0": {v.TAINT_DEVICE_UNHEALTHY: "3"}}
    assert ("taint", "p-0", v.TAINT_DEVICE_UNHEALTHY, "3", "replace") in fake.calls  # the devices may change
    assert list(fake.annotations) == [("ns", "a-a0-0")]
    assert fake.annotations[("ns", "a-a0-0")]  # the checkpoint-now token
    assert sched.metrics.node_taints.labels("taint")._value.get() == 1
    assert sched.metrics.checkpoint_requests.labels("device-unhealthy")._value.get() == 1


# --- the report as the operator reads it -------------------------------------------------------


def _wire(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorNodeReport",
        "metadata": {"name": "n1"},
        "spec": {"nodeName": "n1"},
        "status": {"heartbeatTime": "2026-11-26T12:00:00Z", **status},
    }


def test_a_report_becomes_a_view_of_what_decisions_read() -> None:
    from accel_operator.adapters.kube.reports import report_view

    body = _wire(
        devices=[
            {
                "index": 0,
                "healthy": False,
                "problems": ["device lost", "b", "c", "d", "e"],
                "utilizationGpuPercent": 3.5,
                "memoryUsedBytes": 10,
                "memoryTotalBytes": 100,
                "allocatedPods": [{"namespace": "ns", "name": "p0"}],
                "processes": [
                    {"pid": 7, "pod": {"namespace": "ns", "name": "p1"}},
                    {"pid": 8},
                    {"pid": 9, "podUid": "0f0e0d0c-0b0a-0908-0706-050403020100"},
                ],
            },
            {"index": 1},
        ]
    )
    view = report_view(body)
    assert view is not None and view.node == "n1" and view.heartbeat == T0
    d0, d1 = view.devices
    assert (d0.healthy, d0.problems, d0.utilization, d0.memory_used, d0.memory_total) == (
        False,
        ("device lost", "b", "c", "d"),
        3.5,
        10,
        100,
    )
    assert d0.pods == {("ns", "p0"), ("ns", "p1")} and d1.healthy and d1.utilization is None
    # A process known by its pod's UID belongs to a pod; only pid 8 is nobody's.
    assert d0.pod_uids == {"0f0e0d0c-0b0a-0908-0706-050403020100"} and d0.stray_processes == 1
    assert view.sick == (d0,)


@pytest.mark.parametrize(
    "body",
    [
        {**_wire(), "spec": {"nodeName": "other"}},  # not named after its node
        {**_wire(), "spec": {}},
        _wire(devices=[{"index": -1}]),  # does not validate
        _wire(devices="many"),
        _wire(devices=[{"index": 0, "processes": [{"pid": 1, "podUid": "../../" + "a" * 40}]}]),  # not a UID
        _wire(heartbeatTime="x" * 10_000),
    ],
)
def test_a_report_that_does_not_validate_is_no_report(body: dict[str, Any]) -> None:
    from accel_operator.adapters.kube.reports import report_view

    assert report_view(body) is None


def test_a_report_without_heartbeat_is_never_fresh() -> None:
    from accel_operator.adapters.kube.reports import report_view

    view = report_view(_wire(heartbeatTime=None))
    assert view is not None and view.heartbeat is None and not view.fresh(T0, 1e9)
