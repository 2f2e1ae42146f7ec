"""Which watch events change anything (``engine.changes``): a report whose heartbeat alone moved
wakes nothing, and a policy whose generation stayed changed only its status."""

from __future__ import annotations

import datetime as dt

from accel_operator.engine.changes import PolicyGenerations, ReportChanges
from accel_operator.reconcile.common.reports import DeviceReport, ReportView

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _report(*, beat: int = 0, healthy: bool = True, utilization: float = 10.0) -> ReportView:
    device = DeviceReport(index=0, healthy=healthy, utilization=utilization)
    return ReportView(node="n1", heartbeat=T0 + dt.timedelta(seconds=beat), devices=(device,))


def test_a_heartbeat_alone_changes_nothing_a_health_move_changes_capacity() -> None:
    seen = ReportChanges()
    assert seen.observe("n1", _report()) == ("n1", True)  # a new node: what it can take is news
    assert seen.observe("n1", _report(beat=30)) is None
    assert seen.observe("n1", _report(beat=60, utilization=90.0)) == ("n1", False)  # jobs only
    assert seen.observe("n1", _report(beat=90, utilization=90.0, healthy=False)) == ("n1", True)
    assert seen.observe("n1", None) == ("n1", True)  # deleted: its devices are gone
    assert seen.observe("gone", None) == ("gone", False)  # never seen: named by the object


def test_only_a_new_generation_or_a_policy_coming_or_going_changes_the_rules() -> None:
    seen = PolicyGenerations()
    assert seen.rules_changed("p", 1)
    assert not seen.rules_changed("p", 1)  # a status write
    assert seen.rules_changed("p", 2)
    assert seen.rules_changed("p", None)  # deleted
    assert seen.rules_changed("p", 2)  # created again
