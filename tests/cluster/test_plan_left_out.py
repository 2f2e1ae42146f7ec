"""A job pinned to one pool among several: the API server stores ``status.plan.leftOut`` (the
other pools counted under the filter's sentence, with their first names) as the operator writes
it, the alternatives name only pools the planner weighed, and ``accelctl why`` reads it back."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from accel_operator.cli.jobs import explain
from tests.support.jobs import create_job, get_job, gpu_pool, job_doc, wait_phase


def test_the_pools_a_placement_leaves_out_are_counted_in_the_stored_status(
    api: client.ApiClient, namespace: str, operator: Any
) -> None:
    mine, a, b = (f"{namespace}-{tag}" for tag in ("mine", "other-a", "other-b"))
    with gpu_pool(api, mine, count=1), gpu_pool(api, a, count=1), gpu_pool(api, b, count=1):
        create_job(api, job_doc(namespace, mine, devices=8, name="pinned"))
        st = wait_phase(api, namespace, "pinned", "Running")
        plan = st["plan"]
        assert plan["pool"] == mine
        assert not plan.get("alternatives"), plan  # the other pools were not weighed
        left = plan["leftOut"]
        [why] = [r for r in left["byReason"] if r["reason"] == f"not in placement.pools ({mine})"]
        assert left["count"] >= why["count"] >= 2 and len(why["pools"]) <= 5
        lines = explain(get_job(api, namespace, "pinned"))
        assert any(line.startswith(f"Left out by the placement: {why['count']} pool(s) (") for line in lines), lines
