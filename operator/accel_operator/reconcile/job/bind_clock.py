"""The bind clock of an admitted gang: how long it has waited for what it controls.

An admitted gang holds its devices until every pod has a node; one that cannot get them is
released (its workload deleted, the job planned again), so no partial gang holds devices for
ever. The clock used to start at admission. On a busy control plane that measured the Job
controller and the scheduler, not the gang: at 500 nodes and 5,000 jobs, 808 gangs were released
whose pods had not been created or looked at yet, and each release deleted a Job and admitted
a new attempt — more work for the control plane that was already behind.

Now the clock runs from the moment the scheduler first found one of the attempt's unbound pods
unschedulable (its ``PodScheduled=False`` condition with reason ``Unschedulable``, which
kube-scheduler sets after it tried every node and keeps, with its transition time, while it
retries). That is what a cordoned node, a node that is gone, a taint the pods do not tolerate or
an autoscaler that brings no node look like, and the gang is released ``timeout`` seconds after.
Pods that do not exist yet, or that the scheduler has not tried, stop no clock: the control plane
is behind, and releasing would only add work. A longer bound, :data:`STALL_FACTOR` times the
timeout from admission, still releases a gang whose pods never come at all (a quota or a webhook
refusing them, a scheduler that is down), so the guarantee holds.

One case needs no clock: the nodes the gang was admitted onto are gone (deleted between the
admission and the binding) and the pool, which no autoscaler grows, no longer has enough nodes
that could hold a pod of the gang. Nothing can bind then, and waiting for kube-scheduler's
verdict and the timeout kept the reservation off the pool for minutes: :func:`nodes_gone`
releases it at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from accel_operator.reconcile.common.snapshot import NodeView, PodView, PoolView

# From admission: a gang whose pods were neither placed nor found unschedulable this many
# timeouts later is released anyway (with the default 120 s, after 10 minutes).
STALL_FACTOR = 5.0


@dataclass(frozen=True, slots=True)
class Expired:
    """Why a gang's bind clock ran out (a sentence for the condition and the event)."""

    message: str


def expired(
    pods: Iterable[PodView],
    nodes: int,
    admitted: dt.datetime,
    now: dt.datetime,
    timeout: float,
) -> Expired | None:
    """Whether the admitted gang of ``nodes`` pods (``pods``: this attempt's) must be released."""
    pods = tuple(pods)
    bound = sum(1 for p in pods if p.node and not p.ended)
    waiting = [p.unschedulable_since for p in pods if not p.node and not p.ended and p.unschedulable_since]
    if waiting:
        since = min(waiting)
        if (now - since).total_seconds() > timeout:
            return Expired(
                f"only {bound} of {nodes} pod(s) got a node: the scheduler found none for "
                f"{(now - since).total_seconds():.0f}s (limit {timeout:.0f}s)"
            )
        return None
    stall = timeout * STALL_FACTOR
    if (now - admitted).total_seconds() > stall:
        return Expired(
            f"only {bound} of {nodes} pod(s) got a node within {stall:.0f}s of admission "
            f"({len(pods)} of {nodes} pod(s) created)"
        )
    return None


def nodes_gone(pool: PoolView | None, nodes: Iterable[NodeView], gang: int, per_node: int) -> Expired | None:
    """Whether the pool (not autoscaled) has fewer nodes that could hold ``per_node`` devices than
    the gang's ``gang`` pods: its nodes went since the admission, and nothing can bind. Cordoned
    or not-ready nodes still count (they may come back, and the clock above covers them); only
    nodes deleted or being deleted do not."""
    if pool is None or pool.autoscaled:
        return None
    left = sum(1 for n in nodes if not n.deleting and n.devices >= per_node and pool.owns(n))
    if left >= gang:
        return None
    return Expired(
        f"pool {pool.name} has {left} node(s) left that can hold {per_node} device(s), of the {gang} "
        "the gang needs (nodes gone since the admission)"
    )
