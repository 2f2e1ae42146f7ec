"""Fragmentation that blocks a gang: which checkpointed jobs to move where so that it fits.

A pending gang of ``nodes`` × ``per_node`` devices may wait although the pool has enough free
devices in total, because they are scattered over nodes. :func:`propose` picks the nodes that are
cheapest to clear (the fewest devices to move) and places what it moves on the other nodes (best
fit), as a :class:`MoveProposal` with reasons. Only single-node jobs that checkpoint and have a
checkpoint to resume from are moved, never one that is about to finish, and never more than
``max_moves`` jobs for one gang. Pure: the inputs are the snapshot's values.

This phase proposes only (a condition and an event on the waiting job); performing the moves
needs the policy's consent (AcceleratorPolicy, not there yet) and checkpoint-resume.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from accel_operator.reconcile import actions as act
from accel_operator.reconcile.decide import Cond, Decision
from accel_operator.reconcile.snapshot import HOLDING, Gang, JobKey, JobView, Snapshot

CONSOLIDATION = "Consolidation"  # the condition on a gang that fragmentation keeps waiting


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


def inputs(
    snapshot: Snapshot, pool: str, now: dt.datetime, *, finish_margin: float = 900.0
) -> tuple[dict[str, int], list[Occupant]]:
    """Each usable node's free devices in ``pool`` and the jobs' pods on them, from the snapshot."""
    view = snapshot.pools.get(pool)
    if view is None:
        return {}, []
    nodes = {n.name: n for n in snapshot.nodes.values() if view.owns(n) and n.usable}
    free = {name: max(0, n.devices - snapshot.node_used.get(name, 0)) for name, n in nodes.items()}
    occupants: list[Occupant] = []
    for key, job in snapshot.jobs.items():
        if job.phase not in HOLDING or job.spec is None:
            continue
        res = snapshot.reservations.get(key)
        if res is None or res.pool != pool:
            continue
        why = ""
        if job.spec.checkpoint is None:
            why = "no checkpoint"
        elif job.status.last_checkpoint is None:
            why = "no checkpoint written yet"
        elif res.nodes > 1:
            why = "a multi-node gang"
        elif res.expected_end is not None and (res.expected_end - now).total_seconds() < finish_margin:
            why = "about to finish"
        for p in snapshot.pods_by_job.get(key, ()):
            if p.attempt == job.status.attempt and p.node in nodes and not p.ended:
                occupants.append(Occupant(key, p.node, p.devices, not why, f"{key[1]}: {why}" if why else ""))
    return free, occupants


def amend(decision: Decision, job: JobView, snapshot: Snapshot, now: dt.datetime) -> Decision:
    """A waiting gang's decision, with a consolidation proposal when the free devices of its pool
    would be enough but are scattered (a condition, and an event when the proposal is new)."""
    from dataclasses import replace

    if decision.blocks is None or decision.blocks[1].job != job.key:
        return decision
    pool, blocked = decision.blocks
    cap = snapshot.capacity.get(pool)
    if cap is None or cap.free_devices < blocked.gang.devices or cap.fits(blocked.gang):
        return decision
    free, occupants = inputs(snapshot, pool, now)
    proposal = propose(pool, blocked.gang, free, occupants)
    reason = "ConsolidationProposed" if proposal.feasible else "NoConsolidation"
    message = proposal.reason if len(proposal.reason) <= 1000 else proposal.reason[:999] + "…"
    cond = Cond(CONSOLIDATION, proposal.feasible, reason, message)
    before = next((c for c in job.status.conditions if c.type == CONSOLIDATION), None)
    actions = decision.actions
    if proposal.feasible and (before is None or before.message != message):
        actions = (*actions, act.RecordEvent("Normal", reason, f"fragmented pool {pool}: {message}"[:1000]))
    return replace(decision, conditions=(*decision.conditions, cond), actions=actions)
