"""One accrual step, pure: from a job's status (its attempts, admission, failure and completion
times), the price in force and what node reports show, the job's next ``status.cost``; from the
teams' spending (``reconcile.teamspend``), which running jobs are over budget. The handler
(``handlers.cost``) observes, calls these and writes.

An attempt accrues from its first pod's start (``status.startTime``) to its last pod's end (its
containers' ``finishedAt``, or when the pod's deletion was asked for), or now while one runs: the
pods' own timestamps, so the ledger is the same whether or not an operator watched (docs/cost.md,
"When an attempt is charged"). When its pods are gone, it ends at the preemption or failure time
the scheduler recorded, the completion time — or, when Kubernetes recorded an earlier end (its
batch Job's completion or failure time: the operator was down, or busy, when it ended), that one.
An attempt the ledger never saw running (it started and ended between two ticks, or while the
operator was down) is charged from what its failure record kept (``lastFailure.held``: pool,
devices, and its run as its pods' timestamps, else its batch Job's, said).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from accel_api.durations import parse_time, parse_time_strict, stamp_exact
from accel_api.enums import CapacityType, FailureKind, JobPhase
from accel_api.job import AttemptFailure, CostStatus, OverBudget
from accel_api.policy import TeamSpend
from accel_operator.accounting import ledger
from accel_operator.reconcile.common import attempt_held
from accel_operator.reconcile.common.reports import ReportView
from accel_operator.reconcile.common.snapshot import HOLDING, TERMINAL, JobView, PodView, WorkloadView

# A device at or under this utilization (percent) over a node report's sample is idle.
IDLE_PERCENT = 1.0
# Seconds an attempt that ran (or ended) waits for its pods to show before its batch Job's start
# or its admission stands in for their start: after a pause the pod watch may deliver later than
# the job's, and a start recorded too early is never taken back. Far above a watch's lag.
POD_GRACE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Price:
    usd_per_device_hour: float
    on_demand_usd_per_device_hour: float


def idle_fraction(
    job: JobView,
    pods: Sequence[PodView],
    reports: Mapping[str, ReportView],
    devices: int,
    *,
    now: dt.datetime,
    stale_after: float,
) -> float:
    """The share of the job's devices that their nodes' fresh reports show at ~0% utilization: a
    device counts when the report maps it to one of the job's pods of the current attempt. A
    stale report (its agent stopped writing) says nothing about now and counts no device idle."""
    if devices <= 0:
        return 0.0
    current = [p for p in pods if p.attempt == job.status.attempt and p.node and not p.ended]
    mine = frozenset((p.namespace, p.name) for p in current)
    uids = frozenset(p.uid for p in current if p.uid)
    idle = 0
    for node in {p.node for p in pods if p.node}:
        report = reports.get(node)
        if report is None or not report.fresh(now, stale_after):
            continue
        for dev in report.devices_of(mine, uids):
            if dev.utilization is not None and dev.utilization <= IDLE_PERCENT:
                idle += 1
    return min(1.0, idle / devices)


def _earliest(*times: dt.datetime | None) -> dt.datetime | None:
    found = [t for t in times if t is not None]
    return min(found) if found else None


def completion_end(job: JobView, workload: WorkloadView | None) -> dt.datetime | None:
    """When a finished job's last attempt ended: ``completionTime``, or an earlier end that
    Kubernetes recorded (its batch Job's, its failure's)."""
    st = job.status
    failure = st.last_failure
    mine = failure is not None and failure.attempt == st.attempt
    return _earliest(
        parse_time(st.completion_time),
        workload.end_time if workload is not None and workload.attempt == st.attempt else None,
        attempt_held.failure_end(failure) if mine and failure is not None else None,
    )


def _unseen(
    cost: ledger.Draft, job: JobView, failures: Sequence[AttemptFailure], price_of: Callable[[str], Price | None]
) -> None:
    """Every ended attempt that the ledger has no entry for (it never saw it running: it ran
    between two ticks, or while the operator was down) charged from its failure record
    (``lastFailure``, ``earlierFailures``): from its admission (else its batch Job's start) to its
    end, at its pool's price (``price_of``; None: the pool is gone, nothing is charged).
    Idempotent: once the entry exists this adds nothing (the ledger's watermark)."""
    st = job.status
    for failure in failures:  # attempt_held.failures of the status
        if failure.held is None or failure.attempt >= st.attempt:
            continue  # the current attempt is charged from the status itself
        if any(e.attempt == failure.attempt for e in cost.entries):
            continue
        price = price_of(failure.held.pool)
        held = failure.held
        # From its pods' start (or its batch Job's) when recorded; its admission only for a record
        # written before the start was kept.
        start = parse_time(held.start_time) or parse_time(held.admitted_time)
        end = attempt_held.failure_end(failure)
        if price is None or start is None or end is None or end <= start or not held.devices:
            continue
        cost.record(
            ledger.Observation(
                attempt=failure.attempt,
                pool=held.pool,
                capacity_type=held.capacity_type,
                devices=held.devices,
                start=start,
                end=end,
                usd_per_device_hour=price.usd_per_device_hour,
                on_demand_usd_per_device_hour=price.on_demand_usd_per_device_hour,
                team=job.team or None,
            ),
        )


@dataclass(frozen=True, slots=True)
class Tick:
    """What one accrual step reads of a job besides its status and its ledger (``accrue`` and
    ``step`` take it whole). ``price``: the price in force for the job's pool now (None: the pool
    is gone, nothing new accrues); ``idle``: the idle fraction of its devices; ``workload``: the
    current attempt's batch Job, if it is there; ``failed_price``: the price of the pool of the
    attempt ``lastFailure`` ended; ``held_prices``: the prices of the pools of the attempts
    ``earlierFailures`` ended, by pool; ``pods``: the job's pods (the current attempt's run is
    read from their timestamps); ``pool_of``: the pool, capacity type and price of a pod's
    ``accel.dev/pool`` label, for an earlier attempt whose pods ran though the status kept no
    record of it (``forgotten``)."""

    price: Price | None
    idle: float
    now: dt.datetime
    workload: WorkloadView | None = None
    failed_price: Price | None = None
    held_prices: Mapping[str, Price] = field(default_factory=dict)
    pods: Sequence[PodView] = ()
    pool_of: Callable[[str], PoolPrice | None] | None = None


def accrue(job: JobView, known: CostStatus | None, tick: Tick, *, base: CostStatus | None = None) -> CostStatus:
    """The job's ledger after this step. ``known``: what this process wrote last (the watch may
    not show it yet); ``tick``: what the step reads besides; ``base``: ``known`` and the status's
    ledger merged, when the caller has it already (``step``).

    The steps below change one ``ledger.Draft`` (plain values) and the models are made once at
    the end: each step used to copy the ledger's models (the pods' marks, the record, the close,
    the figures: a dozen copies and a few validations a job), which was most of the cost of a job
    that started or ended since the last step. The ledger is the one the model functions give,
    to the last bit (``tests/unit/operator/test_accrual_draft.py``)."""
    price, idle, now, workload, pods = tick.price, tick.idle, tick.now, tick.workload, tick.pods
    st = job.status
    # The top-level figures are derived once, at the end (ledger.with_totals): the steps between
    # leave them as they were.
    cost = ledger.Draft.of(base if base is not None else ledger.merge(known, st.cost, totals=False))
    if cost.get("forecast_usd") is None and st.plan is not None and st.plan.cost_usd is not None:
        cost.changed["forecast_usd"] = st.plan.cost_usd
    failure = st.last_failure
    prices = dict(tick.held_prices)
    if failure is not None and failure.held is not None and tick.failed_price is not None:
        prices[failure.held.pool] = tick.failed_price
    failures = attempt_held.failures(st)
    _unseen(cost, job, failures, prices.get)
    # What the pods in view say of every attempt they belong to (an ended attempt's pods stay in
    # view until the ledger holds their times: vocabulary.FINALIZER_LEDGER): nothing is charged
    # outside them, whatever stood in for them before they were seen.
    spans = {a: attempt_held.pod_span(pods, a) for a in sorted({p.attempt for p in pods if p.attempt is not None})}
    for attempt, sp in spans.items():
        if sp.start is not None:
            cost.mark_pods_start(attempt, sp.start)
        if sp.end is not None and attempt < st.attempt:
            cost.mark_pods_end(attempt, sp.end)
    if tick.pool_of is not None:
        _forgotten(cost, job, pods, spans, tick.pool_of)
    recorded = {f.attempt: f for f in failures}
    # Attempts before the current one have ended.
    for entry in list(cost.entries):
        if entry.get("end") is not None or entry.attempt >= st.attempt:
            continue  # the current attempt ends below, if the job has finished
        record = recorded.get(entry.attempt)
        if record is not None:
            end, preempted = attempt_held.failure_end(record), record.kind is FailureKind.PREEMPTION
        else:
            end, preempted = None, False
        pods_end = entry.get("pods_end")
        if pods_end is not None:  # its last pod's end (a gang's may outlive its batch Job's failure)
            end = parse_time(pods_end)
        lost = _reported_lost(job, entry.attempt)
        if preempted and lost is None and entry.attempt == st.attempt - 1 and _resume_pending(job):
            # The resume decision (its S3 checkpoint lookup) is what fixes the work this
            # preemption lost: closed now, the ledger would count the whole attempt as lost, and a
            # close is never redone. Nothing accrues to an earlier attempt meanwhile.
            continue
        _close(cost, entry.attempt, end, preempted, _checkpoint(job), reported=lost)
    plan = st.plan
    seen = st.attempt in spans  # a pod of the current attempt is in view
    span = spans[st.attempt] if seen else attempt_held.pod_span(pods, st.attempt)
    began = _began(cost, job, span, workload, pods_seen=seen, now=now)
    if price is not None and plan is not None and plan.pool and plan.devices and began is not None:
        until: dt.datetime | None = None
        if st.phase in HOLDING:
            until = span.end or now
        elif st.phase in TERMINAL:
            until = span.end or completion_end(job, workload)
        if until is not None and until >= began:  # an attempt of no length still gets its (empty) entry
            cost.record(
                ledger.Observation(
                    attempt=st.attempt,
                    pool=plan.pool,
                    capacity_type=plan.capacity_type or CapacityType.ON_DEMAND,
                    devices=plan.devices,
                    start=began,
                    end=min(until, now),
                    usd_per_device_hour=price.usd_per_device_hour,
                    on_demand_usd_per_device_hour=price.on_demand_usd_per_device_hour,
                    idle_fraction=idle,
                    team=job.team or None,
                ),
            )
    if span.start is not None:
        cost.mark_pods_start(st.attempt, span.start)
    if span.end is not None:
        cost.mark_pods_end(st.attempt, span.end)
    if st.phase in TERMINAL:
        end = span.end or completion_end(job, workload)
        preempted = failure is not None and failure.attempt == st.attempt and failure.kind is FailureKind.PREEMPTION
        lost = _reported_lost(job, st.attempt)
        _close(cost, st.attempt, end, preempted and st.phase is JobPhase.FAILED, _checkpoint(job), reported=lost)
    return cost.build({"updated": ledger.stamp(now)})


# --- the running job's open interval, extended ---------------------------------------------------


@dataclass(slots=True)
class Memo:
    """One job's last accrual, for the next step: what it was computed from (``inputs``, all but
    the time and the ledger), the ledger it started from (``base``), what it gave (``out``) and
    the ledger the step ended with (``final``: with the budget and the rollup's marks, the one
    written and so the next step's base)."""

    inputs: tuple[object, ...]
    base: CostStatus
    out: CostStatus
    final: CostStatus | None = None


EMPTY = CostStatus()  # the ledger of a job with none (models are frozen: shared safely)


def inputs_of(job: JobView, tick: Tick) -> tuple[object, ...] | None:
    """Everything ``accrue`` reads of a job but the time and its ledger, when the job is one whose
    open interval may be extended (running or admitted, priced, every pod in view of its current
    attempt and none ended); None otherwise (its ledger is always recomputed)."""
    st = job.status
    plan = st.plan
    if job.phase not in HOLDING or tick.price is None or plan is None or not plan.pool or not plan.devices:
        return None
    if any(p.attempt != st.attempt or p.finished is not None for p in tick.pods):
        return None
    status = tuple(v for k, v in st.__dict__.items() if k != "cost")
    checkpoint = job.spec.checkpoint if job.spec is not None else None
    held = tuple(sorted(tick.held_prices.items()))
    return (
        job.uid,
        job.team,
        checkpoint,
        status,
        tuple(tick.pods),
        tick.workload,
        tick.price,
        tick.idle,
        tick.failed_price,
        held,
    )


def step(memo: Memo | None, job: JobView, known: CostStatus | None, tick: Tick) -> tuple[CostStatus, Memo | None]:
    """``accrue``, at the cost of the time that moved when nothing else did: when the job's
    inputs are those of the last step (``memo``) and its ledger is the one that step started
    from, gave or ended with, the open interval of its current attempt is extended to ``now``
    (``extend``); anything else (a pod started or ended, a price or idle figure changed, a
    ledger someone else wrote, no memo: a restarted process) is the full ``accrue``. Returns the
    ledger and the memo for the next step."""
    # No ledger yet on either side: the same empty one step after step (one the memo knows).
    stored = job.status.cost
    base = EMPTY if known is None and stored is None else ledger.merge(known, stored, totals=False)
    inputs = inputs_of(job, tick)
    if memo is not None and inputs is not None and tick.price is not None and memo.inputs == inputs:
        # The last step's base: its result stands for it. Its result or what it wrote: itself.
        start = memo.out if base is memo.base else base if base is memo.out or base is memo.final else None
        out = extend(start, job.status.attempt, tick.price, tick.idle, tick.now) if start is not None else None
        if out is None and start is not None and _waiting(start, job, tick):
            out = restamp(start, tick.now)
        if out is not None:
            return out, Memo(inputs, base, out)
    out = accrue(job, known, tick, base=base)
    return out, (Memo(inputs, base, out) if inputs is not None else None)


def _waiting(cost: CostStatus, job: JobView, tick: Tick) -> bool:
    """Whether ``accrue`` charges nothing to the job's current attempt at any time while its inputs
    stay as they are (``inputs_of``: holding devices, every pod in view of the current attempt and
    none ended): no pod of it has started, its ledger holds no interval of it, and it is admitted
    (nothing accrues before a pod runs) or running with its pods in view (none started: nothing
    ran yet). Not for a running job with no pod in view: after the pods' grace its batch Job's
    start or its admission stands in for theirs, so the time matters."""
    st = job.status
    if any(p.started is not None for p in tick.pods):
        return False
    if st.phase is JobPhase.RUNNING and not tick.pods:
        return False
    return not any(a.attempt == st.attempt and a.intervals for a in cost.attempts)


def restamp(cost: CostStatus, now: dt.datetime) -> CostStatus:
    """``cost`` (a ledger ``accrue`` made, or one made from it) accrued again at ``now`` when its
    job's inputs did not move and nothing is charged to its current attempt (``_waiting``): what
    ``accrue`` gives then, since its other steps (the earlier attempts' closes, the unseen and
    forgotten attempts, the forecast) were done by the accrual that made ``cost`` and do nothing
    the second time. An admitted job whose pods have not started was recomputed in full at
    every step."""
    return ledger.with_totals(cost, {"attempts": cost.attempts, "updated": ledger.stamp(now)})


def extend(cost: CostStatus, attempt: int, price: Price, idle: float, now: dt.datetime) -> CostStatus | None:
    """``cost`` (a ledger ``accrue`` made, or one made from it) with ``attempt``'s last interval
    extended to ``now``, at its price and idle figure: what ``accrue`` gives when nothing but the
    time moved (it records only the time no interval covers yet, and an interval that touches the
    last one at the same price and idle figure merges with it). None where that is not all it
    would do: the attempt has no open interval, or another price or idle figure is in force."""
    entry = next((a for a in cost.attempts if a.attempt == attempt), None)
    if entry is None or entry.end is not None or entry.pods_end is not None or not entry.intervals:
        return None
    last = entry.intervals[-1]
    # As ledger.record bounds them.
    usd = min(max(price.usd_per_device_hour, 0.0), 1000.0)
    share = min(max(idle, 0.0), 1.0)
    if last.usd_per_device_hour != usd or last.idle_fraction != share:
        return None
    end = parse_time_strict(last.end)
    if now < end:
        return None
    updated = ledger.stamp(now)
    attempts = cost.attempts
    if now > end:
        grown = ledger.copy(last, {"end": updated})
        entry = ledger.copy(entry, {"intervals": [*entry.intervals[:-1], grown]})
        attempts = [entry if a.attempt == attempt else a for a in cost.attempts]
    return ledger.with_totals(cost, {"attempts": attempts, "updated": updated})


@dataclass(frozen=True, slots=True)
class PoolPrice:
    pool: str
    capacity_type: CapacityType
    price: Price


def _forgotten(
    cost: ledger.Draft,
    job: JobView,
    pods: Sequence[PodView],
    spans: Mapping[int, attempt_held.PodSpan],
    pool_of: Callable[[str], PoolPrice | None],
) -> None:
    """Every earlier attempt whose pods ran and ended in view, though neither the ledger nor a
    failure record holds it (a gang released for its bind timeout on a view that did not show its
    late pod yet), charged from those pods: their span, their devices, their pool."""
    st = job.status
    oldest = min((e.attempt for e in cost.entries), default=None)
    for attempt, sp in spans.items():
        if attempt >= st.attempt or sp.start is None or sp.end is None:
            continue
        if any(e.attempt == attempt for e in cost.entries):
            continue
        if cost.get("folded") is not None and oldest is not None and attempt < oldest:
            continue  # folded with the oldest attempts
        mine = [p for p in pods if p.attempt == attempt]
        found = pool_of(mine[0].pool or "") if mine else None
        if found is None:
            continue
        cost.record(
            ledger.Observation(
                attempt=attempt,
                pool=found.pool,
                capacity_type=found.capacity_type,
                devices=sum(p.devices for p in mine),
                start=sp.start,
                end=sp.end,
                usd_per_device_hour=found.price.usd_per_device_hour,
                on_demand_usd_per_device_hour=found.price.on_demand_usd_per_device_hour,
                team=job.team or None,
            ),
        )
        cost.mark_pods_start(attempt, sp.start)
        cost.mark_pods_end(attempt, sp.end)


def _began(
    cost: ledger.Draft,
    job: JobView,
    span: attempt_held.PodSpan,
    workload: WorkloadView | None,
    *,
    pods_seen: bool,
    now: dt.datetime,
) -> dt.datetime | None:
    """When the current attempt began to be charged: its first pod's start. Where no pod of it
    has a start to read (they were deleted while no operator watched), what the ledger already
    holds of it; else, for an attempt that ran (Running: its pods were seen bound) or ended, its
    batch Job's start, else its admission. None while it is admitted and no pod of it has
    started: nothing accrues before a pod runs."""
    if span.start is not None:
        return span.start
    st = job.status
    entry = next((e for e in cost.entries if e.attempt == st.attempt and e.any_interval()), None)
    if entry is not None:
        return entry.ivs[0].start
    if st.phase is not JobPhase.RUNNING and st.phase not in TERMINAL:
        return None
    if pods_seen:
        return None  # its pods are there and none has started: nothing ran (yet)
    # No pod of it in view: gone (deleted while no operator watched), or not shown yet (the pod
    # watch lagging the job's after a pause). The pods are waited for a while before anything
    # stands in for their times.
    if st.phase in TERMINAL:
        since = completion_end(job, workload)
    else:
        since = parse_time(st.attempt_start_time) or parse_time(st.admitted_time)
    if since is not None and (now - since).total_seconds() < POD_GRACE_SECONDS:
        return None
    if workload is not None and workload.attempt == st.attempt and workload.start_time is not None:
        return workload.start_time
    return parse_time(st.admitted_time)


# Seconds after a held pod of ours ended past which it is released though the ledger does not
# hold its times (no entry can come: its pool is gone, its attempt had no plan): the finalizer
# must never keep an object for good.
RELEASE_AFTER_SECONDS = 600.0


def releasable(cost: CostStatus | None, pods: Sequence[PodView], now: dt.datetime, *, job_gone: bool) -> list[PodView]:
    """The pods of one job (``pods``; ``cost``: its ledger as its status holds it, written and
    shown) whose ``vocabulary.FINALIZER_LEDGER`` may go: ended (or being deleted) and either
    never started, or of a job that is gone (its deletion closed its ledger), or of an attempt
    whose entry holds its pods' own start and end (or was folded), or ended long ago."""
    out: list[PodView] = []
    for p in pods:
        if not p.held or p.finished is None:
            continue  # runs on: its end is still to be read
        if job_gone or p.started is None or p.attempt is None:
            out.append(p)
            continue
        entry = next((a for a in cost.attempts if a.attempt == p.attempt), None) if cost is not None else None
        if entry is not None and entry.pods_start is not None and entry.pods_end is not None:
            out.append(p)
        elif (
            entry is None
            and cost is not None
            and cost.folded is not None
            and cost.attempts
            and (p.attempt < min(a.attempt for a in cost.attempts))
        ):
            out.append(p)  # folded into the ledger's totals with the oldest attempts
        elif (now - p.finished).total_seconds() > RELEASE_AFTER_SECONDS:
            out.append(p)
    return out


def _reported_lost(job: JobView, attempt: int) -> float | None:
    """The lost device-seconds the scheduler recorded for a preempted ``attempt`` (from its last
    complete checkpoint, the spot-resume work's ``lastFailure.lostDeviceSeconds``), if any."""
    failure = next((f for f in attempt_held.failures(job.status) if f.attempt == attempt), None)
    return failure.lost_device_seconds if failure is not None else None


def _resume_pending(job: JobView) -> bool:
    """Whether the current attempt's resume point is still to be looked up in S3 (as
    ``reconcile.job.resume.needs_resume``): that lookup finds the checkpoint the previous attempt's
    lost work runs from, which the status does not hold before (other checkpoints are in
    ``status.lastCheckpoint`` already)."""
    st = job.status
    ckpt = job.spec.checkpoint if job.spec is not None else None
    pending = st.attempt > 0 and (st.resume is None or st.resume.attempt != st.attempt)
    return pending and ckpt is not None and ckpt.scheme == "s3"


def _checkpoint(job: JobView) -> dt.datetime | None:
    checkpoint = job.status.last_checkpoint
    return parse_time(checkpoint.time) if checkpoint is not None else None


def at_deletion(cost: CostStatus, end: dt.datetime) -> CostStatus:
    """A deleted job's ledger with every open attempt closed at ``end`` (when the operator saw the
    deletion): the time since the last accrual is charged at the attempt's last price."""
    draft = ledger.Draft.of(cost)
    for entry in cost.attempts:
        if entry.end is None:
            _close(draft, entry.attempt, end, False, None, reported=None)
    return draft.build({})


def _close(
    cost: ledger.Draft,
    attempt: int,
    end: dt.datetime | None,
    preempted: bool,
    checkpoint: dt.datetime | None,
    *,
    reported: float | None,
) -> None:
    entry = cost.find(attempt)
    if entry is None or entry.get("end") is not None:
        return
    ivs = entry.ivs
    if end is None:  # ended without a recorded time (a released gang): at what was accrued
        end = ivs[-1].end if ivs else None
        if end is None:
            return
    elif ivs and ivs[-1].end < end:
        # The tail between the last tick and the end, at the attempt's last price.
        last = ivs[-1]
        cost.record(
            ledger.Observation(
                attempt,
                entry.get("pool"),
                entry.get("capacity_type"),
                entry.get("devices"),
                ivs[0].start,
                end,
                last.price,
                entry.get("on_demand_usd_per_device_hour"),
                last.idle,
            ),
        )
    cost.close(
        ledger.AttemptEnd(
            attempt,
            end,
            preempted=preempted,
            checkpoint=checkpoint,
            reported_lost_device_seconds=reported,
        ),
    )


# --- teams and budgets ----------------------------------------------------------------------------


def over_budget(
    team: str, spends: Mapping[str, Sequence[TeamSpend]], current: OverBudget | None, now: dt.datetime
) -> OverBudget | None:
    """The budget a running job of ``team`` is over (the most used), keeping ``since``."""
    worst: tuple[float, str, TeamSpend] | None = None
    for policy, items in sorted(spends.items()):
        for s in items:
            if s.team == team and s.spent_usd >= s.limit_usd:
                used = s.spent_usd / s.limit_usd if s.limit_usd else float("inf")
                if worst is None or used > worst[0]:
                    worst = (used, policy, s)
    if worst is None:
        return None
    _, policy, s = worst
    since = current.since if current is not None and current.policy == policy else stamp_exact(now)
    return OverBudget(policy=policy, period=s.period, spent_usd=s.spent_usd, limit_usd=s.limit_usd, since=since)


def by_pool(cost: CostStatus) -> dict[tuple[str, CapacityType], ledger.Figures]:
    """The job's figures per (pool, capacity type), for the metrics; folded attempts under ``""``."""
    out: dict[tuple[str, CapacityType], ledger.Figures] = {}
    for entry in cost.attempts:
        t = ledger.Figures()
        for seg in ledger.segments(entry):
            t = ledger.add(t, seg.totals())
        key = (entry.pool, entry.capacity_type)
        out[key] = ledger.add(out.get(key, ledger.Figures()), t)
    if cost.folded is not None:
        key = ("", CapacityType.ON_DEMAND)
        out[key] = ledger.add(out.get(key, ledger.Figures()), ledger.Figures.of(cost.folded))
    return out
