"""The status patch the scheduler builds (``schedule.settle``: the typed check that a job holds its
decision, then ``settle_status`` on the stored form with the plan's stored form made once per plan)
is byte for byte the patch of the plain algorithm: dump the status, prune every value of its
nulls, compare field by field. Checked over a job's life: queued, queued again, admitted, running,
running again, and after a restart with a status written by hand."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from accel_api.durations import stamp
from accel_operator.engine.schedule import settle
from accel_operator.planning.cache import PlanCache
from accel_operator.reconcile.common.decision import Decision
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.job.status import _pruned, _stored
from tests.support.reconcile import T0, World


def _reference(current: dict[str, Any], decision: Decision, generation: int | None, now: dt.datetime) -> Any:
    """The patch as it was built before the fast paths (every value pruned on every write)."""
    before = {c.get("type"): c for c in current.get("conditions") or []}
    conditions = []
    for cond in decision.conditions:
        status = "True" if cond.ok else "False"
        prior = before.get(cond.type)
        held = prior is not None and prior.get("status") == status and prior.get("lastTransitionTime")
        conditions.append(
            {
                "type": cond.type,
                "status": status,
                "reason": cond.reason,
                "message": cond.message[:1000] or None,
                "lastTransitionTime": prior["lastTransitionTime"] if held and prior else stamp(now),
                "observedGeneration": generation,
            }
        )
    new = {
        "phase": decision.phase.value,
        "conditions": conditions,
        "observedGeneration": generation,
        **decision.status.to_wire(),
    }
    strip = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in _pruned(conditions)]
    same_conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in _pruned(current.get("conditions") or [])
    ] == strip
    unchanged = all(_pruned(current.get(k)) == _pruned(v) for k, v in new.items() if k != "conditions")
    if unchanged and same_conditions:
        return None
    return {
        k: v
        for k, v in new.items()
        if not (same_conditions if k == "conditions" else _stored(current, k) and _pruned(current[k]) == _pruned(v))
    }


def _bytes(value: Any) -> str:
    return json.dumps(value, sort_keys=False)


def _check(w: World, status: dict[str, Any], decided: Decision | None = None, devices: int = 8) -> dict[str, Any]:
    """Decide the job on ``status`` (through a shared plan cache, as the scheduler does), compare
    the two patches' bytes, and return the status the API server would store after it."""
    job = w.job("a", "p", devices=devices, status=status)
    decision = decided or decide(job, w.snapshot(), T0, cache=CACHE)
    current = job.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    want = _reference(current, decision, job.generation, T0)
    got = settle(job, decision, T0)
    assert _bytes(got.patch) == _bytes(want)
    return _pruned(got.status) if got.status is not None else status


CACHE = PlanCache()


def test_the_patch_is_the_plain_algorithms_over_a_jobs_life() -> None:
    full = World().pool("p", nodes=1, free=[0])
    queued = _check(full, {})
    assert queued["phase"] == "Pending" and queued["plan"]["pool"] == "p"
    assert _check(full, queued) == queued  # decided again on the plan it holds: nothing written
    free = World().pool("p", nodes=1)
    admitted = _check(free, queued)
    assert admitted["phase"] == "Admitted"
    free.workload("a", 0, active=1)
    free.pod("a", 0, 0, node="p-0")
    running = _check(free, admitted)
    assert running["phase"] == "Running"
    assert _check(free, running) == running
    # A hand-edited status: the plan's figures changed and a message left behind.
    edited = {**queued, "plan": {**queued["plan"], "devices": 4}, "message": "edited"}
    again = _check(full, edited)
    assert again["plan"] == queued["plan"] and again["message"] != "edited"
    assert _check(full, {**queued, "message": "edited"})["message"] == queued["message"]


def test_a_plan_with_empty_fields_is_compared_as_stored() -> None:
    small = World().pool("p", nodes=1)
    nowhere = _check(small, {}, devices=64)  # no placement fits: the plan's figures are null
    assert "pool" not in nowhere["plan"]
    assert _check(small, nowhere, devices=64) == nowhere
    assert _check(small, {**nowhere, "message": "edited"}, devices=64) == nowhere
