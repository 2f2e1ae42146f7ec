"""The index of waiting jobs by pool and shape (engine/waiting.py): a pass woken by grown pools
that looks only at what the index gives decides exactly what the pass over every waiting job of
those pools decides (the same writes, in the same order, with the same statuses and heads, and
the same jobs left to the next pass), and admits what a full re-decide admits; the index kept
by incremental syncs equals one filed afresh."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_operator.engine import schedule
from accel_operator.engine.schedule import Pass
from accel_operator.engine.waiting import WaitingIndex
from accel_operator.reconcile.common.snapshot import AT_REST, HOLDING, JobKey, PodView, Snapshot
from tests.support.reconcile import T0, World

SHORT = {"mode": "training", "tokens": 10_000_000, "microBatch": 1}  # about a minute on 4 devices
POOLS = ("a", "b", "c")


def _running(pool: str, *, devices: int, seconds: int) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "workload": "r-a0",
        "admittedTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "startTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": devices, "nodes": 1, "durationSeconds": seconds},
    }


def _queue(rng: random.Random) -> World:
    """Random pools, a running job in each (a head then has a shadow), and a random queue of jobs
    of 1 to 16 devices pinned to one pool or free to use any, some short enough to backfill, every
    one decided once on a full fleet (so each waits, planned, with the status that says so); then
    the other tenant's pods shrink at random, so devices free here and there."""
    w = World()
    sizes = {name: rng.randint(1, 3) for name in POOLS}
    for name, nodes in sizes.items():
        w.pool(name, nodes=nodes, free=[0] * nodes)
        w.job(f"r-{name}", name, devices=4, status=_running(name, devices=4, seconds=rng.choice((60, 600, 6000))))
        w.pod(f"r-{name}", 0, 0, node=f"{name}-0", devices=4)
        w.workload(f"r-{name}", 0, active=1)
    for i in range(rng.randint(10, 30)):
        extra: dict[str, Any] = {"workload": SHORT} if rng.random() < 0.4 else {}
        w.job(
            f"j{i:02d}",
            rng.choice(POOLS),
            devices=rng.choice((1, 2, 4, 8, 16)),
            priority=rng.choice((0, 0, 10)),
            pinned=rng.random() < 0.6,
            **extra,
        )
    first = w.schedule_pass(T0)
    for write in first.writes:
        if write.status is not None and write.decision.phase is JobPhase.PENDING:
            w.jobs[write.job.key] = [replace(write.job, status=AcceleratorJobStatus.model_validate(write.status))]
    for name, nodes in sizes.items():
        for i in range(nodes):
            node = f"{name}-{i}"
            own = [p for p in w.pods.get(node, []) if p.namespace == "ns"]
            used = rng.choice((0, 2, 4)) if own else rng.choice((0, 2, 4, 6, 7, 8))
            w.pods[node] = own + ([PodView("other", f"user-{node}", node, "Running", used)] if used else [])
    return w


def _waiting(snap: Snapshot) -> set[JobKey]:
    return {k for k, j in snap.jobs.items() if j.phase not in HOLDING and j.phase not in AT_REST}


def _filed(snap: Snapshot, w: World) -> WaitingIndex:
    index = WaitingIndex()
    index.sync(snap.jobs, _waiting(snap), set(), w.plans, rebuilds=0)
    return index


def _writes(p: Pass) -> list[tuple[str, Any, Any]]:
    return [(x.job.name, x.decision, x.patch) for x in p.writes]


def _heads(p: Pass) -> dict[str, Any]:
    return {pool: (b.job, b.gang, b.shadow, b.extra) for pool, b in p.snapshot.blocked.items()}


def _admissions(p: Pass) -> list[tuple[str, Any]]:
    return [(job.name, d.admitted) for job, d in p.decisions if d.admitted is not None]


@pytest.mark.parametrize("seed", range(40))
def test_a_pass_over_the_index_decides_what_the_pass_over_every_waiting_job_decides(seed: int) -> None:
    """Random queues, grown pools (some, or any: a capacity pass), jobs an event named and jobs
    whose last write is in flight, at random: the pass that looks at what the index gives writes
    the same decisions, in the same order, with the same status patches and heads, and leaves the
    same jobs to the next pass, as the pass over every waiting job of the grown pools; and it
    admits what a full re-decide of them admits, on the same shapes. It fails when the index
    leaves out a job that pass would have decided (a head, a job that fits, a job in flight)."""
    rng = random.Random(seed)
    w = _queue(rng)
    snap = w.observe(T0)
    waiting = _waiting(snap)
    index = _filed(snap, w)
    rules = schedule.rules_from(w.settings, snap)
    for _ in range(3):
        grown = None if rng.random() < 0.25 else {p for p in POOLS if rng.random() < 0.5}
        dirty = {k for k in waiting if rng.random() < 0.15}
        busy = {k for k in waiting if rng.random() < 0.1}
        keys = dirty | schedule.waiting_for(snap, w.plans, grown, waiting)
        plain = schedule.schedule_pass(snap, keys, T0, rules, w.plans, marked=dirty, busy=busy)
        woken = index.queue(snap, grown, busy)
        indexed = schedule.schedule_pass(snap, dirty, T0, rules, w.plans, marked=dirty, busy=busy, woken=woken)
        every = schedule.schedule_pass(snap, keys, T0, rules, w.plans, marked=dirty, busy=busy, full=True)
        assert _writes(indexed) == _writes(plain)
        assert indexed.retry == plain.retry
        assert _heads(indexed) == _heads(plain) == _heads(every)
        assert _admissions(indexed) == _admissions(every)
        assert len(woken.keys) <= len(keys)


