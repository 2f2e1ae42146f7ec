"""Which pools a job's placement filters leave it: an index of the pools by name, accelerator and
kind, built once per pools version, and the filters' reasons for the pools they leave out.

A job may only run on the pools its ``placement.pools`` names, of the kinds its
``placement.acceleratorKinds`` allows and the types its ``placement.acceleratorTypes`` lists. Any
pool that fails one of these has a pool-level problem, so none of its placements can win: planning
it (a skeleton of every device count, each priced) only filled its line in the status. With an
index, :func:`selection.plan` plans the other pools in full and builds nothing per left-out pool:
the plan carries a :class:`~candidates.LeftOut`, the left-out pools counted per reason (the
sentences the full planner writes first for such a pool) with the first few names, made here
once per placement and set of offered pools and shared by every plan of them, not per job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from accel_api.catalog import Catalog
from accel_api.enums import AcceleratorKind
from accel_api.job import Placement
from accel_operator.planning.candidates import LEFT_OUT_SAMPLE, NO_LEFT_OUT, LeftOut, LeftOutGroup

# Placements whose left-out pools are kept, per index (a bound on memory, not a tuning).
MAX_PLACEMENTS = 4096
# Summaries kept per placement, one per set of offered pools (the scheduler offers every pool, or
# the ones a team's policies allow: a few sets); a bound on memory, not a tuning.
MAX_SUMMARIES = 16

# The pools offered to the planner, in order, as (name, accelerator id) pairs.
Offered = tuple[tuple[str, str], ...]
# (pools, kinds, types) of a placement: all that decides which pools it leaves out.
_Filters = tuple[tuple[str, ...], tuple[AcceleratorKind, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Pool:
    """What the filters read of one pool: its accelerator id, and that accelerator's kind
    (None: not in the catalog, a pool the planner plans in full since it costs nothing)."""

    accelerator: str
    kind: AcceleratorKind | None


@dataclass
class LeftOutPools:
    """The pools one placement's filters leave out, each with the filters' sentences, and the
    summaries of them made for the sets of pools offered (kept: a plan of that placement and
    those pools shares one instead of building its own)."""

    reasons: Mapping[str, tuple[str, ...]]
    _summaries: dict[tuple[str, ...], LeftOut] = field(default_factory=dict)
    # Per list of offered pools (as (name, accelerator) pairs): the positions of the pools left
    # to the job and the summary of the others; the last one answered by identity.
    _splits: dict[Offered, tuple[tuple[int, ...], LeftOut]] = field(default_factory=dict)
    _last: tuple[Offered, tuple[tuple[int, ...], LeftOut]] | None = None

    def split(self, offered: Offered, known: Mapping[str, Pool]) -> tuple[tuple[int, ...], LeftOut]:
        """The positions in ``offered`` (the (name, accelerator) of each pool offered, in order)
        of the pools left to the job, and the :meth:`summary` of those left out; a pool ``known``
        (the index's pools) under another accelerator is left to the job (planned in full). Made
        once per placement and list of offered pools, so a plan costs what its own pools cost,
        not a look at every pool of the fleet."""
        last = self._last
        if last is not None and last[0] is offered:
            return last[1]
        found = self._splits.get(offered)
        if found is None:
            kept: list[int] = []
            out: list[str] = []
            for i, (name, accelerator) in enumerate(offered):
                pool = known.get(name)
                if name in self.reasons and pool is not None and pool.accelerator == accelerator:
                    out.append(name)
                else:
                    kept.append(i)
            found = (tuple(kept), self.summary(tuple(out)) if out else NO_LEFT_OUT)
            if len(self._splits) >= MAX_SUMMARIES:
                self._splits.clear()
            self._splits[offered] = found
        self._last = (offered, found)
        return found

    def summary(self, names: tuple[str, ...]) -> LeftOut:
        """The summary of ``names`` (pools of :attr:`reasons`, in the order offered): a count
        and the first few names per distinct reasons, the largest groups first."""
        found = self._summaries.get(names)
        if found is None:
            groups: dict[tuple[str, ...], list[str]] = {}
            for name in names:
                groups.setdefault(self.reasons[name], []).append(name)
            ordered = sorted(groups.items(), key=lambda g: -len(g[1]))  # stable: first offered first
            found = LeftOut(
                len(names), tuple(LeftOutGroup(why, len(ns), tuple(ns[:LEFT_OUT_SAMPLE])) for why, ns in ordered)
            )
            if len(self._summaries) >= MAX_SUMMARIES:
                self._summaries.clear()
            self._summaries[names] = found
        return found


@dataclass
class PoolIndex:
    """The pools by name, by accelerator and by kind, and per placement the pools it leaves out
    with the reasons (kept for the index's life: built anew when the pools change)."""

    pools: Mapping[str, Pool]
    by_kind: Mapping[AcceleratorKind, frozenset[str]]
    by_accelerator: Mapping[str, frozenset[str]]
    _left_out: dict[_Filters, LeftOutPools] = field(default_factory=dict)

    @classmethod
    def of(cls, pools: Iterable[tuple[str, str]], catalog: Catalog) -> PoolIndex:
        """The index of ``pools`` as (name, accelerator id) pairs."""
        index: dict[str, Pool] = {}
        by_kind: dict[AcceleratorKind, set[str]] = {}
        by_accel: dict[str, set[str]] = {}
        for name, accelerator in pools:
            accel = catalog.get(accelerator)
            kind = accel.kind if accel is not None else None
            index[name] = Pool(accelerator, kind)
            by_accel.setdefault(accelerator, set()).add(name)
            if kind is not None:
                by_kind.setdefault(kind, set()).add(name)
        return cls(
            pools=index,
            by_kind={k: frozenset(v) for k, v in by_kind.items()},
            by_accelerator={a: frozenset(v) for a, v in by_accel.items()},
        )

    def eligible(self, placement: Placement) -> frozenset[str]:
        """The pools of the index that ``placement``'s filters leave to the job (those of an
        accelerator the catalog lacks included: they are never left out)."""
        return frozenset(self.pools) - self.left_out(placement).keys()

    def left_out(self, placement: Placement) -> Mapping[str, tuple[str, ...]]:
        """The pools ``placement``'s filters leave out, each with the filters' sentences, worded
        and ordered as the planner's pool-level problems (:func:`selection._pool_problems`)."""
        return self.left_out_pools(placement).reasons

    def left_out_pools(self, placement: Placement) -> LeftOutPools:
        """:meth:`left_out` with the summaries made of it (kept per placement)."""
        key: _Filters = (
            tuple(placement.pools),
            tuple(placement.accelerator_kinds),
            tuple(placement.accelerator_types),
        )
        found = self._left_out.get(key)
        if found is None:
            if len(self._left_out) >= MAX_PLACEMENTS:
                self._left_out.clear()
            found = self._left_out[key] = LeftOutPools(self._build(*key))
        return found

    def _build(
        self, pools: tuple[str, ...], kinds: tuple[AcceleratorKind, ...], types: tuple[str, ...]
    ) -> Mapping[str, tuple[str, ...]]:
        known = {name for name, p in self.pools.items() if p.kind is not None}
        named = set(pools) & known if pools else known
        of_kind = set().union(*(self.by_kind.get(k, ()) for k in kinds)) if kinds else known
        of_type = set().union(*(self.by_accelerator.get(t, ()) for t in types)) if types else known
        out: dict[str, tuple[str, ...]] = {}
        pools_text = f"not in placement.pools ({', '.join(pools)})"
        kinds_text = ", ".join(k.value for k in kinds)
        types_text = ", ".join(types)
        for name in sorted(known - (named & of_kind & of_type)):
            pool = self.pools[name]
            assert pool.kind is not None
            why = []
            if name not in named:
                why.append(pools_text)
            if name not in of_kind:
                why.append(f"{pool.kind.value} pool; placement.acceleratorKinds is {kinds_text}")
            if name not in of_type:
                why.append(f"{pool.accelerator} not in placement.acceleratorTypes ({types_text})")
            out[name] = tuple(why)
        return out
