"""The policy facts one decision reads: the AcceleratorPolicies, each namespace's team, the spend.

Folded from the ``policies`` and ``namespace_teams`` indexes (``handlers.policies``) into one
frozen value per pass, beside the rest of the :class:`~accel_operator.reconcile.common.snapshot.Snapshot`.

Spend is a seam: today it comes from the policies' own ``status.spend`` (a team's figure for a
period, the highest any policy reports); the cost ledger will fill it there, or replace
:func:`spend_from` with its own source, without touching the decisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from accel_api.policy import AcceleratorPolicy
from accel_operator.planning import policy


@dataclass(frozen=True, slots=True)
class PolicyInputs:
    policies: tuple[AcceleratorPolicy, ...] = ()
    namespace_teams: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    spent: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # policy.spend_key -> USD
    # Evaluations under these inputs, by (job uid, generation, pool names): a job is judged again
    # only when it, the pools, the policies, the namespaces' teams or the spend changed.
    memo: dict[tuple[str, int | None, frozenset[str]], list[policy.Violation]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def team_of(self, namespace: str) -> str | None:
        """The namespace's team label; None when unlabelled or not known."""
        return self.namespace_teams.get(namespace)

    def binds(self, namespace: str) -> bool:
        """Whether any rule can apply to a job in ``namespace`` (else evaluation is skipped)."""
        return bool(self.policies) or self.team_of(namespace) is not None


def spend_from(policies: Iterable[AcceleratorPolicy]) -> dict[str, float]:
    """Each team's spend this period, as the policies' status reports it (the highest figure)."""
    out: dict[str, float] = {}
    for pol in policies:
        for s in pol.status.spend if pol.status is not None else ():
            key = policy.spend_key(s.team, s.period)
            out[key] = max(out.get(key, 0.0), s.spent_usd)
    return out


def fold(
    policies: Mapping[Any, Iterable[AcceleratorPolicy | None]], teams: Mapping[Any, Iterable[str | None]]
) -> PolicyInputs:
    """kopf's two indexes (key -> a store of values) as one :class:`PolicyInputs`."""
    found = tuple(
        sorted((p for store in policies.values() for p in store if p is not None), key=lambda p: p.metadata.name or "")
    )
    labelled = {str(ns): team for ns, store in teams.items() for team in store if team is not None}
    return PolicyInputs(found, MappingProxyType(labelled), MappingProxyType(spend_from(found)))
