"""Every model rule the API server can check is in the CRDs on disk (crds/*.yaml), so a stored
object can never be one the models refuse: a policy with a malformed field would otherwise be
stored and then switch off every rule it holds. Each rule is checked twice here: the models
refuse the breach, and the generated CRD carries the same rule (a pattern or CEL)."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api import InvalidResource, parse_resource, patterns

ROOT = Path(__file__).resolve().parents[3]


def _spec_schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / f"{plural}.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def _policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "accel.dev/v1alpha1", "kind": "AcceleratorPolicy", "metadata": {"name": "p"}, "spec": spec}


POLICY_PATTERNS = [
    ("reservedEnv.[]", patterns.RESERVED_ENV_NAME, {"reservedEnv": ["MY SECRET"]}),
    ("reservedEnv.[]", patterns.RESERVED_ENV_NAME, {"reservedEnv": ["*"]}),
    ("reservedEnv.[]", patterns.RESERVED_ENV_NAME, {"reservedEnv": ["$HOME"]}),
    ("budgets.[].team", patterns.DNS_LABEL, {"budgets": [{"team": "Research", "limitUsd": 1}]}),
    ("poolAccess.[].teams.[]", patterns.TEAM_OR_ANY, {"poolAccess": [{"teams": ["a b"], "pools": ["*"]}]}),
    ("poolAccess.[].pools.[]", patterns.POOL_OR_ANY, {"poolAccess": [{"teams": ["*"], "pools": ["H100"]}]}),
    ("idle.teams.[]", patterns.DNS_LABEL, {"idle": {"teams": ["ML_team"]}}),
]


@pytest.mark.parametrize(("path", "pattern", "spec"), POLICY_PATTERNS, ids=[f"{p[0]}={p[2]}" for p in POLICY_PATTERNS])
def test_policy_names_are_refused_by_models_and_crd(path: str, pattern: str, spec: dict[str, Any]) -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(_policy(spec))
    assert any(patterns.EXPLAINED[pattern] in p for p in info.value.problems), info.value.problems
    node = _at(_spec_schema("acceleratorpolicies"), path)
    assert node["pattern"] == pattern
    bad = str(next(iter(_leaves(spec))))
    assert not re.fullmatch(pattern, bad)


def _leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [x for k, v in node.items() if k != "limitUsd" for x in _leaves(v)]
    if isinstance(node, list):
        return [x for v in node for x in _leaves(v) if x not in ("*",) or node == ["*"]]
    return [node]


def test_good_policy_names_are_accepted() -> None:
    parse_resource(
        _policy(
            {
                "reservedEnv": ["MY_SECRET", "VENDOR_*", "a.b-c"],
                "budgets": [{"team": "research", "limitUsd": 1}],
                "poolAccess": [{"teams": ["*", "ml-1"], "pools": ["*", "h100.spot-1"]}],
                "idle": {"teams": ["research"]},
            }
        )
    )


def test_job_team_is_immutable_in_the_crd() -> None:
    rules = _at(_spec_schema("acceleratorjobs"), "team")["x-kubernetes-validations"]
    assert {"rule": "self == oldSelf", "message": "is immutable: delete the job and create it for the other team"} in (
        rules
    )


def test_job_cross_field_rules_are_cel_in_the_crd() -> None:
    spec = _spec_schema("acceleratorjobs")
    messages = {r["message"] for r in spec["x-kubernetes-validations"]}
    assert "workload.tensorParallel must divide model.architecture.heads and kvHeads" in messages
    assert "workload.pipelineParallel must be at most model.architecture.layers" in messages
    deadline = {r["message"]: r["rule"] for r in _at(spec, "deadline")["x-kubernetes-validations"]}
    assert "31536000.0" in deadline["must be at most 365d"]
    assert _at(spec, "placement.pools.[]")["pattern"] == patterns.DNS_SUBDOMAIN


def test_pool_label_keys_and_values_are_refused_by_models_and_crd() -> None:
    doc = next(d for d in yaml.safe_load_all((ROOT / "examples" / "10-pool-h100-spot.yaml").read_text()) if d)
    doc["spec"]["nodeSelector"] = {"bad key!": "v", "ok": "bad value"}
    with pytest.raises(InvalidResource) as info:
        parse_resource(doc)
    problems = "\n".join(info.value.problems)
    assert patterns.EXPLAINED[patterns.LABEL_KEY] in problems and patterns.EXPLAINED[patterns.LABEL_VALUE] in problems
    selector = _at(_spec_schema("acceleratorpools"), "nodeSelector")
    assert selector["additionalProperties"]["pattern"] == patterns.LABEL_VALUE
    assert any(patterns.LABEL_KEY in r["rule"] for r in selector["x-kubernetes-validations"])
    assert "x-kubernetes-preserve-unknown-fields" not in selector
    for good in ("accel.dev/pool", "node.kubernetes.io/instance-type", "team"):
        assert re.fullmatch(patterns.LABEL_KEY, good)
    for good in ("", "p4d.24xlarge", "A_b-c"):
        assert re.fullmatch(patterns.LABEL_VALUE, good)
