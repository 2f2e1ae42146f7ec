"""Which watch events change what the engine decides, told apart without kopf: a node report
whose heartbeat alone moved changes nothing a decision reads now (staleness is seen on the
resync), and a policy whose generation stayed the same changed only its status (the ledger's
spending), not its rules."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from accel_operator.reconcile.common import node_capacity
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
