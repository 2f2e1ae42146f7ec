"""A decision's status as a typed patch: ``StatusPatch.to_wire`` is the JSON merge patch the
writer sends (camelCase keys, only the fields the decision sets, null for a field it clears), and
``merged`` lets a later patch's fields win."""

from __future__ import annotations

from accel_api.enums import FailureKind
from accel_api.job import AttemptFailure, HealthStatus, RightSize, SpotStatus
from accel_operator.reconcile.common.decision import CLEAR, NO_CHANGE, PlanWrite, StatusPatch


def test_a_field_left_as_none_is_not_written_and_a_cleared_one_is_null() -> None:
    patch = StatusPatch(workload=CLEAR, attempt=2, attempt_start_time="2026-11-26T12:00:00Z", message="m")
    assert patch.to_wire() == {
        "attempt": 2,
        "workload": None,
        "attemptStartTime": "2026-11-26T12:00:00Z",
        "message": "m",
    }
    assert not patch.empty


def test_an_empty_patch_writes_nothing() -> None:
    assert NO_CHANGE.empty and NO_CHANGE.to_wire() == {}
    assert StatusPatch().empty


def test_nested_values_are_written_whole_their_none_fields_clearing_what_was_stored() -> None:
    health = HealthStatus(idle_since=None, right_size=RightSize(reason="r"), moves=1)
    wire = StatusPatch(health=health).to_wire()["health"]
    assert wire["idleSince"] is None and "idleSince" in wire  # a marker cleared on the stored status
    assert wire["rightSize"] == {"accelerator": None, "devices": None, "reason": "r"} and wire["moves"] == 1
    spot = StatusPatch(spot=SpotStatus(recent_preemptions=["2026-11-26T12:00:00Z"])).to_wire()["spot"]
    assert spot == {
        "lostDeviceSeconds": 0.0,
        "recentPreemptions": ["2026-11-26T12:00:00Z"],
        "leftPools": [],
        "leftTime": None,
        "onDemand": False,
        "preemptionsAtFallback": None,
    }


def test_failures_are_written_without_their_empty_fields() -> None:
    failure = AttemptFailure(kind=FailureKind.PREEMPTION, attempt=1, reason="Terminated")
    wire = StatusPatch(last_failure=failure, earlier_failures=(failure,)).to_wire()
    assert wire["lastFailure"] == {"kind": "Preemption", "attempt": 1, "reason": "Terminated"}
    assert wire["earlierFailures"] == [wire["lastFailure"]]


def test_the_plan_is_written_in_the_wire_form_it_was_made_in() -> None:
    made = {"pool": "p", "durationSeconds": 60.0, "alternatives": []}
    plan = PlanWrite(wire=made, duration_seconds=60.0)
    assert StatusPatch(plan=plan).to_wire()["plan"] is made  # shared, not copied
    assert StatusPatch(plan=CLEAR).to_wire() == {"plan": None}
    assert plan.value().pool == "p"


def test_merged_takes_each_field_the_later_patch_sets_or_clears() -> None:
    first = StatusPatch(resume=None, preemptions=1, workload="w", message="first")
    later = StatusPatch(workload=CLEAR, message="later")
    assert first.merged(later) == StatusPatch(preemptions=1, workload=CLEAR, message="later")
    assert later.merged(first) == StatusPatch(preemptions=1, workload="w", message="first")
    assert first.merged(NO_CHANGE) == first
