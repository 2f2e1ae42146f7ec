"""bench/scale.py's figure of the operator's API writes per admitted job: status patches (the
API server's count), Events (the operator's: created and series patches) and Job creates, and
their total, printed in the table."""

from __future__ import annotations

from bench import scale


def test_the_operators_writes_per_job_and_their_total_are_printed() -> None:
    req0 = {"PATCH acceleratorjobs/status": 10.0, "POST jobs": 5.0, "POST events": 100.0}
    req1 = {"PATCH acceleratorjobs/status": 130.0, "POST jobs": 105.0, "POST events": 400.0}
    ops0: dict[str, float] = {}
    ops1 = {
        'accel_operator_api_writes_total{write="event"}': 90.0,
        'accel_operator_api_writes_total{write="event_series"}': 10.0,
        "accel_operator_events_coalesced_total": 25.0,
    }
    got = scale.operator_writes(req0, req1, ops0, ops1, 100)
    assert got == {
        "status patches": 1.2,
        "Events": 1.0,
        "Job creates": 1.0,
        "Events coalesced (not written)": 0.25,
        "total": 3.2,
    }
    out = {
        "nodes": 1,
        "pools": 1,
        "devices": 8,
        "jobs": 100,
        "burst": {"jobs": 100, "fit": 100, "admitted": 100, "operator_writes_per_job": got},
    }
    row = next(r for r in scale.table(out).splitlines() if r.startswith("burst: operator's API writes"))
    want = "3.20 (status patches 1.20, Events 1.00, Job creates 1.00; Events coalesced 0.25)"
    assert " ".join(row.split()).endswith(want)
