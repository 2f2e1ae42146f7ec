"""The scheduler's incremental picture of the cluster (``handlers.observed``) against a fold of
every index entry: after random sequences of the events the handlers report, both give the same
snapshot. Also: which pools a refresh says grew, and that a pass skips only jobs that can only
wait."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import random
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_operator.engine.cache import grew
from accel_operator.reconcile.common.snapshot import (
    AT_REST,
    HOLDING,
    JobView,
    NodeView,
    PodView,
    Snapshot,
    WorkloadView,
    pool_capacity,
)
from accel_operator.reconcile.job.decide import decide
from tests.support.reconcile import T0, World


def _same(a: Snapshot, b: Snapshot) -> None:
    assert dict(a.pools) == dict(b.pools)
    assert dict(a.jobs) == dict(b.jobs)
    assert dict(a.workloads) == dict(b.workloads)
    assert {k: set(v) for k, v in a.pods_by_job.items()} == {k: set(v) for k, v in b.pods_by_job.items()}
    assert dict(a.reservations) == dict(b.reservations)
    assert set(a.capacity) == set(b.capacity)
    # The indexes a waiting gang's consolidation reads instead of every job and node.
    assert (a.pool_nodes, a.holders, a.markers) == (b.pool_nodes, b.holders, b.markers)
    for name, cap in a.capacity.items():
        other = b.capacity[name]
        assert sorted(cap.node_free) == sorted(other.node_free), name
        assert (cap.total_nodes, cap.usable_nodes, cap.allocated, cap.reserved) == (
            other.total_nodes,
            other.usable_nodes,
            other.allocated,
            other.reserved,
        ), name


def _admitted(job: JobView, pool: str, devices: int, nodes: int, attempt: int = 0) -> JobView:
    status = AcceleratorJobStatus.model_validate(
        {
            "phase": "Admitted",
            "attempt": attempt,
            "admittedTime": "2026-11-26T12:00:00Z",
            "plan": {"pool": pool, "devices": devices, "nodes": nodes, "durationSeconds": 3600},
        }
    )
    return JobView(
        job.namespace, job.name, job.uid, job.created, job.generation, job.spec, (), status, resource_version="5"
    )


class Driver:
    """A World whose changes are reported to the scheduler the way the kopf handlers report them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.w = World().pool("a", nodes=3, per_node=8).pool("b", nodes=2, per_node=4, free=[4, 1])
        self.sched = self.w.scheduler
        self.pod_seen: dict[tuple[str, str], PodView] = {}
        for i in range(6):
            self.w.job(f"j{i}", self.rng.choice(["a", "b"]))
        self.sched._observe(T0)  # the first refresh rebuilds

    def _store_pod(self, pod: PodView | None, before: PodView | None) -> None:
        for old in [before] if before is not None else []:
            for key in (old.node, old.job):
                if key is not None and old in self.w.pods.get(key, []):
                    self.w.pods[key].remove(old)
                    if not self.w.pods[key]:
                        del self.w.pods[key]
        if pod is not None:
            for key in (pod.node, pod.job):
                if key is not None:
                    self.w.pods.setdefault(key, []).append(pod)
        self.sched.pods_changed(before, pod)

    def step(self) -> None:
        rng, w = self.rng, self.w
        what = rng.choice(["node", "pod", "pod", "pod", "job", "job", "workload", "delete-job", "new-job"])
        if what == "node":
            name = rng.choice(sorted(w.nodes))
            old: NodeView = w.nodes[name][0]
            new = NodeView(
                name,
                old.labels,
                old.devices,
                ready=rng.random() > 0.3,
                unschedulable=rng.random() < 0.2,
                terminating=rng.random() < 0.1,
            )
            w.nodes[name] = [new]
            self.sched.node_changed(name)
        elif what == "pod":
            keys = sorted(k for k in w.jobs)
            job = rng.choice(keys)
            index = rng.randrange(2)
            name = f"{job[1]}-a0-{index}"
            before = self.pod_seen.get(("ns", name))
            choice = rng.random()
            if choice < 0.2 and before is not None:
                self.pod_seen.pop(("ns", name))
                self._store_pod(None, before)
                return
            node = rng.choice([None, *sorted(w.nodes)])
            phase = rng.choice(["Pending", "Running", "Running", "Succeeded", "Failed"])
            pod = PodView("ns", name, node, phase, rng.choice([1, 2, 4]), job, 0)
            self.pod_seen[("ns", name)] = pod
            self._store_pod(pod, before)
        elif what == "job":
            key = rng.choice(sorted(w.jobs))
            job = w.jobs[key][0]
            if job.phase in (JobPhase.ADMITTED, JobPhase.RUNNING) and rng.random() < 0.5:
                status = AcceleratorJobStatus.model_validate({"phase": rng.choice(["Succeeded", "Pending"])})
                w.jobs[key] = [
                    JobView(job.namespace, job.name, job.uid, job.created, job.generation, job.spec, (), status)
                ]
            else:
                pool = rng.choice(["a", "b"])
                nodes = rng.choice([1, 2])
                w.jobs[key] = [_admitted(job, pool, nodes * rng.choice([1, 2, 4]), nodes)]
            self.sched.mark(key)
        elif what == "workload":
            key = rng.choice(sorted(w.jobs))
            name = f"{key[1]}-a0"
            if ("ns", name) in w.workloads and rng.random() < 0.3:
                del w.workloads[("ns", name)]
            else:
                w.workloads[("ns", name)] = [WorkloadView("ns", name, key, 0, active=rng.randrange(3))]
            self.sched.workload_changed(("ns", name), key)
        elif what == "delete-job" and len(w.jobs) > 2:
            key = rng.choice(sorted(w.jobs))
            del w.jobs[key]
            self.sched.forget(key)
        else:
            key = ("ns", f"n{rng.randrange(1000)}")
            if key not in w.jobs:
                w.job(key[1], rng.choice(["a", "b"]))
                self.sched.mark(key)


