"""The operator's identity and leadership as metrics: ``accel_operator_build_info`` and
``accel_operator_leader``; the cost counters are exported by the leader only (a replica that lost
the Lease keeps its last figures, which a dashboard summing over replicas would count twice)."""

from __future__ import annotations

from prometheus_client import generate_latest

from accel_operator.adapters.kube.lease import AlwaysLeader
from tests.support.reconcile import World


class _Elector(AlwaysLeader):
    def __init__(self) -> None:
        self.holds = True

    def leading(self) -> bool:
        return self.holds


def test_cost_counters_are_exported_by_the_leader_only() -> None:
    sched = World().scheduler
    elector = _Elector()
    sched.elector = elector
    sched.metrics.cost.set({("research", "p", "spot"): 12.5}, {}, {})
    text = generate_latest(sched.metrics.registry).decode()
    assert 'accel_cost_usd_total{capacity_type="spot",pool="p",team="research"} 12.5' in text
    elector.holds = False  # the Lease went to another replica
    text = generate_latest(sched.metrics.registry).decode()
    assert "accel_cost_usd_total{" not in text
    assert "# TYPE accel_cost_usd_total counter" in text  # the family stays declared


def test_build_info_names_the_version_and_python() -> None:
    text = generate_latest(World().scheduler.metrics.registry).decode()
    line = next(line for line in text.splitlines() if line.startswith("accel_operator_build_info{"))
    assert 'python="3.' in line and 'version="' in line and line.endswith(" 1.0")
    assert "accel_operator_leader 0.0" in text  # until the loop's first Lease tick
