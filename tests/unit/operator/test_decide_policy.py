"""decide(job, snapshot, now) with AcceleratorPolicies: the reconciler checks again what the
webhook checked (it can be bypassed, down, or the policy can change), as a table of small worlds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_operator.planning import explain
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import MESSAGE_LIMIT, Decision
from accel_operator.reconcile.job.decide import decide
from tests.support.decisions import plan_of
from tests.support.reconcile import T0, World

SPOT: dict[str, Any] = {"spot": {"policy": "prefer"}}
NO_CKPT: dict[str, Any] = {"spot": {"policy": "prefer"}}  # and no checkpoint
CKPT: dict[str, Any] = {"checkpoint": {"uri": "s3://bucket/run", "intervalMinutes": 30}}


def _kinds(d: Decision) -> list[str]:
    return [a.reason if isinstance(a, act.RecordEvent) else type(a).__name__ for a in d.actions]


def _cond(d: Decision, type_: str) -> tuple[bool, str, str] | None:
    c = next((c for c in d.conditions if c.type == type_), None)
    return None if c is None else (c.ok, c.reason, c.message)


def _running(name: str, pool: str, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "workload": f"{name}-a0",
        "admittedTime": "2026-11-26T12:00:00Z",
        "startTime": "2026-11-26T12:00:00Z",
        "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "durationSeconds": 3600},
        "conditions": conditions or [],
    }


# --- waiting jobs: refused, with the rule and the policy ------------------------------------------


@pytest.mark.parametrize(
    ("policy", "team", "spec", "rule", "field"),
    [
        ({}, None, NO_CKPT, "spot-needs-checkpoint", "spec.checkpoint"),
        (
            {"spot": {"maxCheckpointIntervalMinutes": 10}},
            None,
            {**SPOT, "checkpoint": {"uri": "s3://b/r", "intervalMinutes": 30}},
            "spot-checkpoint-interval",
            "spec.checkpoint.intervalMinutes",
        ),
        (
            {"spot": {"allowedCheckpointSchemes": ["s3"]}},
            None,
            {**SPOT, "checkpoint": {"uri": "pvc://claim/run", "intervalMinutes": 30}},
            "spot-checkpoint-scheme",
            "spec.checkpoint.uri",
        ),
        ({"poolAccess": [{"teams": ["serving"], "pools": ["p"]}]}, None, {}, "pool-access", "spec.placement.pools[0]"),
        ({"maxDevicesPerJob": 4}, None, {}, "max-devices", "spec.placement.minDevices"),
        (
            {"reservedEnv": ["WANDB_*"]},
            None,
            {"env": [{"name": "WANDB_KEY", "value": "x"}]},
            "reserved-env",
            "spec.env[0].name",
        ),
        (
            {"budgets": [{"team": "research", "limitUsd": 100}]},
            None,
            {"maxCost": 500},
            "budget-exceeds-limit",
            "spec.maxCost",
        ),
        ({}, "serving", {}, "namespace-team", "spec.team"),
        (
            {"checkpointAccess": [{"teams": ["research"], "prefixes": ["s3://bucket/research/"]}]},
            None,
            CKPT,
            "checkpoint-prefix",
            "spec.checkpoint.uri",
        ),
    ],
)
def test_a_job_that_breaks_a_policy_is_not_admitted(
    policy: dict[str, Any], team: str | None, spec: dict[str, Any], rule: str, field: str
) -> None:
    w = World().pool("p").policy("platform", **policy).team("ns", team)
    job = w.job("a", "p", devices=8, **spec)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.UNSCHEDULABLE
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and cond[:2] == (False, "PolicyViolation")
    assert f"(rule {rule})" in cond[2] and cond[2].startswith(f"{field}: ")
    if rule != "namespace-team":
        assert "by policy 'platform'" in cond[2]
    assert (d.status.message or "").startswith("not admitted: ")
    assert _kinds(d) == ["PolicyViolation"], "no workload, one event"
    assert d.blocks is None and d.admitted is None


def test_an_obeying_job_is_admitted_as_without_policies() -> None:
    w = World().pool("p").policy("platform", maxDevicesPerJob=8, poolAccess=[{"teams": ["research"], "pools": ["p"]}])
    job = w.team("ns", "research").job("a", "p", devices=8, **SPOT, **CKPT)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.ADMITTED
    assert _cond(d, "PolicyCompliant") is None


def test_a_refused_job_posts_its_event_once() -> None:
    w = World().pool("p").policy("platform")
    first = decide(w.job("a", "p", devices=8, **NO_CKPT), w.snapshot(), T0)
    conditions = [
        {"type": c.type, "status": str(c.ok), "reason": c.reason, "message": c.message} for c in first.conditions
    ]
    again = w.job("a", "p", devices=8, status={"phase": "Unschedulable", "conditions": conditions}, **NO_CKPT)
    d = decide(again, w.snapshot(), T0)
    assert d.phase is JobPhase.UNSCHEDULABLE and _kinds(d) == []


def test_a_refused_job_runs_once_the_policy_allows_it() -> None:
    w = World().pool("p").policy("platform", spot={"requireCheckpoint": False})
    job = w.job("a", "p", devices=8, status={"phase": "Unschedulable"}, **NO_CKPT)
    assert decide(job, w.snapshot(), T0).phase is JobPhase.ADMITTED


def test_several_violations_are_all_named_up_to_a_limit() -> None:
    w = World().pool("p").policy("a", maxDevicesPerJob=2).policy("b", maxDevicesPerJob=4).team("ns", "serving")
    d = decide(w.job("a", "p", devices=8, **NO_CKPT), w.snapshot(), T0)
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None
    rules = [part.split("(rule ")[1].split(")")[0] for part in cond[2].split("; ") if "(rule " in part]
    # In order: the namespace's team, then each policy's rules (a before b).
    assert rules == ["namespace-team", "spot-needs-checkpoint", "max-devices", "max-devices", "spot-needs-checkpoint"]
    assert cond[2].endswith("; and 2 more")  # b's two max-devices


def _long_name(i: int) -> str:
    return f"{'p' * 60}.{'q' * 60}.{'r' * 60}.{i}"  # a policy name near the 253-character limit


@pytest.mark.parametrize("queued", [False, True])
def test_a_long_message_is_clipped_once_with_an_ellipsis(queued: bool) -> None:
    w = World().pool("p")
    for i in range(7):
        if queued:
            spend = [{"team": "research", "period": "monthly", "spentUsd": 1000, "limitUsd": 1000}]
            w.policy(_long_name(i), spend=spend, budgets=[{"team": "research", "limitUsd": 1000}])
        else:
            w.policy(_long_name(i), maxDevicesPerJob=2)
    d = decide(w.job("a", "p", devices=8), w.snapshot(), T0)
    assert d.phase is (JobPhase.PENDING if queued else JobPhase.UNSCHEDULABLE)
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and len(cond[2]) == MESSAGE_LIMIT and cond[2].endswith("…")
    message = d.status.message
    assert message is not None
    assert message.startswith("queued: " if queued else "not admitted: ")
    assert len(message) == MESSAGE_LIMIT and message.endswith("…"), "cut with the ellipsis, not mid-word"


# --- budgets: queue or refuse as the policy says --------------------------------------------------


def test_an_exhausted_budget_queues_the_job_without_blocking_its_pool() -> None:
    spend = [{"team": "research", "period": "monthly", "spentUsd": 1000, "limitUsd": 1000}]
    w = World().pool("p").policy("platform", spend=spend, budgets=[{"team": "research", "limitUsd": 1000}])
    d = decide(w.job("a", "p", devices=8), w.snapshot(), T0)
    assert d.phase is JobPhase.PENDING
    assert _cond(d, "Admitted") == (False, "BudgetExhausted", d.reason)
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and cond[1] == "BudgetExhausted"
    assert "has spent $1,000.00 of its monthly budget of $1,000.00" in cond[2]
    assert "(rule budget-exhausted)" in cond[2]
    assert d.blocks is None and _kinds(d) == ["BudgetExhausted"]


def test_an_exhausted_budget_does_not_hold_back_the_next_attempt_of_a_job_that_ran() -> None:
    """A preempted job resuming is not new work: the budget does not end it, it is flagged instead."""
    spend = [{"team": "research", "period": "monthly", "spentUsd": 1000, "limitUsd": 1000}]
    w = World().pool("p").policy("platform", spend=spend, budgets=[{"team": "research", "limitUsd": 1000}])
    resumed = w.job("a", "p", devices=8, status={"phase": "Pending", "attempt": 1, "preemptions": 1})
    d = decide(resumed, w.snapshot(), T0)
    assert d.phase is JobPhase.ADMITTED
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and cond[1] == "PolicyChanged" and "(rule budget-exhausted)" in cond[2]


def test_a_resuming_job_outside_its_checkpoint_prefixes_is_refused_before_any_lookup() -> None:
    """The S3 listing is the operator's, with its credentials: a job whose checkpoint URI a policy
    no longer grants its team (a preempted attempt after the policy changed) is refused first, so
    its next attempt never lists another team's prefix."""
    w = World().pool("p").policy("platform", checkpointAccess=[{"teams": ["research"], "prefixes": ["s3://mine"]}])
    resumed = w.job("a", "p", devices=8, status={"phase": "Pending", "attempt": 1, "preemptions": 1}, **CKPT)
    d = decide(resumed, w.snapshot(), T0)
    assert d.phase is JobPhase.UNSCHEDULABLE
    assert not any(isinstance(a, act.ResolveCheckpoint) for a in d.actions)
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and "(rule checkpoint-prefix)" in cond[2] and "'s3://mine'" in cond[2]
    allowed = World().pool("p").policy("platform", checkpointAccess=[{"teams": ["*"], "prefixes": ["s3://bucket"]}])
    again = allowed.job("a", "p", devices=8, status={"phase": "Pending", "attempt": 1, "preemptions": 1}, **CKPT)
    assert any(isinstance(a, act.ResolveCheckpoint) for a in decide(again, allowed.snapshot(), T0).actions)


