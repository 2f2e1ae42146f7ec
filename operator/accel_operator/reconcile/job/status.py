"""Status values: a plan as the job's ``status.plan`` (the winner's figures, at most 5
alternatives and the pools the placement left out, counted per reason), and a decision as the
merge patch of the job's status (its ``StatusPatch`` put on the wire once, by ``to_wire``, here)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from accel_api.durations import stamp
from accel_api.enums import CapacityType
from accel_api.job import AcceleratorJobStatus, Alternative, LeftOut, LeftOutReason, PlanStatus
from accel_operator.planning import candidates as cand
from accel_operator.planning import explain
from accel_operator.planning.cache import Kind, PlanCache
from accel_operator.planning.candidates import Candidate, Plan, best_per_pool
from accel_operator.reconcile.common.decision import CLEAR, Decision, PlanWrite, StatusPatch
from accel_operator.reconcile.common.snapshot import Admission

# The operator writes at most this many alternatives (one per pool, the best ranked first; the
# schema allows bounds.STATUS_ALTERNATIVES): every status write re-encodes the whole object, so
# status.plan says why the winner won and what came next, not every pool's figures.
STATUS_ALTERNATIVES = 5


def _finite(x: float | None, digits: int | None = None) -> float | None:
    """``x`` when finite, else None; with ``digits``, to that many significant digits (an
    estimate's 17 digits are noise that every write of the status would carry)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}") if digits is not None else x


# The status form of a plan's left-out pools: shared by the plans of one placement and pools.
_LEFT_OUT: Kind[cand.LeftOut, LeftOut] = Kind("status.left_out", 256)


def left_out_status(left: cand.LeftOut, cache: PlanCache | None = None) -> LeftOut | None:
    """``status.plan.leftOut`` for ``left`` (None when the placement left no pool out): the count,
    and per reason its count and first names, the largest first (the model keeps the first 8)."""
    if not left:
        return None
    memo = cache.memo(_LEFT_OUT) if cache is not None else None
    hit = memo.get(left) if memo is not None else None
    if hit is None:
        hit = LeftOut(
            count=left.count,
            by_reason=[
                LeftOutReason(reason="; ".join(g.reasons), count=g.total, pools=list(g.pools)) for g in left.groups
            ],
        )
        if memo is not None:
            memo.put(left, hit)
    return hit


# What ``status.plan`` says, as plain values: the pick's figures (None: no pick with figures), the
# reason, the alternatives as (pool, accelerator, devices, capacity, dollars, seconds, reason)
# and the left-out pools. The status model and its wire form are functions of this alone.
_Pick = tuple[str, str, int, int, CapacityType, int, int, float | None, float | None, float | None, float]
_Alternative = tuple[str, str, int, CapacityType, float | None, float | None, str]
_Said = tuple[_Pick | None, str, tuple[_Alternative, ...], cand.LeftOut]


def _said(plan: Plan, chosen: Candidate | None) -> _Said:
    """What :func:`plan_status` writes for ``plan`` and its pick, as plain values (the figures
    rounded as written, the reasons as sentences): equal for plans that write the same status."""
    win = chosen or plan.winner
    alternatives: list[_Alternative] = []
    for c in best_per_pool(plan.candidates):
        if c is win or (win is not None and c.pool == win.pool):
            continue
        ce = c.cost
        usd = _finite(ce.expected_usd) if ce is not None else None
        alternatives.append(
            (
                c.pool,
                c.accelerator,
                c.devices,
                c.capacity_type,
                round(usd, 2) if usd is not None else None,
                _finite(ce.expected_seconds, 4) if ce is not None else None,
                "; ".join(explain.reasons(c)) or "not ranked",
            )
        )
        if len(alternatives) >= STATUS_ALTERNATIVES:
            break
    pick: _Pick | None = None
    if win is not None and win.memory is not None and win.speed is not None and win.cost is not None:
        pick = (
            win.pool,
            win.accelerator,
            win.devices,
            win.nodes,
            win.capacity_type,
            win.memory.peak_allocated_bytes,
            win.memory.footprint_bytes,
            _finite(win.speed.step_seconds, 4),
            _finite(win.speed.tokens_per_second, 4),
            _duration(win),
            round(win.cost.expected_usd, 2),
        )
    return pick, plan.reason, tuple(alternatives), plan.left_out


def _status(said: _Said, cache: PlanCache | None = None) -> PlanStatus:
    """The status model of what :func:`_said` gave."""
    pick, reason, said_alternatives, left = said
    alternatives = [
        Alternative(
            pool=pool,
            accelerator=accelerator,
            devices=devices,
            capacity_type=capacity,
            cost_usd=usd,
            duration_seconds=seconds,
            reason=why,
        )
        for pool, accelerator, devices, capacity, usd, seconds, why in said_alternatives
    ]
    left_out = left_out_status(left, cache)
    if pick is None:
        return PlanStatus(reason=reason, alternatives=alternatives, left_out=left_out)
    pool, accelerator, devices, nodes, capacity, peak, footprint, step, rate, duration, usd = pick
    return PlanStatus(
        pool=pool,
        accelerator=accelerator,
        devices=devices,
        nodes=nodes,
        capacity_type=capacity,
        spot=capacity is CapacityType.SPOT,
        peak_allocated_bytes_per_device=peak,
        footprint_bytes_per_device=footprint,
        step_seconds=step,
        tokens_per_second=rate,
        duration_seconds=duration,
        cost_usd=usd,
        reason=reason,
        alternatives=alternatives,
        left_out=left_out,
    )


def plan_status(plan: Plan, chosen: Candidate | None = None, *, cache: PlanCache | None = None) -> PlanStatus:
    """The value the operator writes into ``status.plan``: the winner's figures (or those of
    ``chosen``, a feasible candidate taken because the winner's pool is full), the other pools
    weighed, and the pools the placement left out (per reason)."""
    return _status(_said(plan, chosen), cache)


def _duration(win: Candidate | None) -> float | None:
    """``status.plan.durationSeconds`` for the plan's pick ``win``: written only with all of its
    figures, as :func:`plan_status` writes them."""
    if win is None or win.memory is None or win.speed is None or win.cost is None:
        return None
    return _finite(win.cost.expected_seconds, 6)


# Every job of one effective spec shares its plan (the scheduler caches plans): its wire form is
# made once per plan and chosen candidate (named by pool, devices and rank: one of the plan's
# candidates) and kept in the caller's PlanCache, with its stored form and its model beside it.
# Shared: callers must not change the dicts.
_WireKey = tuple[Plan, str | None, int, int | None]
_WIRE: Kind[_WireKey, PlanWrite] = Kind("status.plan_wire", 4096)


# The same, per what the status says (:func:`_said`): plans of specs that differ only where the
# planner does not read (a team, a priority, an image) are other plans with equal figures, and
# write one status form, serialised once.
_SAID: Kind[_Said, PlanWrite] = Kind("status.plan_said", 4096)


def _made(plan: Plan, chosen: Candidate | None, cache: PlanCache | None = None) -> PlanWrite:
    said = _said(plan, chosen)
    memo = cache.memo(_SAID) if cache is not None else None
    hit = memo.get(said) if memo is not None else None
    if hit is None:
        model = _status(said, cache)
        wire = model.model_dump(by_alias=True, mode="json")
        duration = said[0][9] if said[0] is not None else None
        hit = PlanWrite(wire=wire, duration_seconds=duration, stored=_pruned(wire), model=model)
        if memo is not None:
            memo.put(said, hit)
    return hit


def plan_write(plan: Plan, chosen: Candidate | None = None, *, cache: PlanCache | None = None) -> PlanWrite:
    """``status.plan`` for a decision's patch: the shared wire form, its expected duration, its
    stored form and its model. Kept in ``cache`` per plan and chosen candidate (``chosen`` is one
    of the plan's candidates; None: made afresh)."""
    if cache is None:
        return _made(plan, chosen)
    memo = cache.memo(_WIRE)
    key = (plan, None, 0, None) if chosen is None else (plan, chosen.pool, chosen.devices, chosen.rank)
    hit = memo.get(key)
    if hit is None:
        hit = memo.put(key, _made(plan, chosen, cache))
    return hit


def plan_wire(plan: Plan, chosen: Candidate | None = None, *, cache: PlanCache | None = None) -> dict[str, Any]:
    """:func:`plan_status` as JSON (camelCase): :func:`plan_write`'s wire form."""
    return dict(plan_write(plan, chosen, cache=cache).wire) if cache is None else _shared(plan, chosen, cache)


def _shared(plan: Plan, chosen: Candidate | None, cache: PlanCache) -> dict[str, Any]:
    wire = plan_write(plan, chosen, cache=cache).wire
    assert isinstance(wire, dict)
    return wire


# --- a decision as a status write --------------------------------------------------------------


def admission_plan(a: Admission) -> PlanWrite:
    """``status.plan`` of an admission adopted from its batch Job's annotation when the job's plan
    no longer ranks the placement the Job records: the pick's figures the annotation keeps (the
    alternatives weighed at the admission are not kept there)."""
    capacity = next((c for c in CapacityType if c.value == a.capacity_type), None)
    model = PlanStatus(
        pool=a.pool,
        accelerator=a.accelerator or None,
        devices=a.devices,
        nodes=a.nodes,
        capacity_type=capacity,
        spot=capacity is CapacityType.SPOT if capacity is not None else None,
        duration_seconds=a.duration_seconds,
        cost_usd=a.cost_usd,
        reason=f"the placement its batch Job records (attempt {a.attempt}), adopted after a restart",
    )
    wire = model.model_dump(by_alias=True, mode="json")
    return PlanWrite(wire=wire, duration_seconds=a.duration_seconds, stored=_pruned(wire), model=model)


def _pruned(value: Any) -> Any:
    """``value`` without null entries: how the API server stores what a merge patch wrote."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _patch_held(status: AcceleratorJobStatus, patch: StatusPatch) -> bool:
    """Whether ``status`` holds every field ``patch`` writes, when it writes only the plan (with
    its model), the message and the workload (a waiting job's patch): compared as models."""
    plan = patch.plan
    if isinstance(plan, PlanWrite):
        if plan.model is None or status.plan is None or not (status.plan is plan.model or status.plan == plan.model):
            return False
    elif plan is CLEAR and status.plan is not None:
        return False
    if patch.message is not None and status.message != patch.message:
        return False
    workload = patch.workload
    if workload is not None and status.workload != (None if workload is CLEAR else workload):
        return False
    return patch == StatusPatch(plan=plan, message=patch.message, workload=workload)


def holds(status: AcceleratorJobStatus, decision: Decision, generation: int | None) -> bool:
    """Whether ``status`` already is what ``decision`` asks for, read on the model itself: the
    common case (a held job decided again on an event or the resync, a waiting job decided again
    on the plan it carries) without serialising the status. False means "maybe not":
    :func:`settle_status` then compares the wire values."""
    if status.phase is not decision.phase or status.observed_generation != generation:
        return False
    if not decision.status.empty and not _patch_held(status, decision.status):
        return False
    have = status.conditions
    if len(have) != len(decision.conditions):
        return False
    for c, d in zip(have, decision.conditions, strict=True):
        if (
            c.type != d.type
            or c.status != ("True" if d.ok else "False")
            or c.reason != d.reason
            or (c.message or None) != (d.message[:1000] or None)
            or c.observed_generation != generation
        ):
            return False
    return True


def settle_status(
    current: dict[str, Any], decision: Decision, generation: int | None, *, now: dt.datetime, stored: bool = False
) -> dict[str, Any] | None:
    """The merge patch that gives a job the status ``decision`` asks for (only the fields that
    change), or None when the job already has it. Each condition keeps its ``lastTransitionTime``
    while its status holds, so a decision repeated by a timer or after a restart writes nothing;
    a condition that changes takes ``now``. ``stored``: ``current`` holds no null entries already
    (a status model dumped without its Nones), so it is compared as it is, not pruned again."""
    before = {c.get("type"): c for c in current.get("conditions") or []}
    conditions = []
    changed_at = stamp(now)
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
                "lastTransitionTime": prior["lastTransitionTime"] if held and prior else changed_at,
                "observedGeneration": generation,
            }
        )
    new: dict[str, Any] = {
        "phase": decision.phase.value,
        "conditions": conditions,
        "observedGeneration": generation,
        **decision.status.to_wire(),
    }
    have = current.get("conditions") or []
    same_conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in (have if stored else _pruned(have))
    ] == [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in _pruned(conditions)]
    # A merge patch needs only what changes: a field the job already holds is not sent again
    # (the plan that a waiting job's status carries is not resent when it is admitted on it).
    # Each side is pruned once (the plan's stored form was made with its wire form).
    plan = decision.status.plan
    changed = set()
    for k, v in new.items():
        if k == "conditions":
            continue
        was = current.get(k)
        if not stored:
            was = _pruned(was)
        now_stored = plan.stored if k == "plan" and isinstance(plan, PlanWrite) and plan.stored is not None else None
        if was != (now_stored if now_stored is not None else _pruned(v)):
            changed.add(k)
    if not changed and same_conditions:
        return None
    return {
        k: v
        for k, v in new.items()
        if not (same_conditions if k == "conditions" else _stored(current, k) and k not in changed)
    }


def _stored(current: dict[str, Any], key: str) -> bool:
    """Whether ``current[key]`` is surely on the stored object, not a model default (0, [] or
    None): those are always written, so a printer column never shows a default that is not there."""
    value = current.get(key)
    return isinstance(value, str | dict | list) and bool(value)
