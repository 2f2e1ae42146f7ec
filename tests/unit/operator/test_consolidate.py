"""reconcile/consolidate.py: which checkpointed jobs to move where so that a gang fits, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_operator.reconcile import actions as act
from accel_operator.reconcile import consolidate as c
from accel_operator.reconcile.decide import decide
from accel_operator.reconcile.snapshot import Gang
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
SAVED = {"lastCheckpoint": {"uri": "s3://ckpt/x/step-5", "time": "2026-11-26T11:50:00Z"}}


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
    d = c.amend(decide(gang, snap, T0), gang, snap, T0)
    assert d.phase is JobPhase.PENDING
    cond = next(x for x in d.conditions if x.type == c.CONSOLIDATION)
    assert cond.ok and cond.reason == "ConsolidationProposed"
    assert "move ns/x (4 device(s)) from p-0 to p-1" in cond.message
    assert [a.reason for a in d.actions if isinstance(a, act.RecordEvent)][-1] == "ConsolidationProposed"
    assert not [a for a in d.actions if isinstance(a, act.DeleteWorkload | act.RequestCheckpoint)]  # proposal only


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
    d = c.amend(decide(gang, snap, T0), gang, snap, T0)
    cond = next(x for x in d.conditions if x.type == c.CONSOLIDATION)
    assert not cond.ok and why in cond.message, cond.message


def test_no_proposal_when_the_pool_is_simply_full() -> None:
    w = World().pool("p", nodes=2, free=[4, 0])
    gang = w.job("g", "p", devices=8)
    snap = w.snapshot()
    d = c.amend(decide(gang, snap, T0), gang, snap, T0)
    assert not any(x.type == c.CONSOLIDATION for x in d.conditions)
