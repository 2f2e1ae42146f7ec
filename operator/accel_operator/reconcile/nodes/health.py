"""Rescheduling on what the node agents report: pure decisions over the snapshot.

Three findings about a running job, each a condition and an event with reasons, some a move:

- **a failing device** the job holds (the agent's health: uncorrectable ECC, a failed row remap,
  a device fallen off the bus, a critical XID, hardware throttling) on a *fresh* report: the
  node's capacity drops by that device, and the node is kept free of new work altogether only
  when the device plugin might hand the device to a new pod (:mod:`node_capacity` says which
  signal is trusted; :func:`node_actions`: a NoSchedule taint); the job is asked to checkpoint
  now, and after the checkpoint (or ``checkpoint_grace``) its attempt ends and a new one is
  planned elsewhere. Jobs on the node's healthy devices stay;
- **a hung distributed job**: every device of a multi-device training job at ~0% at once while
  all its pods run and the devices still hold their memory, for ``hung_window`` (an NCCL
  collective that never completes): flagged with the nodes, and restarted from its latest
  checkpoint where it has one;
- **an idle reservation**: the job's devices near 0% for ``idle_window`` (and not hung: their
  memory is not held, or the job is not a multi-device training job): flagged, with a right-size
  suggestion from the plan's alternatives (or fewer devices).

A report older than ``stale_after`` decides nothing: the job's ``NodeReports`` condition says it
is stale. The markers (idle since, hung since, move requested) are kept in ``status.health`` so a
restarted operator goes on counting where the last one stopped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from accel_api import vocabulary as v
from accel_api.durations import parse_time
from accel_api.durations import stamp as _ts
from accel_api.enums import JobPhase, WorkloadMode
from accel_api.job import HealthStatus, RightSize
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import checkpoints, node_capacity
from accel_operator.reconcile.common.decision import (
    ADMITTED,
    CLEAR,
    SPEC_VALID_AND_PLANNED,
    Cond,
    Decision,
    StatusPatch,
)
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.reports import DeviceReport
from accel_operator.reconcile.common.snapshot import JobView, PodView, Snapshot
from accel_operator.reconcile.nodes import idle_stop

# Condition types this module writes on running jobs.
REPORTS, DEVICES, HUNG, IDLE = "NodeReports", "DevicesHealthy", "Hung", "Idle"
TAINT_VALUE_LIMIT = 63  # a taint value is a label value


class MoveReason(StrEnum):
    """Why a job's attempt was ended to start it again elsewhere (a metrics label)."""

    DEVICE_UNHEALTHY = "device-unhealthy"
    HUNG = "hung"
    CONSOLIDATION = "consolidation"  # reconcile/nodes/consolidate.py: room for a gang
    IDLE_STOP = "idle-stop"  # not a move: a policy stopped the idle job (reconcile/nodes/idle_stop.py)


@dataclass(frozen=True, slots=True)
class Rules:
    stale_after: float = 900.0
    checkpoint_grace: float = 120.0
    idle_window: float = 1800.0
    idle_percent: float = 5.0
    hung_window: float = 600.0
    hung_percent: float = 1.0
    # A hung collective keeps its memory (the model, optimizer state and NCCL buffers stay put);
    # a reservation that was never used does not. Below this share of each device: idle, not hung.
    hung_memory_fraction: float = 0.1
    # A job moved this often is not moved again (a flapping agent, a job that hangs every time):
    # it is flagged and left to its own timeouts.
    max_moves: int = 5


# --- nodes ------------------------------------------------------------------------------------


def node_actions(snapshot: Snapshot, rules: Rules) -> tuple[act.NodeAction, ...]:
    """Taint the nodes a fresh report condemns (a failing device the device plugin may still hand
    to a new pod: :mod:`node_capacity`); untaint those a fresh report clears. A node without a
    fresh report keeps what it has: nothing is decided on old news."""
    out: list[act.NodeAction] = []
    for name, node in sorted(snapshot.nodes.items()):
        report = snapshot.reports.get(name)
        if report is None or not report.fresh(snapshot.now, rules.stale_after):
            continue
        sick = report.sick
        if not sick and not node.health_taint:
            continue  # nothing to taint or untaint (the common case: judged no further)
        judged = node_capacity.judge(node, report, snapshot.now, rules.stale_after)
        if judged.condemned and not node.health_taint:
            value = "-".join(str(d.index) for d in sick)[:TAINT_VALUE_LIMIT].strip("-")
            why = "; ".join(d.describe() for d in sick)
            out.append(act.TaintNode(name, v.TAINT_DEVICE_UNHEALTHY, value, _clip(why)))
        elif not judged.condemned and node.health_taint:
            because = (
                f"the device plugin withholds the failing device(s) "
                f"{', '.join(str(d.index) for d in sick)}: the node stays schedulable with fewer devices"
                if sick
                else "every device is healthy again"
            )
            out.append(act.UntaintNode(name, v.TAINT_DEVICE_UNHEALTHY, because))
    return tuple(out)


