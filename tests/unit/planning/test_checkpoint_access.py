"""Issue 25, finding 10: a team checkpoints to S3 only under the prefixes a policy grants it.

``checkpointAccess`` in the policy, the ``checkpoint-prefix`` rule of ``planning.policy.evaluate``
(shared by the webhook, the reconciler and ``accelctl validate --policy``) and the segment-wise
matching of normalised URIs it rests on.
"""

from typing import Any

import pytest
from pydantic import ValidationError

from accel_api.job import AcceleratorJobSpec
from accel_api.policy import AcceleratorPolicy
from accel_operator.planning import policy
from tests.support.builders import job as job_builder


def _job(uri: str | None, team: str = "research") -> AcceleratorJobSpec:
    b = job_builder()
    b.doc["team"] = team
    if uri is not None:
        b.doc["checkpoint"] = {"uri": uri, "intervalMinutes": 30}
    return b.spec()


def _policy(*rules: dict[str, Any], name: str = "p") -> AcceleratorPolicy:
    return AcceleratorPolicy.model_validate({"metadata": {"name": name}, "spec": {"checkpointAccess": list(rules)}})


RESEARCH = _policy(
    {"teams": ["research"], "prefixes": ["s3://ckpt/teams/research/", "s3://research-scratch"]},
    {"teams": ["serving"], "prefixes": ["s3://ckpt/teams/serving"]},
)


@pytest.mark.parametrize(
    ("uri", "prefix", "within"),
    [
        ("s3://b/team/run", "s3://b/team", True),
        ("s3://b/team/run", "s3://b/team/", True),
        ("s3://b/team", "s3://b/team/", True),  # the prefix itself: the job's steps lie below it
        ("s3://b/team/a/b/c", "s3://b/", True),
        ("s3://b/team/a/b/c", "s3://b", True),
        ("s3://b/team-other/run", "s3://b/team", False),  # a sibling that shares the letters
        ("s3://b/teamx", "s3://b/team/", False),
        ("s3://bb/team/run", "s3://b/team", False),  # another bucket that shares the letters
        ("s3://b/team/run", "s3://bb", False),
        ("s3://b/Team/run", "s3://b/team", False),  # S3 keys are case-sensitive
        ("s3://b/other/run", "s3://b/team", False),
        ("s3://b", "s3://b/team", False),  # the whole bucket is not inside one directory of it
        ("s3://b/team/../other/run", "s3://b/team", False),  # never normalised into the prefix
        ("s3://b/team/%2e%2e/other", "s3://b/team", False),
        ("s3://b/team%2F..%2Fother/x", "s3://b/team", False),  # decodes to a path that leaves it
        ("s3://b/team//x", "s3://b/team", False),
        ("s3://b/team/./x", "s3://b/team", False),
        ("pvc://b/team/run", "s3://b/team", False),  # another scheme
        ("s3://b/team/run", "s3://b/team//", False),  # a prefix that does not normalise allows nothing
        ("s3:/b/team/run", "s3://b/team", False),
    ],
)
def test_checkpoint_within_compares_normalised_segments(uri: str, prefix: str, within: bool) -> None:
    assert policy.checkpoint_within(uri, prefix) is within


@pytest.mark.parametrize(
    ("uri", "team", "policies", "expected"),
    [
        ("s3://ckpt/teams/research/llama", "research", [RESEARCH], []),
        ("s3://research-scratch/x/y", "research", [RESEARCH], []),
        ("s3://ckpt/teams/serving/llama", "research", [RESEARCH], ["checkpoint-prefix"]),
        ("s3://ckpt/teams/research-old/llama", "research", [RESEARCH], ["checkpoint-prefix"]),
        ("s3://ckpt/teams/serving/llama", "serving", [RESEARCH], []),
        ("s3://ckpt/teams/research/llama", "nobody", [RESEARCH], ["checkpoint-prefix"]),  # no grant: nothing
        ("pvc://claim/run", "research", [RESEARCH], []),  # a claim of the job's own namespace: not governed
        (None, "research", [RESEARCH], []),
        ("s3://anything/x", "research", [], []),  # no policy sets prefixes: today's behaviour, allowed
        ("s3://anything/x", "research", [AcceleratorPolicy.model_validate({"metadata": {"name": "q"}})], []),
        # Every policy applies: one that grants a wider prefix does not undo one that grants less.
        (
            "s3://ckpt/teams/serving/x",
            "research",
            [RESEARCH, _policy({"teams": ["*"], "prefixes": ["s3://ckpt"]}, name="wide")],
            ["checkpoint-prefix"],
        ),
        ("s3://ckpt/any/x", "nobody", [_policy({"teams": ["*"], "prefixes": ["s3://ckpt/"]})], []),
    ],
)
def test_the_checkpoint_prefix_rule(
    uri: str | None, team: str, policies: list[AcceleratorPolicy], expected: list[str]
) -> None:
    assert [v.rule for v in policy.evaluate(_job(uri, team), team, policies)] == expected


