"""Fragmentation that blocks a gang: which checkpointed jobs to move where so that it fits.

A pending gang of ``nodes`` × ``per_node`` devices may wait although the pool has enough free
devices in total, because they are scattered over nodes. :func:`propose` picks the nodes that are
cheapest to clear (the fewest devices to move) and places what it moves on the other nodes (best
fit), as a :class:`MoveProposal` with reasons. Only single-node jobs that checkpoint and have a
checkpoint to resume from are moved, never one that is about to finish, and never more than
``max_moves`` jobs for one gang. Pure: the inputs are the snapshot's values.

Performing a proposal needs the consent of the AcceleratorPolicies (``spec.consolidation``,
folded by :func:`rules_from`); without it the waiting job only carries the proposal. Carrying it
out, a move at a time and each step a pure decision with reasons:

1. the waiting gang's decision (:func:`amend`) returns :class:`Order` values, within the policies'
   hourly rate; the scheduler writes each moved job's marker (:func:`start`:
   ``status.health.consolidation``, an event ``Consolidating``, the checkpoint-now request);
2. the moved job's own decisions (:func:`carry`) wait for a checkpoint newer than the request (at
   most ``checkpoint_grace``), then end the attempt through the same move as a failing device
   (``health``): the next attempt resumes from the latest complete checkpoint, and its workload is
   kept off the nodes the gang is to get (:func:`avoid_nodes`), so they are not refilled by it;
   the move is abandoned when the gang no longer waits;
3. while moves made for a gang are under way (or just done: ``settle``), the gang proposes no
   more.

Everything that counts is in the jobs' status (the marker stays after the move): the rate limit
(moves asked in the last hour, cluster-wide), the rule that a moved job is not moved again for
``cooldown``, and the moves in flight, so a restarted operator neither resets nor repeats them.
"""

from __future__ import annotations

import datetime as dt
from collections import ChainMap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType

from accel_api import durations
from accel_api.durations import parse_time
from accel_api.durations import stamp as _ts
from accel_api.enums import JobPhase
from accel_api.job import ConsolidationMove, HealthStatus
from accel_api.policy import AcceleratorPolicy
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import checkpoints
from accel_operator.reconcile.common.decision import Cond, Decision, StatusPatch
from accel_operator.reconcile.common.decision import clip as _clip
from accel_operator.reconcile.common.snapshot import HOLDING, TERMINAL, Gang, JobKey, JobView, NodeView, Snapshot
from accel_operator.reconcile.nodes import health

# The condition on a gang that fragmentation keeps waiting, and on a job being moved for one.
CONSOLIDATION = "Consolidation"
EVENT = "Consolidating"  # the event on the moved job and on the waiting one


class Stage(StrEnum):
    """A consolidation move's steps (a metrics label)."""

    REQUESTED = "requested"  # checkpoint-now asked of the job to move
    MOVED = "moved"  # its attempt ended; the next one resumes elsewhere
    ABANDONED = "abandoned"  # the gang stopped waiting first: the job keeps running


@dataclass(frozen=True, slots=True)
class Rules:
    """What the policies allow (:func:`rules_from`) and the operator's timings."""

    allowed: bool = False
    max_moves_per_hour: int = 2
    min_remaining: float = 900.0  # seconds: a job expected to end sooner is not moved
    max_moves: int = 2  # jobs moved for one gang
    checkpoint_grace: float = 120.0  # how long a moved job gets to checkpoint
    settle: float = 300.0  # a gang proposes no more moves this long after one made for it
    cooldown: float = 6 * 3600.0  # a job moved for a gang is not moved again within this
    window: float = 3600.0  # the rate limit's window
    source: str = ""  # the policies that said so (for messages)


def rules_from(
    policies: Iterable[AcceleratorPolicy], *, checkpoint_grace: float = 120.0, settle: float = 300.0
) -> Rules:
    """The policies' ``spec.consolidation`` combined strictly: allowed only when every policy
    that says something allows it; the lowest hourly rate and the longest remaining time apply."""
    said = [(p.metadata.name or "?", p.spec.consolidation) for p in policies if p.spec.consolidation is not None]
    if not said:
        return Rules(checkpoint_grace=checkpoint_grace, settle=settle)
    return Rules(
        allowed=all(c.allowed for _, c in said),
        max_moves_per_hour=min(c.max_moves_per_hour for _, c in said),
        min_remaining=max(c.min_remaining_minutes for _, c in said) * 60.0,
        checkpoint_grace=checkpoint_grace,
        settle=settle,
        source=", ".join(sorted(n for n, _ in said))[:200],
    )