# --- one running job --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """What the reports say about the nodes and devices of one running attempt."""

    nodes: tuple[str, ...]
    stale: tuple[str, ...]  # nodes without a fresh report
    sick: tuple[tuple[str, DeviceReport], ...]  # failing devices it holds (fresh reports; see find)
    devices: tuple[DeviceReport, ...]  # the devices its pods hold, on fresh reports
    mapped_everywhere: bool  # every node it runs on maps at least one device to its pods


def find(pods: Sequence[PodView], snapshot: Snapshot, now: dt.datetime, rules: Rules) -> Finding:
    nodes = tuple(sorted({p.node for p in pods if p.node}))
    keys = frozenset((p.namespace, p.name) for p in pods)
    uids = frozenset(p.uid for p in pods if p.uid)
    stale: list[str] = []
    sick: list[tuple[str, DeviceReport]] = []
    devices: list[DeviceReport] = []
    mapped = True
    for node in nodes:
        report = snapshot.reports.get(node)
        if report is None or not report.fresh(now, rules.stale_after):
            stale.append(node)
            continue
        mine = report.devices_of(keys, uids)
        # Per device: a failing device of the node that is not the job's leaves the job where it
        # is (the node's capacity drops instead). Where the report maps no device to the job's
        # pods, which devices it holds is unknown: every failing device of the node counts.
        sick += [(node, d) for d in report.sick if not mine or d in mine]
        mapped = mapped and bool(mine)
        devices += mine
    return Finding(nodes, tuple(stale), tuple(sick), tuple(devices), mapped and bool(nodes))


def _quiet(devices: Sequence[DeviceReport], percent: float) -> bool:
    return bool(devices) and all(d.utilization is not None and d.utilization <= percent for d in devices)


def _holding_memory(devices: Sequence[DeviceReport], fraction: float) -> bool:
    """Every device holds at least ``fraction`` of its memory (one not measured counts as holding)."""
    return all(
        d.memory_used is None or not d.memory_total or d.memory_used >= fraction * d.memory_total for d in devices
    )


def _had(job: JobView, type_: str, reason: str) -> bool:
    return any(c.type == type_ and c.reason == reason for c in job.status.conditions)


