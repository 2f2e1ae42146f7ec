"""reconcile.policy_inputs: kopf's policy and namespace indexes folded into one frozen value,
and the spend seam (the policies' status.spend)."""

from typing import Any

from accel_api.policy import AcceleratorPolicy
from accel_operator.reconcile.common import policy_inputs


def _policy(name: str, spend: list[dict[str, Any]] | None = None) -> AcceleratorPolicy:
    doc: dict[str, Any] = {"metadata": {"name": name}, "spec": {}}
    if spend is not None:
        doc["status"] = {"spend": spend}
    return AcceleratorPolicy.model_validate(doc)


def _spend(team: str, period: str, usd: float) -> dict[str, Any]:
    return {"team": team, "period": period, "spentUsd": usd, "limitUsd": 1000}


def test_fold_skips_unparsed_policies_and_unlabelled_namespaces() -> None:
    inputs = policy_inputs.fold(
        {"b": [_policy("b")], "bad": [None], "a": [_policy("a")]},
        {"ns1": ["research"], "ns2": [None]},
    )
    assert [p.metadata.name for p in inputs.policies] == ["a", "b"]
    assert inputs.team_of("ns1") == "research" and inputs.team_of("ns2") is None and inputs.team_of("x") is None
    assert inputs.binds("ns1") and inputs.binds("ns2")  # policies exist: every namespace is judged


def test_nothing_binds_without_policies_or_a_team() -> None:
    assert not policy_inputs.fold({}, {"ns1": [None], "ns2": [None]}).binds("ns1")
    # A labelled namespace binds its team, also for the unlabelled ones: a job there may not name it.
    inputs = policy_inputs.fold({}, {"ns1": ["research"], "ns2": [None]})
    assert inputs.binds("ns1") and inputs.binds("ns2")
    assert inputs.bound_teams() == {"research"}


def test_spend_is_the_highest_figure_any_policy_reports_per_team_and_period() -> None:
    spent = policy_inputs.spend_from(
        [
            _policy("a", [_spend("research", "monthly", 10), _spend("research", "daily", 3)]),
            _policy("b", [_spend("research", "monthly", 25)]),
            _policy("c"),
        ]
    )
    assert spent == {"research/monthly": 25.0, "research/daily": 3.0}
