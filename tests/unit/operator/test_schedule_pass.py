"""schedule_pass(snapshot, keys, now, rules, plans): one scheduling pass as a pure function, as
tables of small worlds (no scheduler, no clock, no I/O): the queue order (priority, then
submission, jobs that hold devices first), backfill around a blocked head, one decision per job;
and the engine's ManualClock."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_operator.engine.clock import ManualClock, SystemClock
from accel_operator.engine.schedule import Pass
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import Decision
from accel_operator.reconcile.common.snapshot import PodView
from accel_operator.reconcile.nodes import consolidate
from tests.support.reconcile import T0, World
from tests.unit.operator.test_consolidate import ALLOW, CKPT, _fragmented

SHORT = {"mode": "training", "tokens": 10_000_000, "microBatch": 1}  # about a minute on 4 devices


def _running(pool: str, *, devices: int, seconds: int) -> dict[str, Any]:
    """A job running in ``pool`` since T0 on ``devices`` devices, planned for ``seconds``."""
    return {
        "phase": "Running",
        "attempt": 0,
        "workload": "r-a0",
        "admittedTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "startTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": devices, "nodes": 1, "durationSeconds": seconds},
    }


def _decided(p: Pass) -> list[str]:
    return [job.name for job, _d in p.decisions]


def _of(p: Pass, name: str) -> Decision:
    [d] = [d for job, d in p.decisions if job.name == name]
    return d


def _admitted(p: Pass) -> list[str]:
    return [job.name for job, d in p.decisions if d.phase is JobPhase.ADMITTED]


def _reason(d: Decision) -> str | None:
    c = next((c for c in d.conditions if c.type == "Admitted"), None)
    return None if c is None else c.reason


# --- queue order ---------------------------------------------------------------------------------

# (case, jobs in submission order as (name, priority), decided in this order, admitted)
QUEUE = [
    ("one job", [("a", 0)], ["a"], ["a"]),
    ("earlier submission first among equals", [("a", 0), ("b", 0)], ["a", "b"], ["a"]),
    ("higher priority first", [("a", 0), ("b", 10)], ["b", "a"], ["b"]),
    ("priority, then submission", [("a", 0), ("b", 5), ("c", 5), ("d", 10)], ["d", "b", "c", "a"], ["d"]),
    ("a negative priority goes last", [("a", -1), ("b", 0), ("c", 0)], ["b", "c", "a"], ["b"]),
]


@pytest.mark.parametrize(("case", "jobs", "order", "admitted"), QUEUE, ids=[c[0] for c in QUEUE])
def test_waiting_jobs_are_decided_by_priority_then_submission(
    case: str, jobs: list[tuple[str, int]], order: list[str], admitted: list[str]
) -> None:
    # One whole node: the first job in queue order takes it; the rest wait behind it.
    w = World().pool("p", nodes=1)
    for name, priority in jobs:
        w.job(name, "p", devices=8, priority=priority)
    p = w.schedule_pass(T0, reversed([("ns", n) for n, _ in jobs]))  # the keys' order does not matter
    assert _decided(p) == order, case
    assert _admitted(p) == admitted, case
    for name in order[1:]:
        assert _of(p, name).phase is JobPhase.PENDING, name
        assert _reason(_of(p, name)) in ("QueuedBehind", "WaitingForCapacity"), name


def test_jobs_that_hold_devices_are_decided_before_waiting_ones() -> None:
    w = World().pool("p", nodes=1)
    w.job("early", "p", devices=4, priority=100)
    w.job("r", "p", devices=4, status=_running("p", devices=4, seconds=600))
    w.pod("r", 0, 0, node="p-0", devices=4)
    w.workload("r", 0, active=1)
    p = w.schedule_pass(T0)
    assert _decided(p) == ["r", "early"]
    # The running job's devices are counted before the waiting one is decided: 4 of 8 are left.
    assert _admitted(p) == ["early"]
    assert p.snapshot.capacity["p"].free_devices == 0


def test_an_admission_is_seen_by_every_later_decision_of_the_pass() -> None:
    w = World().pool("p", nodes=2)
    for name in ("a", "b", "c"):
        w.job(name, "p", devices=8)
    p = w.schedule_pass(T0)
    assert _admitted(p) == ["a", "b"]
    assert _of(p, "c").phase is JobPhase.PENDING
    assert p.queue == {"p": 1}


# --- backfill ------------------------------------------------------------------------------------

# (case, a head waiting for the whole node, the later job's workload (None: examples/01, about 22
# minutes on 4 devices), the later job's phase, its Admitted reason). A running job holds 4 of the
# node's 8 devices for 10 minutes: the head could start then (its shadow time).
BACKFILL = [
    ("no head: the later job fits", False, None, JobPhase.ADMITTED, "Admitted"),
    ("ends before the head could start: backfilled", True, SHORT, JobPhase.ADMITTED, "Admitted"),
    ("would still hold the head's devices: queued behind", True, None, JobPhase.PENDING, "QueuedBehind"),
]


@pytest.mark.parametrize(("case", "head", "workload", "phase", "reason"), BACKFILL, ids=[c[0] for c in BACKFILL])
def test_later_jobs_backfill_only_around_the_blocked_head(
    case: str, head: bool, workload: dict[str, Any] | None, phase: JobPhase, reason: str
) -> None:
    w = World().pool("p", nodes=1)
    w.job("r", "p", devices=4, status=_running("p", devices=4, seconds=600))
    w.pod("r", 0, 0, node="p-0", devices=4)
    w.workload("r", 0, active=1)
    if head:
        w.job("head", "p", devices=8)
    extra: dict[str, Any] = {"workload": workload} if workload is not None else {}
    w.job("later", "p", devices=4, **extra)
    p = w.schedule_pass(T0)
    if head:
        assert _of(p, "head").phase is JobPhase.PENDING, case
        assert p.snapshot.blocked["p"].job == ("ns", "head"), case
    later = _of(p, "later")
    assert later.phase is phase, (case, later.reason)
    assert _reason(later) == reason, case
    if reason == "QueuedBehind":
        assert "held for ns/head, which is ahead in the queue" in later.reason


# --- one decision per job ------------------------------------------------------------------------


def _three() -> World:
    w = World().pool("p", nodes=3)
    for name in ("a", "b", "c"):
        w.job(name, "p", devices=8)
    w.job("done", "p", devices=8, status={"phase": "Succeeded"})
    return w


A, B, C, DONE = ("ns", "a"), ("ns", "b"), ("ns", "c"), ("ns", "done")

# (case, keys, marked (None: the keys), busy, decided, left to the next pass)
ONCE: list[tuple[str, list[tuple[str, str]], list[tuple[str, str]] | None, list[tuple[str, str]], list[str], set[Any]]]
ONCE = [
    ("every key once", [A, B, C], None, [], ["a", "b", "c"], set()),
    ("a key given twice is decided once", [A, B, A, C, B], None, [], ["a", "b", "c"], set()),
    ("only the keys given", [C], None, [], ["c"], set()),
    ("a key of no job is ignored", [("ns", "gone"), B], None, [], ["b"], set()),
    ("a busy job is left to the next pass", [A, B, C], None, [B], ["a", "c"], {B}),
    ("a job at rest is decided when an event named it", [DONE, A], None, [], ["a", "done"], set()),
    ("a job at rest is not decided when none did", [DONE, A], [A], [], ["a"], set()),
]


@pytest.mark.parametrize(("case", "keys", "marked", "busy", "decided", "retry"), ONCE, ids=[c[0] for c in ONCE])
def test_each_job_is_decided_at_most_once_per_pass(
    case: str,
    keys: list[tuple[str, str]],
    marked: list[tuple[str, str]] | None,
    busy: list[tuple[str, str]],
    decided: list[str],
    retry: set[Any],
) -> None:
    p = _three().schedule_pass(T0, keys, marked=marked, busy=busy)
    assert sorted(_decided(p)) == decided, case
    assert len(_decided(p)) == len(set(_decided(p))), case
    assert set(p.retry) == retry, case


def test_a_job_at_rest_left_undecided_is_still_counted_in_its_phase() -> None:
    p = _three().schedule_pass(T0, [DONE, A], marked=[A])
    assert p.phases.get("Succeeded") == 1
    assert p.phases.get("Admitted") == 1


def test_the_same_snapshot_is_decided_the_same_way_twice() -> None:
    # A pure pass: the plan cache it fills changes nothing in what it decides.
    w = _three()
    first, again = w.schedule_pass(T0), w.schedule_pass(T0)
    assert first.decisions == again.decisions
    assert [x.patch for x in first.writes] == [x.patch for x in again.writes]


def test_a_write_carries_its_status_patch_and_a_decision_already_held_writes_nothing() -> None:
    w = World().pool("p", nodes=1, free=[0])
    w.job("a", "p", devices=8)
    [first] = w.schedule_pass(T0).writes
    assert first.patch is not None and first.patch["phase"] == "Pending" and first.acts
    assert first.status is not None and first.status["phase"] == "Pending"
    # The job now holds that status (as the watch shows it): deciding it again writes nothing.
    w.job("a", "p", devices=8, status=first.status)
    [again] = w.schedule_pass(T0).writes
    assert again.decision.phase is JobPhase.PENDING
    assert again.patch is None and again.status is None and not again.acts


# --- consolidation within the pass -------------------------------------------------------------


@pytest.mark.parametrize("held", [True, False], ids=["the jobs to move wrote nothing", "they are writing"])
def test_a_gang_starts_a_move_unless_the_job_to_move_writes_in_this_pass(held: bool) -> None:
    # Two jobs of 4 devices on two nodes, a waiting gang of 8, a policy that allows moves.
    w = _fragmented().policy("platform", consolidation=ALLOW)
    w.workload("x", 0, active=1)
    w.workload("y", 0, active=1)
    if held:  # the running jobs already hold what they are decided to hold: their decisions write nothing
        for x in w.schedule_pass(T0, [("ns", "x"), ("ns", "y")]).writes:
            w.job(x.job.name, "p", devices=4, status=x.status, checkpoint=CKPT)
    w.job("g", "p", devices=8)
    p = w.schedule_pass(T0)
    writes = [(x.job.name, x.acts) for x in p.writes]
    if held:
        # x's own decision wrote nothing, so x is free to move: its move's first step is written
        # (a checkpoint request) before the gang's own decision.
        assert writes == [("x", False), ("y", False), ("x", True), ("g", True)]
        assert p.stages == (consolidate.Stage.REQUESTED,)
        assert any(isinstance(a, act.RequestCheckpoint) for a in p.writes[2].decision.actions)
        assert p.retry == frozenset()
    else:
        # x's decision is being written in this pass: the gang proposes again on the next.
        assert writes == [("x", True), ("y", True), ("g", True)]
        assert p.stages == ()
        assert p.retry == {("ns", "g")}


# --- the clock ----------------------------------------------------------------------------------


def test_the_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(T0)
    mono = clock.monotonic()
    assert clock.now() == T0 and clock.monotonic() == mono
    clock.advance(90)
    assert clock.now() == T0 + dt.timedelta(seconds=90)
    assert clock.monotonic() == mono + 90
    clock.set(T0 + dt.timedelta(hours=1))
    assert clock.now() == T0 + dt.timedelta(hours=1) and clock.monotonic() == mono + 3600
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock(dt.datetime(2026, 1, 1))  # the naive time it refuses


def test_the_system_clock_is_aware_and_monotonic() -> None:
    clock = SystemClock()
    assert clock.now().tzinfo is not None
    first = clock.monotonic()
    assert clock.monotonic() >= first


def test_a_waiting_jobs_own_status_coming_back_decides_it_again_only_if_it_can_change() -> None:
    """Three jobs wait for a node with one free device. The watch then shows each the status
    the engine wrote (an event on each): the head is decided again (it blocks the pool), the
    others, whose shapes cannot fit, are not, unless the event said something the capacity
    does not: a user's stop on one, a new generation of the spec on another."""
    w = World().pool("p", nodes=1, free=[1])
    for name in ("head", "big", "stop", "edited"):
        w.job(name, "p", devices=8 if name != "head" else 4)
    first = w.schedule_pass(T0)
    assert [d.phase for _j, d in first.decisions] == [JobPhase.PENDING] * 4
    for write in first.writes:
        assert write.status is not None
        status = AcceleratorJobStatus.model_validate(write.status)
        view = replace(write.job, status=status, resource_version="2")
        if view.name == "stop":
            view = replace(view, stop_request="now")
        if view.name == "edited":
            view = replace(view, generation=2)
        w.jobs[view.key] = [view]
    again = w.schedule_pass(T0, full=False)
    assert _decided(again) == ["head", "stop", "edited"]
    assert _of(again, "stop").phase is JobPhase.STOPPED
    # A full pass (the resync) decides every one of them.
    assert _decided(w.schedule_pass(T0)) == ["head", "big", "stop", "edited"]