def _name(key: JobKey) -> str:
    return f"{key[0]}/{key[1]}"


@dataclass(frozen=True, slots=True)
class Occupant:
    """Devices one job's pod holds on one node, and whether the job may be moved."""

    job: JobKey
    node: str
    devices: int
    movable: bool
    why_not: str = ""


@dataclass(frozen=True, slots=True)
class Move:
    job: JobKey
    from_node: str
    to_node: str
    devices: int

    def describe(self) -> str:
        return f"{self.job[0]}/{self.job[1]} ({self.devices} device(s)) from {self.from_node} to {self.to_node}"


@dataclass(frozen=True, slots=True)
class Order:
    """One move to carry out for ``gang``, whose pods are to get ``targets``."""

    move: Move
    gang: JobKey
    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MoveProposal:
    pool: str
    gang: Gang
    feasible: bool
    moves: tuple[Move, ...] = ()
    targets: tuple[str, ...] = ()  # the nodes the gang would get
    reason: str = ""


def propose(
    pool: str,
    gang: Gang,
    free: Mapping[str, int],
    occupants: Sequence[Occupant],
    *,
    max_moves: int = 2,
) -> MoveProposal:
    """The fewest moves (at most ``max_moves``) that give ``gang`` its nodes; ``free`` is each
    usable node's free devices."""
    if sum(1 for f in free.values() if f >= gang.per_node) >= gang.nodes:
        return MoveProposal(pool, gang, True, reason="the gang fits without moving anything")
    total = sum(free.values())
    if total < gang.devices:
        return MoveProposal(pool, gang, False, reason=f"only {total} device(s) free in {pool}: not fragmentation")
    by_node: dict[str, list[Occupant]] = {}
    for o in occupants:
        if o.node in free:
            by_node.setdefault(o.node, []).append(o)

    def clearing(node: str) -> tuple[Occupant, ...] | None:
        """The movable occupants to take off ``node`` (fewest devices first), or None."""
        deficit = gang.per_node - free[node]
        if deficit <= 0:
            return ()
        taken: list[Occupant] = []
        for o in sorted((o for o in by_node.get(node, ()) if o.movable), key=lambda o: (o.devices, o.job)):
            if deficit <= 0:
                break
            taken.append(o)
            deficit -= o.devices
        return tuple(taken) if deficit <= 0 else None

    plans = []
    for node in free:
        clear = clearing(node)
        if clear is not None:
            plans.append((sum(o.devices for o in clear), len(clear), node, clear))
    plans.sort()
    if len(plans) < gang.nodes:
        stuck = sorted({o.why_not for o in occupants if not o.movable and o.why_not})
        why = f"; not movable: {', '.join(stuck)[:300]}" if stuck else ""
        return MoveProposal(pool, gang, False, reason=f"no {gang.nodes} node(s) of {pool} can be cleared{why}")
    chosen = plans[: gang.nodes]
    targets = tuple(sorted(node for _, _, node, _ in chosen))
    room = {n: f for n, f in free.items() if n not in targets}
    moves: list[Move] = []
    for _, _, node, clear in chosen:
        for o in clear:
            fitting = [n for n, f in room.items() if f >= o.devices]
            if not fitting:
                return MoveProposal(pool, gang, False, reason=f"nowhere to put {o.job[0]}/{o.job[1]} in {pool}")
            to = min(fitting, key=lambda n: (room[n], n))  # best fit
            room[to] -= o.devices
            moves.append(Move(o.job, node, to, o.devices))
    if len({m.job for m in moves}) > max_moves:
        return MoveProposal(
            pool, gang, False, reason=f"{len(moves)} job(s) would have to move; at most {max_moves} may"
        )
    text = "; ".join(m.describe() for m in moves)
    return MoveProposal(
        pool,
        gang,
        True,
        tuple(moves),
        targets,
        reason=f"move {text}: then {', '.join(targets)} have {gang.per_node} free device(s) each",
    )