@pytest.mark.parametrize("seed", range(12))
def test_the_index_kept_by_syncs_equals_one_filed_afresh(seed: int) -> None:
    """Jobs admitted, moved in the queue (another submission time), deleted and added between
    passes, and jobs not planned yet when the index was filed planned since (their views the
    same): the index, told only the keys the picture read again and the plans' new links, files
    every job as an index filed from scratch does (the same jobs, lists in the same order, the
    same shapes). It fails when a sync misses the jobs linked to a plan since."""
    rng = random.Random(seed)
    w = _queue(rng)
    for i in range(rng.randint(1, 4)):  # not planned yet when the index is filed
        w.job(f"u{i}", rng.choice(POOLS), devices=rng.choice((1, 4, 8)))
    snap = w.observe(T0)
    kept = _filed(snap, w)
    assert kept.unplanned
    changed: set[JobKey] = set()
    names = [k for k in snap.jobs if k[1].startswith("j")]
    for key in rng.sample(names, k=min(len(names), rng.randint(1, 8))):
        job = w.jobs[key][0]
        roll = rng.random()
        if roll < 0.3:
            del w.jobs[key]
        elif roll < 0.6:
            w.jobs[key] = [replace(job, created=job.created + dt.timedelta(seconds=rng.choice((-30, 5, 60))))]
        else:
            w.jobs[key] = [replace(job, status=AcceleratorJobStatus.model_validate({"phase": "Admitted"}))]
        changed.add(key)
    for i in range(rng.randint(0, 4)):
        w.job(f"n{i}", rng.choice(POOLS), devices=rng.choice((1, 4, 8)))
        changed.add(("ns", f"n{i}"))
    snap = w.observe(T0)
    w.schedule_pass(T0, full=True)  # plans every job (the plans' links are what a sync follows)
    kept.sync(snap.jobs, _waiting(snap), changed, w.plans, rebuilds=0)
    fresh = _filed(snap, w)
    assert kept.filed == fresh.filed
    assert {k: v for k, v in kept.lists.items() if v} == fresh.lists
    assert {p: {g: m for g, m in by.items() if m} for p, by in kept.shapes.items()} == fresh.shapes
    assert (kept.unplanned, kept.must, kept.must_else) == (fresh.unplanned, fresh.must, fresh.must_else)
    assert not changed and not w.plans.planned


def test_a_short_job_behind_long_ones_of_the_same_shape_still_backfills() -> None:
    """A head of 16 devices holds a pool of two nodes with 12 devices free (16 once its running job
    ends in 10 minutes); behind it wait two long jobs and then a short one, all three of the same
    shape (one node, 4 devices, the same memory). A pass after the pool grew, over the index,
    decides the head and the short job, which backfills, and not the long ones: the list of a
    shape is walked past jobs that would end too late, since a later one may end in time."""
    w = World().pool("p", nodes=2, free=[8, 8])
    w.job("r", "p", devices=4, status=_running("p", devices=4, seconds=600))
    w.pod("r", 0, 0, node="p-0", devices=4)
    w.workload("r", 0, active=1)
    w.job("head", "p", devices=16, priority=10)
    for name in ("long1", "long2"):
        w.job(name, "p", devices=4, workload={**SHORT, "tokens": 100_000_000_000})
    w.job("short", "p", devices=4, workload=SHORT)
    first = w.schedule_pass(T0)
    assert [(j.name, d.phase) for j, d in first.decisions if d.admitted] == [("short", JobPhase.ADMITTED)]
    for write in first.writes:  # every job waits, the short one too (as if it came after the pass)
        status = write.status if write.job.name != "short" else _pending(first)
        w.jobs[write.job.key] = [replace(write.job, status=AcceleratorJobStatus.model_validate(status))]
    snap = w.observe(T0)
    rules = schedule.rules_from(w.settings, snap)
    woken = _filed(snap, w).queue(snap, {"p"}, ())
    indexed = schedule.schedule_pass(snap, (), T0, rules, w.plans, woken=woken)
    assert [j.name for j, _d in indexed.decisions] == ["head", "short"]
    assert _admissions(indexed) == [("short", indexed.decisions[1][1].admitted)]


def _pending(p: Pass) -> dict[str, Any]:
    """The status a long job waiting behind the head was given (the short job's, had it waited)."""
    [status] = [x.status for x in p.writes if x.job.name == "long1"]
    assert status is not None
    return status