@pytest.mark.parametrize("seed", range(16))
def test_skipping_jobs_that_can_only_wait_admits_the_same_jobs_in_the_same_order(seed: int) -> None:
    """Random queues over pools that free random capacity: a pass that skips the waiting jobs
    whose shapes cannot fit (woken by the capacity, or by their own status coming back) admits
    the same jobs, in the same order, on the same shapes, with the same heads blocking the
    pools, as a pass that decides every one of them."""
    rng = random.Random(seed)
    w = World()
    pools = {name: rng.randint(1, 3) for name in ("a", "b", "c")}
    for name, nodes in pools.items():
        w.pool(name, nodes=nodes, free=[0] * nodes)
    for i in range(rng.randint(6, 14)):
        pool = rng.choice(sorted(pools))
        devices = rng.choice((1, 2, 4, 8, 16))
        w.job(f"j{i:02d}", pool, devices=devices, priority=rng.choice((0, 0, 10)), pinned=rng.random() < 0.7)
    first = w.schedule_pass(T0)
    assert not _admitted(first)  # nothing is free yet: every job waits
    for write in first.writes:
        if write.status is not None:
            w.jobs[write.job.key] = [replace(write.job, status=AcceleratorJobStatus.model_validate(write.status))]
    for name, nodes in pools.items():  # the other tenant's pods shrink: devices free here and there
        for i in range(nodes):
            node = f"{name}-{i}"
            used = rng.choice((0, 2, 4, 6, 7, 8))
            w.pods[node] = [PodView("other", f"user-{node}", node, "Running", used)] if used else []
    _skipping_decides_the_same(w, list(w.jobs))


