"""``decide(job, snapshot, now)``: the one place where a job's next step is chosen.

A pure function of frozen values (see :mod:`snapshot`). It returns a :class:`Decision`: the
status the job should have (phase, conditions, the fields that change) and the actions that get
the cluster there (create or delete a workload, record events). The handlers apply it; running
the same decision twice changes nothing (workload names are deterministic per attempt, status
writes are skipped when nothing changed).

The lifecycle:

    (new) ─► Pending ─► Admitted ─► Running ─► Succeeded
               │  ▲        │           │
               ▼  │        │ gang not  └─► failed: retry (new attempt, Pending) or Failed
        Unschedulable      │ bound in time: released, new attempt, Pending
                           ▼ (the clock runs while the scheduler finds no node: bind_clock)
                        Pending

Admission is all-or-nothing: a job is admitted only when every pod of its gang has a node with
enough free devices now (an autoscaled pool counts the nodes it may still add). Jobs are
considered in queue order (priority, then submission); a job that cannot fit its first-choice
pool *blocks* it, and later jobs may use that pool only to backfill: when they end before the
blocked job could start anyway, or use devices it will not need (EASY backfilling).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import replace

from accel_api import bounds
from accel_api import vocabulary as v
from accel_api.durations import later, parse_time
from accel_api.durations import stamp as _ts
from accel_api.enums import FailureKind, JobPhase
from accel_api.job import AttemptFailure, HealthStatus, SpotStatus
from accel_operator.planning import explain
from accel_operator.planning.cache import PlanCache
from accel_operator.planning.candidates import Candidate, Plan, ranked_per_pool
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import attempt_held, node_capacity
from accel_operator.reconcile.common.decision import (
    ADMITTED,
    CLEAR,
    DISRUPTION_RULE,
    FINISHED,
    PLANNED,
    RESUMED,
    RUNNING,
    SPEC_VALID_AND_PLANNED,
    SPOT_FALLBACK,
    STICKY,
    VALID,
    Cond,
    Decision,
    StatusPatch,
)
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.snapshot import (
    HOLDING,
    Admission,
    Blocked,
    Gang,
    JobKey,
    JobView,
    PodView,
    PoolCapacity,
    Snapshot,
    WorkloadView,
)
from accel_operator.reconcile.job import bind_clock, fallback, invalid, policy_gate, resume, user_stop
from accel_operator.reconcile.job.status import admission_plan, plan_write


def _event_if_new(job: JobView, phase: JobPhase, reason: str, type_: str, message: str) -> tuple[act.Action, ...]:
    """An event only on a change of phase or reason: a decision repeated by a timer posts nothing."""
    current = {c.type: c for c in job.status.conditions}
    reasons = {c.reason for c in current.values()}
    if job.phase is phase and reason in reasons:
        return ()
    return (act.RecordEvent(type_, reason, _clip(message)),)


# --- invalid and terminal -------------------------------------------------------------------------


def _terminal(job: JobView) -> Decision:
    return Decision(phase=job.status.phase or JobPhase.FAILED, conditions=tuple(_keep(job)), reason="finished")


def _keep(job: JobView) -> list[Cond]:
    return [Cond(c.type, c.status == "True", c.reason or "", c.message or "") for c in job.status.conditions]


# --- waiting: plan and admit --------------------------------------------------------------------


def gang_of(c: Candidate) -> Gang:
    """The admission shape of ``c``: nodes × devices per node, with the per-device memory need:
    what the step needs (``required_bytes``: the peak allocated, the context, NCCL's buffers), not
    the roomy footprint, whose cached blocks the allocator gives back when cudaMalloc fails (an
    FSDP rank's gradient-shard pool: docs/planner.md, "FSDP2's reserve: one pool per stream")."""
    memory = c.memory.required_bytes if c.memory is not None else 0
    return Gang(nodes=c.nodes, per_node=c.devices // max(1, c.nodes), memory_bytes=memory)


_gang = gang_of


def _duration(c: Candidate) -> float:
    return c.cost.expected_seconds if c.cost is not None else float("inf")


def blocked_for(snapshot: Snapshot, job: JobView, pool: str, gang: Gang, now: dt.datetime) -> Blocked:
    """When ``gang`` could start in ``pool`` if the jobs holding it end as planned (EASY shadow)."""
    cap = snapshot.capacity[pool]
    free = cap.free_devices
    if free >= gang.devices:
        return Blocked(job.key, gang, now, free - gang.devices)
    ends = sorted((r.expected_end, r.devices) for r in snapshot.reservations_in(pool) if r.expected_end)
    for end, devices in ends:
        free += devices
        if free >= gang.devices:
            return Blocked(job.key, gang, end, free - gang.devices)
    return Blocked(job.key, gang, None, 0)


def shortfall(cap: PoolCapacity, gang: Gang) -> str:
    """What the pool lacks for ``gang``, in words that change only when the kind of shortfall does
    (no usable node, no free device, fewer free devices than the gang needs, enough but not on
    enough nodes), not with every count: a waiting job's status is written again only then, not
    each time another job takes or frees a device or a node's heartbeat is late. The live counts
    are the pool's (``kubectl get acceleratorpools``: its free devices and whole free nodes)."""
    free, need = cap.free_devices, gang.devices
    if free == 0 and cap.usable_nodes == 0:
        return f"0 usable node(s) of {cap.total_nodes}"
    if free == 0:
        return "0 free device(s)"
    if free < need:
        return f"fewer than {need} free device(s)"
    return f"{need} or more free device(s), but not on enough nodes"


def _may_use(snapshot: Snapshot, job: JobView, c: Candidate, now: dt.datetime) -> str | None:
    """Why ``job`` may not take candidate ``c`` now, or None when it may."""
    cap = snapshot.capacity.get(c.pool)
    gang = _gang(c)
    if cap is None:
        return f"pool {c.pool} is gone"
    if not cap.fits(gang):
        shape = f"{gang.nodes} node(s) with {gang.per_node} free device(s) each"
        return f"{c.pool} has {shortfall(cap, gang)}; needs {shape}" + node_capacity.views(cap, gang)
    blocked = snapshot.blocked.get(c.pool)
    if blocked is not None and held_against(blocked, job.key, gang, lambda: later(now, _duration(c))):
        return f"{c.pool} is held for {blocked.job[0]}/{blocked.job[1]}, which is ahead in the queue"
    return None


def held_against(blocked: Blocked | None, key: JobKey, gang: Gang, ends: Callable[[], dt.datetime]) -> bool:
    """Whether the pool's head ``blocked`` holds it against job ``key``'s ``gang``: a head ahead
    of it, the gang larger than what the head leaves spare, and it would not end (``ends``, asked
    only then) before the head may start. The one rule of backfilling, for ``decide`` and for the
    pass that skips jobs it can only repeat (``engine.schedule.still_waits``)."""
    if blocked is None or blocked.job == key or gang.devices <= blocked.extra:
        return False
    return blocked.shadow is None or ends() > blocked.shadow


def _waiting(job: JobView, snapshot: Snapshot, now: dt.datetime, cache: PlanCache | None) -> Decision:
    plan: Plan | None = snapshot.plans.get(job.key)
    if plan is None:
        return Decision(
            phase=job.status.phase or JobPhase.PENDING,
            conditions=(Cond(VALID, True, "SpecValid"), Cond(PLANNED, False, "NotPlannedYet")),
            reason="not planned yet",
        )
    if not plan.schedulable:
        return Decision(
            phase=JobPhase.UNSCHEDULABLE,
            conditions=(Cond(VALID, True, "SpecValid"), Cond(PLANNED, False, "NoPlacement", plan.reason)),
            status=StatusPatch(plan=plan_write(plan, cache=cache), message=_clip(plan.reason)),
            actions=_event_if_new(job, JobPhase.UNSCHEDULABLE, "NoPlacement", "Warning", plan.reason),
            reason=plan.reason,
        )
    ranked = ranked_per_pool(plan, cache=cache)
    first = ranked[0]
    why_not: list[str] = []
    for c in ranked:
        problem = _may_use(snapshot, job, c, now)
        if problem is not None:
            why_not.append(problem)
            continue
        return _admit(job, plan, c, first=first, why_not=why_not, now=now, cache=cache)
    reason = "waiting for capacity: " + "; ".join(why_not[:3])
    if len(why_not) > 3:
        reason += f"; and {len(why_not) - 3} more pools"
    waiting_reason = "QueuedBehind" if "ahead in the queue" in why_not[0] else "WaitingForCapacity"
    # Only the first waiting job in queue order blocks a pool; for the later ones the pool's
    # shadow (a sort of its reservations) is not computed again.
    blocked = snapshot.blocked.get(first.pool) or blocked_for(snapshot, job, first.pool, _gang(first), now)
    return Decision(
        phase=JobPhase.PENDING,
        conditions=(
            Cond(VALID, True, "SpecValid"),
            Cond(PLANNED, True, "Planned"),  # the why is status.plan.reason, once
            Cond(ADMITTED, False, waiting_reason, reason),
        ),
        status=StatusPatch(plan=plan_write(plan, cache=cache), message=_clip(reason), workload=CLEAR),
        actions=_event_if_new(job, JobPhase.PENDING, waiting_reason, "Normal", reason),
        reason=reason,
        blocks=(first.pool, blocked),
    )


def _admit(
    job: JobView,
    plan: Plan,
    c: Candidate,
    *,
    first: Candidate,
    why_not: Sequence[str],
    now: dt.datetime,
    cache: PlanCache | None,
) -> Decision:
    attempt = job.status.attempt
    workload = act.workload_name(job.name, attempt)
    gang = _gang(c)
    message = (
        f"admitted attempt {attempt} on {c.pool}: {c.devices} × {c.accelerator} on {c.nodes} node(s), "
        f"{c.capacity_type.value}; expected {explain.duration(_duration(c))}, {explain.money(c.cost.expected_usd)}"
        if c.cost is not None
        else f"admitted attempt {attempt} on {c.pool}"
    )
    events: list[act.Action] = [act.RecordEvent("Normal", "Admitted", _clip(message))]
    if c.pool != first.pool:
        events.append(
            act.RecordEvent(
                "Normal",
                "Replanned",
                _clip(f"took {c.pool} because the planned pool cannot run it now: {why_not[0] if why_not else ''}"),
            )
        )
    written = plan_write(plan, chosen=c, cache=cache)
    admitted = _ts(now)
    status = StatusPatch(
        plan=written,
        attempt=attempt,
        workload=workload,
        admitted_time=admitted,
        message=_clip(message),
    )
    record = Admission(
        attempt=attempt,
        pool=c.pool,
        devices=c.devices,
        nodes=c.nodes,
        admitted_time=admitted,
        accelerator=c.accelerator,
        capacity_type=c.capacity_type.value,
        duration_seconds=written.duration_seconds,
        cost_usd=round(c.cost.expected_usd, 2) if c.cost is not None else None,
    )
    create = act.CreateWorkload(attempt, workload, c.pool, c.devices, c.nodes, resume.resume_from(job), record)
    return Decision(
        phase=JobPhase.ADMITTED,
        conditions=(
            Cond(VALID, True, "SpecValid"),
            Cond(PLANNED, True, "Planned"),  # the why is status.plan.reason, once
            Cond(ADMITTED, True, "Admitted", message),
            # The words the next decision uses while no pod is placed: no second status write for them.
            Cond(RUNNING, False, "WaitingForNodes", f"0 of {c.nodes} pod(s) placed"),
        ),
        status=status,
        actions=(*events, create),
        reason=message,
        admitted=(c.pool, gang),
        # The Job records the admission: created first, the status may follow with Running.
        status_after_workload=True,
    )


# The phases a job may show while its admission is recorded on its batch Job alone (a new job, a
# waiting one): an admission decided from any other (a stopped job resumed, a failed one started
# over) writes its status first, as before.
ADOPTABLE = frozenset({None, JobPhase.PENDING, JobPhase.UNSCHEDULABLE})


def recorded(job: JobView, snapshot: Snapshot) -> tuple[WorkloadView, Admission] | None:
    """The admission the batch Job of ``job``'s current attempt records, when the job's status
    does not say it (the operator stopped between the Job's create and the status write): that
    admission stands, and is adopted as it is, never planned again."""
    st = job.status
    name = act.workload_name(job.name, st.attempt)
    wl = snapshot.workloads.get((job.namespace, name))
    a = wl.admission if wl is not None else None
    if wl is None or a is None or a.attempt != st.attempt or wl.attempt != st.attempt:
        return None
    if wl.owner_uid is not None and wl.owner_uid != job.uid:
        return None  # another job's of the same name (deleted and created again): the sweep's
    return wl, a


def _adopt(job: JobView, wl: WorkloadView, a: Admission, plan: Plan | None, cache: PlanCache | None) -> Decision:
    """The admission ``wl`` records, written to the job's status as it stands: its pool, shape
    and admitted time (the gang clock's start) are the Job's, whatever the job's plan says now."""
    chosen = None
    if plan is not None and plan.schedulable:
        chosen = next(
            (
                c
                for c in ranked_per_pool(plan, cache=cache)
                if (c.pool, c.devices, c.nodes) == (a.pool, a.devices, a.nodes)
            ),
            None,
        )
    written = plan_write(plan, chosen=chosen, cache=cache) if plan is not None and chosen is not None else None
    what = f"{a.devices} × {a.accelerator or 'device'} on {a.nodes} node(s)"
    message = f"admitted attempt {a.attempt} on {a.pool}: {what}, as its batch Job {wl.name} records"
    return Decision(
        phase=JobPhase.ADMITTED,
        conditions=(
            Cond(VALID, True, "SpecValid"),
            Cond(PLANNED, True, "Planned"),
            Cond(ADMITTED, True, "Admitted", message),
            Cond(RUNNING, False, "WaitingForNodes", f"0 of {a.nodes} pod(s) placed"),
        ),
        status=StatusPatch(
            plan=written or admission_plan(a),
            attempt=a.attempt,
            workload=wl.name,
            admitted_time=a.admitted_time,
            message=_clip(message),
        ),
        actions=_event_if_new(job, JobPhase.ADMITTED, "Admitted", "Normal", message),
        reason=message,
    )


# --- holding: admitted and running --------------------------------------------------------------


def _attempt_pods(snapshot: Snapshot, job: JobView) -> list[PodView]:
    return [p for p in snapshot.pods_by_job.get(job.key, ()) if p.attempt == job.status.attempt]


def _failure(
    job: JobView, wl: WorkloadView, pods: Sequence[PodView], now: dt.datetime, preempted_nodes: frozenset[str]
) -> AttemptFailure:
    preempted = DISRUPTION_RULE in (wl.failure_message or "") or any(p.disrupted for p in pods)
    # A pod on a node the cloud API reports preempted (TPU VM outside GKE) ends as the VM died:
    # whatever its exit code, that is a preemption.
    preempted = preempted or any(p.node in preempted_nodes for p in pods if p.node)
    failed = [p for p in pods if p.phase == "Failed"]
    culprit = next((p for p in failed if p.exit_code not in (None, 0)), failed[0] if failed else None)
    return AttemptFailure(
        kind=FailureKind.PREEMPTION if preempted else FailureKind.FAILURE,
        attempt=job.status.attempt,
        reason=(wl.failure_reason or ("Preempted" if preempted else "Failed"))[:128],
        message=_clip(wl.failure_message or ""),
        exit_code=culprit.exit_code if culprit is not None else None,
        pod=culprit.name if culprit is not None else None,
        node=culprit.node if culprit is not None else None,
        time=_ts(now),
        held=attempt_held.of(job, wl, pods),
    )


def _after_failure(
    job: JobView, failure: AttemptFailure, now: dt.datetime, rules: fallback.SpotRules = fallback.DEFAULT_RULES
) -> Decision:
    """A new attempt when the job may have one (or may fall back to on-demand), else Failed."""
    assert job.spec is not None
    st = job.status
    where = f" (pod {failure.pod}, exit code {failure.exit_code})" if failure.pod else ""
    fell_back: fallback.Fallback | None = None
    if failure.kind is FailureKind.PREEMPTION:
        count, limit, field_name = st.preemptions + 1, job.spec.spot.max_preemptions, "spot.maxPreemptions"
        spot = st.spot or SpotStatus()
        recent = [*spot.recent_preemptions, _ts(now)]
        fell_back = fallback.check(job.spec, st, count=count, recent=recent, now=now, rules=rules)
        to_on_demand = fell_back is not None and fell_back.leave is None
        left = (
            {"left_pools": [*spot.left_pools, fell_back.leave], "left_time": _ts(now)}
            if fell_back is not None and fell_back.leave is not None
            else {}
        )
        spot = spot.model_copy(
            update={
                "recent_preemptions": recent[-bounds.STATUS_PREEMPTION_TIMES :],
                "on_demand": fallback.on_demand(st) or to_on_demand,
                **({"preemptions_at_fallback": count} if to_on_demand else {}),
                **left,
            }
        )
        counters = StatusPatch(preemptions=count, spot=spot)
        used = fallback.counted(st, count)  # since the fallback, once fallen back
    else:
        count, limit, field_name = st.retries + 1, job.spec.max_retries, "maxRetries"
        counters = StatusPatch(retries=count)
        used = count
    old = st.workload or act.workload_name(job.name, st.attempt)
    if used <= limit or fell_back is not None:
        message = (
            f"attempt {st.attempt} ended: {failure.kind.value.lower()}{where}: {failure.reason}; "
            f"retrying as attempt {st.attempt + 1} ({used} of {field_name} {limit})"
        )
        events: tuple[act.Action, ...] = (act.RecordEvent("Warning", "Retrying", _clip(message)),)
        conditions: tuple[Cond, ...] = (
            *SPEC_VALID_AND_PLANNED,
            Cond(ADMITTED, False, "Retrying", message),
        )
        if fell_back is not None and fell_back.leave is not None:
            message = f"attempt {st.attempt} ended: preemption{where}; {fell_back.message}"
            events = (act.RecordEvent("Warning", "LeftSpotPool", _clip(message)),)
        elif fell_back is not None:
            message = f"attempt {st.attempt} ended: preemption{where}; {fell_back.message}"
            events = (act.RecordEvent("Warning", "FellBackToOnDemand", _clip(message)),)
            conditions = (*conditions, Cond(SPOT_FALLBACK, True, fell_back.reason, _clip(message)))
        return Decision(
            phase=JobPhase.PENDING,
            conditions=conditions,
            status=counters.merged(
                StatusPatch(
                    attempt=st.attempt + 1,
                    workload=CLEAR,
                    last_failure=failure,
                    earlier_failures=attempt_held.earlier(st),
                    message=_clip(message),
                )
            ),
            actions=(act.DeleteWorkload(old, "retrying"), *events),
            reason=message,
        )
    message = (
        f"attempt {st.attempt} ended: {failure.kind.value.lower()}{where}: {failure.reason}; "
        f"no retries left ({field_name} is {limit})"
    )
    return Decision(
        phase=JobPhase.FAILED,
        conditions=(
            Cond(VALID, True, "SpecValid"),
            Cond(RUNNING, False, failure.kind.value),
            Cond(FINISHED, True, "Failed", message),
        ),
        status=counters.merged(
            StatusPatch(
                last_failure=failure,
                earlier_failures=attempt_held.earlier(st),
                completion_time=_ts(now),
                message=_clip(message),
            )
        ),
        actions=(act.RecordEvent("Warning", "Failed", _clip(message)),),
        reason=message,
    )


def _held(job: JobView, type_: str, reason: str) -> Cond:
    """A true condition as it stands: the message the decision that set it wrote is kept, so a
    later decision that holds it (a watch event, the resync) writes no status for it."""
    prior = next((c for c in job.status.conditions if c.type == type_), None)
    same = prior is not None and prior.status == "True" and prior.reason == reason
    return Cond(type_, True, reason, (prior.message or "") if same and prior is not None else "")


def _holding(
    job: JobView, snapshot: Snapshot, now: dt.datetime, bind_timeout: float, rules: fallback.SpotRules
) -> Decision:
    st = job.status
    assert st.phase is not None
    name = st.workload or act.workload_name(job.name, st.attempt)
    wl = snapshot.workloads.get((job.namespace, name))
    pods = _attempt_pods(snapshot, job)
    plan = st.plan
    nodes = plan.nodes if plan is not None and plan.nodes else 1
    base = (Cond(VALID, True, "SpecValid"), _held(job, PLANNED, "Planned"), _held(job, ADMITTED, "Admitted"))
    if wl is None:
        if st.phase is JobPhase.RUNNING:
            failure = AttemptFailure(
                kind=FailureKind.FAILURE,
                attempt=st.attempt,
                reason="WorkloadDeleted",
                message=f"the workload {name} was deleted while the job ran",
                time=_ts(now),
                held=attempt_held.of(job, None, pods),
            )
            return _after_failure(job, failure, now, rules)
        # Admitted, but the workload is not there (yet): create it; a retry of a lost create.
        assert plan is not None and plan.pool is not None and plan.devices is not None
        record = Admission(
            attempt=st.attempt,
            pool=plan.pool,
            devices=plan.devices,
            nodes=nodes,
            admitted_time=st.admitted_time or _ts(now),
            accelerator=plan.accelerator or "",
            capacity_type=plan.capacity_type.value if plan.capacity_type is not None else "",
            duration_seconds=plan.duration_seconds,
            cost_usd=plan.cost_usd,
        )
        create = act.CreateWorkload(st.attempt, name, plan.pool, plan.devices, nodes, resume.resume_from(job), record)
        return Decision(
            phase=JobPhase.ADMITTED,
            conditions=(*base, Cond(RUNNING, False, "WaitingForNodes")),
            actions=(create,),
            reason="creating the workload",
        )
    if wl.complete:
        message = f"attempt {st.attempt} succeeded"
        # When it completed, as its pods' own timestamps say (the cost ledger's end) when they are
        # there; the operator may notice much later (it was down).
        finished = attempt_held.pod_span(pods, st.attempt).end
        done = min(finished, now) if finished is not None else now
        return Decision(
            phase=JobPhase.SUCCEEDED,
            conditions=(*base, Cond(RUNNING, False, "Succeeded"), Cond(FINISHED, True, "Succeeded", message)),
            status=StatusPatch(completion_time=_ts(done), message=message),
            actions=_event_if_new(job, JobPhase.SUCCEEDED, "Succeeded", "Normal", message),
            reason=message,
        )
    if wl.failed_condition:
        return _after_failure(job, _failure(job, wl, pods, now, snapshot.preempted_nodes), now, rules)
    bound = sum(1 for p in pods if p.node and not p.ended)
    if st.phase is JobPhase.ADMITTED:
        if bound >= nodes:
            message = f"all {nodes} pod(s) of attempt {st.attempt} have their nodes"
            return Decision(
                phase=JobPhase.RUNNING,
                conditions=(*base, Cond(RUNNING, True, "Running", message)),
                status=StatusPatch(start_time=st.start_time or _ts(now), attempt_start_time=_ts(now), message=message),
                # No Event: the Running condition (with its transition time) and the phase say it,
                # the batch Job's pods have their own, and an Event here was one of the five
                # writes every admitted job cost (Kueue posts none for a running workload either).
                reason=message,
            )
        admitted = parse_time(st.admitted_time) or now
        pool = snapshot.pools.get(plan.pool or "") if plan is not None else None
        timeout = pool.spec.scale_up_timeout_seconds if pool is not None and pool.autoscaled else bind_timeout
        per_node = plan.devices // nodes if plan is not None and plan.devices else 0
        # The pool's nodes from the snapshot's index, not every node of the cluster: this runs for
        # each decision of an admitted gang whose pods are not all bound (about three per admission).
        members = snapshot.nodes_in(pool.name) if pool is not None else ()
        ran_out = bind_clock.nodes_gone(pool, members, nodes, per_node) or bind_clock.expired(
            pods, nodes, admitted, now, timeout
        )
        if ran_out is not None:
            message = f"{ran_out.message}: the gang is released and planned again as attempt {st.attempt + 1}"
            return Decision(
                phase=JobPhase.PENDING,
                conditions=(
                    *SPEC_VALID_AND_PLANNED,
                    Cond(ADMITTED, False, "GangTimeout", message),
                ),
                status=StatusPatch(attempt=st.attempt + 1, workload=CLEAR, message=message),
                actions=(act.DeleteWorkload(name, "gang timeout"), act.RecordEvent("Warning", "GangTimeout", message)),
                reason=message,
            )
        return Decision(
            phase=JobPhase.ADMITTED,
            conditions=(*base, Cond(RUNNING, False, "WaitingForNodes", f"{bound} of {nodes} pod(s) placed")),
            reason=f"{bound} of {nodes} pod(s) placed",
        )
    return Decision(
        phase=JobPhase.RUNNING,
        conditions=(*base, _held(job, RUNNING, "Running")),
        status=StatusPatch(last_checkpoint=resume.reported_newer(job, pods, now)),
        reason="running",
    )


# --- resuming: where a new attempt starts ------------------------------------------------------


def _resolving(job: JobView, lookup: resume.Lookup | None, now: dt.datetime) -> Decision:
    """The attempt waits for its resume point: an S3 lookup is asked for, running, or failed."""
    assert job.spec is not None and job.spec.checkpoint is not None
    st, uri = job.status, job.spec.checkpoint.uri
    ask = act.ResolveCheckpoint(st.attempt, uri)
    if lookup is not None and lookup.attempt == st.attempt and lookup.error:
        message = _clip(
            f"attempt {st.attempt} waits: the checkpoints under {uri} cannot be read ({lookup.error}); "
            f"trying again every {resume.RETRY_SECONDS:.0f}s"
        )
        reason = "CheckpointStoreUnavailable"
        retry = (now - lookup.at).total_seconds() >= resume.RETRY_SECONDS
        actions = (*_event_if_new(job, JobPhase.PENDING, reason, "Warning", message), *((ask,) if retry else ()))
    else:
        message = f"attempt {st.attempt}: looking for the latest complete checkpoint under {uri}"
        reason, actions = "ResolvingCheckpoint", (ask,)
    return Decision(
        phase=JobPhase.PENDING,
        conditions=(
            Cond(VALID, True, "SpecValid"),
            Cond(ADMITTED, False, "Resuming", message),
            Cond(RESUMED, False, reason, message),
        ),
        status=StatusPatch(message=message),
        actions=actions,
        reason=message,
    )


def _resuming(
    job: JobView, snapshot: Snapshot, now: dt.datetime, lookup: resume.Lookup | None, cache: PlanCache | None
) -> Decision:
    """A new attempt's resume point (and the lost work) decided, then planned and admitted as
    any waiting job, all in one status write."""
    r = resume.decide_resume(job, lookup)
    if r is None:
        return _resolving(job, lookup, now)
    patch = r.patch(job)
    resolved = replace(job, status=job.status.model_copy(update={"resume": patch.resume}))
    d = _waiting(resolved, snapshot, now, cache)
    if r.checkpoint is not None:
        cond, event = Cond(RESUMED, True, "FromCheckpoint", _clip(r.message)), ("Normal", "ResumingFromCheckpoint")
    else:
        cond, event = Cond(RESUMED, False, "FromScratch", _clip(r.message)), ("Warning", "RestartingFromScratch")
    events: list[act.Action] = [act.RecordEvent(*event, _clip(r.message))]
    if r.lost_device_seconds:
        events.append(act.RecordEvent("Warning", "LostWork", _clip(r.lost_message)))
    return replace(
        d,
        conditions=(*(c for c in d.conditions if c.type != RESUMED), cond),
        status=patch.merged(d.status),
        actions=(*events, *d.actions),
        # The resume point is decided with the admission: the status (which records it) is
        # written before the Job that resumes from it, as before.
        status_after_workload=False,
    )


def _sticky(job: JobView, d: Decision) -> Decision:
    """Carry the conditions that outlive one decision (how the attempt started, the fallback)."""
    have = {c.type for c in d.conditions}
    keep = tuple(
        Cond(c.type, c.status == "True", c.reason or "", c.message or "")
        for c in job.status.conditions
        if c.type in STICKY and c.type not in have
    )
    return replace(d, conditions=(*d.conditions, *keep)) if keep else d


def decide(
    job: JobView,
    snapshot: Snapshot,
    now: dt.datetime,
    *,
    bind_timeout: float = 120.0,
    lookup: resume.Lookup | None = None,
    rules: fallback.SpotRules = fallback.DEFAULT_RULES,
    cache: PlanCache | None = None,
    checkpoint_grace: float = 120.0,
) -> Decision:
    """The next step of ``job``, with reasons. ``lookup``: what the scheduler found for the
    current attempt's resume point; ``rules``: the operator's spot fallback window; ``cache``:
    the scheduler's, keeping what every job sharing a plan reads of it (None: made afresh);
    ``checkpoint_grace``: how long a running attempt that must end waits for its checkpoint."""
    decision = _decide(
        job,
        snapshot,
        now,
        bind_timeout=bind_timeout,
        lookup=lookup,
        rules=rules,
        cache=cache,
        checkpoint_grace=checkpoint_grace,
    )
    if decision.status_after_workload and job.status.phase not in ADOPTABLE:
        # Only from the phases a restarted operator adopts a recorded admission in.
        decision = replace(decision, status_after_workload=False)
    return _sticky(job, decision)


def _decide(
    job: JobView,
    snapshot: Snapshot,
    now: dt.datetime,
    *,
    bind_timeout: float,
    lookup: resume.Lookup | None,
    rules: fallback.SpotRules,
    cache: PlanCache | None,
    checkpoint_grace: float,
) -> Decision:
    if job.spec is None:
        return invalid.decide(job, snapshot, now, grace=checkpoint_grace)
    phase = job.status.phase
    if phase is JobPhase.FAILED and any(c.type == VALID and c.status == "False" for c in job.status.conditions):
        phase = None  # a spec that was invalid and is valid now: start over
    if phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
        return _terminal(job)
    if job.status.phase in ADOPTABLE:
        found = recorded(job, snapshot)
        if found is not None:  # before a stop or a policy is looked at: the Job runs, the job holds it
            return policy_gate.holding(job, snapshot, _adopt(job, *found, snapshot.plans.get(job.key), cache))
    # The policies are checked again here.
    if phase in HOLDING:
        held = _holding(job, snapshot, now, bind_timeout, rules)
        if user_stop.requested(job) and held.phase in HOLDING:
            return user_stop.holding(job, snapshot, held, now, grace=checkpoint_grace)
        return _over_budget(job, policy_gate.holding(job, snapshot, held))
    if phase is JobPhase.STOPPED:  # stopped for idleness by a policy, or by a user: until a user resumes it
        if not _resume_requested(job):
            return _stopped(job)
        return _resumed(job, _waiting_or_resuming(job, snapshot, now, lookup, cache))
    if user_stop.requested(job):
        return user_stop.waiting(job, now)
    return _waiting_or_resuming(job, snapshot, now, lookup, cache)


# --- a Stopped job (by a policy for idleness: reconcile/nodes/idle_stop.py; by a user: user_stop.py)


def _resume_requested(job: JobView) -> bool:
    """Whether a user set ``accel.dev/resume`` to a value the job was not stopped with."""
    seen = job.status.health.resume_seen if job.status.health is not None else None
    return job.resume_request is not None and job.resume_request != seen


def _stopped(job: JobView) -> Decision:
    """A Stopped job stays as it is: its conditions kept, nothing to do."""
    conds = tuple(Cond(c.type, c.status == "True", c.reason or "", c.message or "") for c in job.status.conditions)
    return Decision(phase=JobPhase.STOPPED, conditions=conds, reason="stopped (for idleness, or by a user)")


def _resumed(job: JobView, decision: Decision) -> Decision:
    """``decision`` (the job planned again) with the record that a user resumed it."""
    health = (job.status.health or HealthStatus()).model_copy(update={"stopped_time": None})
    message = f"resumed by the {v.ANNOTATION_RESUME} annotation as attempt {job.status.attempt}"
    return replace(
        decision,
        status=replace(decision.status, health=health),
        actions=(act.RecordEvent("Normal", "Resumed", message), *decision.actions),
    )


def _waiting_or_resuming(
    job: JobView, snapshot: Snapshot, now: dt.datetime, lookup: resume.Lookup | None, cache: PlanCache | None
) -> Decision:
    if resume.needs_resume(job):
        return policy_gate.waiting(job, snapshot) or policy_gate.holding(
            job, snapshot, _resuming(job, snapshot, now, lookup, cache)
        )
    return policy_gate.waiting(job, snapshot) or policy_gate.holding(job, snapshot, _waiting(job, snapshot, now, cache))


DECISION_FAILED = "DecisionFailed"  # a condition type and an event reason
# How much of an error's text a condition quotes (the rest is in the operator's log).
ERROR_QUOTE = 300


def failed(job: JobView, error: BaseException) -> Decision:
    """What a job gets when deciding it raised: its phase and conditions as they are, plus a
    ``DecisionFailed`` condition (and an event, once) naming the error, so the pass goes on for
    every other job and a person sees why this one does not move."""
    text = f"{type(error).__name__}: {error}"
    text = text if len(text) <= ERROR_QUOTE else text[: ERROR_QUOTE - 1] + "…"
    message = _clip(f"the operator could not decide this job ({text}); other jobs are not held up by it")
    conds = tuple(c for c in _keep(job) if c.type != DECISION_FAILED)
    phase = job.status.phase or JobPhase.PENDING
    return Decision(
        phase=phase,
        conditions=(*conds, Cond(DECISION_FAILED, True, "DecisionFailed", message)),
        actions=_event_if_new(job, phase, "DecisionFailed", "Warning", message),
        reason=message,
    )


OVER_BUDGET = "OverBudget"


def _over_budget(job: JobView, decision: Decision) -> Decision:
    """A running job whose team is over a budget (the cost ledger says so in ``status.cost``)
    carries the condition; it is never stopped for it."""
    over = job.status.cost.over_budget if job.status.cost is not None else None
    if over is None or decision.phase not in HOLDING:
        return decision
    message = (
        f"team {job.spec.team if job.spec else '?'} is over its {over.period.value} budget in policy {over.policy}: "
        f"${over.spent_usd:,.2f} of ${over.limit_usd:,.2f}; the job keeps running"
    )
    return replace(decision, conditions=(*decision.conditions, Cond(OVER_BUDGET, True, "BudgetExceeded", message)))
