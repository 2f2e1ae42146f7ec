"""Pool selection: every pool × device count, checked, ranked, with a reason for each.

``plan(spec, pools, catalog)`` enumerates, for each pool, the device counts it can offer (powers
of two within a node, then whole nodes in powers of two up to ``maxNodes``; whole slices for TPU
pools with a topology), estimates memory, speed and cost for each, checks the rules (fits in
memory, placement bounds, spot policy, deadline, maxCost, maxPreemptions), ranks what passes by
the job's objective and returns a :class:`Plan`: the winner, every candidate with its rank and
why it lost, and a decision. An impossible job gives ``schedulable = False`` and a reason for
every pool; it never raises.

A plan weighs hundreds of candidates in a few milliseconds, so the failed checks are kept as
flags and the sentences about them are written when someone reads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from accel_api.catalog import Accelerator, Catalog
from accel_api.enums import AcceleratorKind, CapacityType, Objective, Provider, SpotPolicy, WorkloadMode
from accel_api.job import AcceleratorJobSpec, Alternative, PlanStatus
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import cost, memory, profile, throughput
from accel_operator.planning.layout import Layout
from accel_operator.planning.profile import JobProfile

GB = 1e9
# Under spot.policy prefer a spot placement wins when its objective is within this fraction of
# the best on-demand one (spot is cheaper and the checkpoint makes preemption survivable).
SPOT_PREFERENCE = 0.05
# Ratios closer to 1 than this are reported as ties.
TIE = 0.005
# PlanStatus carries at most this many alternatives (one per pool), to keep status small.
STATUS_ALTERNATIVES = 20
# Default pools (accelctl plan without --pools): this many nodes per pool at most.
DEFAULT_MAX_NODES = 8

# Checks a candidate can fail, as bits of Candidate.failed.
_MIN_DEVICES, _MAX_DEVICES, _MAX_NODES, _LAYOUT = 1, 2, 4, 8
_MEMORY, _DEADLINE, _MAX_COST, _PREEMPTIONS = 16, 32, 64, 128


@dataclass(frozen=True, slots=True)
class PoolOffer:
    """A pool as the planner sees it: its spec and what the operator observed of it."""

    name: str
    spec: AcceleratorPoolSpec
    observed_preemption_rate_per_hour: float | None = None
    free_devices: int | None = None
    free_nodes: int | None = None


class _Job(NamedTuple):
    """What the checks and sentences need of the job, resolved once per plan."""

    spec: AcceleratorJobSpec
    workload: JobProfile
    deadline: float | None
    min_devices: int
    max_devices: int | None
    max_nodes: int | None
    max_cost: float | None
    max_preemptions: int
    checkpoint_interval: float | None
    by_time: bool
    prefer_spot: bool


class _Pool(NamedTuple):
    """What every device count of one pool shares."""

    job: _Job
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
    failed: int  # bits of the checks it failed (see _MIN_DEVICES ...)
    source: _Pool
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

    @property
    def problems(self) -> tuple[str, ...]:
        """Why it may not run as asked; empty when feasible."""
        return self.source.problems + tuple(_describe(self))

    @property
    def reasons(self) -> tuple[str, ...]:
        """Empty for the winner; why it lost otherwise."""
        if self.rank is None:
            return self.problems
        if self.winner is None:
            return ()
        return (_versus(self.source.job, self, self.winner),)

    def to_json(self) -> dict[str, Any]:
        mem, speed, c = self.memory, self.speed, self.cost
        finite = c is not None and math.isfinite(c.expected_seconds)
        return {
            "pool": self.pool,
            "accelerator": self.accelerator,
            "devices": self.devices,
            "nodes": self.nodes,
            "capacityType": self.capacity_type.value,
            "fits": self.fits,
            "peakAllocatedBytes": None if mem is None else mem.peak_allocated_bytes,
            "footprintBytes": None if mem is None else mem.footprint_bytes,
            "deviceMemoryBytes": None if mem is None else mem.device_bytes,
            "peakAt": None if mem is None else mem.peak_at,
            "stepSeconds": None if speed is None else speed.step_seconds,
            "tokensPerSecond": None if speed is None else speed.tokens_per_second,
            "durationSeconds": None if speed is None else speed.duration_seconds,
            "expectedSeconds": (c.expected_seconds if finite else None) if c is not None else None,
            "mfu": None if speed is None else round(speed.mfu, 4),
            "costUSD": None
            if c is None
            else {
                "onDemand": round(c.on_demand_usd, 2),
                "spot": round(c.spot_usd, 2),
                "expected": round(c.expected_usd, 2) if math.isfinite(c.expected_usd) else None,
            },
            "expectedPreemptions": None if c is None or not finite else round(c.preemptions, 2),
            "feasible": self.feasible,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "rank": self.rank,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    job: dict[str, Any]
    candidates: tuple[Candidate, ...]  # ranked feasible ones first, then the rest
    winner: Candidate | None
    reason: str

    @property
    def schedulable(self) -> bool:
        return self.winner is not None

    @property
    def pool_reasons(self) -> tuple[tuple[str, str], ...]:
        """(pool, why its best placement lost or cannot run), one per pool; "chosen" for the winner's."""
        return tuple((c.pool, "; ".join(c.reasons) or "chosen") for c in best_per_pool(self.candidates))

    def to_status(self) -> PlanStatus:
        """The value the operator writes into ``status.plan``."""
        alternatives = []
        for c in best_per_pool(self.candidates):
            if c is self.winner:
                continue
            ce = c.cost
            alternatives.append(
                Alternative(
                    pool=c.pool,
                    accelerator=c.accelerator,
                    devices=c.devices,
                    capacity_type=c.capacity_type,
                    cost_usd=round(ce.expected_usd, 2) if ce is not None and math.isfinite(ce.expected_usd) else None,
                    duration_seconds=ce.expected_seconds
                    if ce is not None and math.isfinite(ce.expected_seconds)
                    else None,
                    reason="; ".join(c.reasons) or "not ranked",
                )
            )
            if len(alternatives) >= STATUS_ALTERNATIVES:
                break
        win = self.winner
        if win is None or win.memory is None or win.speed is None or win.cost is None:
            return PlanStatus(reason=self.reason, alternatives=alternatives)
        return PlanStatus(
            pool=win.pool,
            accelerator=win.accelerator,
            devices=win.devices,
            nodes=win.nodes,
            capacity_type=win.capacity_type,
            spot=win.capacity_type is CapacityType.SPOT,
            peak_allocated_bytes_per_device=win.memory.peak_allocated_bytes,
            footprint_bytes_per_device=win.memory.footprint_bytes,
            step_seconds=win.speed.step_seconds,
            tokens_per_second=win.speed.tokens_per_second,
            duration_seconds=win.cost.expected_seconds,
            cost_usd=round(win.cost.expected_usd, 2),
            reason=self.reason,
            alternatives=alternatives,
        )

    def to_json(self) -> dict[str, Any]:
        """The stable JSON contract of ``accelctl plan -o json``: job, candidates, decision."""
        win = self.winner
        decision: dict[str, Any] = {"schedulable": self.schedulable, "reason": self.reason}
        if win is not None and win.cost is not None:
            decision |= {
                "pool": win.pool,
                "accelerator": win.accelerator,
                "devices": win.devices,
                "nodes": win.nodes,
                "capacityType": win.capacity_type.value,
                "costUSD": round(win.cost.expected_usd, 2),
                "durationSeconds": win.cost.expected_seconds,
            }
        else:
            decision |= {"pool": None, "accelerator": None, "devices": None, "nodes": None, "capacityType": None}
        decision["poolReasons"] = dict(self.pool_reasons)
        return {"job": dict(self.job), "candidates": [c.to_json() for c in self.candidates], "decision": decision}