def test_an_exhausted_budget_that_says_refuse_refuses() -> None:
    spend = [{"team": "research", "period": "monthly", "spentUsd": 1000, "limitUsd": 1000}]
    budgets = [{"team": "research", "limitUsd": 1000, "onExhausted": "refuse"}]
    w = World().pool("p").policy("platform", spend=spend, budgets=budgets)
    d = decide(w.job("a", "p", devices=8), w.snapshot(), T0)
    assert d.phase is JobPhase.UNSCHEDULABLE
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and cond[1] == "PolicyViolation" and "(rule budget-exhausted)" in cond[2]


def test_spend_below_the_budget_admits() -> None:
    spend = [{"team": "research", "period": "monthly", "spentUsd": 10, "limitUsd": 1000}]
    w = World().pool("p").policy("platform", spend=spend, budgets=[{"team": "research", "limitUsd": 1000}])
    assert decide(w.job("a", "p", devices=8), w.snapshot(), T0).phase is JobPhase.ADMITTED


def test_another_teams_spend_does_not_queue_the_job() -> None:
    spend = [{"team": "serving", "period": "monthly", "spentUsd": 5000, "limitUsd": 1000}]
    w = World().pool("p").policy("platform", spend=spend, budgets=[{"team": "research", "limitUsd": 1000}])
    assert decide(w.job("a", "p", devices=8), w.snapshot(), T0).phase is JobPhase.ADMITTED


