"""planning.policy.evaluate: one row per rule, each breach named with its policy and rule."""

from typing import Any

import pytest
import yaml

from accel_api.enums import BudgetPeriod
from accel_api.job import AcceleratorJobSpec
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import policy
from tests.support.hostile import EXAMPLES

POLICY = AcceleratorPolicy.model_validate(yaml.safe_load(EXAMPLES["20-policy.yaml"]))


def _job(example: str = "02-multinode-spot-training.yaml", **changes: Any) -> AcceleratorJobSpec:
    doc = next(d for d in yaml.safe_load_all(EXAMPLES[example]) if d)
    spec: dict[str, Any] = doc["spec"]
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return AcceleratorJobSpec.model_validate(spec)


# The example policy grants each team its own S3 prefix (checkpointAccess).
SERVING_CHECKPOINT = {"uri": "s3://ml-checkpoints/serving/llama-8b", "intervalMinutes": 20}


def _policy(**spec: Any) -> AcceleratorPolicy:
    return AcceleratorPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})


def _rules(found: list[policy.Violation]) -> list[str]:
    return [v.rule for v in found]


@pytest.mark.parametrize(
    "example", [n for n, t in EXAMPLES.items() if "kind: AcceleratorJob" in t], ids=lambda n: n.split("-")[0]
)
def test_examples_obey_the_example_policy(example: str) -> None:
    job = _job(example)
    assert policy.evaluate(job, job.team, [POLICY]) == []


@pytest.mark.parametrize(
    ("job", "team", "policies", "spent", "expected"),
    [
        (_job(), None, [], None, []),
        (_job(), "serving", [], None, ["namespace-team"]),
        (_job(checkpoint=None, spot={"policy": "prefer"}), None, [POLICY], None, ["spot-needs-checkpoint"]),
        (_job(checkpoint=None, spot={"policy": "never"}), None, [POLICY], None, []),
        (_job(checkpoint=None), None, [_policy(spot={"requireCheckpoint": False})], None, []),
        (
            _job(checkpoint={"uri": "pvc://c/x", "intervalMinutes": 90}),
            None,
            [_policy(spot={"allowedCheckpointSchemes": ["s3"]})],
            None,
            ["spot-checkpoint-interval", "spot-checkpoint-scheme"],
        ),
        (
            _job(
                team="serving",
                maxCost=None,
                placement={"pools": ["h100-spot", "l4-on-demand"]},
                checkpoint=SERVING_CHECKPOINT,
            ),
            None,
            [POLICY],
            None,
            ["pool-access"],
        ),
        (
            _job(team="serving", maxCost=None, placement={"pools": ["l4-on-demand"]}, checkpoint=SERVING_CHECKPOINT),
            None,
            [POLICY],
            None,
            [],
        ),
        # A team the policy names nowhere: no budget, every pool, but no S3 prefix of its own.
        (_job(team="nobody"), None, [POLICY], None, ["checkpoint-prefix"]),
        (_job(team="nobody", checkpoint=None, spot={"policy": "never"}), None, [POLICY], None, []),
        (_job(placement={"minDevices": 128}), None, [POLICY], None, ["max-devices"]),
        (_job(placement={"minDevices": 8, "maxDevices": 65}), None, [POLICY], None, ["max-devices"]),
        (_job(placement={"minDevices": 8}), None, [POLICY], None, []),
        (
            _job(env=[{"name": "WANDB_KEY", "value": "x"}]),
            None,
            [_policy(reservedEnv=["WANDB_*"])],
            None,
            ["reserved-env"],
        ),
        (_job(env=[{"name": "HF_HOME", "value": "x"}]), None, [_policy(reservedEnv=["WANDB_*"])], None, []),
        (_job(maxCost=500_000), None, [POLICY], None, ["budget-exceeds-limit"]),
        (_job(), None, [POLICY], {"research/monthly": 400_000}, ["budget-exhausted"]),
        (_job(maxCost=1000), None, [POLICY], {"research/monthly": 399_500}, ["budget-exhausted"]),
        (_job(maxCost=100), None, [POLICY], {"research/monthly": 399_500}, []),
        (_job(), None, [POLICY], {"research/weekly": 10**6}, []),
        (
            _job(team="serving", maxCost=None, checkpoint=None, placement={"pools": ["h100-spot"], "minDevices": 99}),
            "research",
            [POLICY, _policy(maxDevicesPerJob=16)],
            None,
            [
                "namespace-team",
                "spot-needs-checkpoint",
                "pool-access",
                "max-devices",
                "spot-needs-checkpoint",
                "max-devices",
            ],
        ),
    ],
)
def test_rules(
    job: AcceleratorJobSpec,
    team: str | None,
    policies: list[AcceleratorPolicy],
    spent: dict[str, float] | None,
    expected: list[str],
) -> None:
    assert _rules(policy.evaluate(job, team, policies, spent=spent)) == expected