# --- the markers in the jobs' status ------------------------------------------------------------


def marker(job: JobView) -> ConsolidationMove | None:
    h = job.status.health
    return h.consolidation if h is not None else None


def _gang_key(m: ConsolidationMove) -> JobKey:
    ns, _, name = m.gang.partition("/")
    return (ns, name)


def marked_for(job: JobView) -> JobKey | None:
    """The gang that ``job``'s consolidation marker was made for (None: no marker)."""
    m = marker(job)
    return _gang_key(m) if m is not None else None


def _marked_jobs(snapshot: Snapshot, gang: JobKey | None = None) -> Iterable[JobView]:
    """The jobs that may carry a marker (made for ``gang``; None: for any gang): from the
    snapshot's index when it keeps one, else every job."""
    if snapshot.markers is None:
        return snapshot.jobs.values()
    keys = snapshot.markers.get(gang, frozenset()) if gang is not None else _union(snapshot.markers.values())
    return [job for k in sorted(keys) if (job := snapshot.jobs.get(k)) is not None]


def _union(sets: Iterable[frozenset[JobKey]]) -> set[JobKey]:
    out: set[JobKey] = set()
    for s in sets:
        out |= s
    return out


def moves_in_window(snapshot: Snapshot, now: dt.datetime, window: float = 3600.0) -> int:
    """Moves asked in the last ``window`` seconds, cluster-wide (each job keeps its latest; a job
    is not moved twice within ``Rules.cooldown``, which is longer than the window)."""
    count = 0
    for job in _marked_jobs(snapshot):
        m = marker(job)
        asked = parse_time(m.requested_time) if m is not None else None
        if asked is not None and (now - asked).total_seconds() < window:
            count += 1
    return count


def in_flight(snapshot: Snapshot, gang: JobKey, now: dt.datetime, settle: float) -> list[str]:
    """The moves made for ``gang`` that are under way, or carried out less than ``settle`` ago."""
    out = []
    for job in _marked_jobs(snapshot, gang):
        m = marker(job)
        if m is None or _gang_key(m) != gang:
            continue
        if m.state == "requested" and m.attempt == job.status.attempt and job.phase in HOLDING:
            out.append(f"{_name(job.key)} (checkpoint asked at {m.requested_time})")
        elif (
            m.state == "moved"
            and (ended := parse_time(m.ended_time)) is not None
            and (now - ended).total_seconds() < settle
        ):
            out.append(f"{_name(job.key)} (moved at {m.ended_time})")
    return sorted(out)


def avoid_nodes(job: JobView) -> tuple[str, ...]:
    """The nodes the attempt after a consolidation move is kept off (the gang's), else ()."""
    m = marker(job)
    if m is None or m.state != "moved" or m.attempt + 1 != job.status.attempt:
        return ()
    return tuple(m.targets)


# --- who may move ------------------------------------------------------------------------------


def _why_not(job: JobView, snapshot: Snapshot, now: dt.datetime, rules: Rules) -> str:
    """Why ``job`` (holding devices in a pool) may not be moved now, or "" when it may."""
    assert job.spec is not None
    st = job.status
    res = snapshot.reservations.get(job.key)
    m = marker(job)
    asked = parse_time(m.requested_time) if m is not None else None
    if job.spec.checkpoint is None:
        return "no checkpoint"
    if st.last_checkpoint is None:
        return "no checkpoint written yet"
    if res is not None and res.nodes > 1:
        return "a multi-node gang"
    if job.phase is not JobPhase.RUNNING:
        return "not running yet"
    if m is not None and m.state == "requested" and m.attempt == st.attempt:
        return f"already moving for {m.gang}"
    if asked is not None and (now - asked).total_seconds() < rules.cooldown:
        return f"moved for consolidation at {m.requested_time if m else ''}"
    if st.health is not None and st.health.moves >= health.Rules().max_moves:
        return f"moved {st.health.moves} times already"
    if (
        res is not None
        and res.expected_end is not None
        and (res.expected_end - now).total_seconds() < rules.min_remaining
    ):
        return "about to finish"
    admitted = parse_time(st.admitted_time)
    if job.spec.deadline and admitted is not None:
        left = (admitted - now).total_seconds() + durations.parse_seconds(job.spec.deadline)
        if left < rules.min_remaining:
            return "its deadline is near"
    return ""


