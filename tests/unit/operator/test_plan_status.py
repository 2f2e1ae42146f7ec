"""The status the operator writes for a job, from its spec and the pools (no cluster needed)."""

from pathlib import Path
from typing import Any

import yaml

from accel_operator.adapters.kube import FakePoolSource
from accel_operator.handlers.jobs import plan_status, settle
from accel_operator.planning import catalog

ROOT = Path(__file__).resolve().parents[3]


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]


def _pools(*extra: dict[str, Any]) -> FakePoolSource:
    items = _docs("10-pool-h100-spot.yaml") + _docs("11-pool-l4-on-demand.yaml") + list(extra)
    return FakePoolSource(items)


def test_schedulable_job_is_pending_with_its_plan() -> None:
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    pools = _pools()
    status = plan_status(spec, 3, pools, catalog.default())
    assert pools.calls == 1
    assert status["phase"] == "Pending"
    assert status["observedGeneration"] == 3
    assert status["plan"]["pool"] == "h100-on-demand"  # spot.policy never; the L4 is too small
    assert any("needs" in a["reason"] and a["pool"] == "l4-on-demand" for a in status["plan"]["alternatives"])
    assert [c["type"] for c in status["conditions"]] == ["Valid", "Planned"]


def test_no_pool_can_run_it() -> None:
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"] | {"maxCost": 0.5}
    status = plan_status(spec, 1, _pools(), catalog.default())
    assert status["phase"] == "Unschedulable"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Planned"] == "False"
    assert "maxCost" in status["message"]


def test_invalid_spec_fails_with_the_field_path() -> None:
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    spec["workload"]["microBatch"] = 0
    pools = _pools()
    status = plan_status(spec, 1, pools, catalog.default())
    assert status["phase"] == "Failed"
    assert "spec.workload.microBatch: must be >= 1 (got 0)" in status["message"]
    assert pools.calls == 0  # nothing is read for a job that cannot be planned


def test_an_invalid_pool_is_named_and_the_rest_still_plan() -> None:
    broken = {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorPool",
        "metadata": {"name": "broken"},
        "spec": {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 0},
    }
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    status = plan_status(spec, 1, _pools(broken), catalog.default())
    assert status["phase"] == "Pending"
    assert "ignored invalid pools: broken: spec.devicesPerNode: must be >= 1" in status["message"]


def test_settle_keeps_transition_times_and_skips_writes_that_change_nothing() -> None:
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    first = plan_status(spec, 1, _pools(), catalog.default())
    stored = {k: v for k, v in first.items() if v is not None}  # as the API server keeps it
    stored["conditions"] = [{**c, "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in first["conditions"]]
    again = plan_status(spec, 1, _pools(), catalog.default())
    assert settle(stored, again) is None  # same pools, same plan: nothing to write

    cheaper = _docs("10-pool-h100-spot.yaml")[1] | {}
    cheaper["spec"] = cheaper["spec"] | {"price": {"onDemandPerDeviceHour": 1.0}}
    changed = settle(stored, plan_status(spec, 1, FakePoolSource([cheaper]), catalog.default()))
    assert changed is not None
    assert changed["plan"]["costUsd"] < first["plan"]["costUsd"]
    # Valid and Planned held their status, so they keep the time they last changed.
    assert {c["lastTransitionTime"] for c in changed["conditions"]} == {"2026-01-01T00:00:00Z"}


def test_a_job_that_becomes_invalid_loses_its_plan() -> None:
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    stored = plan_status(spec, 1, _pools(), catalog.default())
    spec["workload"]["microBatch"] = 0
    failed = settle(stored, plan_status(spec, 2, _pools(), catalog.default()))
    assert failed is not None
    assert failed["plan"] is None  # null in a merge patch deletes the old plan
    flipped = {c["type"]: c for c in failed["conditions"]}["Valid"]
    assert flipped["status"] == "False"
    assert flipped["lastTransitionTime"] != "2026-01-01T00:00:00Z"


def test_status_messages_fit_the_crd_bounds_whatever_the_input() -> None:
    from accel_api import bounds

    bad_spec = {"team": "X" * 5000, "image": "", "model": {}, "workload": {"tokens": 0}} | {
        f"unknown{i}": "v" * 500 for i in range(50)
    }
    invalid = plan_status(bad_spec, 1, _pools(), catalog.default())
    assert len(invalid["message"]) <= bounds.MESSAGE_LENGTH
    bad_pools = [
        {"apiVersion": "accel.dev/v1alpha1", "kind": "AcceleratorPool", "metadata": {"name": f"p{i}"}, "spec": {}}
        for i in range(200)
    ]
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    status = plan_status(spec, 1, _pools(*bad_pools), catalog.default())
    assert "ignored invalid pools" in status["message"]
    assert len(status["message"]) <= bounds.MESSAGE_LENGTH
    assert all(len(c["message"]) <= bounds.MESSAGE_LENGTH for c in status["conditions"])
