"""What the planner weighs: pools as offers, the job's terms, candidates and the resulting plan.

Plain frozen values, no logic beyond what a value can say of itself. Enumeration and ranking live
in :mod:`selection`, the sentences about them in :mod:`explain`, and the serialisations (the
job's ``status.plan``, ``accelctl plan -o json``) outside the planner, where they are written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from accel_api import bounds
from accel_api.catalog import Accelerator
from accel_api.enums import CapacityType
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import cost, memory, throughput
from accel_operator.planning.cache import Kind, PlanCache
from accel_operator.planning.profile import JobProfile

# Under spot.policy prefer a spot placement wins when its objective is within this fraction of
# the best on-demand one (spot is cheaper and the checkpoint makes preemption survivable).
SPOT_PREFERENCE = 0.05
# Ratios closer to 1 than this are reported as ties.
TIE = 0.005

# Checks a candidate can fail, as bits of Candidate.failed.
MIN_DEVICES, MAX_DEVICES, MAX_NODES, LAYOUT = 1, 2, 4, 8
MEMORY, DEADLINE, MAX_COST, PREEMPTIONS = 16, 32, 64, 128
HORIZON = 256  # expected to run longer than bounds.PLANNING_HORIZON_SECONDS


@dataclass(frozen=True, slots=True)
class PoolOffer:
    """A pool as the planner sees it: its spec and what the operator observed of it."""

    name: str
    spec: AcceleratorPoolSpec
    observed_preemption_rate_per_hour: float | None = None
    free_devices: int | None = None
    free_nodes: int | None = None


# How the planner's sentences name a device cap the job set itself (a policy's: policy.cap_source).
OWN_MAX_DEVICES = "placement.maxDevices"


class JobTerms(NamedTuple):
    """What the checks and sentences need of the job, resolved once per plan."""

    spec: AcceleratorJobSpec
    profile: JobProfile
    deadline: float | None
    min_devices: int
    max_devices: int | None
    max_nodes: int | None
    max_cost: float | None
    max_preemptions: int
    checkpoint_interval: float | None
    by_time: bool
    prefer_spot: bool
    max_devices_from: str = OWN_MAX_DEVICES  # what set max_devices, as the sentences name it


class PoolTerms(NamedTuple):
    """What every device count of one pool shares."""

    job: JobTerms
    offer: PoolOffer
    accel: Accelerator | None
    problems: tuple[str, ...]  # pool-level: why none of its placements may be used
    prices: cost.Pricing | None
    preemption_rate: float | None


class Candidate(NamedTuple):
    """One pool × device count. Immutable (a NamedTuple: cheaper to build than a frozen dataclass)."""

    pool: str
    accelerator: str
    devices: int
    nodes: int
    capacity_type: CapacityType
    memory: memory.MemoryEstimate | None
    speed: throughput.ThroughputEstimate | None
    cost: cost.CostEstimate | None
    failed: int  # bits of the checks it failed (see MIN_DEVICES ...)
    source: PoolTerms
    notes: tuple[str, ...] = ()
    rank: int | None = None  # 1 = winner; None: not feasible
    winner: Candidate | None = None  # for ranked losers: the candidate they lost to

    @property
    def feasible(self) -> bool:
        return not self.failed and not self.source.problems and self.cost is not None

    @property
    def fits(self) -> bool:
        return self.memory is not None and self.memory.fits

    @property
    def label(self) -> str:
        return f"{self.pool}×{self.devices}"

    @property
    def problem_count(self) -> int:
        return len(self.source.problems) + self.failed.bit_count()


# Pools named per reason in a plan's summary of the pools its placement leaves out (the first,
# in the order they were offered): the count says how many, the names say which kind of pool.
LEFT_OUT_SAMPLE = bounds.STATUS_LEFT_OUT_SAMPLE


class LeftOutGroup(NamedTuple):
    """Pools the placement's filters leave out for the same reasons: the filters' sentences (as
    the planner writes them for such a pool), how many pools, and the first few by name."""

    reasons: tuple[str, ...]
    total: int  # pools (a NamedTuple's ``count`` is tuple.count)
    pools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LeftOut:
    """The pools the job's placement filters leave out (``placement.pools``, ``acceleratorKinds``,
    ``acceleratorTypes``), summarised: none of their placements may win, so the planner builds no
    candidate for them (at a hundred pools most of a pinned job's pools), only this, one per
    placement and set of offered pools, shared by every plan of that placement."""

    count: int = 0
    groups: tuple[LeftOutGroup, ...] = ()

    def __bool__(self) -> bool:
        return self.count > 0


NO_LEFT_OUT = LeftOut()


def spec_digest(spec: AcceleratorJobSpec) -> bytes:
    """An exact, cheap-to-compare name of ``spec``'s value: a digest of its canonical JSON. Equal
    specs have equal digests; specs that differ in any field (a team, a priority) do not."""
    return hashlib.blake2b(spec.model_dump_json().encode(), digest_size=16).digest()


# The fields of a job's spec the planner reads (``selection.plan`` and everything it calls), as
# pydantic's ``include``: a whole field, or the sub-fields read of it (of ``checkpoint`` only
# whether there is one and its interval: its ``uri``, which holds the team in many a template, is
# the policies' to read, not the planner's). A plan is a function of these and of the pools
# offered, so specs equal in them (jobs of one template in other teams, at other priorities,
# with another image or checkpoint path) get one plan. The team and the policies act before the
# planner, through what they restrict (``policy.restrict``: the pools offered and
# ``maxDevices``), which :func:`plan_key`'s callers add to the key.
# ``tests/unit/planning/test_plan_keys.py`` records every field and sub-field the planner reads
# of a spec and fails when one is missing here.
PLANNED_FIELDS: Mapping[str, Any] = MappingProxyType(
    {
        "model": True,
        "workload": True,
        "placement": True,
        "objective": True,
        "deadline": True,
        "max_cost": True,
        "spot": True,
        "checkpoint": MappingProxyType({"interval_minutes": True}),
    }
)


def plan_key(spec: AcceleratorJobSpec, *more: str) -> bytes:
    """A digest of what the planner reads of ``spec`` (:data:`PLANNED_FIELDS`, canonical JSON)
    and of ``more`` (what else the plan was made from: the source of a policy's device cap, the
    pools a grant left). Equal for specs that differ only where the planner does not read."""
    # pydantic reads sub-field includes only from a dict: the read-only table is copied per key.
    include = {k: dict(v) if isinstance(v, Mapping) else v for k, v in PLANNED_FIELDS.items()}
    h = hashlib.blake2b(spec.model_dump_json(include=include).encode(), digest_size=16)
    for part in more:
        h.update(b"\0" + part.encode())
    return h.digest()


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """Where a job should run: every candidate (ranked feasible ones first, then the rest), the
    winner and the decision in one sentence. ``profile`` and ``spec`` are the job it is for (a
    plan is shared by every spec equal in what the planner reads: ``spec`` is the first of them);
    ``digest`` is :func:`plan_key` of ``spec`` (made here when not given); ``left_out`` the
    pools the placement's filters left out, which have no candidates (planned with a pool index)."""

    spec: AcceleratorJobSpec
    profile: JobProfile
    name: str | None
    candidates: tuple[Candidate, ...]
    winner: Candidate | None
    reason: str
    digest: bytes = b""
    left_out: LeftOut = NO_LEFT_OUT

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", plan_key(self.spec))

    @property
    def schedulable(self) -> bool:
        return self.winner is not None

    # What is derived from a plan (its ranking, its status form) is kept in a PlanCache keyed on
    # the plan's value, and plans are shared by thousands of jobs whose specs differ in a team or a
    # priority but not in what the planner reads. Hash and equality read the spec through its
    # digest first: plans of different specs never collide (a lookup never compares two specs
    # model by model, the cost the fleet-size bench found), and equal plans still share entries.
    def __hash__(self) -> int:
        return hash((self.digest, self.name, self.reason, len(self.candidates)))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Plan):
            return NotImplemented
        return (
            self.digest == other.digest
            and self.name == other.name
            and self.reason == other.reason
            and self.profile == other.profile
            and self.winner == other.winner
            and self.left_out == other.left_out
            and self.candidates == other.candidates
        )


