"""AcceleratorPolicies and namespaces' team labels: the indexes that admission and the reconciler read.

Two kopf indexes, shared by the admission webhook and the scheduling loop (no LIST per job):
``policies`` (name -> AcceleratorPolicy, or a ``planning.policy.BrokenPolicy`` when the stored
object does not parse: it fails closed, holding every job it would govern) and
``namespace_teams`` (namespace -> its ``vocabulary.LABEL_NAMESPACE_TEAM`` label, or None).
With a scheduler, a policy change re-plans every job (pool grants and device caps filter the
planner's candidates) and a namespace change re-decides that namespace's jobs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import kopf

from accel_api import durations, registry
from accel_api import vocabulary as v
from accel_api.policy import AcceleratorPolicy
from accel_operator.adapters.kube import jobs
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.engine.scheduler import Scheduler
from accel_operator.planning import policy
from accel_operator.reconcile.common import policy_inputs


async def _say_validity(
    name: str, body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, api: Callable[[], Any] | None
) -> None:
    """The policy's Valid condition (written with kopf's patch after the handler) and an event, when
    they change: an invalid policy is said on the object, not only in the operator's log."""
    found = policy.read(name, body)
    bad = found if isinstance(found, policy.BrokenPolicy) else None
    change = policy_inputs.validity(body, bad, durations.stamp(dt.datetime.now(dt.UTC)))
    if change is None:
        return
    conditions, message = change
    patch.setdefault("status", {})["conditions"] = conditions
    if bad is not None:
        logger.warning(f"AcceleratorPolicy {name} does not parse and fails closed: {message}")
    if api is None:
        return
    type_, reason = ("Warning", "InvalidPolicy") if bad is not None else ("Normal", "PolicyValid")
    uid = body.get("metadata", {}).get("uid")
    try:
        await asyncio.to_thread(
            jobs.object_event,
            api(),
            kind=registry.POLICY.kind,
            name=name,
            uid=uid,
            type_=type_,
            reason=reason,
            message=message,
        )
    except ClusterUnavailable as exc:
        logger.info(f"the {reason} event on AcceleratorPolicy {name} was not posted: {exc}")


def register(reg: kopf.OperatorRegistry, sched: Scheduler | None, api: Callable[[], Any] | None = None) -> None:
    @kopf.index(v.GROUP, v.VERSION, registry.POLICY.plural, id="policies", registry=reg)
    async def policies(body: kopf.Body, name: str, **_: Any) -> dict[str, AcceleratorPolicy | policy.BrokenPolicy]:
        return {name: policy.read(name, body)}

    @kopf.index("", "v1", "namespaces", id="namespace_teams", registry=reg)
    async def namespace_teams(name: str, labels: kopf.Labels, meta: kopf.Meta, **_: Any) -> dict[str, str | None]:
        # A namespace being deleted holds no team (it takes no new jobs): its team is free again
        # for the unlabelled namespaces (planning.policy's bound teams).
        if meta.get("deletionTimestamp"):
            return {name: None}
        return {name: labels.get(v.LABEL_NAMESPACE_TEAM)}

    if sched is None:
        return  # the webhook alone (tests/support/webhook_main.py)

    generations: dict[str, Any] = {}

    @kopf.on.event(v.GROUP, v.VERSION, registry.POLICY.plural, registry=reg)
    async def policy_changed(
        name: str, event: kopf.RawEvent, body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, **_: Any
    ) -> None:
        sched.policies_changed()
        if event.get("type") != "DELETED":
            await _say_validity(name, body, patch, logger, api)
        generation = None if event.get("type") == "DELETED" else body.get("metadata", {}).get("generation")
        if generations.get(name, -1) != generation:
            # The rules changed (or the policy came or went): re-plan everything, since grants and
            # caps change the candidates.
            if generation is None:
                generations.pop(name, None)
            else:
                generations[name] = generation
            sched.pools_changed()
        else:
            # Only the status (the ledger's spending, every accrual tick): waiting jobs are decided
            # again against the budgets, without re-planning every job.
            sched.capacity_changed()

    @kopf.on.event("", "v1", "namespaces", registry=reg)
    async def namespace_changed(name: str, **_: Any) -> None:
        sched.kopf_listed()
        sched.policies_changed()
        idx = sched.indices
        if idx is None:
            return
        for key in list(idx.jobs):
            if isinstance(key, tuple) and key[0] == name:
                sched.mark(key)
