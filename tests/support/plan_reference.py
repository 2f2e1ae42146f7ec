"""The planner's pool selection as it was before the plan-speed work (commit 4922578), kept
unoptimised as the reference the fast path must reproduce field for field
(tests/unit/planning/test_plan_equivalence.py).

A frozen copy of ``selection.plan`` at that commit with its caches taken out: every pool's
skeleton and every estimate is built afresh per call. Do not optimise it; it is the yardstick.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

from accel_api.catalog import Accelerator, Catalog
from accel_api.enums import AcceleratorKind, CapacityType, Framework, Objective, Precision, Provider, SpotPolicy
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import candidates as cand
from accel_operator.planning import cost, explain, memory, profile, throughput
from accel_operator.planning.candidates import Candidate, JobTerms, Plan, PoolOffer, PoolTerms
from accel_operator.planning.layout import Layout
from accel_operator.planning.profile import JobProfile


def _topology_chips(topology: str | None) -> int | None:
    if not topology:
        return None
    return math.prod(int(d) for d in topology.split("x"))


def device_counts(pool: AcceleratorPoolSpec) -> list[int]:
    """Device counts a pool offers: powers of two in a node, then whole nodes in powers of two."""
    return list(_device_counts(pool.devices_per_node, pool.max_nodes, pool.tpu_topology))


@functools.lru_cache(maxsize=256)
def _device_counts(per_node: int, max_nodes: int, topology: str | None, model_parallel: int = 1) -> tuple[int, ...]:
    counts = _counts(per_node, max_nodes, topology)
    if model_parallel & (model_parallel - 1) and topology is None:
        # A model-parallel group that is not a power of two (pipelineParallel 3, 5, 10 ...) never
        # divides the powers of two above: offer whole groups on whole nodes as well, the least
        # common multiple of the group and the node and its doublings.
        unit = math.lcm(model_parallel, per_node)
        while unit <= per_node * max_nodes:
            counts.append(unit)
            unit *= 2
    return tuple(sorted(set(counts)))


def _counts(per_node: int, max_nodes: int, topology: str | None) -> list[int]:
    limit = per_node * max_nodes
    chips = _topology_chips(topology)
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


def _terms(spec: AcceleratorJobSpec, w: JobProfile) -> JobTerms:
    p = spec.placement
    return JobTerms(
        spec=spec,
        profile=w,
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
    precision = spec.workload.precision
    if spec.workload.framework is Framework.MEGATRON and accel.kind is AcceleratorKind.TPU:
        out.append(f"framework megatron runs on GPUs (CUDA); {accel.id} is a TPU (use maxtext)")
    if precision is Precision.FP8 and not accel.fp8_tensor_cores:
        out.append(f"precision fp8 needs FP8 tensor cores; {accel.id} has none (use amp-bf16)")
    if precision in (Precision.AMP_BF16, Precision.BF16, Precision.FP8) and not accel.bf16:
        out.append(f"precision {precision.value} needs bf16; {accel.id} has none (use amp-fp16 or fp16)")
    return tuple(out)


def _pool(job: JobTerms, offer: PoolOffer, cat: Catalog) -> PoolTerms:
    accel = cat.get(offer.spec.accelerator)
    if accel is None:
        problem = f"accelerator {offer.spec.accelerator!r} is not in the catalog ({', '.join(cat.ids())})"
        return PoolTerms(job, offer, None, (problem,), None, None)
    network = offer.spec.inter_node_bytes_per_second
    if network is not None and network != accel.inter_node_bytes_per_second:
        # The pool's own network (a faster fabric, a slower cluster) instead of the catalog's default.
        accel = dataclasses.replace(accel, inter_node_bytes_per_second=network)
    rate = offer.observed_preemption_rate_per_hour
    if rate is None:
        rate = offer.spec.preemption_rate_per_hour
    return PoolTerms(job, offer, accel, _pool_problems(job.spec, offer, accel), cost.pricing(offer.spec, accel), rate)


_Memo = dict[tuple[str, float, int, int], throughput.ThroughputEstimate]
_Step = tuple[memory.MemoryEstimate, throughput.ThroughputEstimate, int]
_StepMemo = dict[tuple[str, float, int, int], _Step | None]


class _Skeleton(NamedTuple):
    """What one pool offers one job whatever its token count: the pool's terms, and per device
    count the nodes, the checks that do not depend on the duration (placement bounds, layout,
    memory) and the step-level estimates. Built once per (pool, catalog, job less its tokens) and
    reused across plans, so a plan only prices each candidate for its tokens."""

    offer: PoolOffer  # held: the cache is keyed by its id, which cannot be reused while it lives
    catalog: Catalog
    accel: Accelerator | None
    problems: tuple[str, ...]
    prices: cost.Pricing | None
    rate: float | None
    pricer: cost.PoolCost | None
    # devices, nodes, failed bits, estimates key, (memory, step-level speed, data-parallel degree)
    entries: tuple[tuple[int, int, int, tuple[str, float, int, int], _Step | None], ...]


def _skeleton(job: JobTerms, offer: PoolOffer, cat: Catalog, counts: Sequence[int], steps: _StepMemo) -> _Skeleton:
    src = _pool(job, offer, cat)
    accel, prices, pool = src.accel, src.prices, offer.spec
    per_node = pool.devices_per_node
    if accel is None or prices is None:
        entries = tuple((n, -(-n // per_node), 0, ("", 0.0, n, 0), None) for n in counts)
        return _Skeleton(offer, cat, accel, src.problems, prices, src.preemption_rate, None, entries)
    w = job.profile
    pricer = cost.PoolCost(
        pool.capacity_type, prices, src.preemption_rate, pool.restart_seconds, job.checkpoint_interval
    )
    out = []
    for devices in counts:
        nodes = -(-devices // per_node)
        failed = 0
        if devices < job.min_devices:
            failed |= cand.MIN_DEVICES
        if job.max_devices is not None and devices > job.max_devices:
            failed |= cand.MAX_DEVICES
        if job.max_nodes is not None and nodes > job.max_nodes:
            failed |= cand.MAX_NODES
        key = (accel.id, accel.inter_node_bytes_per_second, devices, nodes)
        if key in steps:
            step = steps[key]
        else:
            step = None
            layout = Layout.of(w, devices, nodes)
            if layout.problem(per_node) is None:
                ws = w.step_key
                mem_est, speed_est = memory.estimate(ws, accel, layout), throughput.estimate(ws, accel, layout)
                step = (mem_est, speed_est, layout.data_parallel)
            steps[key] = step
        if step is None:
            failed |= cand.LAYOUT
        elif not step[0].fits:
            failed |= cand.MEMORY
        out.append((devices, nodes, failed, key, step))
    return _Skeleton(offer, cat, accel, src.problems, prices, src.preemption_rate, pricer, tuple(out))


def _candidates(job: JobTerms, sk: _Skeleton, memo: _Memo) -> list[Candidate]:
    """One candidate per device count of one pool, priced for the job's tokens (a hot loop:
    locals hoisted on purpose)."""
    offer = sk.offer
    pool = offer.spec
    name, capacity, acc_id = offer.name, pool.capacity_type, pool.accelerator
    src = PoolTerms(job, offer, sk.accel, sk.problems, sk.prices, sk.rate)
    pricer = sk.pricer
    if pricer is None:
        return [Candidate(name, acc_id, n, nodes, capacity, None, None, None, 0, src) for n, nodes, *_ in sk.entries]
    w = job.profile
    spot = capacity is CapacityType.SPOT
    free, free_nodes = offer.free_devices, offer.free_nodes
    deadline, max_cost, max_preemptions = job.deadline, job.max_cost, job.max_preemptions
    out: list[Candidate] = []
    for devices, nodes, static_failed, key, step in sk.entries:
        if step is None:
            out.append(Candidate(name, acc_id, devices, nodes, capacity, None, None, None, static_failed, src))
            continue
        failed = static_failed
        speed = memo.get(key)
        if speed is None:
            speed = memo[key] = throughput.for_tokens(step[1], w, step[2])
        c = pricer.estimate(speed.duration_seconds, devices, nodes)
        if deadline is not None and c.expected_seconds > deadline:
            failed |= cand.DEADLINE
        if max_cost is not None and c.expected_usd > max_cost:
            failed |= cand.MAX_COST
        if spot and c.preemptions > max_preemptions:
            failed |= cand.PREEMPTIONS
        notes = c.notes
        if free is not None and devices > free:
            notes = (*notes, f"{free} devices free now: waits for the pool to grow")
        elif free_nodes is not None and nodes > free_nodes:
            notes = (*notes, f"{free_nodes} whole nodes free now: waits for the pool to grow")
        out.append(Candidate(name, acc_id, devices, nodes, capacity, step[0], speed, c, failed, src, notes))
    return out


def _decide(job: JobTerms, candidates: list[Candidate], name: str | None) -> Plan:
    feasible: list[tuple[tuple[float, float, int, str], Candidate]] = []
    rest: list[Candidate] = []
    spot_bonus = 1 - cand.SPOT_PREFERENCE if job.prefer_spot else 1.0
    for c in candidates:
        if c.failed or c.source.problems or c.cost is None:
            rest.append(c)
            continue
        primary, secondary = explain.objective(job, c)
        if c.capacity_type is CapacityType.SPOT:
            primary *= spot_bonus
        feasible.append(((primary, secondary, c.devices, c.pool), c))
    feasible.sort(key=lambda kc: kc[0])
    # Positional rebuilds: the last two fields are rank and winner.
    win = Candidate(*feasible[0][1][:-2], 1, None) if feasible else None
    ranked = [win] if win is not None else []
    ranked += [Candidate(*c[:-2], i, win) for i, (_, c) in enumerate(feasible[1:], 2)]
    ranked += rest
    reason = explain.decision(job, ranked, len(feasible))
    return Plan(spec=job.spec, profile=job.profile, name=name, candidates=tuple(ranked), winner=win, reason=reason)


def plan(
    spec: AcceleratorJobSpec,
    pools: Sequence[PoolOffer],
    catalog: Catalog,
    *,
    name: str | None = None,
) -> Plan:
    """Where ``spec`` should run among ``pools``: every estimate made afresh."""
    job = _terms(spec, profile.from_spec(spec))
    candidates: list[Candidate] = []
    memo: _Memo = {}
    steps: _StepMemo = {}
    w = job.profile
    model_parallel = w.tensor_parallel * w.pipeline_parallel * w.context_parallel
    for offer in pools:
        pool = offer.spec
        counts = _device_counts(pool.devices_per_node, pool.max_nodes, pool.tpu_topology, model_parallel)
        candidates += _candidates(job, _skeleton(job, offer, catalog, counts, steps), memo)
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
    job = _terms(spec, profile.from_spec(spec))
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
    return _decide(job, _candidates(job, _skeleton(job, offer, catalog, [devices], {}), {}), name)