def best_per_pool(candidates: tuple[Candidate, ...] | list[Candidate]) -> list[Candidate]:
    """Each pool's best candidate: its best-ranked, else the one closest to feasible."""
    best: dict[str, Candidate] = {}
    for c in candidates:  # ranked ones come first, in rank order
        seen = best.get(c.pool)
        if seen is None or (seen.rank is None and (c.fits, -c.problem_count) > (seen.fits, -seen.problem_count)):
            best[c.pool] = c
    return list(best.values())


# Plans are shared by every job of one effective spec (the scheduler caches them): what every
# decision reads of a plan is kept per plan in the caller's PlanCache.
_RANKED: Kind[Plan, tuple[Candidate, ...]] = Kind("candidates.ranked_per_pool", 4096)


def ranked_per_pool(plan: Plan, *, cache: PlanCache | None = None) -> tuple[Candidate, ...]:
    """Each pool's best candidate among the ranked (feasible) ones, best first; kept in ``cache``
    per plan (None: computed afresh)."""
    memo = cache.memo(_RANKED) if cache is not None else None
    hit = memo.get(plan) if memo is not None else None
    if hit is None:
        hit = tuple(c for c in best_per_pool(plan.candidates) if c.rank is not None)
        if memo is not None:
            memo.put(plan, hit)
    return hit
