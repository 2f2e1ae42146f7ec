"""PoolView: which nodes a pool owns, from a selector built once with the view."""

from __future__ import annotations

from typing import Any, cast

import pytest

from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.reconcile.common.snapshot import NodeView, PoolView


def _spec(**extra: Any) -> AcceleratorPoolSpec:
    doc = {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8, "maxNodes": 2, **extra}
    return AcceleratorPoolSpec.model_validate(doc)


def _node(**labels: str) -> NodeView:
    return NodeView("n", labels, 8)


@pytest.mark.parametrize(
    ("selector", "labels", "owned"),
    [
        (None, {v.LABEL_POOL: "p"}, True),  # no nodeSelector: our pool label
        (None, {v.LABEL_POOL: "q"}, False),
        (None, {}, False),
        ({"team": "ml", "gpu": "h100"}, {"team": "ml", "gpu": "h100", "other": "x"}, True),
        ({"team": "ml", "gpu": "h100"}, {"team": "ml"}, False),  # every pair must match
        ({"team": "ml"}, {"team": "ml", v.LABEL_POOL: "q"}, True),  # the pool label is not needed then
        ({"team": "ml"}, {v.LABEL_POOL: "p"}, False),
    ],
)
def test_a_pool_owns_the_nodes_its_selector_matches(
    selector: dict[str, str] | None, labels: dict[str, str], owned: bool
) -> None:
    pool = PoolView("p", _spec(**({"nodeSelector": selector} if selector else {})))
    assert pool.owns(_node(**labels)) is owned
    assert dict(pool.selector) == (selector or {v.LABEL_POOL: "p"})


class _CountingSpec:
    """Stands in for the spec and counts how often the selector is read from it."""

    def __init__(self, node_selector: dict[str, str] | None) -> None:
        self._selector = node_selector
        self.reads = 0

    @property
    def node_selector(self) -> dict[str, str] | None:
        self.reads += 1
        return self._selector


@pytest.mark.parametrize("selector", [None, {"team": "ml"}])
def test_the_selector_is_built_once_not_per_node(selector: dict[str, str] | None) -> None:
    spec = _CountingSpec(selector)
    pool = PoolView("p", cast(AcceleratorPoolSpec, spec))
    built = spec.reads
    nodes = [_node(team="ml"), _node(**{v.LABEL_POOL: "p"}), _node()] * 100
    assert sum(pool.owns(n) for n in nodes) == 100
    _ = pool.selector
    assert spec.reads == built == 1


def test_views_compare_by_name_and_spec_only() -> None:
    spec = _spec(nodeSelector={"team": "ml"})
    a, b = PoolView("p", spec), PoolView("p", spec)
    assert a == b and repr(a) == repr(b) and "_match" not in repr(a)
    assert PoolView("q", spec) != a