@pytest.mark.parametrize("seed", range(24))
def test_skipping_jobs_queued_behind_a_head_admits_the_same_jobs_in_the_same_order(seed: int) -> None:
    """As above, with running jobs that end at planned times (so a pool's head has a shadow) and
    jobs short enough to backfill before it: a pass that also skips the waiting jobs whose shapes
    fit but whose pools are held for a head ahead of them (and that may not backfill around it)
    admits the same jobs, in the same order, on the same shapes, with the same heads, as a pass
    that decides every one of them, and decides fewer."""
    rng = random.Random(seed)
    w = World()
    pools = {name: rng.randint(1, 3) for name in ("a", "b")}
    for name, nodes in pools.items():
        w.pool(name, nodes=nodes, free=[0] * nodes)
        w.job(f"r-{name}", name, devices=4, status=_running(name, devices=4, seconds=rng.choice((60, 600, 6000))))
        w.pod(f"r-{name}", 0, 0, node=f"{name}-0", devices=4)
        w.workload(f"r-{name}", 0, active=1)
    for i in range(rng.randint(8, 16)):
        pool = rng.choice(sorted(pools))
        devices = rng.choice((1, 2, 4, 8, 16))
        extra: dict[str, Any] = {"workload": SHORT} if rng.random() < 0.4 else {}
        w.job(f"j{i:02d}", pool, devices=devices, priority=rng.choice((0, 0, 10)), pinned=rng.random() < 0.7, **extra)
    first = w.schedule_pass(T0)
    for write in first.writes:
        if write.status is not None and write.decision.phase is JobPhase.PENDING:
            w.jobs[write.job.key] = [replace(write.job, status=AcceleratorJobStatus.model_validate(write.status))]
    for name, nodes in pools.items():  # the other tenant's pods shrink: devices free here and there
        for i in range(nodes):
            node = f"{name}-{i}"
            own = [p for p in w.pods.get(node, []) if p.namespace == "ns"]
            used = rng.choice((0, 2, 4)) if own else rng.choice((0, 2, 4, 6, 7, 8))
            w.pods[node] = own + ([PodView("other", f"user-{node}", node, "Running", used)] if used else [])
    _skipping_decides_the_same(w, [k for k in w.jobs if not k[1].startswith("r-")])