def test_a_refusal_names_the_field_the_team_and_the_allowed_prefixes() -> None:
    (v,) = policy.evaluate(_job("s3://ckpt/teams/serving/llama"), "research", [RESEARCH])
    assert str(v) == (
        "spec.checkpoint.uri: team 'research' may not checkpoint to 's3://ckpt/teams/serving/llama': it is under "
        "none of the team's 2 allowed prefix(es) by policy 'p' (rule checkpoint-prefix); fix: checkpoint under a "
        "prefix granted to team 'research': 's3://ckpt/teams/research/', 's3://research-scratch'"
    )
    (none,) = policy.evaluate(_job("s3://ckpt/x", "nobody"), "nobody", [RESEARCH])
    assert "none of the team's 0 allowed prefix(es)" in str(none)
    assert "ask the platform team for a checkpoint prefix for team 'nobody'" in str(none)


def test_a_refusal_stays_bounded_with_many_long_prefixes() -> None:
    long = [f"s3://b/{'x' * 240}{i}/" for i in range(16)]
    pol = _policy(*({"teams": ["research"], "prefixes": long} for _ in range(64)))
    (v,) = policy.evaluate(_job(f"s3://c/{'y' * 1000}"), "research", [pol])
    text = str(v)
    assert len(text) < 1000
    assert "and 1020 more" in text


@pytest.mark.parametrize(
    "prefix",
    [
        "s3://",
        "gs://b/x",
        "pvc://claim/x",
        "s3://B/x",
        "s3://b//",
        "s3://b//x",
        "s3://b/x//",
        "s3://b/./x",
        "s3://b/x/..",
        "s3://b/%2e%2E/x",
        "s3://b/x\\y",
        "s3://b/\x00",
        "s3://b/" + "x" * 250,  # 257 characters
    ],
)
def test_a_malformed_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ValidationError, match="prefixes"):
        _policy({"teams": ["research"], "prefixes": [prefix]})


@pytest.mark.parametrize("prefix", ["s3://b", "s3://b/", "s3://b/teams/ml", "s3://b/teams/ml/", "s3://b-1.x/a b/c"])
def test_a_wellformed_prefix_is_kept(prefix: str) -> None:
    assert _policy({"teams": ["research"], "prefixes": [prefix]}).spec.checkpoint_access[0].prefixes == [prefix]


def test_rule_and_prefix_lists_are_bounded() -> None:
    with pytest.raises(ValidationError):
        _policy({"teams": ["research"], "prefixes": [f"s3://b/{i}" for i in range(17)]})
    with pytest.raises(ValidationError):
        _policy(*({"teams": ["research"], "prefixes": ["s3://b"]} for _ in range(65)))
    with pytest.raises(ValidationError):
        _policy({"teams": [], "prefixes": ["s3://b"]})


def test_a_broken_policy_with_checkpoint_rules_governs_the_teams_they_name() -> None:
    bad = policy.read(
        "bad", {"metadata": {"name": "bad"}, "spec": {"checkpointAccess": [{"teams": ["ml"], "prefixes": ["x"]}]}}
    )
    assert isinstance(bad, policy.BrokenPolicy)
    assert bad.teams == frozenset({"ml"})
