"""reconcile/common/node_capacity.py and the snapshot's capacity: free devices and memory from fresh node
reports, per-device exclusion of failing devices, the fallback to Kubernetes' view; as tables of
small worlds folded by the engine's own cache (``Observed``)."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace
from typing import Any

import pytest

from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import node_capacity
from accel_operator.reconcile.common.reports import DeviceReport, ReportView
from accel_operator.reconcile.common.snapshot import Gang, NodeView, PoolCapacity, PoolView
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import health
from tests.support.decisions import health_of
from tests.support.reconcile import T0, World

GIB = 2**30
TOTAL = 80 * GIB
RULES = health.Rules()
ECC = "uncorrectable ECC errors since the driver loaded: 2"


def _dev(
    i: int,
    *,
    used: float = 0.0,
    pods: tuple[str, ...] = (),
    stray_processes: int = 0,
    sick: bool = False,
    total: int | None = TOTAL,
    util: float = 0.0,
) -> DeviceReport:
    return DeviceReport(
        index=i,
        healthy=not sick,
        problems=(ECC,) if sick else (),
        utilization=util,
        memory_used=int(used * GIB) if total is not None else None,
        memory_total=total,
        pods=frozenset(("ns", p) for p in pods),
        stray_processes=stray_processes,
    )


def _report(w: World, node: str, devices: list[DeviceReport], *, age: float = 10.0) -> None:
    reports: Any = w.indices.reports
    reports[node] = [ReportView(node, T0 - dt.timedelta(seconds=age), tuple(devices))]


def _node(w: World, name: str, **changes: Any) -> None:
    store = w.nodes[name]
    store[0] = replace(store[0], **changes)


def _free(**changes: Any) -> list[DeviceReport]:
    """Eight idle, healthy, unallocated devices, with ``changes`` by index: {3: dict(stray_processes=1)}."""
    return [_dev(i, **changes.get(str(i), {})) for i in range(8)]


# --- one device --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "clean", "stray", "why"),
    [
        (_dev(0), True, False, "idle, healthy, unallocated"),
        (_dev(0, pods=("a-a0-0",), used=60.0), False, False, "a pod's: Kubernetes counts it"),
        (_dev(0, stray_processes=1), False, True, "a process no pod owns"),
        (_dev(0, pods=("a-a0-0",), stray_processes=1), False, False, "a pod's (Kubernetes counts it)"),
        (_dev(0, used=3.9), True, False, "under 5% of 80 GiB in use"),
        (_dev(0, used=4.1), False, True, "memory held with no pod (over 5%)"),
        (_dev(0, sick=True), False, False, "failing: counted apart"),
        (_dev(0, total=None), True, False, "memory not measured (TPU): not a reason to refuse"),
    ],
)
def test_clean_and_stray_devices(device: DeviceReport, clean: bool, stray: bool, why: str) -> None:
    assert (node_capacity.device_clean(device), node_capacity.device_stray(device)) == (clean, stray), why


# --- one node ----------------------------------------------------------------------------------

NODE = NodeView("n", {}, 8, capacity_devices=8)


@pytest.mark.parametrize(
    ("node", "devices", "age", "stray", "sick", "condemned"),
    [
        (NODE, _free(), 10.0, 0, 0, False),
        (NODE, _free(**{"2": {"stray_processes": 1}}), 10.0, 1, 0, False),
        # A failing device Kubernetes still advertises: the plugin may hand it to a new pod.
        (NODE, _free(**{"3": {"sick": True}}), 10.0, 0, 1, True),
        # The device plugin withholds it (capacity 8, allocatable 7): the node stays usable, one fewer.
        (replace(NODE, devices=7), _free(**{"3": {"sick": True}}), 10.0, 0, 1, False),
        # Two failing, one withheld: not enough.
        (replace(NODE, devices=7), _free(**{"3": {"sick": True}, "5": {"sick": True}}), 10.0, 0, 2, True),
        # Capacity unknown (no status.capacity): nothing is withheld as far as we know.
        (replace(NODE, devices=7, capacity_devices=None), _free(**{"3": {"sick": True}}), 10.0, 0, 1, True),
        # A stale report says nothing: Kubernetes' view, never condemned on old news.
        (NODE, _free(**{"3": {"sick": True}, "4": {"used": 50.0}}), RULES.stale_after + 1, None, 0, False),
    ],
)
def test_judge_a_node_on_its_fresh_report(
    node: NodeView, devices: list[DeviceReport], age: float, stray: int | None, sick: int, condemned: bool
) -> None:
    report = ReportView("n", T0 - dt.timedelta(seconds=age), tuple(devices))
    judged = node_capacity.judge(node, report, T0, RULES.stale_after)
    assert (None if judged.clean_memory is None else judged.stray_devices) == stray
    assert judged.sick_devices == sick and judged.condemned is condemned
    assert judged.usable is not condemned


def test_a_node_whose_report_goes_missing_falls_back_to_kubernetes() -> None:
    report = ReportView("n", T0, tuple(_free(**{"3": {"sick": True}})))
    judged = node_capacity.judge(NODE, report, T0, RULES.stale_after)
    assert judged.condemned
    again = node_capacity.judge(judged, None, T0, RULES.stale_after)
    assert again == NODE


# --- a pool ------------------------------------------------------------------------------------


def _world(nodes: int = 2) -> World:
    return World().pool("p", nodes=nodes)


def test_devices_used_by_what_kubernetes_does_not_know_are_not_free() -> None:
    w = _world()
    # p-0: Kubernetes says 8 free, the report shows a process on device 2 and memory held on 5.
    _report(w, "p-0", _free(**{"2": {"stray_processes": 1}, "5": {"used": 30.0}}))
    # p-1: a pod Kubernetes knows holds 6, the agent has not seen it yet: Kubernetes' 2 count.
    w.pods.setdefault("p-1", []).append(_pod("p-1", 6))
    _report(w, "p-1", _free())
    cap = w.snapshot().capacity["p"]
    assert sorted(cap.node_free) == [2, 6]
    assert cap.free_devices == 8 and cap.whole_free_nodes == 0 and cap.unreported_nodes == 0


def _pod(node: str, devices: int) -> Any:
    from accel_operator.reconcile.common.snapshot import PodView

    return PodView("other", f"user-{node}", node, "Running", devices)


def test_a_node_without_a_fresh_report_is_counted_from_kubernetes() -> None:
    w = _world()
    _report(w, "p-0", _free(**{"2": {"stray_processes": 1}}), age=RULES.stale_after + 1)
    _report(w, "p-1", _free(**{"2": {"stray_processes": 1}}))
    cap = w.snapshot().capacity["p"]
    assert sorted(cap.node_free) == [7, 8]
    assert cap.unreported_nodes == 1
    assert node_capacity.views(cap, Gang(1, 8)) == (" (1 node(s) without a fresh report counted from Kubernetes' view)")


def test_a_pool_without_any_report_is_kubernetes_view_as_before() -> None:
    cap = _world().snapshot().capacity["p"]
    assert cap.node_free == (8, 8) and cap.node_memory == () and cap.unreported_nodes == 2
    assert node_capacity.views(cap, Gang(1, 8, 70 * GIB)) == ""


@pytest.mark.parametrize(
    ("used", "need", "fits"),
    [
        (0.0, 70, True),
        (3.0, 77, True),  # 77 GiB free on each
        (3.0, 78, False),  # under 5% in use, so free, but 77 GiB is not 78
        (None, 200, True),  # memory not measured: Kubernetes' word
    ],
)
def test_a_gang_needing_more_memory_than_the_free_devices_have_is_not_placed(
    used: float | None, need: int, fits: bool
) -> None:
    w = _world(nodes=1)
    total = None if used is None else TOTAL
    _report(w, "p-0", [_dev(i, used=used or 0.0, total=total) for i in range(8)])
    cap = w.snapshot().capacity["p"]
    assert cap.fits(Gang(1, 8, need * GIB)) is fits
    assert cap.fits(Gang(1, 8)) is True  # no memory need known: the devices alone
    if not fits:
        assert "less than 78.0 GiB free on each" in node_capacity.views(cap, Gang(1, 8, need * GIB))


def test_one_device_short_of_memory_leaves_the_others() -> None:
    w = _world(nodes=1)
    _report(w, "p-0", _free(**{"0": {"used": 3.5}}))  # 76.5 GiB free on device 0, 80 on the others
    cap = w.snapshot().capacity["p"]
    assert cap.fits(Gang(1, 7, 78 * GIB)) and not cap.fits(Gang(1, 8, 78 * GIB))


def test_take_keeps_the_memory_of_what_is_left() -> None:
    pool = PoolView("p", World().pool("p").pools["p"][0][0].spec)
    cap = PoolCapacity(pool, (8, 4), 2, 2, 0, 0, node_memory=((80 * GIB,) * 8, (10 * GIB,) * 4))
    # 4 devices of 20 GiB: only node 0 has the memory, although node 1 fits best by count.
    after = cap.take(Gang(1, 4, 20 * GIB))
    assert after.node_free == (4, 4)
    assert after.node_memory == ((80 * GIB,) * 4, (10 * GIB,) * 4)
    assert not after.fits(Gang(2, 4, 20 * GIB)) and after.fits(Gang(1, 4, 20 * GIB))


def test_a_reservation_takes_devices_and_their_memory() -> None:
    w = _world(nodes=1)
    _report(w, "p-0", _free())
    w.job("r", "p", devices=4, status={"phase": "Admitted", "attempt": 0, "plan": {"pool": "p", "devices": 4}})
    cap = w.snapshot().capacity["p"]
    assert cap.node_free == (4,) and cap.node_memory == ((TOTAL,) * 4,)


def test_admission_waits_for_the_devices_the_report_shows_free_and_says_why() -> None:
    w = _world(nodes=1)
    _report(w, "p-0", _free(**{"6": {"stray_processes": 1}}))  # a stray process on one device
    job = w.job("a", "p", devices=8)
    snap = w.snapshot()
    assert snap.capacity["p"].free_devices == 7
    d = decide(job, snap, T0)
    assert d.phase is JobPhase.PENDING and "fewer than 8 free device(s)" in d.reason
    _report(w, "p-0", _free())  # the stray process is gone
    assert decide(job, w.snapshot(), T0).phase is JobPhase.ADMITTED


# --- per-device exclusion -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("withheld", "tainted", "expected"),
    [
        (0, False, [act.TaintNode("p-0", v.TAINT_DEVICE_UNHEALTHY, "3", f"device 3 ({ECC})")]),
        (1, False, []),  # the device plugin withholds it: no taint
        (
            1,
            True,  # tainted before the plugin noticed: taken off
            [
                act.UntaintNode(
                    "p-0",
                    v.TAINT_DEVICE_UNHEALTHY,
                    "the device plugin withholds the failing device(s) 3: "
                    "the node stays schedulable with fewer devices",
                )
            ],
        ),
        (0, True, []),
    ],
)
def test_a_node_is_tainted_only_when_the_plugin_may_hand_out_the_bad_device(
    withheld: int, tainted: bool, expected: list[act.NodeAction]
) -> None:
    w = _world()
    _node(w, "p-0", devices=8 - withheld, capacity_devices=8, health_taint=tainted)
    _report(w, "p-0", _free(**{"3": {"sick": True}}))
    assert list(health.node_actions(w.snapshot(), RULES)) == expected


def test_one_failing_device_of_eight_leaves_seven_usable_when_the_plugin_withholds_it() -> None:
    w = _world(nodes=1)
    _node(w, "p-0", devices=7, capacity_devices=8)
    _report(w, "p-0", _free(**{"3": {"sick": True}}))
    w.job("a", "p", devices=4)
    snap = w.snapshot()
    cap = snap.capacity["p"]
    assert cap.usable_nodes == 1 and cap.node_free == (7,)
    assert decide(snap.jobs[("ns", "a")], snap, T0).phase is JobPhase.ADMITTED
    w2 = _world(nodes=1)
    _report(w2, "p-0", _free(**{"3": {"sick": True}}))  # no plugin signal: the whole node is out
    w2.job("a", "p", devices=4)
    snap2 = w2.snapshot()
    assert snap2.capacity["p"].usable_nodes == 0
    assert decide(snap2.jobs[("ns", "a")], snap2, T0).phase is JobPhase.PENDING


def _running(name: str, node: str, devices: int, w: World) -> Any:
    status = {
        "phase": "Running",
        "attempt": 0,
        "workload": f"{name}-a0",
        "admittedTime": "2026-11-26T11:00:00Z",
        "startTime": "2026-11-26T11:00:00Z",
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": devices, "nodes": 1},
    }
    job = w.job(name, "p", devices=devices, status=status, checkpoint={"uri": "s3://ckpt/x", "intervalMinutes": 10})
    w.workload(name, 0, active=1)
    w.pod(name, 0, 0, node=node, devices=devices)
    return job


def test_only_the_job_on_the_failing_device_moves() -> None:
    w = _world(nodes=1)
    a = _running("a", "p-0", 4, w)
    b = _running("b", "p-0", 4, w)
    devices = [_dev(i, pods=("a-a0-0",) if i < 4 else ("b-a0-0",), sick=i == 5, util=90.0) for i in range(8)]
    _report(w, "p-0", devices)
    snap = w.snapshot()
    da, moved_a = health.amend(decide(a, snap, T0), a, snap, T0, RULES)
    db, moved_b = health.amend(decide(b, snap, T0), b, snap, T0, RULES)
    assert moved_a is None and not [x for x in da.actions if isinstance(x, act.RequestCheckpoint)]
    assert next(c for c in da.conditions if c.type == "DevicesHealthy").ok
    assert [x for x in db.actions if isinstance(x, act.RequestCheckpoint)], db.actions
    assert "device 5" in (health_of(db).move_reason or "") and moved_b is None


def test_a_report_without_pod_mapping_moves_every_job_on_the_node_as_before() -> None:
    w = _world(nodes=1)
    a = _running("a", "p-0", 4, w)
    _report(w, "p-0", [_dev(i, sick=i == 5) for i in range(8)])
    snap = w.snapshot()
    da, _ = health.amend(decide(a, snap, T0), a, snap, T0, RULES)
    assert [x for x in da.actions if isinstance(x, act.RequestCheckpoint)]


def test_signature_ignores_drift_and_heartbeats_but_not_capacity() -> None:
    base = ReportView("n", T0, tuple(_free()))
    drift = ReportView("n", T0 + dt.timedelta(seconds=30), tuple(_free(**{"1": {"used": 0.001}})))
    busy = ReportView("n", T0, tuple(_free(**{"1": {"stray_processes": 1}})))
    sick = ReportView("n", T0, tuple(_free(**{"1": {"sick": True}})))
    sig = node_capacity.signature
    assert sig(base) == sig(drift)
    assert len({sig(base), sig(busy), sig(sick), sig(None)}) == 4


def test_a_pod_that_ended_before_the_next_report_frees_its_devices_at_once() -> None:
    """The report lags: devices it still attributes to a pod Kubernetes saw end are free (a moved
    or restarted job's new attempt is not held up until the agent writes again)."""
    w = _world(nodes=1)
    _report(w, "p-0", [_dev(i, pods=("gone-a0-0",), used=60.0) for i in range(8)])
    cap = w.snapshot().capacity["p"]
    assert cap.node_free == (8,) and cap.node_memory == ((),)
    assert cap.fits(Gang(1, 8, 70 * GIB))  # not listed as clean: not refused for memory


@pytest.mark.parametrize("seed", range(8))
def test_fits_counts_the_nodes_that_hold_the_gang(seed: int) -> None:
    """``fits`` (which stops at the nodes it needs, and reads the free counts alone when no
    memory is to be checked) answers as counting every node that holds the gang, over random
    pools with and without reported memory and random gangs."""
    rng = random.Random(seed)
    pool = PoolView("p", World().pool("p").pools["p"][0][0].spec)
    for _ in range(200):
        n = rng.randint(0, 6)
        free = tuple(rng.randint(0, 8) for _ in range(n))
        memory: tuple[tuple[int, ...] | None, ...] = ()
        if rng.random() < 0.5:
            memory = tuple(
                None
                if rng.random() < 0.3
                else tuple(sorted((rng.randint(1, 80) * GIB for _ in range(rng.randint(0, f))), reverse=True))
                for f in free[: rng.randint(0, n)]
            )
        cap = PoolCapacity(pool, free, n, n, 0, 0, node_memory=memory)
        gang = Gang(rng.randint(0, 4), rng.randint(1, 8), rng.choice((0, 0, rng.randint(1, 80) * GIB)))
        assert cap.fits(gang) is (sum(1 for i in range(n) if cap.holds(i, gang)) >= gang.nodes)
