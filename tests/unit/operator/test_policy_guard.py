"""Issue 25, findings 6 and 7: a stored policy the models refuse fails closed (webhook and
reconciler refuse every job it would govern; the policy says so in a condition), and the webhook
and the reconciler refuse alike a job in an unlabelled namespace that names a team some labelled
namespace holds."""

from __future__ import annotations

from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_operator.engine import admission
from accel_operator.planning import policy
from accel_operator.reconcile.common import policy_inputs
from accel_operator.reconcile.job.decide import decide
from tests.support.jobs import job_doc
from tests.support.reconcile import T0, World

BAD_ENV: dict[str, Any] = {"reservedEnv": ["MY SECRET"]}


def _compliance(world: World, job: Any) -> tuple[JobPhase, str]:
    d = decide(job, world.snapshot(), T0)
    cond = next((c for c in d.conditions if c.type == "PolicyCompliant"), None)
    return d.phase, cond.message if cond is not None else ""


@pytest.mark.parametrize("bad", [["MY SECRET"], ["*"], ["$HOME"]])
def test_a_broken_policy_holds_every_job_naming_itself(bad: list[str]) -> None:
    w = World().pool("p").broken_policy("bad", reservedEnv=bad)
    phase, message = _compliance(w, w.job("a", "p", devices=8))
    assert phase is JobPhase.UNSCHEDULABLE
    assert "spec: cannot be checked: the policy does not parse (spec.reservedEnv[0]: " in message, message
    assert "by policy 'bad' (rule policy-invalid)" in message, message


def test_fixing_the_policy_releases_the_job() -> None:
    w = World().pool("p").broken_policy("bad", **BAD_ENV)
    assert _compliance(w, w.job("a", "p", devices=8))[0] is JobPhase.UNSCHEDULABLE
    w.policy("bad", reservedEnv=["MY_SECRET"])
    assert decide(w.job("a", "p", devices=8), w.snapshot(), T0).phase is JobPhase.ADMITTED


def test_a_broken_team_scoped_policy_holds_its_teams_and_spot_jobs_only() -> None:
    w = World().pool("p").broken_policy("bad", budgets=[{"team": "research", "limitUsd": -1}])
    assert _compliance(w, w.job("mine", "p", devices=8))[0] is JobPhase.UNSCHEDULABLE  # team research
    assert decide(w.job("theirs", "p", devices=8, team="serving"), w.snapshot(), T0).phase is JobPhase.ADMITTED
    spot = w.job("spot", "p", devices=8, team="serving", spot={"policy": "prefer"}, checkpoint={"uri": "s3://b/r"})
    assert _compliance(w, spot)[0] is JobPhase.UNSCHEDULABLE  # the spot rules apply to every team


@pytest.mark.parametrize(
    ("spec", "teams"),
    [
        ({"budgets": [{"team": "a", "limitUsd": -1}], "poolAccess": [{"teams": ["b"], "pools": ["x"]}]}, {"a", "b"}),
        ({"budgets": [{"team": "a", "limitUsd": -1}], "idle": {"teams": ["c"]}}, {"a", "c"}),
        ({"poolAccess": [{"teams": ["*"], "pools": ["x"]}], "budgets": [{"team": 5}]}, None),  # * : every team
        ({"budgets": [{"team": ["a"]}]}, None),  # unreadable
        ({"budgets": "all"}, None),
        ({"idle": {"action": "stop"}, "budgets": [{"team": "a"}]}, None),  # idle without teams: every team
        ({"budgets": [{"team": "a"}], "maxDevicesPerJob": 0}, None),  # a rule for every team
        ({"spot": "always"}, None),
        ("spec", None),
    ],
)
def test_the_teams_a_broken_policy_governs(spec: Any, teams: set[str] | None) -> None:
    got = policy.read("bad", {"metadata": {"name": "bad"}, "spec": spec})
    assert isinstance(got, policy.BrokenPolicy)
    assert got.teams == (frozenset(teams) if teams is not None else None)


def test_a_broken_policy_keeps_few_bounded_problems() -> None:
    got = policy.read("bad", {"spec": {"reservedEnv": ["X" * 100 + " " + "Y" * 10_000] * 60}})
    assert isinstance(got, policy.BrokenPolicy)
    assert 1 <= len(got.problems) <= policy.BROKEN_PROBLEMS
    assert all(len(p) <= 200 for p in got.problems)


def test_the_webhook_refuses_what_a_broken_policy_governs() -> None:
    bad = policy.read("bad", {"metadata": {"name": "bad"}, "spec": BAD_ENV})
    assert isinstance(bad, policy.BrokenPolicy)
    body = job_doc("ns", "p", name="a")
    lines = admission.review(body, None, [], broken=[bad])
    assert len(lines) == 1 and "by policy 'bad' (rule policy-invalid)" in lines[0], lines
    assert admission.review(body, None, []) == []


# --- the namespace-team binding -------------------------------------------------------------------


def test_an_unlabelled_namespace_may_not_name_a_bound_team() -> None:
    w = World().pool("p").team("research-ns", "research").team("ns", None)
    phase, message = _compliance(w, w.job("a", "p", devices=8))  # team research, in "ns"
    assert phase is JobPhase.UNSCHEDULABLE
    assert message.startswith("spec.team: team 'research' is bound to the namespaces labelled accel.dev/team=")
    assert "(rule namespace-team)" in message
    assert decide(w.job("b", "p", devices=8, team="ml"), w.snapshot(), T0).phase is JobPhase.ADMITTED


def test_the_webhook_refuses_the_same_bound_team() -> None:
    body = job_doc("ns", "p", name="a")
    lines = admission.review(body, None, [], bound_teams={"research"})
    assert len(lines) == 1 and "(rule namespace-team)" in lines[0], lines
    assert admission.review(body, "research", [], bound_teams={"research"}) == []
    assert admission.review(body, None, [], bound_teams={"serving"}) == []


# --- the policy's Valid condition ----------------------------------------------------------------


def test_the_valid_condition_is_written_on_change_only() -> None:
    body: dict[str, Any] = {"metadata": {"name": "bad", "generation": 3}, "spec": BAD_ENV}
    bad = policy.read("bad", body)
    assert isinstance(bad, policy.BrokenPolicy)
    assert policy_inputs.validity(body, None, "t") is None  # a valid policy that never was invalid
    change = policy_inputs.validity(body, bad, "t")
    assert change is not None
    conditions, message = change
    (cond,) = conditions
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "Valid",
        "False",
        "InvalidSpec",
        3,
    )
    assert cond["message"] == message and message.startswith("spec.reservedEnv[0]: must be an environment variable")
    assert "holds every job until it is fixed" in message
    body["status"] = {"conditions": [{"type": "Other", "status": "True"}, *conditions]}
    assert policy_inputs.validity(body, bad, "t2") is None  # said once
    fixed = policy_inputs.validity(body, None, "t3")
    assert fixed is not None
    assert [(c["type"], c["status"]) for c in fixed[0]] == [("Other", "True"), ("Valid", "True")]
