"""Which watch events change what the engine decides, told apart without kopf: a node report
whose heartbeat alone moved changes nothing a decision reads now (staleness is seen on the
resync), and a policy whose generation stayed the same changed only its status (the ledger's
spending), not its rules; and what a policy's validity says on the object (a condition and an
event), so a policy that does not parse fails closed in plain sight."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import replace
from typing import Any

from accel_api import durations, registry
from accel_operator.adapters.kube import jobs
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.planning import policy
from accel_operator.reconcile.common import node_capacity, policy_inputs
from accel_operator.reconcile.common.reports import ReportView


class ReportChanges:
    """The last report seen of each node."""

    def __init__(self) -> None:
        self._seen: dict[str, ReportView] = {}

    def observe(self, name: str, view: ReportView | None) -> tuple[str, bool] | None:
        """Report ``name`` is now ``view`` (None: deleted or invalid): the node it is about and
        whether what the node can take changed (``node_capacity.signature``); None when only the
        heartbeat moved."""
        before = self._seen.pop(name, None)
        if view is not None:
            self._seen[name] = view
        if before is not None and view is not None and replace(before, heartbeat=None) == replace(view, heartbeat=None):
            return None
        node = view.node if view is not None else (before.node if before is not None else name)
        return node, node_capacity.signature(before) != node_capacity.signature(view)


class PolicyGenerations:
    """The last generation seen of each AcceleratorPolicy."""

    def __init__(self) -> None:
        self._seen: dict[str, Any] = {}

    def rules_changed(self, name: str, generation: Any) -> bool:
        """Whether policy ``name``, now at ``generation`` (None: deleted), came, went or has other
        rules than last seen; False: only its status moved."""
        if self._seen.get(name, -1) == generation:
            return False
        if generation is None:
            self._seen.pop(name, None)
        else:
            self._seen[name] = generation
        return True


async def say_policy_validity(
    name: str,
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    logger: logging.Logger | logging.LoggerAdapter[Any],
    api: Callable[[], Any] | None,
    *,
    now: dt.datetime,
) -> None:
    """The policy's Valid condition (written into ``patch``, which kopf applies after the handler) and an event, when
    they change: an invalid policy is said on the object, not only in the operator's log."""
    found = policy.read(name, body)
    bad = found if isinstance(found, policy.BrokenPolicy) else None
    change = policy_inputs.validity(body, bad, durations.stamp(now))
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