# --- sentences --------------------------------------------------------------------------------


def _hours(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "never (preemptions outpace progress)"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _usd(x: float) -> str:
    if not math.isfinite(x):
        return "unbounded"
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _describe(c: Candidate) -> list[str]:
    """The failed checks of ``c`` as sentences, in check order."""
    job, f = c.source.job, c.failed
    out: list[str] = []
    if f & _MIN_DEVICES:
        out.append(f"{c.devices} devices < placement.minDevices {job.min_devices}")
    if f & _MAX_DEVICES:
        out.append(f"{c.devices} devices > placement.maxDevices {job.max_devices}")
    if f & _MAX_NODES:
        out.append(f"{c.nodes} nodes > placement.maxNodes {job.max_nodes}")
    if f & _LAYOUT:
        layout = Layout(c.devices, c.nodes, job.workload.tensor_parallel)
        per_node = c.source.offer.spec.devices_per_node
        out.append(layout.problem(per_node) or "impossible layout")
    mem = c.memory
    if f & _MEMORY and mem is not None:
        out.append(
            f"needs {mem.footprint_bytes / GB:.1f} GB per device > {mem.usable_bytes / GB:.1f} GB usable "
            f"({mem.device_bytes / GB:.1f} GB {c.accelerator}; peak at {mem.peak_at})"
        )
    ce = c.cost
    if ce is not None:
        if f & _DEADLINE:
            out.append(f"misses deadline {job.spec.deadline}: takes {_hours(ce.expected_seconds)}")
        if f & _MAX_COST and job.max_cost is not None:
            out.append(f"costs {_usd(ce.expected_usd)} > maxCost {_usd(job.max_cost)}")
        if f & _PREEMPTIONS:
            shown = f"{ce.preemptions:.1f}" if math.isfinite(ce.preemptions) else "unbounded"
            out.append(f"expects {shown} preemptions > spot.maxPreemptions {job.max_preemptions}")
    return out


def _objective(job: _Job, c: Candidate) -> tuple[float, float]:
    assert c.cost is not None
    if job.by_time:
        return c.cost.expected_seconds, c.cost.expected_usd
    return c.cost.expected_usd, c.cost.expected_seconds


def _versus(job: _Job, c: Candidate, win: Candidate) -> str:
    """One line: why ``c`` (feasible) lost to ``win``."""
    cp, cs = _objective(job, c)
    wp, ws = _objective(job, win)
    what, other = ("time", "cost") if job.by_time else ("cost", "time")

    def fmt(x: float) -> str:
        return _hours(x) if job.by_time else _usd(x)

    if cp < wp:  # only the spot preference ranks a better objective lower
        return f"{fmt(cp)} vs {fmt(wp)}, but {win.label} is spot and within {SPOT_PREFERENCE:.0%} (spot.policy prefer)"
    if cp <= wp * (1 + TIE) and cs > ws * (1 + TIE):
        return f"same {what} as {win.label} but {cs / ws:.1f}× the {other}"
    ratio = cp / wp if wp > 0 else math.inf
    shown = f"{ratio:.1f}×" if ratio >= 1.1 else f"+{(ratio - 1) * 100:.1f}%"
    return f"{shown} the {what} of {win.label} ({fmt(cp)} vs {fmt(wp)})"


# --- enumeration ------------------------------------------------------------------------------


def _topology_chips(topology: str | None) -> int | None:
    if not topology:
        return None
    return math.prod(int(d) for d in topology.split("x"))


def device_counts(pool: AcceleratorPoolSpec) -> list[int]:
    """Device counts a pool offers: powers of two in a node, then whole nodes in powers of two."""
    per_node, max_nodes = pool.devices_per_node, pool.max_nodes
    limit = per_node * max_nodes
    chips = _topology_chips(pool.tpu_topology)
    if chips is not None:
        # A TPU slice is all-or-nothing: whole slices (multislice in powers of two).
        return [chips * 2**k for k in range(32) if chips * 2**k <= limit] or [chips]
    counts: list[int] = []
    c = 1
    while c < per_node:
        counts.append(c)
        c *= 2
    counts.append(per_node)
    nodes = 2
    while nodes <= max_nodes:
        counts.append(per_node * nodes)
        nodes *= 2
    return counts


def _job(spec: AcceleratorJobSpec, w: JobProfile) -> _Job:
    p = spec.placement
    return _Job(
        spec=spec,
        workload=w,
        deadline=spec.deadline_seconds,
        min_devices=p.min_devices,
        max_devices=p.max_devices,
        max_nodes=p.max_nodes,
        max_cost=spec.max_cost,
        max_preemptions=spec.spot.max_preemptions,
        checkpoint_interval=spec.checkpoint.interval_minutes * 60 if spec.checkpoint is not None else None,
        by_time=spec.objective is Objective.TIME,
        prefer_spot=spec.spot.policy is SpotPolicy.PREFER,
    )


def _pool_problems(spec: AcceleratorJobSpec, offer: PoolOffer, accel: Accelerator) -> tuple[str, ...]:
    p, pool = spec.placement, offer.spec
    out = []
    if p.pools and offer.name not in p.pools:
        out.append(f"not in placement.pools ({', '.join(p.pools)})")
    if p.accelerator_kinds and accel.kind not in p.accelerator_kinds:
        kinds = ", ".join(k.value for k in p.accelerator_kinds)
        out.append(f"{accel.kind.value} pool; placement.acceleratorKinds is {kinds}")
    if p.accelerator_types and accel.id not in p.accelerator_types:
        out.append(f"{accel.id} not in placement.acceleratorTypes ({', '.join(p.accelerator_types)})")
    spot = pool.capacity_type is CapacityType.SPOT
    if spec.spot.policy is SpotPolicy.NEVER and spot:
        out.append("spot pool; spot.policy is never")
    if spec.spot.policy is SpotPolicy.REQUIRE and not spot:
        out.append("on-demand pool; spot.policy is require")
    if spec.spot.policy is SpotPolicy.PREFER and spot and spec.checkpoint is None:
        out.append("spot without spec.checkpoint: a preemption would restart the job from zero")
    return tuple(out)


def _pool(job: _Job, offer: PoolOffer, cat: Catalog) -> _Pool:
    accel = cat.get(offer.spec.accelerator)
    if accel is None:
        problem = f"accelerator {offer.spec.accelerator!r} is not in the catalog ({', '.join(cat.ids())})"
        return _Pool(job, offer, None, (problem,), None, None)
    rate = offer.observed_preemption_rate_per_hour
    if rate is None:
        rate = offer.spec.preemption_rate_per_hour
    return _Pool(job, offer, accel, _pool_problems(job.spec, offer, accel), cost.pricing(offer.spec, accel), rate)


# Per plan() call: estimates of one accelerator and layout, shared by pools that offer both.
_Memo = dict[tuple[str, int, int], tuple[memory.MemoryEstimate, throughput.ThroughputEstimate] | None]


def _candidates(src: _Pool, counts: Sequence[int], memo: _Memo) -> list[Candidate]:
    """One candidate per device count of one pool (a hot loop: locals hoisted on purpose)."""
    job, offer, accel, prices = src.job, src.offer, src.accel, src.prices
    pool = offer.spec
    name, capacity, per_node = offer.name, pool.capacity_type, pool.devices_per_node
    if accel is None or prices is None:
        return [
            Candidate(name, pool.accelerator, n, -(-n // per_node), capacity, None, None, None, 0, src) for n in counts
        ]
    w, acc_id, tp = job.workload, accel.id, job.workload.tensor_parallel
    spot = capacity is CapacityType.SPOT
    free, free_nodes = offer.free_devices, offer.free_nodes
    out: list[Candidate] = []
    for devices in counts:
        nodes = -(-devices // per_node)
        failed = 0
        if devices < job.min_devices:
            failed |= _MIN_DEVICES
        if job.max_devices is not None and devices > job.max_devices:
            failed |= _MAX_DEVICES
        if job.max_nodes is not None and nodes > job.max_nodes:
            failed |= _MAX_NODES
        key = (acc_id, devices, nodes)
        if key in memo:
            found = memo[key]
        else:
            layout = Layout(devices, nodes, tp)
            found = None
            if layout.problem(per_node) is None:
                found = (memory.estimate(w, accel, layout), throughput.estimate(w, accel, layout))
            memo[key] = found
        if found is None:
            out.append(Candidate(name, acc_id, devices, nodes, capacity, None, None, None, failed | _LAYOUT, src))
            continue
        mem, speed = found
        if not mem.fits:
            failed |= _MEMORY
        c = cost.estimate(
            duration_seconds=speed.duration_seconds,
            devices=devices,
            nodes=nodes,
            capacity_type=capacity,
            prices=prices,
            preemption_rate_per_node_hour=src.preemption_rate,
            restart_seconds=pool.restart_seconds,
            checkpoint_interval_seconds=job.checkpoint_interval,
        )
        if job.deadline is not None and c.expected_seconds > job.deadline:
            failed |= _DEADLINE
        if job.max_cost is not None and c.expected_usd > job.max_cost:
            failed |= _MAX_COST
        if spot and c.preemptions > job.max_preemptions:
            failed |= _PREEMPTIONS
        notes = c.notes
        if free is not None and devices > free:
            notes = (*notes, f"{free} devices free now: waits for the pool to grow")
        elif free_nodes is not None and nodes > free_nodes:
            notes = (*notes, f"{free_nodes} whole nodes free now: waits for the pool to grow")
        out.append(Candidate(name, acc_id, devices, nodes, capacity, mem, speed, c, failed, src, notes))
    return out


# --- ranking ----------------------------------------------------------------------------------


def best_per_pool(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Each pool's best candidate: its best-ranked, else the one closest to feasible."""
    best: dict[str, Candidate] = {}
    for c in candidates:  # ranked ones come first, in rank order
        seen = best.get(c.pool)
        if seen is None or (seen.rank is None and (c.fits, -c.problem_count) > (seen.fits, -seen.problem_count)):
            best[c.pool] = c
    return list(best.values())


def _job_summary(spec: AcceleratorJobSpec, w: JobProfile, name: str | None) -> dict[str, Any]:
    s = w.shape
    out: dict[str, Any] = {
        "name": name,
        "model": spec.model.name,
        "parameters": s.params,
        "architecture": {
            "layers": s.layers,
            "hidden": s.hidden,
            "heads": s.heads,
            "kvHeads": s.kv_heads,
            "intermediate": s.intermediate,
            "vocab": s.vocab,
            "mlp": s.mlp.value,
        },
        "mode": w.mode.value,
        "precision": w.precision.value,
        "tokens": w.tokens,
        "objective": spec.objective.value,
        "deadlineSeconds": spec.deadline_seconds,
        "maxCostUSD": spec.max_cost,
        "spotPolicy": spec.spot.policy.value,
        "checkpointIntervalMinutes": None if spec.checkpoint is None else spec.checkpoint.interval_minutes,
        "notes": list(w.notes),
    }
    if w.mode is WorkloadMode.TRAINING:
        out |= {
            "optimizer": w.optimizer.value,
            "microBatch": w.micro_batch,
            "seqLen": w.seq_len,
            "gradientCheckpointing": w.checkpointing,
            "sharding": w.sharding.value,
            "tensorParallel": w.tensor_parallel,
        }
    else:
        out |= {
            "batch": w.batch,
            "promptLen": w.prompt_len,
            "newTokens": w.new_tokens,
            "tensorParallel": w.tensor_parallel,
        }
    return out


def _decide(job: _Job, candidates: list[Candidate], name: str | None) -> Plan:
    feasible: list[tuple[tuple[float, float, int, str], Candidate]] = []
    rest: list[Candidate] = []
    spot_bonus = 1 - SPOT_PREFERENCE if job.prefer_spot else 1.0
    for c in candidates:
        if c.failed or c.source.problems or c.cost is None:
            rest.append(c)
            continue
        primary, secondary = _objective(job, c)
        if c.capacity_type is CapacityType.SPOT:
            primary *= spot_bonus
        feasible.append(((primary, secondary, c.devices, c.pool), c))
    feasible.sort(key=lambda kc: kc[0])
    # Positional rebuilds: the last two fields are rank and winner.
    win = Candidate(*feasible[0][1][:-2], 1, None) if feasible else None
    ranked = [win] if win is not None else []
    ranked += [Candidate(*c[:-2], i, win) for i, (_, c) in enumerate(feasible[1:], 2)]
    ranked += rest
    if win is not None and win.cost is not None and win.memory is not None:
        why = "fastest" if job.by_time else "cheapest"
        if job.prefer_spot and win.capacity_type is CapacityType.SPOT:
            why += " (spot preferred)"
        reason = (
            f"{win.label} ({win.nodes} node{'s' if win.nodes > 1 else ''}, {win.capacity_type.value}): "
            f"{why} of {len(feasible)} feasible placements: {_usd(win.cost.expected_usd)}, "
            f"{_hours(win.cost.expected_seconds)}, {win.memory.footprint_bytes / GB:.1f} GB per device"
        )
    elif not candidates:
        reason = "no pools to consider"
    else:
        best = best_per_pool(ranked)
        shown = [f"{c.pool}: {'; '.join(c.reasons)}" for c in best[:5]]
        reason = f"no feasible placement in {len(best)} pools: " + "; ".join(shown)
        if len(best) > 5:
            reason += f"; and {len(best) - 5} more pools (see alternatives)"
    return Plan(job=_job_summary(job.spec, job.workload, name), candidates=tuple(ranked), winner=win, reason=reason)


def plan(
    spec: AcceleratorJobSpec,
    pools: Sequence[PoolOffer],
    catalog: Catalog,
    *,
    name: str | None = None,
) -> Plan:
    """Where ``spec`` should run among ``pools``, with the alternatives and why they lost."""
    job = _job(spec, profile.from_spec(spec))
    candidates: list[Candidate] = []
    memo: _Memo = {}
    for offer in pools:
        candidates += _candidates(_pool(job, offer, catalog), device_counts(offer.spec), memo)
    return _decide(job, candidates, name)


def evaluate(
    spec: AcceleratorJobSpec,
    accelerator: str,
    devices: int,
    catalog: Catalog,
    *,
    capacity_type: CapacityType = CapacityType.ON_DEMAND,
    name: str | None = None,
) -> Plan:
    """One placement (``devices`` of ``accelerator`` at catalog prices) without pools."""
    job = _job(spec, profile.from_spec(spec))
    accel = catalog.get(accelerator)
    per_node = accel.devices_per_node if accel is not None else max(1, devices)
    offer = PoolOffer(
        name=f"{accelerator}-{capacity_type.value}",
        spec=AcceleratorPoolSpec(
            provider=Provider.GCP if accel is not None and accel.kind is AcceleratorKind.TPU else Provider.AWS,
            accelerator=accelerator,
            devices_per_node=min(64, per_node),
            capacity_type=capacity_type,
            max_nodes=max(1, -(-devices // per_node)),
        ),
    )
    return _decide(job, _candidates(_pool(job, offer, catalog), [devices], {}), name)


def _default_offer(accel: Accelerator, capacity: CapacityType) -> PoolOffer:
    spec = AcceleratorPoolSpec(
        provider=Provider.GCP if accel.kind is AcceleratorKind.TPU else Provider.AWS,
        accelerator=accel.id,
        devices_per_node=accel.devices_per_node,
        capacity_type=capacity,
        max_nodes=DEFAULT_MAX_NODES,
    )
    return PoolOffer(name=f"{accel.id}-{capacity.value}", spec=spec)


def default_pools(catalog: Catalog) -> tuple[PoolOffer, ...]:
    """One on-demand and one spot pool per catalog accelerator, catalog prices, up to 8 nodes."""
    return tuple(
        _default_offer(accel, capacity) for accel in catalog for capacity in (CapacityType.ON_DEMAND, CapacityType.SPOT)
    )
