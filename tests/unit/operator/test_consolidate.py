"""reconcile/nodes/consolidate.py: which checkpointed jobs to move where so that a gang fits, as tables."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import ConsolidationMove
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import Decision
from accel_operator.reconcile.common.snapshot import Gang
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import consolidate as c
from tests.support.decisions import health_of
from tests.support.reconcile import T0, World


def _o(job: str, node: str, devices: int, movable: bool = True, why: str = "") -> c.Occupant:
    return c.Occupant(("ns", job), node, devices, movable, why)


@pytest.mark.parametrize(
    ("gang", "free", "occupants", "feasible", "moves", "reason"),
    [
        (Gang(1, 8), {"n0": 8, "n1": 0}, [], True, [], "fits without moving"),
        (Gang(1, 8), {"n0": 4, "n1": 2}, [_o("x", "n0", 4)], False, [], "only 6 device(s) free"),
        (
            Gang(1, 8),
            {"n0": 4, "n1": 4},
            [_o("x", "n0", 4), _o("y", "n1", 4)],
            True,
            [c.Move(("ns", "x"), "n0", "n1", 4)],
            "move ns/x (4 device(s)) from n0 to n1: then n0 have 8 free device(s) each",
        ),
        (
            Gang(1, 8),
            {"n0": 4, "n1": 4},
            [_o("x", "n0", 4, False, "x: no checkpoint"), _o("y", "n1", 4)],
            True,
            [c.Move(("ns", "y"), "n1", "n0", 4)],
            "move ns/y",
        ),
        (
            Gang(1, 8),
            {"n0": 4, "n1": 4},
            [_o("x", "n0", 4, False, "x: no checkpoint"), _o("y", "n1", 4, False, "y: about to finish")],
            False,
            [],
            "not movable: x: no checkpoint, y: about to finish",
        ),
        (
            Gang(1, 8),
            {"n0": 5, "n1": 3},
            [_o("a", "n0", 1), _o("b", "n0", 1), _o("d", "n0", 1)],
            False,
            [],
            "3 job(s) would have to move; at most 2 may",
        ),
        (
            Gang(1, 8),
            {"n0": 4, "n1": 2, "n2": 2},
            [_o("x", "n0", 4)],
            False,
            [],
            "nowhere to put ns/x",
        ),
        (
            Gang(2, 8),
            {"n0": 6, "n1": 6, "n2": 4},
            [_o("a", "n0", 2), _o("b", "n1", 2)],
            True,
            [c.Move(("ns", "a"), "n0", "n2", 2), c.Move(("ns", "b"), "n1", "n2", 2)],
            "then n0, n1 have 8",
        ),
    ],
)
def test_propose(
    gang: Gang,
    free: dict[str, int],
    occupants: list[c.Occupant],
    feasible: bool,
    moves: list[c.Move],
    reason: str,
) -> None:
    p = c.propose("p", gang, free, occupants)
    assert p.feasible is feasible, p.reason
    assert list(p.moves) == moves
    assert reason in p.reason, p.reason


def _running(devices: int, **extra: Any) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "startTime": "2026-11-26T11:00:00Z",
        "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": devices, "nodes": 1, "durationSeconds": 36000},
        **extra,
    }


CKPT = {"uri": "s3://ckpt/x", "intervalMinutes": 10}
SAVED = {"lastCheckpoint": {"uri": "s3://ckpt/x/step-5", "step": 5, "time": "2026-11-26T11:50:00Z"}}


def _fragmented(*, x_saved: bool = True, y_ends_soon: bool = False) -> World:
    w = World().pool("p", nodes=2)
    w.job("x", "p", devices=4, status=_running(4, **(SAVED if x_saved else {})), checkpoint=CKPT)
    w.pod("x", 0, 0, node="p-0", devices=4)
    y_status = _running(4, **SAVED)
    if y_ends_soon:
        y_status["plan"]["durationSeconds"] = 3660  # started an hour ago: a minute left
    w.job("y", "p", devices=4, status=y_status, checkpoint=CKPT)
    w.pod("y", 0, 0, node="p-1", devices=4)
    return w


def test_a_fragmented_pool_gets_a_proposal_on_the_waiting_gang() -> None:
    w = _fragmented()
    gang = w.job("g", "p", devices=8)
    snap = w.snapshot()
    d, orders = c.amend(decide(gang, snap, T0), gang, snap, T0)
    assert d.phase is JobPhase.PENDING
    cond = next(x for x in d.conditions if x.type == c.CONSOLIDATION)
    assert cond.ok and cond.reason == "ConsolidationProposed"
    assert "move ns/x (4 device(s)) from p-0 to p-1" in cond.message
    assert [a.reason for a in d.actions if isinstance(a, act.RecordEvent)][-1] == "ConsolidationProposed"
    assert not [a for a in d.actions if isinstance(a, act.DeleteWorkload | act.RequestCheckpoint)]  # proposal only
    assert orders == ()
    assert "not performed: no AcceleratorPolicy allows it" in cond.message


@pytest.mark.parametrize(
    ("world", "why"),
    [
        (lambda: _fragmented(x_saved=False, y_ends_soon=True), "x: no checkpoint written yet, y: about to finish"),
    ],
)
def test_no_proposal_moves_an_unsaved_or_finishing_job(world: Any, why: str) -> None:
    w = world()
    gang = w.job("g", "p", devices=8)
    snap = w.snapshot()
    d, _ = c.amend(decide(gang, snap, T0), gang, snap, T0)
    cond = next(x for x in d.conditions if x.type == c.CONSOLIDATION)
    assert not cond.ok and why in cond.message, cond.message


def test_no_proposal_when_the_pool_is_simply_full() -> None:
    w = World().pool("p", nodes=2, free=[4, 0])
    gang = w.job("g", "p", devices=8)
    snap = w.snapshot()
    d, _ = c.amend(decide(gang, snap, T0), gang, snap, T0)
    assert not any(x.type == c.CONSOLIDATION for x in d.conditions)


# --- performing it: the policies' consent, the rate, the moved job's steps ------------------------

ALLOW = {"allowed": True, "maxMovesPerHour": 2, "minRemainingMinutes": 15}


def _marker(gang: str = "ns/g", *, at: str = "2026-11-26T11:59:00Z", attempt: int = 0, **kw: Any) -> dict[str, Any]:
    return {
        "health": {"consolidation": {"gang": gang, "targets": ["p-0"], "attempt": attempt, "requestedTime": at, **kw}}
    }


def _decide_gang(w: World, now: Any = T0, rules: c.Rules | None = None) -> tuple[Any, tuple[c.Order, ...]]:
    gang = w.jobs[("ns", "g")][0] if ("ns", "g") in w.jobs else w.job("g", "p", devices=8)
    snap = w.snapshot(now)
    rules = rules or c.rules_from(snap.policy.policies)
    d, orders = c.amend(decide(gang, snap, now), gang, snap, now, rules)
    return d, orders


def _cond(d: Any) -> Any:
    return next(x for x in d.conditions if x.type == c.CONSOLIDATION)


@pytest.mark.parametrize(
    ("policies", "allowed", "rate", "remaining", "source"),
    [
        ({}, False, 2, 900.0, ""),
        ({"a": {"spot": {"requireCheckpoint": False}}}, False, 2, 900.0, ""),
        ({"a": {"consolidation": ALLOW}}, True, 2, 900.0, "a"),
        (
            {"a": {"consolidation": {"allowed": True}}, "b": {"consolidation": {"allowed": False}}},
            False,
            2,
            900.0,
            "a, b",
        ),
        (
            {
                "a": {"consolidation": {"allowed": True, "maxMovesPerHour": 5, "minRemainingMinutes": 30}},
                "b": {"consolidation": {"allowed": True, "maxMovesPerHour": 1, "minRemainingMinutes": 5}},
            },
            True,
            1,
            1800.0,
            "a, b",
        ),
    ],
)
def test_the_policies_combine_strictly(
    policies: dict[str, dict[str, Any]], allowed: bool, rate: int, remaining: float, source: str
) -> None:
    w = World()
    for name, spec in policies.items():
        w.policy(name, **spec)
    r = c.rules_from(w.snapshot().policy.policies)
    assert (r.allowed, r.max_moves_per_hour, r.min_remaining, r.source) == (allowed, rate, remaining, source)


@pytest.mark.parametrize(
    "spec",
    [
        {"maxMovesPerHour": 101},
        {"maxMovesPerHour": -1},
        {"minRemainingMinutes": -1},
        {"minRemainingMinutes": 10_081},
        {"allowed": "maybe"},
        {"allowd": True},
    ],
)
def test_the_policy_fields_are_bounded(spec: dict[str, Any]) -> None:
    from pydantic import ValidationError

    from accel_api.policy import AcceleratorPolicy

    with pytest.raises(ValidationError):
        AcceleratorPolicy.model_validate({"metadata": {"name": "p"}, "spec": {"consolidation": spec}})


def test_a_policy_that_allows_it_orders_the_move_with_an_event() -> None:
    w = _fragmented().policy("platform", consolidation=ALLOW)
    d, orders = _decide_gang(w)
    assert [o.move for o in orders] == [c.Move(("ns", "x"), "p-0", "p-1", 4)]
    assert orders[0].gang == ("ns", "g") and orders[0].targets == ("p-0",)
    cond = _cond(d)
    assert cond.ok and cond.reason == "Consolidating" and "policy platform" in cond.message
    events = [a for a in d.actions if isinstance(a, act.RecordEvent)]
    assert events[-1].reason == "Consolidating" and "move ns/x" in events[-1].message
    assert d.phase is JobPhase.PENDING  # the gang itself waits until the nodes are free


def test_not_allowed_by_one_policy_names_the_policy_and_orders_nothing() -> None:
    w = _fragmented().policy("platform", consolidation=ALLOW).policy("team-a", consolidation={"allowed": False})
    d, orders = _decide_gang(w)
    assert orders == ()
    cond = _cond(d)
    assert cond.reason == "ConsolidationProposed" and "move ns/x" in cond.message
    assert "not performed: policy platform, team-a does not allow it" in cond.message


@pytest.mark.parametrize(
    ("others", "rate", "ordered", "reason"),
    [
        ([], 2, True, "Consolidating"),
        (["2026-11-26T11:30:00Z"], 2, True, "Consolidating"),
        (["2026-11-26T11:30:00Z", "2026-11-26T11:10:00Z"], 2, False, "ConsolidationRateLimited"),
        (["2026-11-26T10:59:00Z", "2026-11-26T10:30:00Z"], 2, True, "Consolidating"),  # over an hour ago
        ([], 0, False, "ConsolidationRateLimited"),
    ],
)
def test_the_hourly_rate_counts_the_moves_recorded_in_the_jobs_status(
    others: list[str], rate: int, ordered: bool, reason: str
) -> None:
    w = _fragmented().policy("platform", consolidation={**ALLOW, "maxMovesPerHour": rate})
    w.pool("q", nodes=1)
    for i, at in enumerate(others):  # jobs elsewhere that were moved earlier (their markers survive a restart)
        w.job(f"old{i}", "q", devices=1, status={"phase": "Succeeded", **_marker("ns/other", at=at, state="moved")})
    d, orders = _decide_gang(w)
    assert bool(orders) is ordered
    cond = _cond(d)
    assert cond.reason == reason, cond.message
    if not ordered:
        assert f"{len(others)} move(s) in the last hour, at most {rate}" in cond.message


def test_a_gang_with_a_move_under_way_orders_no_more() -> None:
    w = _fragmented().policy("platform", consolidation=ALLOW)
    x = w.jobs[("ns", "x")][0]
    w.jobs[("ns", "x")] = [
        type(x)(
            **{
                **{f: getattr(x, f) for f in x.__slots__},
                "status": x.status.model_validate({**_running(4, **SAVED), **_marker()}),
            }
        )
    ]
    d, orders = _decide_gang(w)
    assert orders == ()
    cond = _cond(d)
    assert cond.reason == "Consolidating" and "waiting for the moves made for it: ns/x" in cond.message


@pytest.mark.parametrize(
    ("x_extra", "y_extra", "moved", "why"),
    [
        # x was moved for another gang two hours ago (cool-down 6 h): y moves instead.
        (_marker("ns/h", at="2026-11-26T10:00:00Z", attempt=0, state="moved"), {}, "y", ""),
        # Both moved lately: nothing may move.
        (
            _marker("ns/h", at="2026-11-26T10:00:00Z", state="moved"),
            _marker("ns/h", at="2026-11-26T09:00:00Z", state="moved"),
            None,
            "moved for consolidation at",
        ),
        # x is moving for another gang right now.
        (_marker("ns/h"), {}, "y", ""),
        # y has been moved 5 times (device failures, hangs): only x.
        ({}, {"health": {"moves": 5}}, "x", ""),
    ],
)
def test_a_job_is_not_moved_repeatedly(
    x_extra: dict[str, Any], y_extra: dict[str, Any], moved: str | None, why: str
) -> None:
    w = World().pool("p", nodes=2).policy("platform", consolidation=ALLOW)
    w.job("x", "p", devices=4, status={**_running(4, **SAVED), **x_extra}, checkpoint=CKPT)
    w.pod("x", 0, 0, node="p-0", devices=4)
    w.job("y", "p", devices=4, status={**_running(4, **SAVED), **y_extra}, checkpoint=CKPT)
    w.pod("y", 0, 0, node="p-1", devices=4)
    d, orders = _decide_gang(w)
    assert [o.move.job[1] for o in orders] == ([moved] if moved else [])
    if why:
        assert why in _cond(d).message


@pytest.mark.parametrize(("minutes", "movable"), [(15, True), (90, False)])
def test_min_remaining_minutes_comes_from_the_policy(minutes: int, movable: bool) -> None:
    # Both started at 11:00 and are planned for two hours: an hour left at 12:00.
    w = World().pool("p", nodes=2).policy("platform", consolidation={**ALLOW, "minRemainingMinutes": minutes})
    for name, node in (("x", "p-0"), ("y", "p-1")):
        status = _running(4, **SAVED)
        status["plan"]["durationSeconds"] = 7200
        w.job(name, "p", devices=4, status=status, checkpoint=CKPT)
        w.pod(name, 0, 0, node=node, devices=4)
    d, orders = _decide_gang(w)
    assert bool(orders) is movable
    if not movable:
        assert "about to finish" in _cond(d).message


def test_a_deadline_near_keeps_a_job_in_place() -> None:
    w = World().pool("p", nodes=2).policy("platform", consolidation=ALLOW)
    status = {**_running(4, **SAVED), "admittedTime": "2026-11-26T11:00:00Z"}
    w.job("x", "p", devices=4, status=status, checkpoint=CKPT, deadline="65m")  # 5 minutes left
    w.pod("x", 0, 0, node="p-0", devices=4)
    w.job("y", "p", devices=4, status=status, checkpoint=CKPT, deadline="65m")
    w.pod("y", 0, 0, node="p-1", devices=4)
    d, orders = _decide_gang(w)
    assert orders == () and "its deadline is near" in _cond(d).message


# --- the moved job --------------------------------------------------------------------------------


def _order() -> c.Order:
    return c.Order(c.Move(("ns", "x"), "p-0", "p-1", 4), ("ns", "g"), ("p-0",))


def _state(d: Decision) -> str:
    """The state of the consolidation marker the decision writes."""
    marker = health_of(d).consolidation
    assert marker is not None
    return marker.state


def test_start_writes_the_marker_asks_for_a_checkpoint_and_says_why() -> None:
    w = _fragmented()
    w.job("g", "p", devices=8)
    snap = w.snapshot()
    x = snap.jobs[("ns", "x")]
    d = c.start(x, _order(), snap, T0, c.Rules(allowed=True))
    assert d is not None and d.phase is JobPhase.RUNNING
    marker = health_of(d).consolidation
    assert marker == ConsolidationMove(
        gang="ns/g",
        targets=["p-0"],
        attempt=0,
        requested_time="2026-11-26T12:00:00Z",
        checkpoint_step=5,
        state="requested",
        ended_time=None,
    )
    ask = next(a for a in d.actions if isinstance(a, act.RequestCheckpoint))
    assert ask.pods == (("ns", "x-a0-0"),) and ask.reason == "consolidation"
    event = next(a for a in d.actions if isinstance(a, act.RecordEvent))
    assert event.reason == "Consolidating" and "make room for ns/g" in event.message
    # counted at once for the rest of the pass
    assert c.moves_in_window(c.with_started(snap, x, d), T0) == 1
    # A job that stopped qualifying since the proposal (its checkpoint is gone) is not started.
    bare = snap.jobs[("ns", "y")].status.model_copy(update={"last_checkpoint": None})
    from dataclasses import replace

    assert c.start(replace(snap.jobs[("ns", "y")], status=bare), _order(), snap, T0, c.Rules()) is None


def _moving(*, saved_at: str | None, gang: dict[str, Any] | None, annotated: bool = True) -> tuple[Any, Any]:
    w = World().pool("p", nodes=2)
    extra = {"lastCheckpoint": {"uri": "s3://ckpt/x/step-6", "time": saved_at}} if saved_at else SAVED
    w.job("x", "p", devices=4, status={**_running(4, **extra), **_marker(at="2026-11-26T11:59:00Z")}, checkpoint=CKPT)
    w.pod("x", 0, 0, node="p-0", devices=4, checkpoint_now="2026-11-26T11:59:00Z" if annotated else None)
    w.workload("x", 0, active=1)
    if gang is not None:
        w.job("g", "p", devices=8, status=gang)
    snap = w.snapshot()
    x = snap.jobs[("ns", "x")]
    return x, snap


@pytest.mark.parametrize(
    ("saved_at", "gang", "now_s", "stage", "says"),
    [
        ("2026-11-26T11:59:30Z", {}, 0, c.Stage.MOVED, "the checkpoint it just wrote"),
        (None, {}, 0, None, "waiting for a checkpoint newer than the request"),
        ("2026-11-26T11:58:00Z", {}, 0, None, "waiting for a checkpoint"),  # older than the request
        (None, {}, 200, c.Stage.MOVED, "its latest complete checkpoint (none newer within 180s)"),
        ("2026-11-26T11:59:30Z", {"phase": "Running"}, 0, c.Stage.ABANDONED, "no longer waits"),
        ("2026-11-26T11:59:30Z", None, 0, c.Stage.ABANDONED, "no longer waits"),
    ],
)
def test_carry_moves_after_the_checkpoint_or_the_grace(
    saved_at: str | None, gang: dict[str, Any] | None, now_s: int, stage: c.Stage | None, says: str
) -> None:
    import datetime as dt

    x, snap = _moving(saved_at=saved_at, gang=gang)
    now = T0 + dt.timedelta(seconds=now_s)
    d, got = c.carry(decide(x, snap, now), x, snap, now, c.Rules(allowed=True, checkpoint_grace=180))
    assert got is stage
    texts = " ".join(
        [*(a.message for a in d.actions if isinstance(a, act.RecordEvent)), *(k.message for k in d.conditions)]
    )
    texts += str(d.status.health.move_reason if d.status.health is not None else None)
    assert says in texts, texts
    deleted = [a for a in d.actions if isinstance(a, act.DeleteWorkload)]
    if stage is c.Stage.MOVED:
        assert (
            d.phase is JobPhase.PENDING
            and d.status.attempt == 1
            and deleted == [act.DeleteWorkload("x-a0", "moved: consolidation")]
        )
        assert _state(d) == "moved" and health_of(d).moves == 1
        assert {a.reason for a in d.actions if isinstance(a, act.RecordEvent)} == {"Moved", "Consolidating"}
    else:
        assert d.phase is JobPhase.RUNNING and not deleted
    if stage is c.Stage.ABANDONED:
        assert _state(d) == "abandoned"


@pytest.mark.parametrize(
    ("asked_step", "saved_step", "saved_at", "moved"),
    [
        (5, 5, "2026-11-26T11:59:00Z", False),  # the same checkpoint, seen in the request's second
        (5, 6, "2026-11-26T11:59:00Z", True),  # a later step in that second
        (None, None, "2026-11-26T11:59:00Z", False),  # no steps: by time, strictly after the request
        (None, None, "2026-11-26T11:59:01Z", True),
    ],
)
def test_a_checkpoint_counts_only_when_written_after_the_request(
    asked_step: int | None, saved_step: int | None, saved_at: str, moved: bool
) -> None:
    w = World().pool("p", nodes=2)
    last = {"uri": f"s3://ckpt/x/step-{saved_step or 5}", "step": saved_step, "time": saved_at}
    status = {**_running(4, lastCheckpoint=last), **_marker(at="2026-11-26T11:59:00Z", checkpointStep=asked_step)}
    w.job("x", "p", devices=4, status=status, checkpoint=CKPT)
    w.pod("x", 0, 0, node="p-0", devices=4, checkpoint_now="2026-11-26T11:59:00Z")
    w.workload("x", 0, active=1)
    w.job("g", "p", devices=8, status={})
    snap = w.snapshot()
    x = snap.jobs[("ns", "x")]
    _, stage = c.carry(decide(x, snap, T0), x, snap, T0, c.Rules(checkpoint_grace=600))
    assert (stage is c.Stage.MOVED) is moved


def test_carry_asks_again_when_the_request_did_not_reach_the_pods() -> None:
    x, snap = _moving(saved_at=None, gang={}, annotated=False)
    d, _ = c.carry(decide(x, snap, T0), x, snap, T0, c.Rules())
    ask = [a for a in d.actions if isinstance(a, act.RequestCheckpoint)]
    assert ask == [act.RequestCheckpoint((("ns", "x-a0-0"),), "2026-11-26T11:59:00Z", "consolidation")]
    x2, snap2 = _moving(saved_at=None, gang={}, annotated=True)
    d2, _ = c.carry(decide(x2, snap2, T0), x2, snap2, T0, c.Rules())
    assert not [a for a in d2.actions if isinstance(a, act.RequestCheckpoint)]


@pytest.mark.parametrize(
    ("state", "marker_attempt", "attempt", "avoid"),
    [
        ("moved", 0, 1, ("p-0",)),
        ("moved", 0, 2, ()),  # a later attempt (a retry) goes anywhere
        ("requested", 0, 0, ()),
        ("abandoned", 0, 1, ()),
    ],
)
def test_the_attempt_after_a_move_avoids_the_gangs_nodes(
    state: str, marker_attempt: int, attempt: int, avoid: tuple[str, ...]
) -> None:
    w = World().pool("p", nodes=2)
    x = w.job(
        "x",
        "p",
        devices=4,
        status={"phase": "Pending", "attempt": attempt, **_marker(attempt=marker_attempt, state=state)},
    )
    assert c.avoid_nodes(x) == avoid


class _NoScan(Mapping[Any, Any]):
    """A snapshot's jobs or nodes that may be looked up by key but not walked through: what a
    waiting gang's consolidation may read at fleet size (its pool, its own moves), not everything."""

    def __init__(self, inner: Mapping[Any, Any]) -> None:
        self.inner = inner

    def __getitem__(self, key: Any) -> Any:
        return self.inner[key]

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("a scan of every job or node of the cluster")


