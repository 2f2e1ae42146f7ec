"""A running job whose stored spec stops parsing (an edit made while the webhook was unreachable, an
upgrade that tightens a rule): it is charged on, asked to checkpoint, stopped after the checkpoint
or the grace, and never adopted again under the same attempt; the team's spend never goes down."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

import pytest

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.views import job_view
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine.accountant import Accountant
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.snapshot import JobView
from accel_operator.reconcile.job.decide import decide
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World

HOUR = dt.timedelta(hours=1)
PROBLEM = ("workload.microBatch: must be >= 1 (got 0)",)


def _running(attempt: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": attempt,
        "admittedTime": "2026-11-26T12:00:00Z",
        "workload": f"a-a{attempt}",
        "plan": {"pool": "spot", "devices": 2, "nodes": 1, "capacityType": "spot", "costUsd": 20.0},
        **extra,
    }


def _world(status: dict[str, Any] | None = None, *, pod: bool = True) -> tuple[World, JobView]:
    w = World().pool("spot", capacityType="spot", price={"spotPerDeviceHour": 3.6})
    w.policy("budgets", budgets=[{"team": "research", "limitUsd": 1000}])
    job = w.job("a", "spot", devices=2, status=status or _running(), checkpoint={"uri": "s3://b/a"})
    if pod:
        w.pod("a", 0, 0, node="spot-0", devices=2)
    bad = dataclasses.replace(job, spec=None, spec_problems=PROBLEM)
    w.jobs[("ns", "a")] = [bad]
    return w, bad


def _with_status(w: World, job: JobView, **update: Any) -> JobView:
    status = job.status.model_dump(by_alias=True, mode="json", exclude_none=True) | update
    view = dataclasses.replace(job, status=AcceleratorJobStatus.model_validate(status))
    w.jobs[("ns", "a")] = [view]
    return view


def _kinds(d: Any) -> list[str]:
    return [type(a).__name__ for a in d.actions]


def test_a_waiting_job_with_an_invalid_spec_fails_at_once() -> None:
    w, job = _world({"phase": "Pending"}, pod=False)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.FAILED
    assert "spec.workload.microBatch" in d.reason
    assert _kinds(d) == ["RecordEvent"]


def test_a_running_job_with_an_invalid_spec_checkpoints_then_stops_never_failed_with_its_pods_running() -> None:
    w, job = _world()
    first = decide(job, w.snapshot(), T0, checkpoint_grace=120)
    # Not Failed while its pods run: it keeps its devices, asks for a checkpoint, says why.
    assert first.phase is JobPhase.RUNNING
    assert _kinds(first) == ["RecordEvent", "RequestCheckpoint"]
    assert "spec.workload.microBatch" in first.reason and "checkpoint" in first.reason
    assert not any(isinstance(a, act.DeleteWorkload) for a in first.actions)
    health = first.status.health
    assert health is not None and health.stop_requested_time is not None
    job = _with_status(w, job, health=health.model_dump(by_alias=True, mode="json", exclude_none=True))
    # Within the grace, no checkpoint yet: it waits, nothing deleted.
    wait = decide(job, w.snapshot(), T0 + dt.timedelta(seconds=60), checkpoint_grace=120)
    assert wait.phase is JobPhase.RUNNING and wait.actions == ()
    # Past the grace: the attempt ends, its batch Job is deleted, a new attempt number.
    end = decide(job, w.snapshot(), T0 + dt.timedelta(seconds=121), checkpoint_grace=120)
    assert end.phase is JobPhase.FAILED
    assert [a for a in end.actions if isinstance(a, act.DeleteWorkload)] == [act.DeleteWorkload("a-a0", "spec invalid")]
    assert end.status.attempt == 1
    assert "no checkpoint within 120s" in end.reason


def test_a_checkpoint_written_after_the_request_ends_the_attempt_before_the_grace() -> None:
    w, job = _world()
    first = decide(job, w.snapshot(), T0, checkpoint_grace=600)
    assert first.status.health is not None
    health = first.status.health.model_dump(by_alias=True, mode="json", exclude_none=True)
    later = (T0 + dt.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    job = _with_status(w, job, health=health, lastCheckpoint={"uri": "s3://b/a/step-7", "step": 7, "time": later})
    end = decide(job, w.snapshot(), T0 + dt.timedelta(seconds=40), checkpoint_grace=600)
    assert end.phase is JobPhase.FAILED and "checkpoint written" in end.reason


def test_a_holding_job_with_no_running_pod_stops_at_once() -> None:
    w, job = _world(pod=False)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.FAILED
    assert any(isinstance(a, act.DeleteWorkload) for a in d.actions)
    assert "none of its pods was running" in d.reason


def test_the_fixed_spec_is_a_new_attempt_not_the_old_batch_job() -> None:
    w, _ = _world()
    job = w.job("a", "spot", devices=2, checkpoint={"uri": "s3://b/a"}, status=None)
    failed = {
        "phase": "Failed",
        "attempt": 1,
        "conditions": [{"type": "Valid", "status": "False", "reason": "InvalidSpec"}],
    }
    job = _with_status(w, job, **failed)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is not JobPhase.FAILED
    assert all(getattr(a, "name", "a-a1") != "a-a0" for a in d.actions)


def _accountant(w: World, writer: FakeJobWriter, costs: FakeCostWriter) -> Accountant:
    setattr(w.scheduler, "current", w.scheduler.observe)  # noqa: B010
    w.scheduler.settings = OperatorSettings(
        cost_interval_seconds=1.0, cost_write_seconds=0.0, cost_writes_per_second=1000, cost_rollup=""
    )
    return Accountant(scheduler=w.scheduler, writer=writer, costs=costs, prices=PriceBook())


def test_an_invalid_spec_is_still_charged_and_the_team_spend_never_drops() -> None:
    w = World().pool("spot", capacityType="spot", price={"spotPerDeviceHour": 3.6})
    w.policy("budgets", budgets=[{"team": "research", "limitUsd": 1000}])
    good = w.job("a", "spot", devices=2, status=_running(), checkpoint={"uri": "s3://b/a"})
    w.pod("a", 0, 0, node="spot-0", devices=2)
    writer, costs = FakeJobWriter(), FakeCostWriter()
    acc = _accountant(w, writer, costs)
    asyncio.run(acc.step(T0 + HOUR))
    spent = costs.policies["budgets"]["spend"][0]["spentUsd"]
    assert spent == pytest.approx(7.2)
    ledger = writer.statuses[("ns", "a")]["cost"]
    assert ledger["attempts"][0]["team"] == "research"  # the team recorded on the attempt
    # The stored spec stops parsing: the ledger (with its recorded team) is still the job's.
    status = good.status.model_dump(by_alias=True, mode="json", exclude_none=True) | {"cost": ledger}
    bad = dataclasses.replace(
        good, spec=None, spec_problems=PROBLEM, status=AcceleratorJobStatus.model_validate(status)
    )
    assert bad.team == "research"
    w.jobs[("ns", "a")] = [bad]
    asyncio.run(acc.step(T0 + 2 * HOUR))
    assert writer.statuses[("ns", "a")]["cost"]["spentUsd"] == pytest.approx(14.4)  # charged on
    assert costs.policies["budgets"]["spend"][0]["spentUsd"] == pytest.approx(14.4)  # never down


def test_the_view_of_an_unparsable_spec_keeps_a_valid_team_field_only() -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
        "spec": {"team": "research", "workload": {"microBatch": 0}},
    }
    assert job_view(body).spec is None and job_view(body).team == "research"
    body["spec"]["team"] = "Not A Label " * 30
    assert job_view(body).team == ""