def test_jobs_queued_behind_a_head_are_not_decided_again_until_they_may_run() -> None:
    """A head of 16 devices holds a pool of two nodes, 12 devices free (16 once its running job ends
    in 10 minutes); two jobs of 4 that run 22 minutes wait behind it (QueuedBehind). A pass woken by the
    capacity decides the head again and skips the two (their shape fits, but the pool is held
    and they would not end before the head may start); a short job of 4 behind it, which would
    end in time, is decided and backfills."""
    w = World().pool("p", nodes=2, free=[8, 8])
    w.job("r", "p", devices=4, status=_running("p", devices=4, seconds=600))
    w.pod("r", 0, 0, node="p-0", devices=4)
    w.workload("r", 0, active=1)
    w.job("head", "p", devices=16, priority=10)
    w.job("long1", "p", devices=4)
    w.job("long2", "p", devices=4)
    first = w.schedule_pass(T0)
    for write in first.writes:
        if write.status is not None and write.decision.phase is JobPhase.PENDING:
            w.jobs[write.job.key] = [replace(write.job, status=AcceleratorJobStatus.model_validate(write.status))]
    assert _admitted(first) == [] and _reason(_of(first, "long1")) == "QueuedBehind"
    w.job("short", "p", devices=4, workload=SHORT)
    keys = [("ns", n) for n in ("head", "long1", "long2", "short")]
    woken = w.schedule_pass(T0, keys, marked=[("ns", "short")], full=False)
    assert _decided(woken) == ["head", "short"]
    assert _admitted(woken) == ["short"]
    assert _admitted(w.schedule_pass(T0, keys, full=True)) == ["short"]


def _skipping_decides_the_same(w: World, keys: list[Any]) -> None:
    """A pass woken by grown pools (skipping what cannot change) and one woken by the jobs' own
    statuses coming back admit the same jobs, on the same shapes, with the same heads, as a pass
    that decides every one of ``keys``; the woken pass decides no more of them."""
    every = w.schedule_pass(T0, keys, marked=(), full=True)
    woken = w.schedule_pass(T0, keys, marked=(), full=False)  # a pass after pools grew
    echoed = w.schedule_pass(T0, keys, marked=keys, full=False)  # their own statuses came back

    def admissions(p: Pass) -> list[tuple[str, Any]]:
        return [(job.name, d.admitted) for job, d in p.decisions if d.admitted is not None]

    def heads(p: Pass) -> dict[str, Any]:
        return {pool: (b.job, b.gang, b.shadow, b.extra) for pool, b in p.snapshot.blocked.items()}

    assert admissions(woken) == admissions(every) == admissions(echoed)
    assert heads(woken) == heads(every) == heads(echoed)
    assert len(woken.decisions) <= len(every.decisions)
