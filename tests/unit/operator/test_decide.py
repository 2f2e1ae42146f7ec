"""decide(job, snapshot, now): every transition of the lifecycle, as a table of small worlds."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest

from accel_api.enums import CapacityType, FailureKind, JobPhase
from accel_api.job import AcceleratorJobStatus, AttemptHeld
from accel_operator.planning import memory
from accel_operator.planning.candidates import Candidate
from accel_operator.planning.layout import Layout
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.decision import CLEAR, Decision
from accel_operator.reconcile.common.snapshot import Blocked, Gang
from accel_operator.reconcile.job.decide import decide, gang_of
from accel_operator.reconcile.job.status import holds, settle_status
from tests.support.builders import JobBuilder, accel
from tests.support.decisions import failure_of, plan_of
from tests.support.reconcile import T0, World

LATER = T0 + dt.timedelta(seconds=30)


def _kinds(d: Decision) -> list[str]:
    out = []
    for a in d.actions:
        out.append(a.reason if isinstance(a, act.RecordEvent) else type(a).__name__)
    return out


def _cond(d: Decision, type_: str) -> tuple[bool, str] | None:
    c = next((c for c in d.conditions if c.type == type_), None)
    return None if c is None else (c.ok, c.reason)


def _admitted(
    name: str, pool: str, *, attempt: int = 0, devices: int = 8, nodes: int = 1, **extra: Any
) -> dict[str, Any]:
    return {
        "phase": "Admitted",
        "attempt": attempt,
        "workload": f"{name}-a{attempt}",
        "admittedTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": devices, "nodes": nodes, "durationSeconds": 3600},
        **extra,
    }


def _running(name: str, pool: str, **kw: Any) -> dict[str, Any]:
    return {**_admitted(name, pool, **kw), "phase": "Running", "startTime": "2026-11-26T12:00:00Z"}


# --- waiting jobs -----------------------------------------------------------------------------------


def test_a_job_that_fits_is_admitted_with_its_workload() -> None:
    w = World().pool("p", nodes=1)
    job = w.job("a", "p", devices=8)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.ADMITTED
    assert _cond(d, "Admitted") == (True, "Admitted")
    create = [a for a in d.actions if isinstance(a, act.CreateWorkload)]
    assert [replace(c, admission=None) for c in create] == [act.CreateWorkload(0, "a-a0", "p", 8, 1)]
    # The Job records the admission (its status may be written after it, with Running).
    adm = create[0].admission
    assert adm is not None and (adm.attempt, adm.pool, adm.devices, adm.nodes) == (0, "p", 8, 1)
    assert adm.admitted_time == d.status.admitted_time and d.status_after_workload
    assert d.status.workload == "a-a0" and plan_of(d).pool == "p"
    assert d.admitted is not None and d.admitted[0] == "p"
    assert (d.admitted[1].nodes, d.admitted[1].per_node) == (1, 8) and d.admitted[1].memory_bytes > 0


def test_a_job_that_does_not_fit_waits_with_the_reason_and_blocks_its_pool() -> None:
    w = World().pool("p", nodes=1, free=[4])
    job = w.job("a", "p", devices=8)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.PENDING
    assert _cond(d, "Admitted") == (False, "WaitingForCapacity")
    assert "p has fewer than 8 free device(s); needs 1 node(s) with 8 free device(s) each" in d.reason
    assert not [a for a in d.actions if isinstance(a, act.CreateWorkload)]
    assert d.blocks is not None and d.blocks[0] == "p"
    assert _kinds(d) == ["WaitingForCapacity"]


def test_a_gang_needs_every_node_at_once() -> None:
    # 16 free devices in total, but not two whole nodes: no partial gang.
    w = World().pool("p", nodes=3, free=[8, 4, 4])
    d = decide(w.job("gang", "p", devices=16), w.snapshot(), T0)
    assert d.phase is JobPhase.PENDING
    assert "p has 16 or more free device(s), but not on enough nodes; needs 2 node(s) with 8" in d.reason
    w2 = World().pool("p", nodes=3, free=[8, 8, 0])
    assert decide(w2.job("gang", "p", devices=16), w2.snapshot(), T0).phase is JobPhase.ADMITTED


def test_a_waiting_jobs_words_change_with_the_kind_of_shortfall_not_with_every_count() -> None:
    # A pool that fills one device at a time, or whose nodes' heartbeats come late: the waiting
    # job's message (and so its status) stays the same until the shortfall changes its kind.
    said = set()
    for free, nodes in (([3], 1), ([2], 1), ([1], 1), ([1, 1], 2)):
        w = World().pool("p", nodes=nodes, free=free)
        said.add(decide(w.job("a", "p", devices=4), w.snapshot(), T0).reason)
    words = "waiting for capacity: p has fewer than 4 free device(s); needs 1 node(s) with 4 free device(s) each"
    assert said == {words}
    for nodes in (1, 3):
        w = World().pool("p", nodes=nodes, free=[0] * nodes)
        d = decide(w.job("a", "p", devices=4), w.snapshot(), T0)
        assert "p has 0 free device(s); needs" in d.reason, d.reason


def test_a_waiting_job_posts_no_event_when_nothing_changed() -> None:
    w = World().pool("p", nodes=1, free=[0])
    first = decide(w.job("a", "p", devices=8), w.snapshot(), T0)
    status = {
        "phase": "Pending",
        "conditions": [{"type": "Admitted", "status": "False", "reason": "WaitingForCapacity"}],
    }
    again = decide(w.job("a", "p", devices=8, status=status), w.snapshot(), T0)
    assert _kinds(first) == ["WaitingForCapacity"] and _kinds(again) == []


def test_an_impossible_job_is_unschedulable() -> None:
    w = World().pool("p", nodes=1)
    d = decide(w.job("a", "p", devices=8, maxCost=0.01), w.snapshot(), T0)
    assert d.phase is JobPhase.UNSCHEDULABLE
    assert _cond(d, "Planned") == (False, "NoPlacement")
    assert "maxCost" in d.reason


def test_an_invalid_spec_fails_with_the_field_path() -> None:
    w = World().pool("p")
    job = w.job("a", "p")
    bad = replace(job, spec=None, spec_problems=("workload.microBatch: must be >= 1 (got 0)",))
    d = decide(bad, w.snapshot(), T0)
    assert d.phase is JobPhase.FAILED
    assert _cond(d, "Valid") == (False, "InvalidSpec")
    assert d.reason == "spec.workload.microBatch: must be >= 1 (got 0)"


def test_backfill_only_around_the_blocked_head() -> None:
    # The head waits for 8 devices; 4 are free; the running jobs end in ten minutes (shadow).
    w = World().pool("p", nodes=1, free=[4])
    head = w.job("head", "p", devices=8)
    snap = w.snapshot()
    blocked = Blocked(head.key, Gang(1, 8), T0 + dt.timedelta(minutes=10), 0)
    snap = snap.with_blocked("p", blocked)
    # A job that ends before the shadow time may use the 4 free devices (10M tokens: about a minute):
    small = w.job("small", "p", devices=4, workload={"mode": "training", "tokens": 10_000_000, "microBatch": 1})
    snap2 = w.snapshot().with_blocked("p", blocked)
    d = decide(small, snap2, T0)
    assert d.phase is JobPhase.ADMITTED, d.reason
    # A long one (about 22 minutes) may not: it would still hold them when the head could start.
    long = w.job("long", "p", devices=4)
    snap3 = w.snapshot().with_blocked("p", blocked)
    d = decide(long, snap3, T0)
    assert d.phase is JobPhase.PENDING
    assert "held for ns/head, which is ahead in the queue" in d.reason
    assert _cond(d, "Admitted") == (False, "QueuedBehind")
    del snap


def test_a_full_first_choice_pool_lets_the_job_take_another_feasible_one() -> None:
    w = World().pool("cheap", nodes=1, free=[0]).pool("dear", nodes=1, price={"onDemandPerDeviceHour": 20.0})
    job = w.job("a", "cheap", devices=8, pinned=False)
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.ADMITTED and plan_of(d).pool == "dear"
    assert "Replanned" in _kinds(d)


# --- admitted and running ---------------------------------------------------------------------------


def test_admitted_without_a_workload_creates_it_again() -> None:
    # The operator died between the status write and the create: the next decision creates it.
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_admitted("a", "p"))
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.ADMITTED
    creates = [a for a in d.actions if isinstance(a, act.CreateWorkload)]
    assert [replace(c, admission=None) for c in creates] == [act.CreateWorkload(0, "a-a0", "p", 8, 1)]
    assert not d.status_after_workload  # the status says it already


def test_admitted_becomes_running_when_every_pod_has_a_node() -> None:
    w = World().pool("p", nodes=2)
    job = w.job("a", "p", devices=16, status=_admitted("a", "p", devices=16, nodes=2))
    w.workload("a", 0, active=2)
    w.pod("a", 0, 0, node="p-0")
    assert decide(job, w.snapshot(), T0).phase is JobPhase.ADMITTED  # one of two
    w.pod("a", 0, 1, node="p-1")
    d = decide(job, w.snapshot(), T0)
    assert d.phase is JobPhase.RUNNING and d.status.start_time
    assert _kinds(d) == []  # no Event: the phase and the Running condition say it


def _s(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# The gang's bind clock (reconcile/job/bind_clock.py), bind timeout 120 s, a 2-node gang admitted at T0:
# (what its two pods are: "bound", "waiting" (not tried by the scheduler yet), "missing" (not
# created yet) or "stuck@S" (the scheduler found no node for it since T0 + S), now in seconds
# after T0, whether the gang is released).
_BIND_CLOCK = [
    # The scheduler found no node (cordoned, gone, tainted): released 120 s after that, not before.
    (("bound", "stuck@0"), 60, False),
    (("bound", "stuck@0"), 121, True),
    (("stuck@5", "stuck@0"), 121, True),  # the earliest finding starts the clock
    (("bound", "stuck@30"), 121, False),  # the pods came late: the clock started late
    (("bound", "stuck@30"), 151, True),
    # The control plane is behind (pods not created, or not tried yet): no release at 120 s ...
    (("bound", "waiting"), 121, False),
    (("bound", "missing"), 121, False),
    (("missing", "missing"), 590, False),
    (("waiting", "waiting"), 590, False),
    # ... but pods that never come release the gang after 5 timeouts: no partial gang holds for ever.
    (("bound", "missing"), 601, True),
    (("missing", "missing"), 601, True),
    (("bound", "waiting"), 601, True),
    # Every pod has a node: Running, never released.
    (("bound", "bound"), 10_000, False),
]


@pytest.mark.parametrize(("pods", "now", "released"), _BIND_CLOCK)
def test_a_gang_is_released_when_its_bind_clock_runs_out(pods: tuple[str, ...], now: float, released: bool) -> None:
    w = World().pool("p", nodes=2)
    job = w.job("a", "p", devices=16, status=_admitted("a", "p", devices=16, nodes=2))
    w.workload("a", 0, active=2)
    for i, kind in enumerate(pods):
        if kind == "bound":
            w.pod("a", 0, i, node=f"p-{i}")
        elif kind == "waiting":
            w.pod("a", 0, i, node=None, phase="Pending")
        elif kind.startswith("stuck@"):
            w.pod("a", 0, i, node=None, phase="Pending", unschedulable_since=_s(float(kind[6:])))
    d = decide(job, w.snapshot(_s(now)), _s(now), bind_timeout=120)
    if pods == ("bound", "bound"):
        assert d.phase is JobPhase.RUNNING
        return
    if not released:
        assert d.phase is JobPhase.ADMITTED and not d.actions
        assert _cond(d, "Running") == (False, "WaitingForNodes")
        return
    # Released: the workload (and every pod of the partial gang) goes, the job is planned again.
    assert d.phase is JobPhase.PENDING and d.status.attempt == 1 and d.status.workload is CLEAR
    assert _kinds(d) == ["DeleteWorkload", "GangTimeout"]
    assert _cond(d, "Admitted") == (False, "GangTimeout")
    assert "attempt 1" in (d.status.message or "")


# Nodes deleted after the admission, before the pods bound: (nodes left, of them deleting,
# cordoned) -> released at once (no clock), or left to the bind clock.
_NODES_GONE = [
    ((2, 0, 0), False),  # every node still there: the bind clock decides
    ((1, 0, 0), True),  # one of the two gone: the gang can never bind
    ((0, 0, 0), True),
    ((2, 1, 0), True),  # one being deleted counts as gone
    ((2, 0, 1), False),  # a cordoned node may come back: the bind clock covers it
]


@pytest.mark.parametrize(("nodes", "released"), _NODES_GONE)
def test_a_gang_whose_nodes_went_before_binding_is_released_at_once(
    nodes: tuple[int, int, int], released: bool
) -> None:
    left, deleting, cordoned = nodes
    w = World().pool("p", nodes=left)
    for i in range(deleting):
        (n,) = w.nodes[f"p-{i}"]
        w.nodes[f"p-{i}"] = [replace(n, deleting=True)]
    for i in range(deleting, deleting + cordoned):
        (n,) = w.nodes[f"p-{i}"]
        w.nodes[f"p-{i}"] = [replace(n, unschedulable=True)]
    job = w.job("a", "p", devices=16, status=_admitted("a", "p", devices=16, nodes=2))
    w.workload("a", 0, active=2)
    w.pod("a", 0, 0, node=None, phase="Pending")
    w.pod("a", 0, 1, node=None, phase="Pending")
    d = decide(job, w.snapshot(_s(5)), _s(5), bind_timeout=120)  # 5 s after the admission
    if not released:
        assert d.phase is JobPhase.ADMITTED and not d.actions
        return
    assert d.phase is JobPhase.PENDING and d.status.attempt == 1 and d.status.workload is CLEAR
    assert _kinds(d) == ["DeleteWorkload", "GangTimeout"]
    assert "nodes gone since the admission" in (d.status.message or "")


def test_an_autoscaled_pool_waits_for_its_nodes() -> None:
    w = World().pool("auto", nodes=0, maxNodes=2, scaling="autoscaled", scaleUpTimeoutSeconds=300)
    job = w.job("a", "auto", devices=16, status=_admitted("a", "auto", devices=16, nodes=2))
    w.workload("a", 0, active=2)
    assert decide(job, w.snapshot(_s(5)), _s(5), bind_timeout=120).phase is JobPhase.ADMITTED


def test_an_autoscaled_pool_gives_a_stuck_gang_its_scale_up_timeout() -> None:
    # An autoscaled pool's pods are unschedulable until the autoscaler's nodes come: its
    # scaleUpTimeoutSeconds, from the scheduler's first finding, not the bind timeout.
    w = World().pool("auto", nodes=0, maxNodes=2, scaling="autoscaled", scaleUpTimeoutSeconds=300)
    job = w.job("a", "auto", devices=16, status=_admitted("a", "auto", devices=16, nodes=2))
    w.workload("a", 0, active=2)
    w.pod("a", 0, 0, node=None, phase="Pending", unschedulable_since=_s(10))
    w.pod("a", 0, 1, node=None, phase="Pending", unschedulable_since=_s(10))
    assert decide(job, w.snapshot(_s(200)), _s(200), bind_timeout=120).phase is JobPhase.ADMITTED
    d = decide(job, w.snapshot(_s(311)), _s(311), bind_timeout=120)
    assert d.phase is JobPhase.PENDING and _kinds(d) == ["DeleteWorkload", "GangTimeout"]
    assert "found none for 301s (limit 300s)" in (d.status.message or "")


def test_a_workload_that_completes_succeeds_the_job() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("a", "p"))
    w.workload("a", 0, succeeded=1, complete=True)
    d = decide(job, w.snapshot(), LATER)
    assert d.phase is JobPhase.SUCCEEDED and d.status.completion_time
    assert _cond(d, "Finished") == (True, "Succeeded")


def _failed(w: World, exit_code: int, message: str) -> None:
    w.workload("a", 0, failed=1, failed_condition=True, failure_reason="PodFailurePolicy", failure_message=message)
    w.pod("a", 0, 0, node="p-0", phase="Failed", exit_code=exit_code)


def test_a_real_failure_without_retries_fails_the_job_with_the_exit_code() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("a", "p"))
    _failed(w, 3, "Container main for pod ns/a-a0-0 failed with exit code 3 matching FailJob rule at index 1")
    d = decide(job, w.snapshot(), LATER)
    assert d.phase is JobPhase.FAILED
    failure = failure_of(d)
    assert failure.kind is FailureKind.FAILURE and failure.exit_code == 3 and failure.pod == "a-a0-0"
    assert "maxRetries is 0" in d.reason


def test_a_real_failure_with_retries_left_starts_a_new_attempt() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("a", "p"), maxRetries=2)
    _failed(w, 1, "... matching FailJob rule at index 1")
    d = decide(job, w.snapshot(), LATER)
    assert d.phase is JobPhase.PENDING
    assert d.status.attempt == 1 and d.status.retries == 1
    assert _kinds(d) == ["DeleteWorkload", "Retrying"]


def test_a_disruption_counts_as_a_preemption_not_a_failure() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("a", "p"))
    _failed(w, 137, "Pod ns/a-a0-0 has condition DisruptionTarget matching FailJob rule at index 0")
    d = decide(job, w.snapshot(), LATER)
    assert failure_of(d).kind == "Preemption"
    assert d.status.preemptions == 1 and d.status.retries is None
    assert d.phase is JobPhase.PENDING  # spot.maxPreemptions defaults to 10


def test_a_deleted_workload_of_a_running_job_is_a_failure() -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("a", "p"))
    d = decide(job, w.snapshot(), LATER)
    assert d.phase is JobPhase.FAILED and failure_of(d).reason == "WorkloadDeleted"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_jobs_stay_finished(phase: str) -> None:
    w = World().pool("p")
    job = w.job("a", "p", status={"phase": phase, "conditions": [{"type": "Valid", "status": "True"}]})
    d = decide(job, w.snapshot(), LATER)
    assert d.phase.value == phase and not d.actions


def test_capacity_counts_other_pods_and_admitted_reservations() -> None:
    # A node with 8 GPUs: someone else's 2-GPU pod, and an admitted job's 4 unbound devices.
    w = World().pool("p", nodes=1, free=[6])
    w.job("held", "p", devices=4, status=_admitted("held", "p", devices=4))
    cap = w.snapshot().capacity["p"]
    assert (cap.allocated, cap.reserved, cap.free_devices) == (2, 4, 2)


# --- budgets ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("over", [True, False])
def test_a_running_job_over_budget_carries_the_condition_and_keeps_running(over: bool) -> None:
    w = World().pool("p", nodes=1)
    cost: dict[str, Any] = {"spentUsd": 12.0}
    if over:
        cost["overBudget"] = {
            "policy": "budgets",
            "period": "monthly",
            "spentUsd": 12.0,
            "limitUsd": 10.0,
            "since": "2026-11-26T12:00:00Z",
        }
    job = w.job("a", "p", status={**_running("a", "p"), "cost": cost})
    w.workload("a", 0, active=1)
    w.pod("a", 0, 0, node="p-0")
    d = decide(job, w.snapshot(), LATER)
    assert d.phase is JobPhase.RUNNING
    assert not d.actions  # nothing is deleted or stopped
    assert _cond(d, "OverBudget") == ((True, "BudgetExceeded") if over else None)


def test_a_failure_keeps_what_the_attempt_held_and_its_pods_times() -> None:
    """The next admission overwrites admittedTime and the plan, and the workload is deleted: the
    failure record keeps them, and the attempt's run as its pods' timestamps say (else its batch
    Job's), so the ledger can charge an attempt it never saw running."""
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("a", "p"), maxRetries=1)
    w.workload(
        "a",
        0,
        failed=1,
        failed_condition=True,
        failure_reason="PodFailurePolicy",
        failure_message="... matching FailJob rule at index 1",
        start_time=T0 + dt.timedelta(seconds=20),
        end_time=T0 + dt.timedelta(minutes=40),
    )
    w.pod(
        "a",
        0,
        0,
        node="p-0",
        phase="Failed",
        exit_code=1,
        started=T0 + dt.timedelta(seconds=25),
        finished=T0 + dt.timedelta(minutes=39),
    )
    d = decide(job, w.snapshot(), LATER)
    assert d.status.attempt == 1
    assert failure_of(d).held == AttemptHeld(
        pool="p",
        devices=8,
        capacity_type=CapacityType.ON_DEMAND,
        admitted_time="2026-11-26T12:00:00Z",
        start_time="2026-11-26T12:00:25Z",
        end_time="2026-11-26T12:39:00Z",
    )
    gone = decide(w.job("b", "p", devices=8, status=_running("b", "p")), w.snapshot(), LATER)
    assert failure_of(gone).reason == "WorkloadDeleted"
    held = failure_of(gone).held
    assert held is not None and held.admitted_time == "2026-11-26T12:00:00Z"
    assert held.end_time is None  # nothing recorded: the failure's time stands