def test_violation_renders_field_rule_policy_and_fix() -> None:
    (v,) = policy.evaluate(_job(checkpoint=None), "research", [POLICY])
    assert str(v) == (
        "spec.checkpoint: required for spot jobs by policy 'platform-defaults' (rule spot-needs-checkpoint); "
        "fix: add spec.checkpoint with an s3:// or pvc:// uri, or set spec.spot.policy: never"
    )


def test_budget_exhaustion_queues_rather_than_refuses() -> None:
    found = policy.evaluate(_job(), None, [POLICY], spent={policy.spend_key("research", BudgetPeriod.MONTHLY): 4e5})
    assert [v.queue for v in found] == [True]
    assert policy.refusals(found) == []


def test_a_budget_that_says_refuse_refuses() -> None:
    pol = _policy(budgets=[{"team": "research", "limitUsd": 100, "onExhausted": "refuse"}])
    found = policy.evaluate(_job(maxCost=None), None, [pol], spent={"research/monthly": 100})
    assert [(v.rule, v.queue) for v in found] == [("budget-exhausted", False)]
    assert policy.refusals(found) == found
    assert "submit it again in the next monthly period" in str(found[0])


def test_team_granted_no_existing_pool() -> None:
    pools = {
        "h100-spot": AcceleratorPoolSpec.model_validate(
            {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8}
        )
    }
    job = _job(team="serving", maxCost=None, checkpoint=SERVING_CHECKPOINT)
    assert _rules(policy.evaluate(job, None, [POLICY], pools=pools)) == ["pool-access"]
    assert policy.pool_allowed("serving", "l4-on-demand", [POLICY])
    assert not policy.pool_allowed("serving", "h100-spot", [POLICY])
    assert policy.pool_allowed("research", "anything", [POLICY])
    assert policy.device_cap([POLICY, _policy(maxDevicesPerJob=16)]) == 16
    assert policy.device_cap([]) is None


def test_tenant_values_are_clipped() -> None:
    job = _job(team="a" * 63)
    (v,) = policy.evaluate(job, "b" * 63, [])
    assert len(str(v)) < 600


# --- restrict: what the planner may consider ------------------------------------------------------


def _offers(*names: str) -> list[Any]:
    from accel_operator.planning.candidates import PoolOffer

    spec = AcceleratorPoolSpec.model_validate({"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8})
    return [PoolOffer(name=n, spec=spec) for n in names]


def test_restrict_keeps_only_the_granted_pools() -> None:
    pols = [_policy(poolAccess=[{"teams": ["research"], "pools": ["a", "c"]}, {"teams": ["*"], "pools": ["d"]}])]
    _, offers = policy.restrict(_job(placement={"minDevices": 8}), _offers("a", "b", "c", "d"), pols)
    assert [o.name for o in offers] == ["a", "c", "d"]
    # Two policies: a pool must be granted by both.
    both = [*pols, _policy(poolAccess=[{"teams": ["research"], "pools": ["c"]}])]
    assert [o.name for o in policy.restrict(_job(), _offers("a", "c", "d"), both)[1]] == ["c"]


@pytest.mark.parametrize(
    ("placement", "cap", "expected_max"),
    [
        ({"minDevices": 1}, 4, 4),  # unset: lowered to the cap
        ({"minDevices": 1, "maxDevices": 16}, 4, 4),
        ({"minDevices": 1, "maxDevices": 2}, 4, 2),  # already within it: unchanged
        ({"minDevices": 8}, 4, None),  # above the cap: a max-devices refusal, left to evaluate
        ({"minDevices": 1}, None, None),  # no cap
    ],
)
def test_restrict_caps_max_devices(placement: dict[str, Any], cap: int | None, expected_max: int | None) -> None:
    pols = [_policy(maxDevicesPerJob=cap)] if cap is not None else [_policy()]
    job, _ = policy.restrict(_job(placement=placement), _offers("a"), pols)
    assert job.placement.max_devices == expected_max
    assert job.placement.min_devices == placement["minDevices"]


def test_restrict_without_policies_changes_nothing() -> None:
    job = _job()
    assert policy.restrict(job, _offers("a", "b"), []) == (job, _offers("a", "b"))
