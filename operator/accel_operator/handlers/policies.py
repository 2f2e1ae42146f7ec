"""AcceleratorPolicies and namespaces' team labels: the indexes that admission and the reconciler read.

Two kopf indexes, shared by the admission webhook and the scheduling loop (no LIST per job):
``policies`` (name -> AcceleratorPolicy, or a ``planning.policy.BrokenPolicy`` when the stored
object does not parse: it fails closed, holding every job it would govern) and
``namespace_teams`` (namespace -> its ``vocabulary.LABEL_NAMESPACE_TEAM`` label, or None).
With a scheduler, a policy change re-plans every job (pool grants and device caps filter the
planner's candidates) and a namespace change re-decides that namespace's jobs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import kopf

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.policy import AcceleratorPolicy
from accel_operator.engine import changes
from accel_operator.engine.scheduler import Scheduler
from accel_operator.planning import policy


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

    generations = changes.PolicyGenerations()

    @kopf.on.event(v.GROUP, v.VERSION, registry.POLICY.plural, registry=reg)
    async def policy_changed(
        name: str, event: kopf.RawEvent, body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, **_: Any
    ) -> None:
        sched.policies_changed()
        if event.get("type") != "DELETED":
            await changes.say_policy_validity(name, body, patch, logger, api, now=dt.datetime.now(dt.UTC))
        generation = None if event.get("type") == "DELETED" else body.get("metadata", {}).get("generation")
        if generations.rules_changed(name, generation):
            sched.pools_changed()  # grants and caps change the candidates: re-plan everything
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