@pytest.mark.parametrize("under_way", [False, True])
def test_a_waiting_gangs_consolidation_reads_its_pool_and_its_moves_not_every_job(under_way: bool) -> None:
    """The proposal (its pool's nodes and occupants), the hourly rate and the moves in flight
    come from the snapshot's indexes; the same answers as a scan, at any number of jobs."""
    w = _fragmented().policy("platform", consolidation=ALLOW)
    w.pool("q", nodes=1)
    w.job("old", "q", devices=1, status={"phase": "Succeeded", **_marker("ns/other", state="moved")})
    if under_way:
        x = w.jobs[("ns", "x")][0]
        status = x.status.model_validate({**_running(4, **SAVED), **_marker()})
        w.jobs[("ns", "x")] = [replace(x, status=status)]
    gang = w.job("g", "p", devices=8)
    snap = w.snapshot()
    scanned = c.amend(decide(gang, snap, T0), gang, snap, T0, c.rules_from(snap.policy.policies))
    blind = replace(snap, jobs=_NoScan(snap.jobs), nodes=_NoScan(snap.nodes))
    d, orders = c.amend(decide(gang, blind, T0), gang, blind, T0, c.rules_from(snap.policy.policies))
    assert (d, orders) == scanned
    assert _cond(d).reason == "Consolidating"
    if under_way:
        assert orders == () and "waiting for the moves made for it: ns/x" in _cond(d).message
    else:
        assert [o.move.job for o in orders] == [("ns", "x")]
        # The move started is counted at once by the index too (the rate, the moves in flight).
        x = blind.jobs[("ns", "x")]
        begun = c.start(x, orders[0], blind, T0, c.Rules(allowed=True))
        assert begun is not None
        started = c.with_started(blind, x, begun)
        assert (c.moves_in_window(blind, T0), c.moves_in_window(started, T0)) == (1, 2)  # old's, then x's too
        assert c.in_flight(started, gang.key, T0, 300.0) == ["ns/x (checkpoint asked at 2026-11-26T12:00:00Z)"]