def inputs(
    snapshot: Snapshot, pool: str, now: dt.datetime, rules: Rules | None = None
) -> tuple[dict[str, int], list[Occupant]]:
    """Each usable node's free devices in ``pool`` and the jobs' pods on them, from the snapshot."""
    rules = rules or Rules()
    view = snapshot.pools.get(pool)
    if view is None:
        return {}, []
    if snapshot.pool_nodes is None:
        members: Iterable[NodeView] = snapshot.nodes.values()
    else:
        members = [n for name in sorted(snapshot.pool_nodes.get(pool, ())) if (n := snapshot.nodes.get(name))]
    nodes = {n.name: n for n in members if n.usable and view.owns(n)}
    free = {name: max(0, n.devices - snapshot.node_used.get(name, 0)) for name, n in nodes.items()}
    occupants: list[Occupant] = []
    # The jobs holding devices in the pool (a job admitted earlier in this pass is not among
    # them, nor among the holding ones without the index: its view waits, and no pod is bound).
    held = snapshot.jobs if snapshot.holders is None else sorted(snapshot.holders.get(pool, ()))
    for key in held:
        job = snapshot.jobs.get(key)
        if job is None or job.phase not in HOLDING or job.spec is None:
            continue
        res = snapshot.reservations.get(key)
        if res is None or res.pool != pool:
            continue
        why = _why_not(job, snapshot, now, rules)
        for p in snapshot.pods_by_job.get(key, ()):
            if p.attempt == job.status.attempt and p.node in nodes and not p.ended:
                occupants.append(Occupant(key, p.node, p.devices, not why, f"{key[1]}: {why}" if why else ""))
    return free, occupants


# --- the waiting gang --------------------------------------------------------------------------


def amend(
    decision: Decision, job: JobView, snapshot: Snapshot, now: dt.datetime, rules: Rules | None = None
) -> tuple[Decision, tuple[Order, ...]]:
    """A waiting gang's decision, with a consolidation proposal when the free devices of its pool
    would be enough but are scattered (a condition, and an event when it is new), and the moves to
    start when the policies allow them and the hourly rate has room."""
    rules = rules or Rules()
    if decision.blocks is None or decision.blocks[1].job != job.key:
        return decision, ()
    pool, blocked = decision.blocks
    cap = snapshot.capacity.get(pool)
    if cap is None or cap.free_devices < blocked.gang.devices or cap.fits(blocked.gang):
        # Not fragmentation (now). Only a gang that ordered moves looks for them (a scan of the jobs).
        before = next((c for c in job.status.conditions if c.type == CONSOLIDATION), None)
        ordered = before is not None and before.reason == EVENT and cap is not None
        waiting = in_flight(snapshot, job.key, now, rules.settle) if ordered else []
        if not waiting:
            return decision, ()
        # The moved jobs' devices are not free yet: say what the gang waits for.
        message = _clip(f"waiting for the moves made for it: {', '.join(waiting)}")
        return _with(decision, job, Cond(CONSOLIDATION, True, EVENT, message), None), ()
    waiting = in_flight(snapshot, job.key, now, rules.settle)
    if waiting:
        message = _clip(f"waiting for the moves made for it: {', '.join(waiting)}")
        return _with(decision, job, Cond(CONSOLIDATION, True, EVENT, message), None), ()
    free, occupants = inputs(snapshot, pool, now, rules)
    proposal = propose(pool, blocked.gang, free, occupants, max_moves=rules.max_moves)
    if not proposal.feasible:
        return _with(decision, job, Cond(CONSOLIDATION, False, "NoConsolidation", _clip(proposal.reason)), None), ()
    if not rules.allowed:
        why = (
            f"policy {rules.source} does not allow it" if rules.source else "no AcceleratorPolicy allows it"
        ) + " (spec.consolidation.allowed)"
        message = _clip(f"{proposal.reason}; not performed: {why}")
        cond = Cond(CONSOLIDATION, True, "ConsolidationProposed", message)
        return _with(decision, job, cond, f"fragmented pool {pool}: {message}"), ()
    used = moves_in_window(snapshot, now, rules.window)
    jobs = {m.job for m in proposal.moves}
    if used + len(jobs) > rules.max_moves_per_hour:
        message = _clip(
            f"{proposal.reason}; not performed yet: {used} move(s) in the last hour, at most "
            f"{rules.max_moves_per_hour} (policy {rules.source}, spec.consolidation.maxMovesPerHour)"
        )
        cond = Cond(CONSOLIDATION, True, "ConsolidationRateLimited", message)
        return _with(decision, job, cond, f"fragmented pool {pool}: {message}"), ()
    orders = tuple(Order(m, job.key, proposal.targets) for m in proposal.moves)
    message = _clip(f"consolidating {pool} (policy {rules.source}): {proposal.reason}")
    return _with(decision, job, Cond(CONSOLIDATION, True, EVENT, message), message, force=True), orders