@pytest.mark.parametrize("seed", range(12))
def test_incremental_snapshot_equals_a_full_fold(seed: int) -> None:
    d = Driver(seed)
    for _ in range(60):
        for _ in range(d.rng.randrange(1, 4)):
            d.step()
        incremental, _grown = d.sched._observe(T0)
        full = World()
        full.pools, full.nodes, full.pods, full.workloads, full.jobs = d.w.pools, d.w.nodes, d.w.pods, {}, {}
        full.scheduler.indices = d.sched.indices
        _same(incremental, full.scheduler.observe(T0))
        # Each pool's capacity, folded from the nodes' entries the refreshes kept, is what a fold
        # of every node of the pool gives now (each entry follows its node and its devices in use).
        obs = d.sched.observed
        for name, cap in incremental.capacity.items():
            nodes, reserved = obs.pool_nodes.get(name, {}).values(), obs.pool_reservations.get(name, {}).values()
            assert cap == pool_capacity(obs.pools[name], nodes, obs.used, reserved), name
        # The waiting jobs a pass after a pool grew looks through, kept as the jobs change.
        assert d.sched.observed.waiting == full.scheduler.observed.waiting
        assert d.sched.observed.waiting == {
            k for k, j in incremental.jobs.items() if j.phase not in HOLDING and j.phase not in AT_REST
        }


def test_a_pod_binding_where_its_job_reserved_grows_nothing() -> None:
    w = World().pool("p", nodes=2, per_node=8)
    job = w.job("j", "p", devices=8)
    w.jobs[job.key] = [_admitted(job, "p", 8, 1)]
    sched = w.scheduler
    before, _ = sched._observe(T0)
    assert sorted(before.capacity["p"].node_free) == [0, 8]
    pod = PodView("ns", "j-a0-0", "p-0", "Running", 8, job.key, 0)
    w.pod("j", 0, 0, node="p-0")
    sched.pods_changed(None, pod)
    after, grown = sched._observe(T0)
    assert grown == set()
    assert sorted(after.capacity["p"].node_free) == [0, 8]
    # The pod ends and the job finishes: its devices come back, and the pool grew.
    w.pods.clear()
    sched.pods_changed(pod, None)
    w.jobs[job.key] = [JobView("ns", "j", job.uid, job.created, 1, job.spec, (), AcceleratorJobStatus())]
    sched.mark(job.key)
    final, grown = sched._observe(T0)
    assert grown == {"p"}
    assert sorted(final.capacity["p"].node_free) == [8, 8]


