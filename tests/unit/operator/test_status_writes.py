"""What one admission writes: a status merge patch carries only the fields that change, and
status.plan stays small (a few alternatives, estimates without 17-digit noise)."""

from __future__ import annotations

import json
from typing import Any

from accel_api.enums import JobPhase
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.job.status import STATUS_ALTERNATIVES, settle_status
from tests.support.reconcile import T0, World


def _merged(before: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = {**before, **{k: v for k, v in patch.items() if v is not None}}
    return {k: v for k, v in out.items() if not (k in patch and patch[k] is None)}


def test_a_waiting_job_admitted_on_its_plan_is_not_sent_the_plan_again() -> None:
    full = World().pool("p", nodes=1, free=[0])
    waiting = decide(full.job("a", "p", devices=8), full.snapshot(), T0)
    assert waiting.phase is JobPhase.PENDING
    first = settle_status({}, waiting, 1, now=T0)
    assert first is not None and first["plan"]["pool"] == "p"
    free = World().pool("p", nodes=1)
    admitted = decide(free.job("a", "p", devices=8, status=first), free.snapshot(), T0)
    assert admitted.phase is JobPhase.ADMITTED and admitted.status.to_wire()["plan"] == first["plan"]
    patch = settle_status(first, admitted, 1, now=T0)
    assert patch is not None
    assert "plan" not in patch  # held already: not resent
    assert patch["phase"] == "Admitted" and patch["workload"] == "a-a0"
    assert patch["attempt"] == 0  # a value equal to the model's default is always written
    # What the API server stores after the patch is what the whole status would have given.
    whole = settle_status({}, admitted, 1, now=T0)
    assert whole is not None
    stored = _merged(first, patch)
    assert {k: stored[k] for k in whole if k != "conditions"} == {k: v for k, v in whole.items() if k != "conditions"}


def test_the_running_patch_carries_no_plan_and_a_repeat_writes_nothing() -> None:
    w = World().pool("p", nodes=1)
    admitted = settle_status({}, decide(w.job("a", "p", devices=8), w.snapshot(), T0), 1, now=T0)
    assert admitted is not None
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    running = decide(w.job("a", "p", devices=8, status=admitted), w.snapshot(), T0)
    patch = settle_status(admitted, running, 1, now=T0)
    assert patch is not None and patch["phase"] == "Running"
    assert not {"plan", "workload", "admittedTime"} & patch.keys()
    after = _merged(admitted, patch)
    assert settle_status(after, decide(w.job("a", "p", devices=8, status=after), w.snapshot(), T0), 1, now=T0) is None


def test_status_plan_keeps_a_few_alternatives_and_rounded_estimates() -> None:
    w = World()
    for name in [f"p{i:02d}" for i in range(12)]:
        w = w.pool(name, nodes=1)
    d = decide(w.job("a", "p00", devices=8, pinned=False), w.snapshot(), T0)
    plan = d.status.to_wire()["plan"]  # as written
    assert plan["pool"] == "p00"
    assert 0 < len(plan["alternatives"]) <= STATUS_ALTERNATIVES < 11
    assert plan["leftOut"] is None  # no pool left out (null: a merge patch clears an older one)
    assert all(alt["reason"] for alt in plan["alternatives"])
    for key in ("stepSeconds", "tokensPerSecond"):
        assert plan[key] == float(f"{plan[key]:.4g}"), plan[key]
    # The Planned condition does not repeat the plan's reason (it is in status.plan.reason).
    planned = next(c for c in d.conditions if c.type == "Planned")
    assert planned.ok and planned.message == "" and plan["reason"]
    assert len(json.dumps(plan, separators=(",", ":"))) < 1500


def test_status_plan_counts_the_pools_the_placement_leaves_out() -> None:
    # A job pinned to one pool of 40: the other 39 are counted with their reason and five names,
    # not written one alternative each, and the status stays as small as with 12 pools.
    w = World()
    for name in [f"p{i:02d}" for i in range(40)]:
        w = w.pool(name, nodes=1)
    d = decide(w.job("a", "p07", devices=8), w.snapshot(), T0)
    plan = d.status.to_wire()["plan"]
    assert plan["pool"] == "p07" and plan["alternatives"] == []
    assert plan["leftOut"] == {
        "count": 39,
        "byReason": [
            {"reason": "not in placement.pools (p07)", "count": 39, "pools": ["p00", "p01", "p02", "p03", "p04"]}
        ],
    }
    assert len(json.dumps(plan, separators=(",", ":"))) < 1000
