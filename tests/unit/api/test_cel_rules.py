"""Rules across one object's fields: declared once (``cel_rules``), enforced by the models and
emitted into the CRDs as ``x-kubernetes-validations``. The real API server's side is
tests/cluster/test_cel.py."""

from typing import Any

import pytest

from accel_api import InvalidResource, catalog, crdgen, parse_resource, registry
from accel_api.base import ApiModel
from accel_api.job import Architecture, ModelSpec, Placement, Workload
from tests.support.cel_cases import CASES, Case


def _rules_in(node: Any) -> list[dict[str, str]]:
    if isinstance(node, dict):
        found = list(node.get("x-kubernetes-validations", []))
        return found + [r for v in node.values() for r in _rules_in(v)]
    if isinstance(node, list):
        return [r for v in node for r in _rules_in(v)]
    return []


def _models() -> list[type[ApiModel]]:
    seen: list[type[ApiModel]] = []
    stack: list[type[ApiModel]] = [ApiModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            seen.append(sub)
            stack.append(sub)
    return seen


def test_every_declared_rule_is_in_a_crd_once() -> None:
    emitted = [r["rule"] for k in registry.KINDS for r in _rules_in(crdgen.crd(k))]
    for model in _models():
        for rule in model.__dict__.get("cel_rules", ()):
            assert emitted.count(rule.cel) == 1, (model.__name__, rule.name)


def test_rule_names_are_unique_and_messages_static() -> None:
    rules = [r for m in _models() for r in m.__dict__.get("cel_rules", ())]
    assert len({r.name for r in rules}) == len(rules)
    assert all("{" not in r.message for r in rules)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_models_refuse_each_violation_with_the_rules_message(case: Case) -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(case.doc)
    assert any(case.message in p for p in info.value.problems), info.value.problems


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_fixed_document_is_accepted(case: Case) -> None:
    parse_resource(case.fixed)


def test_tpu_rule_matches_the_catalog() -> None:
    cat = catalog.default()
    for acc_id in cat.ids():
        acc = cat.get(acc_id)
        assert acc is not None
        assert acc_id.startswith("tpu-") == (acc.kind == "tpu"), acc_id


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        (Placement, {"minDevices": 8, "maxDevices": 8, "maxNodes": 1}),
        (Placement, {"maxNodes": 4}),
        (Workload, {"mode": "inference", "recompute": "none"}),
        (Workload, {"tokens": 1, "gradientCheckpointing": True, "recompute": "full"}),
        (ModelSpec, {"parameters": 10}),
        (Architecture, {"layers": 1, "hidden": 10, "heads": 4, "headDim": 3, "vocab": 1}),
    ],
)
def test_edges_are_accepted(model: type[ApiModel], doc: dict[str, Any]) -> None:
    model.model_validate(doc)
