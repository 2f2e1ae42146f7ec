"""The status the operator writes for a job, from its spec and the pools (no cluster needed)."""

import asyncio
import logging
from pathlib import Path
from typing import Any

import kopf
import yaml

from accel_api import catalog
from accel_operator.adapters.kube.pools import FakePoolSource
from accel_operator.context import OperatorContext
from accel_operator.handlers import jobs
from accel_operator.handlers.jobs import plan_status, settle
from accel_operator.settings import OperatorSettings

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
    stored["conditions"] = [{**c, "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in stored["conditions"]]
    spec["workload"]["microBatch"] = 0
    failed = settle(stored, plan_status(spec, 2, _pools(), catalog.default()))
    assert failed is not None
    assert failed["plan"] is None  # null in a merge patch deletes the old plan
    flipped = {c["type"]: c for c in failed["conditions"]}["Valid"]
    assert flipped["status"] == "False"
    assert flipped["lastTransitionTime"] != "2026-01-01T00:00:00Z"


# --- the kopf handler functions themselves --------------------------------------------------


def _call_plan_job(spec: dict[str, Any], status: dict[str, Any], pools: FakePoolSource) -> kopf.Patch:
    ctx = OperatorContext(settings=OperatorSettings(), catalog=catalog.default(), pools=pools)
    patch = kopf.Patch()
    asyncio.run(
        jobs.plan_job(
            spec=kopf.Spec({"spec": spec}),  # type: ignore[arg-type]
            meta=kopf.Meta({"metadata": {"generation": 1}}),  # type: ignore[arg-type]
            status=kopf.Status({"status": status}),  # type: ignore[arg-type]
            patch=patch,
            memo=kopf.Memo(ctx=ctx),
            logger=logging.getLogger("test"),
        )
    )
    return patch


def test_plan_job_writes_the_plan_of_a_new_job() -> None:
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    patch = _call_plan_job(spec, {}, _pools())
    assert patch["status"]["phase"] == "Pending"
    assert patch["status"]["plan"]["pool"] == "h100-on-demand"


def test_plan_job_writes_nothing_when_the_plan_is_unchanged() -> None:
    # An operator restart (resume) or a spec edit that leaves the plan as it is must not rewrite
    # the conditions with fresh transition times.
    spec = _docs("01-finetune-single-gpu.yaml")[0]["spec"]
    first = _call_plan_job(spec, {}, _pools())["status"]
    stored = {k: v for k, v in first.items() if v is not None}
    stored["conditions"] = [{**c, "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in first["conditions"]]
    again = _call_plan_job(spec, stored, _pools())
    assert not again, f"expected no write, got {dict(again)}"