def _with(decision: Decision, job: JobView, cond: Cond, event: str | None, *, force: bool = False) -> Decision:
    """``decision`` with ``cond``, and ``event`` when the condition is new (or ``force``)."""
    before = next((c for c in job.status.conditions if c.type == CONSOLIDATION), None)
    actions = decision.actions
    fresh = before is None or before.reason != cond.reason or (before.message or "") != cond.message
    if event is not None and (force or fresh):
        type_ = "Normal"
        reason = EVENT if cond.reason == EVENT else cond.reason
        actions = (*actions, act.RecordEvent(type_, reason, _clip(event)))
    return replace(decision, conditions=(*decision.conditions, cond), actions=actions)


# --- the job that moves ------------------------------------------------------------------------


def _health_of(decision: Decision, job: JobView) -> HealthStatus:
    """The health markers as the decision leaves them (health.amend may have changed some)."""
    return decision.status.health or job.status.health or HealthStatus()


def _conditions(job: JobView) -> tuple[Cond, ...]:
    return tuple(
        Cond(c.type, c.status == "True", c.reason or "", c.message or "")
        for c in job.status.conditions
        if c.type != CONSOLIDATION
    )


def start(job: JobView, order: Order, snapshot: Snapshot, now: dt.datetime, rules: Rules) -> Decision | None:
    """The moved job's first step: its marker, a ``Consolidating`` event and the checkpoint-now
    request. None when it no longer qualifies (it changed since the proposal)."""
    if job.phase is not JobPhase.RUNNING or job.spec is None or _why_not(job, snapshot, now, rules):
        return None
    pods = tuple(
        (p.namespace, p.name)
        for p in snapshot.pods_by_job.get(job.key, ())
        if p.attempt == job.status.attempt and p.node and not p.ended
    )
    m = ConsolidationMove(
        gang=_name(order.gang),
        targets=list(order.targets),
        attempt=job.status.attempt,
        requested_time=_ts(now),
        checkpoint_step=checkpoints.step_at_request(job.status),
    )
    message = _clip(
        f"moving to make room for {_name(order.gang)}, which needs whole nodes ({', '.join(order.targets)}): "
        f"checkpoint requested; attempt {job.status.attempt} ends after the checkpoint (at most "
        f"{rules.checkpoint_grace:.0f}s) and the job resumes from it off those nodes (planned: {order.move.describe()})"
    )
    new_health = (job.status.health or HealthStatus()).model_copy(update={"consolidation": m})
    return Decision(
        phase=job.phase,
        conditions=(*_conditions(job), Cond(CONSOLIDATION, True, "Moving", message)),
        status=StatusPatch(health=new_health),
        actions=(
            act.RecordEvent("Normal", EVENT, message),
            act.RequestCheckpoint(pods, _ts(now), "consolidation"),
        ),
        reason=message,
    )


def _saved_since(job: JobView, m: ConsolidationMove) -> bool:
    """Whether the job wrote a checkpoint after the request (:mod:`checkpoint_since`: by step)."""
    return checkpoints.written_since(job.status.last_checkpoint, m.checkpoint_step, parse_time(m.requested_time))


