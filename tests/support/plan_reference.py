"""The planner's pool selection as it was before the plan-speed work (commit 4922578), kept
unoptimised as the reference the fast path must reproduce field for field
(tests/unit/planning/test_plan_equivalence.py).

A frozen copy of ``selection.plan`` at that commit with its caches taken out: every pool's
skeleton and every estimate is built afresh per call. Do not optimise it; it is the yardstick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from accel_api import bounds
from accel_api.catalog import Accelerator, Catalog
from accel_api.enums import AcceleratorKind, CapacityType, Provider
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import candidates as cand
from accel_operator.planning import cost, explain, memory, profile, throughput
from accel_operator.planning.candidates import Candidate, JobTerms, Plan, PoolOffer, PoolTerms
from accel_operator.planning.layout import Layout

# The pieces the plan-speed work left as they were (device counts, job and pool terms, the pool's
# problems) are the planner's own: only the candidates, their estimates and the decision are
# frozen here.
from accel_operator.planning.selection import _device_counts, _pool, _Step, _terms

_Memo = dict[tuple[str, float, int, int], throughput.ThroughputEstimate]
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
        if not c.expected_seconds <= bounds.PLANNING_HORIZON_SECONDS:  # the planning horizon
            failed |= cand.HORIZON
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