def test_the_accountants_read_rebuilds_nothing_and_leaves_the_pools_that_grew_to_the_next_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = World().pool("p", nodes=2, per_node=8)
    job = w.job("j", "p", devices=8)
    w.jobs[job.key] = [_admitted(job, "p", 8, 1)]
    sched = w.scheduler
    sched._observe(T0)  # the first refresh rebuilds
    rebuilds: list[int] = []
    real = sched.observed.rebuild

    def counted(*a: Any, **k: Any) -> None:
        rebuilds.append(1)
        real(*a, **k)

    monkeypatch.setattr(sched.observed, "rebuild", counted)
    assert dict(sched.current(T0).jobs) == dict(sched.observe(T0).jobs)
    assert len(rebuilds) == 1  # observe() rebuilt; current() did not
    # The job finishes: the accountant's read sees its devices come back, and the scheduler's
    # next pass is still told the pool grew (the read does not take that from it).
    w.jobs[job.key] = [JobView("ns", "j", job.uid, job.created, 1, job.spec, (), AcceleratorJobStatus())]
    sched.mark(job.key)
    seen = sched.current(T0)
    assert sorted(seen.capacity["p"].node_free) == [8, 8]
    _snap, grown = sched._observe(T0)
    assert grown == {"p"}
    assert sched._observe(T0)[1] == set()
    assert len(rebuilds) == 1


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ((8, 0), (8, 0), False),
        ((8, 0), (0, 8), False),  # the same shapes fit
        ((8, 0), (8, 1), True),  # one more device: a 1-device gang fits twice now
        ((4, 4), (8, 0), True),  # one whole node: an 8-device gang fits now
        ((8, 8), (8, 4), False),
    ],
)
def test_grew_means_some_gang_shape_fits_that_did_not(old: Any, new: Any, expected: bool) -> None:
    w = World().pool("p", nodes=2, per_node=8)
    cap = w.scheduler.observe(T0).capacity["p"]
    from dataclasses import replace

    assert grew(replace(cap, node_free=old), replace(cap, node_free=new)) is expected


def _grew_by_every_shape(old: tuple[int, ...], new: tuple[int, ...]) -> bool:
    """The definition: some k (free devices per node) has more nodes with at least k free."""
    top = max((*old, *new), default=0)
    return any(sum(1 for f in new if f >= k) > sum(1 for f in old if f >= k) for k in range(1, top + 1))


@pytest.mark.parametrize("seed", range(5))
def test_grew_counts_as_the_definition_does(seed: int) -> None:
    rng = random.Random(seed)
    cap = World().pool("p", nodes=2, per_node=8).scheduler.observe(T0).capacity["p"]
    for _ in range(400):
        old = tuple(rng.randrange(9) for _ in range(rng.randrange(6)))
        new = tuple(rng.randrange(9) for _ in range(rng.randrange(6)))
        if rng.random() < 0.3:
            new = tuple(sorted(old, reverse=rng.random() < 0.5))
        expected = _grew_by_every_shape(old, new)
        assert grew(dataclasses.replace(cap, node_free=old), dataclasses.replace(cap, node_free=new)) is expected


def test_a_capacity_pass_skips_only_jobs_that_can_only_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """One free device and four one-device jobs: the first is admitted, three wait. When it
    finishes, the next is admitted, the one after is decided (and waits: the shape no longer fits),
    and the last, which waits already for that shape, is not decided again."""
    w = World().pool("p", nodes=1, per_node=8, free=[1])
    jobs = [w.job(f"j{i}", "p", devices=1) for i in range(4)]
    sched = w.scheduler
    sched.marks.ready = True
    asyncio.run(_run_pass(sched))  # the first pass decides everything
    assert set(sched.applier.overlay) == {j.key for j in jobs}

    show = functools.partial(_show, w)

    for j in jobs:
        show(j.key, sched.applier.overlay[j.key].status)
    assert [w.jobs[j.key][0].phase for j in jobs] == [JobPhase.ADMITTED] + [JobPhase.PENDING] * 3
    asyncio.run(_run_pass(sched))
    show(jobs[0].key, AcceleratorJobStatus.model_validate({"phase": "Succeeded"}))  # its device is free again

    seen = _decided(monkeypatch)
    asyncio.run(_run_pass(sched))
    assert seen == ["j0", "j1", "j2"]
    assert sched.applier.overlay[("ns", "j1")].status.phase is JobPhase.ADMITTED
    assert w.jobs[("ns", "j3")][0].phase is JobPhase.PENDING