def right_size(job: JobView) -> RightSize:
    """A smaller reservation to suggest: the cheapest of the plan's alternatives that uses fewer
    devices or another accelerator for less money, else half the devices of the same kind."""
    plan = job.status.plan
    if plan is None or not plan.devices:
        return RightSize(reason="the reservation sat idle: check that the job is doing work, or stop it")
    cheaper = [
        a
        for a in plan.alternatives
        if a.cost_usd is not None
        and (plan.cost_usd is None or a.cost_usd < plan.cost_usd)
        and (a.devices < plan.devices or a.accelerator != plan.accelerator)
    ]
    if cheaper:
        best = min(cheaper, key=lambda a: (a.cost_usd or 0.0, a.devices))
        return RightSize(
            accelerator=best.accelerator,
            devices=best.devices,
            reason=_clip(
                f"the planner's alternative in pool {best.pool}: {best.devices} × {best.accelerator} for "
                f"${best.cost_usd:.2f} (the plan: {plan.devices} × {plan.accelerator})"
            ),
        )
    if plan.devices > 1:
        fewer = max(1, plan.devices // 2)
        return RightSize(
            accelerator=plan.accelerator,
            devices=fewer,
            reason=_clip(
                f"{plan.devices} × {plan.accelerator} sat idle: try {fewer} (check the memory fit with accelctl plan)"
            ),
        )
    return RightSize(
        accelerator=plan.accelerator,
        devices=1,
        reason="one device sat idle: check that the job is doing work, or stop it",
    )


def _move(
    job: JobView, health: HealthStatus, reason: MoveReason, why: str, *, from_checkpoint: bool
) -> tuple[Decision, MoveReason]:
    st = job.status
    old = st.workload or act.workload_name(job.name, st.attempt)
    start = "from its latest checkpoint" if from_checkpoint else "from the start (the job has no checkpoint)"
    message = _clip(f"attempt {st.attempt} ended: {why}; attempt {st.attempt + 1} is planned again, {start}")
    new_health = health.ended(right_size=None, move_reason=_clip(why), moves=health.moves + 1)
    decision = Decision(
        phase=JobPhase.PENDING,
        conditions=(
            *SPEC_VALID_AND_PLANNED,
            Cond(ADMITTED, False, "Moved", message),
        ),
        status=StatusPatch(attempt=st.attempt + 1, workload=CLEAR, message=message, health=new_health),
        actions=(act.DeleteWorkload(old, f"moved: {reason.value}"), act.RecordEvent("Warning", "Moved", message)),
        reason=message,
    )
    return decision, reason


move = _move  # the same move, for consolidation (reconcile/nodes/consolidate.py)


def amend(
    decision: Decision, job: JobView, snapshot: Snapshot, now: dt.datetime, rules: Rules
) -> tuple[Decision, MoveReason | None]:
    """``decision`` for a running job, with what the node reports add: conditions, events, the
    health markers, a checkpoint-now request, or a move (a new attempt) in its place. The
    decision that makes an admitted job Running is amended too: its conditions are written with
    it, not by a second status write at the next event."""
    running = job.phase in (JobPhase.ADMITTED, JobPhase.RUNNING) and decision.phase is JobPhase.RUNNING
    if job.spec is None or not running:
        return decision, None
    pods = [
        p for p in snapshot.pods_by_job.get(job.key, ()) if p.attempt == job.status.attempt and p.node and not p.ended
    ]
    if not pods:
        return decision, None
    f = find(pods, snapshot, now, rules)
    before = job.status.health or HealthStatus()
    health = before
    conds = list(decision.conditions)
    events: list[act.Action] = []
    checkpointable = job.spec.checkpoint is not None
    moves = health.moves
    limit = f"not moved: moved {moves} time(s) already (at most {rules.max_moves})"

    if f.stale:
        conds.append(
            Cond(
                REPORTS,
                False,
                "ReportStale",
                _clip(
                    f"no fresh report (within {rules.stale_after:.0f}s) from node(s) {', '.join(f.stale)}: "
                    "nothing is decided on them"
                ),
            )
        )
    else:
        conds.append(Cond(REPORTS, True, "Fresh", f"reports from {', '.join(f.nodes)}"))

    # (a) a failing device where the job runs.
    requested = parse_time(health.move_requested_time)
    if f.sick:
        why = _clip("; ".join(f"node {node}: {d.describe()}" for node, d in f.sick))
        if moves >= rules.max_moves:
            conds.append(Cond(DEVICES, False, "DeviceUnhealthyMoveLimit", _clip(f"{why}; {limit}")))
            if not _had(job, DEVICES, "DeviceUnhealthyMoveLimit"):
                events.append(act.RecordEvent("Warning", "DeviceUnhealthy", _clip(f"{why}; {limit}")))
            return _amended(decision, conds, events, before, health), None
        conds.append(Cond(DEVICES, False, "DeviceUnhealthy", why))
        if not checkpointable:
            return _move(job, health, MoveReason.DEVICE_UNHEALTHY, why, from_checkpoint=False)
        if requested is None:
            step_then = checkpoints.step_at_request(job.status)
            health = health.model_copy(
                update={"move_requested_time": _ts(now), "move_reason": why, "move_checkpoint_step": step_then}
            )
            # The event first: it is the record a person reads, even if the request fails.
            events.append(
                act.RecordEvent(
                    "Warning",
                    "DeviceUnhealthy",
                    _clip(f"{why}: checkpoint requested; the job moves within {rules.checkpoint_grace:.0f}s"),
                )
            )
            pod_keys = tuple((p.namespace, p.name) for p in pods)
            events.append(act.RequestCheckpoint(pod_keys, _ts(now), MoveReason.DEVICE_UNHEALTHY.value))
        else:
            step_then = health.move_checkpoint_step
            saved = checkpoints.written_since(job.status.last_checkpoint, step_then, requested)
            if saved or (now - requested).total_seconds() >= rules.checkpoint_grace:
                return _move(job, health, MoveReason.DEVICE_UNHEALTHY, why, from_checkpoint=True)
        return _amended(decision, conds, events, before, health), None
    if f.stale and requested is not None and (now - requested).total_seconds() >= rules.checkpoint_grace:
        # Decided on a fresh report; the agent went quiet since: the move goes ahead.
        why = health.move_reason or "a device was failing"
        return _move(job, health, MoveReason.DEVICE_UNHEALTHY, why, from_checkpoint=True)
    if not f.stale:
        conds.append(Cond(DEVICES, True, "Healthy"))
        if requested is not None:
            # Recovered first.
            health = health.model_copy(
                update={"move_requested_time": None, "move_reason": None, "move_checkpoint_step": None}
            )

    if f.stale or not f.mapped_everywhere:
        return _amended(decision, conds, events, before, health), None  # markers kept as they are

    # (c) a hung distributed job: every device quiet at once while every pod runs.
    nodes_n = (job.status.plan.nodes if job.status.plan is not None else None) or 1
    devices_n = (job.status.plan.devices if job.status.plan is not None else None) or len(f.devices)
    multi = devices_n > 1 and job.spec.workload.mode is WorkloadMode.TRAINING
    all_running = len(pods) >= nodes_n and all(p.phase == "Running" for p in pods)
    quiet = _quiet(f.devices, rules.hung_percent) and _holding_memory(f.devices, rules.hung_memory_fraction)
    if multi and all_running and quiet:
        since = parse_time(health.hung_since) or now
        health = health.model_copy(update={"hung_since": _ts(since)})
        held = (now - since).total_seconds()
        if held >= rules.hung_window:
            why = _clip(
                f"hung: all {len(f.devices)} device(s) at ≤{rules.hung_percent:g}% for {held:.0f}s on node(s) "
                f"{', '.join(f.nodes)} while every pod runs (a collective that never completes)"
            )
            if checkpointable and moves < rules.max_moves:
                return _move(job, health, MoveReason.HUNG, why, from_checkpoint=True)
            left = "not restarted: the job has no checkpoint" if not checkpointable else limit
            conds.append(Cond(HUNG, True, "Hung", _clip(f"{why}; {left}")))
            if not _had(job, HUNG, "Hung"):
                events.append(act.RecordEvent("Warning", "Hung", _clip(f"{why}; {left}")))
        else:
            conds.append(Cond(HUNG, False, "Stalling", f"every device quiet since {_ts(since)}"))
    elif multi:
        health = health.model_copy(update={"hung_since": None})
        conds.append(Cond(HUNG, False, "Progressing"))

    # (b) an idle reservation (a hung job is not idle: it is stuck, and handled above).
    if _quiet(f.devices, rules.idle_percent) and not (multi and all_running and quiet):
        since = parse_time(health.idle_since) or now
        health = health.model_copy(update={"idle_since": _ts(since)})
        held = (now - since).total_seconds()
        if held >= rules.idle_window:
            suggestion = right_size(job)
            health = health.model_copy(update={"right_size": suggestion})
            why = _clip(
                f"idle: {len(f.devices)} device(s) at ≤{rules.idle_percent:g}% since {_ts(since)} on node(s) "
                f"{', '.join(f.nodes)}; suggestion: {suggestion.reason}"
            )
            conds.append(Cond(IDLE, True, "IdleReservation", why))
            if not _had(job, IDLE, "IdleReservation"):
                events.append(act.RecordEvent("Warning", "IdleReservation", why))
        else:
            conds.append(Cond(IDLE, False, "Quiet", f"devices near 0% since {_ts(since)}"))
        # A policy may stop it (reconcile/nodes/idle_stop.py).
        rule = idle_stop.rule_for(job.spec.team, snapshot.policy.policies)
        stop, health = idle_stop.step(
            job, pods, rule, held, now=now, health=health, grace=rules.checkpoint_grace, conds=conds, events=events
        )
        if stop is not None:
            return stop, MoveReason.IDLE_STOP
    else:
        health = idle_stop.clear(health.model_copy(update={"idle_since": None, "right_size": None}))
        conds.append(Cond(IDLE, False, "Busy"))
    if job.stop_requested:
        # A user's stop waits for its checkpoint (reconcile/job/user_stop.py): its markers are the
        # decision's, never cleared here because the devices are busy.
        asked = decision.status.health or before
        health = health.model_copy(
            update={
                "stop_requested_time": asked.stop_requested_time,
                "stop_checkpoint_step": asked.stop_checkpoint_step,
            }
        )
    return _amended(decision, conds, events, before, health), None


def _amended(
    decision: Decision,
    conds: list[Cond],
    events: list[act.Action],
    before: HealthStatus,
    health: HealthStatus,
) -> Decision:
    status = decision.status if health == before else replace(decision.status, health=health)
    return replace(decision, conditions=tuple(conds), status=status, actions=(*decision.actions, *events))
