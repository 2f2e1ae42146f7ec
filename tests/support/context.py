"""An OperatorContext of fakes, for tests that register the handlers without a cluster: the
context takes no default adapter (a production wiring slip must fail at start), so the fakes are
named here, once."""

from __future__ import annotations

from typing import Any

from accel_api import catalog
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.lease import AlwaysLeader
from accel_operator.adapters.kube.nodes import FakeNodeWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.context import OperatorContext
from accel_operator.metrics import OperatorMetrics
from accel_operator.settings import OperatorSettings


def fake_context(**overrides: Any) -> OperatorContext:
    """Every adapter a fake, every optional source off; ``overrides`` replace any of them."""
    given: dict[str, Any] = {
        "settings": OperatorSettings(),
        "catalog": catalog.default(),
        "metrics": OperatorMetrics(),
        "writer": FakeJobWriter(),
        "workloads": FakeWorkloadClient(),
        "elector": AlwaysLeader(),
        "nodes": FakeNodeWriter(),
        "costs": FakeCostWriter(),
        "prices": PriceBook(),
        "interruptions": None,
        "tpu": None,
        "checkpoints": None,
        "watch_api": None,
    }
    return OperatorContext(**(given | overrides))