def carry(
    decision: Decision, job: JobView, snapshot: Snapshot, now: dt.datetime, rules: Rules
) -> tuple[Decision, Stage | None]:
    """A running job asked to move for a gang: after a checkpoint newer than the request (or the
    grace), its attempt ends and the next resumes from the latest complete checkpoint; abandoned
    when the gang stopped waiting. Other decisions pass unchanged."""
    m = marker(job)
    st = job.status
    if (
        m is None
        or m.state != "requested"
        or m.attempt != st.attempt
        or job.phase is not JobPhase.RUNNING
        or decision.phase is not JobPhase.RUNNING
    ):
        return decision, None
    h = _health_of(decision, job)
    gang_key = _gang_key(m)
    gang = snapshot.jobs.get(gang_key)
    if gang is None or gang.deleting or gang.phase in HOLDING or gang.phase in TERMINAL:
        done = m.model_copy(update={"state": "abandoned", "ended_time": _ts(now)})
        message = _clip(f"not moved: {m.gang} no longer waits; attempt {st.attempt} goes on")
        return (
            replace(
                decision,
                conditions=(*decision.conditions, Cond(CONSOLIDATION, False, "Abandoned", message)),
                status=replace(decision.status, health=h.model_copy(update={"consolidation": done})),
                actions=(*decision.actions, act.RecordEvent("Normal", EVENT, message)),
            ),
            Stage.ABANDONED,
        )
    asked = parse_time(m.requested_time) or now
    saved = _saved_since(job, m)
    if saved or (now - asked).total_seconds() >= rules.checkpoint_grace:
        done = m.model_copy(update={"state": "moved", "ended_time": _ts(now)})
        point = (
            "the checkpoint it just wrote"
            if saved
            else f"its latest complete checkpoint (none newer within {rules.checkpoint_grace:.0f}s)"
        )
        why = f"consolidation: making room for {m.gang} on {', '.join(m.targets)}; resumes from {point}"
        moved, _ = health.move(
            job,
            h.model_copy(update={"consolidation": done}),
            health.MoveReason.CONSOLIDATION,
            why,
            from_checkpoint=True,
        )
        event = act.RecordEvent(
            "Normal",
            EVENT,
            _clip(f"attempt {st.attempt} ended to make room for {m.gang}; the next one avoids {', '.join(m.targets)}"),
        )
        return replace(moved, actions=(*moved.actions, event)), Stage.MOVED
    message = _clip(
        f"moving for {m.gang}: waiting for a checkpoint newer than the request at {m.requested_time} "
        f"(at most {rules.checkpoint_grace:.0f}s)"
    )
    actions = decision.actions
    pods = [p for p in snapshot.pods_by_job.get(job.key, ()) if p.attempt == st.attempt and p.node and not p.ended]
    if any(p.checkpoint_now != m.requested_time for p in pods):
        # The request did not reach every pod (a crash between the status write and the annotation).
        actions = (
            *actions,
            act.RequestCheckpoint(tuple((p.namespace, p.name) for p in pods), m.requested_time, "consolidation"),
        )
    return replace(
        decision, conditions=(*decision.conditions, Cond(CONSOLIDATION, True, "Moving", message)), actions=actions
    ), None


def with_started(snapshot: Snapshot, job: JobView, decision: Decision) -> Snapshot:
    """``snapshot`` with ``job``'s marker as :func:`start` wrote it, so that the rest of the pass
    counts the move (the rate limit, the moves in flight)."""
    status = job.status.model_copy(update={"health": decision.status.health or HealthStatus()})
    moved = replace(job, status=status)
    # Layered over the pass's jobs, not a copy of them (every job of the cluster per move).
    jobs = ChainMap({job.key: moved}, snapshot.jobs)  # type: ignore[arg-type]
    if snapshot.markers is None:
        return replace(snapshot, jobs=MappingProxyType(jobs))
    markers = {g: keys - {job.key} for g, keys in snapshot.markers.items()}
    gang = marked_for(moved)
    if gang is not None:
        markers[gang] = markers.get(gang, frozenset()) | {job.key}
    return replace(snapshot, jobs=MappingProxyType(jobs), markers=MappingProxyType(markers))