# --- running jobs: a policy change is said, never enforced ----------------------------------------


def test_a_policy_change_never_stops_a_running_job() -> None:
    w = World().pool("p").policy("platform")
    job = w.job("a", "p", devices=8, status=_running("a", "p"), **NO_CKPT)
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.RUNNING
    assert not [a for a in d.actions if isinstance(a, act.DeleteWorkload)]
    cond = _cond(d, "PolicyCompliant")
    assert cond is not None and cond[:2] == (False, "PolicyChanged") and "(rule spot-needs-checkpoint)" in cond[2]
    assert _kinds(d) == ["PolicyViolation"]
    # The next decision, with the condition on record: no second event.
    on_record = [{"type": "PolicyCompliant", "status": "False", "reason": "PolicyChanged", "message": cond[2]}]
    again = w.job("a", "p", devices=8, status=_running("a", "p", on_record), **NO_CKPT)
    d2 = decide(again, w.snapshot(), T0)
    assert d2.phase is JobPhase.RUNNING and _kinds(d2) == []
    assert _cond(d2, "PolicyCompliant") == cond


def test_a_running_job_that_obeys_gets_no_policy_condition() -> None:
    w = World().pool("p").policy("platform")
    job = w.job("a", "p", devices=8, status=_running("a", "p"))
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.RUNNING and _cond(d, "PolicyCompliant") is None and _kinds(d) == []