def _settled(before: dict[str, Any], d: Decision) -> dict[str, Any] | None:
    """The status a job has after the operator wrote ``d`` (None: nothing to write)."""
    new = settle_status(before, d, 1, now=T0)
    if new is None:
        return None
    merged = {**before, **{k: v for k, v in new.items() if v is not None}}
    return {k: v for k, v in merged.items() if not (k in new and new[k] is None)}


def test_holding_an_admission_writes_no_status_until_something_changes() -> None:
    # One status write for the admission, one for Running; the decisions in between (the
    # workload's and the pods' watch events) and after (the resync) hold what was written.
    w = World().pool("p", nodes=1)
    admitted = _settled({}, decide(w.job("a", "p", devices=8), w.snapshot(), T0))
    assert admitted is not None and admitted["phase"] == "Admitted"
    w.workload("a", 0, active=1)
    waiting = decide(w.job("a", "p", devices=8, status=admitted), w.snapshot(), T0)
    assert waiting.phase is JobPhase.ADMITTED and _settled(admitted, waiting) is None
    w.pod("a", 0, 0, node="p-0")
    running = _settled(admitted, decide(w.job("a", "p", devices=8, status=admitted), w.snapshot(), T0))
    assert running is not None and running["phase"] == "Running"
    held = decide(w.job("a", "p", devices=8, status=running), w.snapshot(), LATER)
    assert held.phase is JobPhase.RUNNING and _settled(running, held) is None
    # The scheduler's shortcut (no serialising) says the same as the full comparison.
    assert holds(AcceleratorJobStatus.model_validate(running), held, 1)
    assert holds(AcceleratorJobStatus.model_validate(admitted), waiting, 1)
    moved = replace(held, conditions=(*held.conditions[:-1], replace(held.conditions[-1], message="other")))
    assert not holds(AcceleratorJobStatus.model_validate(running), moved, 1) and _settled(running, moved) is not None
    assert not holds(AcceleratorJobStatus.model_validate(running), held, 2)  # a new generation is written
    assert next(c["message"] for c in running["conditions"] if c["type"] == "Admitted").startswith("admitted")


