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

from accel_api import bounds
from accel_api.policy import AcceleratorPolicy
from accel_operator.planning import policy


@dataclass(frozen=True, slots=True)
class PolicyInputs:
    policies: tuple[AcceleratorPolicy, ...] = ()
    namespace_teams: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    spent: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # policy.spend_key -> USD
    # Stored policies the models refuse: they fail closed (policy.BrokenPolicy).
    broken: tuple[policy.BrokenPolicy, ...] = ()
    # Evaluations under these inputs, by (job uid, generation, pool names): a job is judged again
    # only when it, the pools, the policies, the namespaces' teams or the spend changed.
    memo: dict[tuple[str, int | None, frozenset[str]], list[policy.Violation]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # The pool names of the memo's keys, one frozenset per distinct set: every job of a pass (and
    # of the passes until a pool changes) is judged over the same pools, and a key's own copy of
    # the names (8 KB at 100 pools) made the memo the largest store at fleet size (400 MB at
    # 50,000 entries, docs/scale.md).
    pool_sets: dict[frozenset[str], frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    def team_of(self, namespace: str) -> str | None:
        """The namespace's team label; None when unlabelled or not known."""
        return self.namespace_teams.get(namespace)

    def binds(self, namespace: str) -> bool:
        """Whether any rule can apply to a job in ``namespace`` (else evaluation is skipped): a
        policy, a broken one, or any labelled namespace (a job in an unlabelled one may not name
        a team that another namespace holds)."""
        return bool(self.policies) or bool(self.broken) or bool(self.namespace_teams)

    def bound_teams(self) -> frozenset[str]:
        """The teams some namespace is labelled with (:func:`policy.evaluate`'s ``bound_teams``)."""
        return frozenset(t for t in self.namespace_teams.values() if t is not None)


def spend_from(policies: Iterable[AcceleratorPolicy]) -> dict[str, float]:
    """Each team's spend this period, as the policies' status reports it (the highest figure)."""
    out: dict[str, float] = {}
    for pol in policies:
        for s in pol.status.spend if pol.status is not None else ():
            key = policy.spend_key(s.team, s.period)
            out[key] = max(out.get(key, 0.0), s.spent_usd)
    return out


def split(
    policies: Mapping[Any, Iterable[AcceleratorPolicy | policy.BrokenPolicy | None]],
) -> tuple[tuple[AcceleratorPolicy, ...], tuple[policy.BrokenPolicy, ...]]:
    """The ``policies`` index's values: the policies that parse and the broken ones, each by name."""
    values = [p for store in policies.values() for p in store]
    found = sorted((p for p in values if isinstance(p, AcceleratorPolicy)), key=lambda p: p.metadata.name or "")
    broken = sorted((p for p in values if isinstance(p, policy.BrokenPolicy)), key=lambda p: p.name)
    return tuple(found), tuple(broken)


def fold(
    policies: Mapping[Any, Iterable[AcceleratorPolicy | policy.BrokenPolicy | None]],
    teams: Mapping[Any, Iterable[str | None]],
) -> PolicyInputs:
    """kopf's two indexes (key -> a store of values) as one :class:`PolicyInputs`."""
    found, broken = split(policies)
    labelled = {str(ns): team for ns, store in teams.items() for team in store if team is not None}
    return PolicyInputs(found, MappingProxyType(labelled), MappingProxyType(spend_from(found)), broken=broken)


VALID = "Valid"  # the policy's condition: whether the models read it (else it fails closed)


def validity(
    body: Mapping[str, Any], broken: policy.BrokenPolicy | None, now: str
) -> tuple[list[dict[str, Any]], str] | None:
    """The policy's ``status.conditions`` with its ``Valid`` condition set, and the event's message,
    when they change: ``Valid=False`` (reason ``InvalidSpec``) naming the field and the fix while
    the models refuse it, ``Valid=True`` once a policy that was invalid parses again. None when
    nothing changes (a valid policy never had the condition: nothing is written)."""
    status = body.get("status")
    held = status.get("conditions") if isinstance(status, Mapping) else None
    conditions = [c for c in held if isinstance(c, Mapping)] if isinstance(held, list) else []
    current = next((c for c in conditions if c.get("type") == VALID), None)
    if broken is None:
        if current is None or current.get("status") == "True":
            return None
        cond: dict[str, Any] = {
            "type": VALID,
            "status": "True",
            "reason": "SpecValid",
            "message": "the policy parses; its rules apply",
        }
    else:
        text = "; ".join(broken.problems)
        cond = {
            "type": VALID,
            "status": "False",
            "reason": "InvalidSpec",
            "message": bounds.clip_message(
                f"{text}. None of its rules can be read, so it holds {broken.governed()} until it is fixed: "
                f"correct the field(s) named (kubectl edit apol {broken.name})"
            ),
        }
        if current is not None and all(current.get(k) == cond[k] for k in ("status", "reason", "message")):
            return None
    generation = body.get("metadata", {}).get("generation")
    cond["lastTransitionTime"] = now
    if isinstance(generation, int):
        cond["observedGeneration"] = generation
    rest = [dict(c) for c in conditions if c.get("type") != VALID]
    return [*rest, cond][-bounds.CONDITIONS_ITEMS :], str(cond["message"])