# --- the planner: only granted pools, at most the device cap --------------------------------------


def test_the_planner_never_plans_onto_a_pool_the_team_may_not_use() -> None:
    w = World().pool("cheap", nodes=1).pool("dear", nodes=1, price={"onDemandPerDeviceHour": 20.0})
    w.policy("platform", poolAccess=[{"teams": ["research"], "pools": ["dear"]}])
    d = decide(w.job("a", "cheap", devices=8, pinned=False), w.snapshot(), T0)
    assert d.phase is JobPhase.ADMITTED and plan_of(d).pool == "dear"
    considered = {plan_of(d).pool} | {alt.pool for alt in plan_of(d).alternatives}
    assert "cheap" not in considered


def test_without_access_rules_the_cheaper_pool_wins() -> None:
    # The control for the test above: the same world without the grant plans onto "cheap".
    w = World().pool("cheap", nodes=1).pool("dear", nodes=1, price={"onDemandPerDeviceHour": 20.0})
    d = decide(w.job("a", "cheap", devices=8, pinned=False), w.snapshot(), T0)
    assert plan_of(d).pool == "cheap"


def test_the_planner_keeps_to_the_device_cap() -> None:
    w = World().pool("p", nodes=2).policy("platform", maxDevicesPerJob=2)
    job = w.job("a", "p", devices=1, pinned=False)
    assert job.spec is not None
    free = job.spec.placement.model_copy(update={"max_devices": None})  # 1 device or more, as the planner likes
    w.jobs[("ns", "a")] = [replace(job, spec=job.spec.model_copy(update={"placement": free}))]
    snap = w.snapshot()
    plan = snap.plans[("ns", "a")]
    ranked = [c for c in plan.candidates if c.rank is not None]
    assert plan.schedulable and ranked
    assert max(c.devices for c in ranked) <= 2
    assert any(c.devices > 2 for c in plan.candidates), "the larger placements were considered and refused"
    # The refusal names the policy that set the cap, not the job's own field.
    too_many = [s for c in plan.candidates if c.devices > 2 for s in explain.failed_checks(c) if "devices >" in s]
    assert too_many and all(s.endswith("devices > policy 'platform' maxDevicesPerJob 2") for s in too_many), too_many
    d = decide(snap.jobs[("ns", "a")], snap, T0)
    assert d.admitted is not None and d.admitted[1].devices <= 2


def test_a_policy_change_is_seen_by_the_next_decision() -> None:
    # The folded policies are kept between passes until a policy or namespace event.
    w = World().pool("p")
    job = w.job("a", "p", devices=8, **NO_CKPT)
    assert decide(job, w.snapshot(), T0).phase is JobPhase.ADMITTED
    w.policy("platform")
    assert decide(job, w.snapshot(), T0).phase is JobPhase.UNSCHEDULABLE
    w.team("ns", "serving")
    cond = _cond(decide(job, w.snapshot(), T0), "PolicyCompliant")
    assert cond is not None and "(rule namespace-team)" in cond[2]


def test_a_cap_the_job_set_itself_is_named_as_its_field() -> None:
    w = World().pool("p", nodes=2).policy("platform", maxDevicesPerJob=16)
    job = w.job("a", "p", devices=1, pinned=False)
    assert job.spec is not None
    own = job.spec.placement.model_copy(update={"max_devices": 2})  # below the policy's cap
    w.jobs[("ns", "a")] = [replace(job, spec=job.spec.model_copy(update={"placement": own}))]
    plan = w.snapshot().plans[("ns", "a")]
    too_many = [s for c in plan.candidates if c.devices > 2 for s in explain.failed_checks(c) if "devices >" in s]
    assert too_many and all(s.endswith("devices > placement.maxDevices 2") for s in too_many), too_many


def test_the_cap_comes_from_the_policy_with_the_smallest_one() -> None:
    from accel_operator.planning import policy

    w = World().policy("b-wide", maxDevicesPerJob=16).policy("a-narrow", maxDevicesPerJob=4).policy("open")
    pols = w.snapshot().policy.policies
    assert policy.device_cap(pols) == 4
    assert policy.cap_source(pols) == "policy 'a-narrow' maxDevicesPerJob"
    assert policy.cap_source([]) == "placement.maxDevices"