def test_a_gang_asks_each_device_for_what_the_step_needs_not_the_roomy_reserve() -> None:
    # An FSDP rank's footprint holds the reduce-scatter stream's pool of gradient shards (2.2 GB
    # here) beside the default pool's peak: cached blocks the allocator frees and retries with, so
    # a device with the step's need free holds the gang. Before, the gang asked for the footprint
    # and a near-full device that runs the step was refused.
    w = JobBuilder().workload(framework="fsdp", sharding="zero2", microBatch=4, seqLen=2048).profile()
    est = memory.estimate(w, accel("h100-80gb"), Layout(2, 1))
    gang = gang_of(cast(Candidate, SimpleNamespace(nodes=1, devices=2, memory=est)))
    assert gang.memory_bytes == est.required_bytes < est.footprint_bytes


class _NoScan(dict[str, Any]):
    """Nodes by name that may be looked up but not walked: a decision that walks every node of
    the cluster fails here."""

    def __iter__(self) -> Any:
        raise AssertionError("every node of the cluster was walked")

    def values(self) -> Any:
        raise AssertionError("every node of the cluster was walked")

    def items(self) -> Any:
        raise AssertionError("every node of the cluster was walked")


@pytest.mark.parametrize("deleting", [0, 1])
def test_an_admitted_gang_reads_only_its_pools_nodes(deleting: int) -> None:
    # The bind clock's check for nodes gone ran over every node of the cluster for each decision
    # of an admitted gang whose pods were not all bound (about three per admission): on the scale
    # benchmark, the cost per admission grew with the cluster. It reads its pool's nodes from the
    # snapshot's index now, with the same answer.
    w = World().pool("p", nodes=2).pool("q", nodes=40)
    for i in range(deleting):
        (n,) = w.nodes[f"p-{i}"]
        w.nodes[f"p-{i}"] = [replace(n, deleting=True)]
    job = w.job("a", "p", devices=16, status=_admitted("a", "p", devices=16, nodes=2))
    w.workload("a", 0, active=2)
    w.pod("a", 0, 0, node=None, phase="Pending")
    w.pod("a", 0, 1, node=None, phase="Pending")
    snap = w.snapshot(_s(5))
    assert snap.pool_nodes is not None
    unindexed = decide(job, replace(snap, pool_nodes=None), _s(5), bind_timeout=120)
    d = decide(job, replace(snap, nodes=_NoScan(snap.nodes)), _s(5), bind_timeout=120)
    assert d == unindexed
    assert d.phase is (JobPhase.PENDING if deleting else JobPhase.ADMITTED)
