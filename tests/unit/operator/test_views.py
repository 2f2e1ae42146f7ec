"""Kubernetes objects as the snapshot's views: what counts, and how pods find their job."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from accel_api import vocabulary as v
from accel_api.job import AcceleratorJob, AcceleratorJobStatus
from accel_operator.adapters.kube import views, workloads
from accel_operator.reconcile.common import actions
from tests.support.jobs import job_doc
from tests.unit.operator.test_workloads import spec


def _pod_from(job: dict[str, Any], index: int, node: str | None) -> dict[str, Any]:
    tmpl = copy.deepcopy(job["spec"]["template"])
    meta = {**tmpl["metadata"], "name": f"{job['metadata']['name']}-{index}-x", "namespace": "ml"}
    return {"metadata": meta, "spec": {**tmpl["spec"], "nodeName": node}, "status": {"phase": "Running"}}


def test_a_long_job_name_still_maps_pods_and_workloads_to_their_job() -> None:
    long = "a" * 200
    job, _ = workloads.build(spec(name=long, devices=8))
    assert len(job["metadata"]["labels"][v.LABEL_JOB]) <= 63  # the label is shortened ...
    pod = views.pod_view(_pod_from(job, 0, "n1"))
    wl = views.workload_view(job)
    assert pod is not None and wl is not None
    assert pod.job == ("ml", long) and wl.job == ("ml", long)  # ... the annotation is whole
    assert pod.devices == 8 and pod.attempt == 0 and pod.node == "n1"


def test_the_decision_and_the_builder_name_workloads_alike() -> None:
    for name in ("llama", "a" * 200, "1.5b-run.v2", "x" * 57):
        for attempt in (0, 7, 123):
            assert actions.workload_name(name, attempt) == workloads.workload_name(name, attempt)


def test_a_pod_the_scheduler_found_no_node_for_carries_since_when() -> None:
    # kube-scheduler's PodScheduled=False/Unschedulable starts the gang's bind clock; anything
    # else (not tried yet, gated, bound, an unreadable time) starts none.
    job, _ = workloads.build(spec(name="g", devices=8))
    body = _pod_from(job, 0, None)
    body["status"] = {"phase": "Pending"}
    pod = views.pod_view(body)
    assert pod is not None and pod.unschedulable_since is None
    stuck = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    body["status"]["conditions"] = [{**stuck, "lastTransitionTime": "2026-11-26T12:00:05Z"}]
    pod = views.pod_view(body)
    assert pod is not None and pod.unschedulable_since == dt.datetime(2026, 11, 26, 12, 0, 5, tzinfo=dt.UTC)
    for cond in (
        {**stuck, "reason": "SchedulingGated", "lastTransitionTime": "2026-11-26T12:00:05Z"},
        {**stuck, "lastTransitionTime": "x" * 10_000},
        {**stuck, "status": "True", "lastTransitionTime": "2026-11-26T12:00:05Z"},
    ):
        body["status"]["conditions"] = [cond]
        pod = views.pod_view(body)
        assert pod is not None and pod.unschedulable_since is None, cond
    bound = _pod_from(job, 0, "n1")
    bound["status"]["conditions"] = [{**stuck, "lastTransitionTime": "2026-11-26T12:00:05Z"}]  # stale: bound now
    pod = views.pod_view(bound)
    assert pod is not None and pod.unschedulable_since is None


def test_pods_without_devices_that_are_not_ours_do_not_count() -> None:
    pod = {"metadata": {"name": "web", "namespace": "x"}, "spec": {"containers": [{"name": "c"}]}, "status": {}}
    assert views.pod_view(pod) is None


def test_a_node_view_notes_cordon_termination_taints_and_readiness() -> None:
    node = {
        "metadata": {"name": "n", "labels": {"accel.dev/pool": "p"}},
        "spec": {"unschedulable": True, "taints": [{"key": v.TAINT_NTH_SPOT_ITN, "effect": "NoSchedule"}]},
        "status": {"allocatable": {v.RESOURCE_NVIDIA_GPU: "8"}, "conditions": [{"type": "Ready", "status": "False"}]},
    }
    view = views.node_view(node)
    assert view is not None and view.devices == 8
    assert view.unschedulable and view.terminating and not view.ready and not view.usable
    assert views.node_view({"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "8"}}}) is None


def test_a_workload_carries_the_times_kubernetes_recorded_and_nothing_made_up() -> None:
    job, _ = workloads.build(spec(name="t", devices=8))
    failed = {
        "startTime": "2026-11-26T12:00:05Z",
        "conditions": [
            {"type": "FailureTarget", "status": "True", "lastTransitionTime": "2026-11-26T12:40:00Z"},
            {"type": "Failed", "status": "True", "lastTransitionTime": "2026-11-26T12:40:01Z"},
        ],
    }
    wl = views.workload_view({**job, "status": failed})
    assert wl is not None and wl.start_time is not None and wl.end_time is not None
    assert (wl.start_time.isoformat(), wl.end_time.isoformat()) == (
        "2026-11-26T12:00:05+00:00",
        "2026-11-26T12:40:01+00:00",
    )
    done = views.workload_view(
        {
            **job,
            "status": {
                "completionTime": "2026-11-26T13:00:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            },
        }
    )
    assert done is not None and done.end_time is not None and done.end_time.hour == 13
    # Running, or hostile: no end, no start, never "now".
    for status in ({}, {"startTime": "x" * 5000, "completionTime": 7}, {"startTime": "yesterday"}):
        wl = views.workload_view({**job, "status": status})
        assert wl is not None and (wl.start_time, wl.end_time) == (None, None)


# --- job views share what equal jobs carry ---------------------------------------------------

_STATUS: dict[str, Any] = {
    "phase": "Running",
    "attempt": 1,
    "conditions": [
        {"type": "Valid", "status": "True", "reason": "SpecValid", "lastTransitionTime": "2026-11-26T12:00:00Z"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted attempt 1 on p"},
    ],
    "plan": {"pool": "p", "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "reason": "cheapest"},
}


def _job_body(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = job_doc("ml", "p", devices=8, name=name)
    doc["metadata"].update(uid=f"uid-{name}", resourceVersion="7", generation=1)
    doc["status"] = copy.deepcopy(status if status is not None else _STATUS)
    return doc


def test_job_views_of_equal_jobs_share_their_parsed_values_and_equal_a_whole_parse() -> None:
    a, b = views.job_view(_job_body("a")), views.job_view(_job_body("b"))
    assert a.spec is not None and a.spec is b.spec
    assert a.status.plan is b.status.plan and a.status.conditions[1] is b.status.conditions[1]
    whole = AcceleratorJob.model_validate(_job_body("a"))
    assert a.spec == whole.spec and a.status == whole.status
    assert whole.status is not None
    assert a.status.model_dump(by_alias=True, exclude_none=True) == whole.status.model_dump(
        by_alias=True, exclude_none=True
    )


@pytest.mark.parametrize(
    "status",
    [
        {**_STATUS, "plan": {"devices": "many"}},
        {**_STATUS, "conditions": [{"type": "Valid", "status": "Maybe"}]},
        {**_STATUS, "conditions": "Valid"},
        {**_STATUS, "attempt": -1},
    ],
    ids=["plan", "condition", "conditions-not-a-list", "attempt"],
)
def test_an_unreadable_status_is_decided_from_scratch_every_time(status: dict[str, Any]) -> None:
    for _ in range(2):  # the second time from the shared table, if anything was kept
        view = views.job_view(_job_body("a", status))
        assert view.status == AcceleratorJobStatus() and view.spec is not None


def test_an_invalid_spec_keeps_its_problems_when_shared() -> None:
    body = _job_body("a")
    body["spec"]["workload"]["microBatch"] = 0
    first, again = views.job_view(body), views.job_view(copy.deepcopy(body))
    assert first.spec is None and first.spec_problems and again.spec_problems == first.spec_problems