def _show(w: World, key: Any, status: AcceleratorJobStatus) -> None:
    """The watch shows the job with ``status``: its view replaced, and a mark."""
    j = w.jobs[key][0]
    w.jobs[key] = [JobView(j.namespace, j.name, j.uid, j.created, 1, j.spec, (), status, False, "9")]
    w.scheduler.mark(key)


def _decided(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the jobs the pass decides from now on, in order."""
    seen: list[str] = []
    real = decide

    def spy(job: JobView, snap: Snapshot, now: dt.datetime, **kw: Any) -> Any:
        seen.append(job.name)
        return real(job, snap, now, **kw)

    monkeypatch.setattr("accel_operator.engine.schedule.decide", spy)
    return seen


async def _run_pass(sched: Any) -> None:
    await sched.step()
    await asyncio.gather(*sched.applier.in_flight)


def test_a_capacity_pass_decides_again_only_the_head_and_the_shapes_that_fit_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One free device; a one-device job runs there, and behind it wait a one-device job, a
    4-device one, then an 8-device and a 2-device job (shapes that no pass refused yet). When the
    first finishes, one device is free: the one-device job is decided (its shape fits) and is
    admitted on that very pass, the 4-device one is decided (the first to wait, it blocks the
    pool); the 8- and 2-device jobs, whose shapes cannot fit what is left, are not decided again."""
    w = World().pool("p", nodes=1, per_node=8, free=[1])
    sizes = {"j0": 1, "one": 1, "head": 4, "big": 8, "two": 2}
    jobs = {name: w.job(name, "p", devices=n) for name, n in sizes.items()}
    sched = w.scheduler
    sched.marks.ready = True
    asyncio.run(_run_pass(sched))

    show = functools.partial(_show, w)

    for j in jobs.values():
        show(j.key, sched.applier.overlay[j.key].status)
    assert [w.jobs[j.key][0].phase for j in jobs.values()] == [JobPhase.ADMITTED] + [JobPhase.PENDING] * 4
    asyncio.run(_run_pass(sched))
    show(jobs["j0"].key, AcceleratorJobStatus.model_validate({"phase": "Succeeded"}))

    seen = _decided(monkeypatch)
    asyncio.run(_run_pass(sched))
    assert seen == ["j0", "one", "head"]
    assert sched.applier.overlay[("ns", "one")].status.phase is JobPhase.ADMITTED
    for name in ("head", "big", "two"):
        assert w.jobs[("ns", name)][0].phase is JobPhase.PENDING, name


def _contents(snap: Snapshot) -> dict[str, Any]:
    """Everything a snapshot shows, copied out (what it showed when it was taken)."""
    return {
        name: {k: getattr(snap, name)[k] for k in getattr(snap, name)} | {"len": len(getattr(snap, name))}
        for name in ("jobs", "workloads", "pods_by_job", "reservations", "nodes", "node_used", "capacity")
    }


@pytest.mark.parametrize("seed", range(6))
def test_a_later_refresh_never_reaches_an_earlier_snapshot(seed: int) -> None:
    """The pure pass decides on one picture (and the accountant reads its snapshot in a thread
    while the next pass refreshes): snapshots are frozen views, not copies, so every one taken
    along random events must still show, after all of them, exactly what it showed when taken.
    Some are dropped along the way (the cache forgets what no live snapshot can ask for)."""
    d = Driver(seed)
    held: list[tuple[Snapshot, dict[str, Any]]] = []
    for i in range(80):
        for _ in range(d.rng.randrange(1, 4)):
            d.step()
        snap, _grown = d.sched._observe(T0)
        held.append((snap, _contents(snap)))
        if i % 3 == 0:
            held.pop(d.rng.randrange(len(held)))  # dropped: its history may go
        if i % 20 == 19:
            d.sched.observed.invalidate()  # a rebuild: the maps are replaced, old views kept
    for snap, then in held:
        assert _contents(snap) == then
