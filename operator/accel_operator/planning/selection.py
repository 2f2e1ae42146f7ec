"""Pool selection: every pool × device count, checked, ranked, with a reason for each.

``plan(spec, pools, catalog)`` enumerates, for each pool, the device counts it can offer (powers
of two within a node, then whole nodes in powers of two up to ``maxNodes``; whole slices for TPU
pools with a topology), estimates memory, speed and cost for each, checks the rules (fits in
memory, placement bounds, spot policy, deadline, maxCost, maxPreemptions), ranks what passes by
the job's objective and returns a :class:`~candidates.Plan`: the winner, every candidate with its
rank and why it lost, and a decision. An impossible job gives ``schedulable = False`` and a
reason for every pool; it never raises.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from accel_api import bounds
from accel_api.catalog import Accelerator, Catalog
from accel_api.enums import (
    AcceleratorKind,
    AdapterMethod,
    CapacityType,
    Framework,
    Objective,
    Precision,
    Provider,
    SpotPolicy,
)
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import candidates as cand
from accel_operator.planning import cost, explain, memory, profile, throughput
from accel_operator.planning.cache import Kind, PlanCache, memoised
from accel_operator.planning.candidates import Candidate, JobTerms, Plan, PoolOffer, PoolTerms
from accel_operator.planning.eligible import Offered, PoolIndex
from accel_operator.planning.layout import Layout
from accel_operator.planning.profile import JobProfile

# Default pools (accelctl plan without --pools): this many nodes per pool at most.
DEFAULT_MAX_NODES = 8


def _topology_chips(topology: str | None) -> int | None:
    if not topology:
        return None
    return math.prod(int(d) for d in topology.split("x"))


def device_counts(pool: AcceleratorPoolSpec) -> list[int]:
    """Device counts a pool offers: powers of two in a node, then whole nodes in powers of two."""
    return list(_device_counts(pool.devices_per_node, pool.max_nodes, pool.tpu_topology))


@memoised(256)
def _device_counts(
    per_node: int, max_nodes: int, topology: str | None, model_parallel: int = 1, *, cache: PlanCache | None = None
) -> tuple[int, ...]:
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


def _terms(spec: AcceleratorJobSpec, w: JobProfile, max_devices_from: str = cand.OWN_MAX_DEVICES) -> JobTerms:
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
        max_devices_from=max_devices_from,
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
    adapter = spec.workload.adapter
    if adapter is not None and adapter.method is AdapterMethod.QLORA and accel.kind is AcceleratorKind.TPU:
        base = adapter.base_weights_or_default.value
        out.append(f"a qlora {base} base runs on bitsandbytes' CUDA kernels; {accel.id} is a TPU (use method lora)")
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


# Step-level estimates (memory, step-level speed and the data-parallel degree; None where the
# layout cannot be built) per (accelerator with the pool's network, devices, nodes), shared by
# pools that offer the same accelerator and layout.
_Step = tuple[memory.MemoryEstimate, throughput.ThroughputEstimate, int]
_StepKey = tuple[Accelerator, int, int]
_StepMemo = dict[_StepKey, _Step | None]
# Step-level estimates of the last jobs planned, per job less its tokens (memory and step time do
# not depend on the token count, price or pool): a new job that differs only in ``tokens`` —
# every resubmission, every re-plan after a preemption with the tokens left — reuses them.
_STEPS: Kind[JobProfile, _StepMemo] = Kind("selection.steps", 32)


def _step_memo(key: JobProfile, cache: PlanCache) -> _StepMemo:
    memo = cache.memo(_STEPS)
    found = memo.get(key)
    return found if found is not None else memo.put(key, {})


# One device count of a pool's skeleton: devices, nodes, the bits of the checks that do not
# depend on the duration, the step-level estimates (None: no layout), and the slots of the
# plan's tables where its speed for the job's tokens and its price are kept (see _JobCache).
_Entry = tuple[int, int, int, _Step | None, int, int]
# A priced slot: the speed for the job's tokens, the cost, the bits of the duration checks
# (deadline, maxCost, preemptions) and the objective as ranked (spot preference applied).
_Priced = tuple[throughput.ThroughputEstimate, cost.CostEstimate, int, float, float]


class _Skeleton(NamedTuple):
    """What one pool offers one job whatever its token count: the pool's terms, and per device
    count the nodes, the checks that do not depend on the duration (placement bounds, layout,
    memory) and the step-level estimates. Built once per (pool's values, job less its tokens) and
    reused across plans, so a plan only prices each candidate for its tokens. What it depends
    on of the pool is :func:`_offer_key`; the offer's free devices and nodes are read per plan."""

    accel: Accelerator | None
    problems: tuple[str, ...]
    prices: cost.Pricing | None
    rate: float | None
    pricer: cost.PoolCost | None
    entries: tuple[_Entry, ...]


_K = TypeVar("_K")


class _JobCache:
    """What plans of one job less its tokens share: each pool's skeleton, and a slot number per
    distinct step-level estimate (accelerator, network, devices, nodes) and per distinct price of
    one (the pool's cost terms and that estimate). A plan keeps its speeds and prices in lists
    indexed by these slots, so pools of the same accelerator and layout share the speed for the
    job's tokens, and pools with equal cost terms (the same accelerator at the same prices, rate,
    restart time and capacity type) share its price: each is computed once per plan."""

    __slots__ = ("costs", "skeletons", "speeds")

    def __init__(self) -> None:
        self.skeletons: dict[_OfferKey, _Skeleton] = {}
        self.speeds: dict[_StepKey, int] = {}
        self.costs: dict[tuple[object, _StepKey], int] = {}

    def slot(self, table: dict[_K, int], key: _K) -> int:
        found = table.get(key)
        if found is None:
            found = table[key] = len(table)
        return found


# Per job less its tokens (and the rules the skeletons check): the last jobs planned.
_JOBS: Kind[tuple[object, ...], _JobCache] = Kind("selection.jobs", 32)
# One job's cache starts again past these: pools that keep changing (new skeletons) or prices
# that keep changing (new cost slots) would otherwise grow it, and each plan allocates its
# tables at the size of the slot counts.
_JOB_SKELETONS = 4096
_JOB_SLOTS = 16384


def _job_cache(job_key: tuple[object, ...], cache: PlanCache) -> _JobCache:
    memo = cache.memo(_JOBS)
    found = memo.get(job_key)
    if found is None or len(found.skeletons) > _JOB_SKELETONS or len(found.costs) > _JOB_SLOTS:
        found = memo.put(job_key, _JobCache())
    return found


# What a pool's skeleton depends on of the pool (besides the job): its name (placement.pools),
# its accelerator as the catalog has it (the catalog's ids where it has none: the sentence names
# them), its shape, network, capacity type, prices, restart time and preemption rates. Not its
# free devices and nodes: they only add notes, read per plan.
_OfferKey = tuple[object, ...]


def _offer_key(offer: PoolOffer, accel: Accelerator | None, cat: Catalog) -> _OfferKey:
    pool = offer.spec
    return (
        offer.name,
        accel if accel is not None else cat.ids(),
        pool.devices_per_node,
        pool.max_nodes,
        pool.tpu_topology,
        pool.inter_node_bytes_per_second,
        pool.capacity_type,
        pool.price.on_demand_per_device_hour,
        pool.price.spot_per_device_hour,
        pool.restart_seconds,
        pool.preemption_rate_per_hour,
        offer.observed_preemption_rate_per_hour,
    )


def _skeleton(
    job: JobTerms,
    offer: PoolOffer,
    cat: Catalog,
    counts: Sequence[int],
    *,
    steps: _StepMemo,
    jc: _JobCache,
    cache: PlanCache | None,
) -> _Skeleton:
    src = _pool(job, offer, cat)
    accel, prices, pool = src.accel, src.prices, offer.spec
    per_node = pool.devices_per_node
    if accel is None or prices is None:
        entries = tuple((n, -(-n // per_node), 0, None, -1, -1) for n in counts)
        return _Skeleton(accel, src.problems, prices, src.preemption_rate, None, entries)
    w = job.profile
    pricer = cost.PoolCost(
        pool.capacity_type, prices, src.preemption_rate, pool.restart_seconds, job.checkpoint_interval
    )
    out: list[_Entry] = []
    for devices in counts:
        nodes = -(-devices // per_node)
        failed = 0
        if devices < job.min_devices:
            failed |= cand.MIN_DEVICES
        if job.max_devices is not None and devices > job.max_devices:
            failed |= cand.MAX_DEVICES
        if job.max_nodes is not None and nodes > job.max_nodes:
            failed |= cand.MAX_NODES
        key = (accel, devices, nodes)
        if key in steps:
            step = steps[key]
        else:
            step = None
            layout = Layout.of(w, devices, nodes)
            if layout.problem(per_node) is None:
                ws = w.step_key
                mem_est = memory.estimate(ws, accel, layout, cache=cache)
                speed_est = throughput.estimate(ws, accel, layout, cache=cache)
                step = (mem_est, speed_est, layout.data_parallel)
            steps[key] = step
        if step is None:
            failed |= cand.LAYOUT
            out.append((devices, nodes, failed, None, -1, -1))
            continue
        if not step[0].fits:
            failed |= cand.MEMORY
        out.append((devices, nodes, failed, step, jc.slot(jc.speeds, key), jc.slot(jc.costs, (pricer.terms, key))))
    return _Skeleton(accel, src.problems, prices, src.preemption_rate, pricer, tuple(out))


_RANK_KEY = operator.itemgetter(0)
_new = tuple.__new__  # builds a NamedTuple from its fields without the keyword-handling __new__


def _candidates(
    job: JobTerms,
    offer: PoolOffer,
    sk: _Skeleton,
    *,
    speeds: list[throughput.ThroughputEstimate | None],
    steps: dict[int, int],
    priced: list[_Priced | None],
    feasible: list[tuple[tuple[float, float, int, str], tuple[object, ...]]],
    rest: list[Candidate],
) -> None:
    """Each device count of one pool priced for the job's tokens: the feasible ones go to
    ``feasible`` as their rank key and fields (the candidate is built once ranked, in _decide),
    the rest to ``rest`` as candidates. A hot loop: locals hoisted on purpose."""
    pool = offer.spec
    name, capacity, acc_id = offer.name, pool.capacity_type, pool.accelerator
    src = PoolTerms(job, offer, sk.accel, sk.problems, sk.prices, sk.rate)
    pricer = sk.pricer
    if pricer is None:
        rest += [
            _new(Candidate, (name, acc_id, n, nodes, capacity, None, None, None, 0, src, (), None, None))
            for n, nodes, *_ in sk.entries
        ]
        return
    w = job.profile
    usable = not sk.problems
    spot = capacity is CapacityType.SPOT
    spot_bonus = 1 - cand.SPOT_PREFERENCE if spot and job.prefer_spot else None
    by_time = job.by_time
    free, free_nodes = offer.free_devices, offer.free_nodes
    deadline, max_cost, max_preemptions = job.deadline, job.max_cost, job.max_preemptions
    busy = free is not None or free_nodes is not None
    for devices, nodes, static_failed, step, speed_slot, cost_slot in sk.entries:
        if step is None:
            rest.append(
                _new(
                    Candidate,
                    (name, acc_id, devices, nodes, capacity, None, None, None, static_failed, src, (), None, None),
                )
            )
            continue
        hit = priced[cost_slot]
        if hit is None:
            speed = speeds[speed_slot]
            if speed is None:
                # The token count enters only through the steps, which depend only on the
                # data-parallel degree: counted once per degree.
                n = steps.get(step[2])
                if n is None:
                    n = steps[step[2]] = throughput.steps_for(w, step[2])
                speed = speeds[speed_slot] = throughput.for_steps(step[1], n)
            c = pricer.estimate(speed.duration_seconds, devices, nodes)
            late = 0
            if deadline is not None and c.expected_seconds > deadline:
                late |= cand.DEADLINE
            if max_cost is not None and c.expected_usd > max_cost:
                late |= cand.MAX_COST
            if spot and c.preemptions > max_preemptions:
                late |= cand.PREEMPTIONS
            if not c.expected_seconds <= bounds.PLANNING_HORIZON_SECONDS:  # NaN and inf too
                late |= cand.HORIZON
            # explain.objective, with the spot preference the ranking applies.
            primary, secondary = (
                (c.expected_seconds, c.expected_usd) if by_time else (c.expected_usd, c.expected_seconds)
            )
            if spot_bonus is not None:
                primary *= spot_bonus
            hit = priced[cost_slot] = (speed, c, late, primary, secondary)
        speed, c, late, primary, secondary = hit
        notes = c.notes
        if busy:
            if free is not None and devices > free:
                notes = (*notes, f"{free} devices free now: waits for the pool to grow")
            elif free_nodes is not None and nodes > free_nodes:
                notes = (*notes, f"{free_nodes} whole nodes free now: waits for the pool to grow")
        failed = static_failed | late
        if failed or not usable:
            rest.append(
                _new(
                    Candidate,
                    (name, acc_id, devices, nodes, capacity, step[0], speed, c, failed, src, notes, None, None),
                )
            )
        else:
            feasible.append(
                (
                    (primary, secondary, devices, name),
                    (name, acc_id, devices, nodes, capacity, step[0], speed, c, 0, src, notes),
                )
            )


def _decide(
    job: JobTerms,
    feasible: list[tuple[tuple[float, float, int, str], tuple[object, ...]]],
    rest: list[Candidate],
    name: str | None,
    digest: bytes = b"",
    *,
    left_out: cand.LeftOut = cand.NO_LEFT_OUT,
) -> Plan:
    """Ranks the feasible candidates by the job's objective (the spot preference applied; ties by
    devices, then pool name): the winner first, the ranked losers, then the rest as enumerated;
    ``left_out`` (the pools the placement left out, not planned) goes with them into the plan."""
    feasible.sort(key=_RANK_KEY)  # stable: equal keys keep the pools' order
    win: Candidate | None = _new(Candidate, (*feasible[0][1], 1, None)) if feasible else None
    ranked = [win] if win is not None else []
    ranked += [_new(Candidate, (*fields, i, win)) for i, (_, fields) in enumerate(feasible[1:], 2)]
    ranked += rest
    reason = explain.decision(job, ranked, len(feasible), left_out)
    w = job.profile
    if win is not None and w.knobs and win.source.accel is not None:
        w = dataclasses.replace(w, notes=(*w.notes, _knob_effect(w, win, win.source.accel)))
    return Plan(
        spec=job.spec,
        profile=w,
        name=name,
        candidates=tuple(ranked),
        winner=win,
        reason=reason,
        digest=digest,
        left_out=left_out,
    )


def _knob_effect(w: JobProfile, win: Candidate, accel: Accelerator) -> str:
    """What the recipe knobs changed on the chosen placement: its peak and tokens/s planned with
    them against without them (only for a job that turns one: two estimates per plan)."""
    plain = w.without_knobs
    layout = Layout.of(w, win.devices, win.nodes)
    m0, s0 = memory.estimate(plain, accel, layout), throughput.estimate(plain, accel, layout)
    m1, s1 = win.memory, win.speed
    assert m1 is not None and s1 is not None
    gb = 1e9
    return (
        f"the recipe knobs on {win.label}: peak {m0.peak_allocated_bytes / gb:.1f} → "
        f"{m1.peak_allocated_bytes / gb:.1f} GB per device, {s0.tokens_per_second:,.0f} → "
        f"{s1.tokens_per_second:,.0f} tokens/s ({s1.tokens_per_second / s0.tokens_per_second - 1:+.1%})"
    )


def _model_key(model: object) -> tuple[object, ...]:
    """A hashable key of a flat model's values (lists as tuples): cheaper than its repr."""
    return (type(model), *(tuple(v) if type(v) is list else v for v in vars(model).values()))


def plan(
    spec: AcceleratorJobSpec,
    pools: Sequence[PoolOffer],
    catalog: Catalog,
    *,
    name: str | None = None,
    max_devices_from: str = cand.OWN_MAX_DEVICES,
    cache: PlanCache | None = None,
    spec_digest: bytes = b"",
    index: PoolIndex | None = None,
    offered: Offered | None = None,
) -> Plan:
    """Where ``spec`` should run among ``pools``, with the alternatives and why they lost;
    ``max_devices_from`` names what set ``maxDevices`` (a policy's cap: ``policy.cap_source``).
    ``cache`` keeps what later plans of jobs of the same shape and of the same pools reuse (the
    step-level estimates, each pool's skeleton); None keeps them for this call alone (its pools
    share the pieces of the memory and speed models), with the same result. ``spec_digest`` is
    :func:`candidates.spec_digest` of ``spec`` when the caller has it already (made here if not).
    With ``index`` (the pools' :class:`eligible.PoolIndex`), a pool the placement's filters leave
    out is not planned and has no candidate: the plan's ``left_out`` counts such pools per reason
    (the filters' sentences) with the first few names (the same winner and the same ranked
    candidates, with nothing built per left-out pool). ``offered``: the (name, accelerator) of
    each of ``pools`` in order, when the caller keeps it (the same object while the offered pools
    are): with ``index``, the pools left out are then found once per placement and such list."""
    if cache is None:
        cache = PlanCache()
    job = _terms(spec, profile.from_spec(spec), max_devices_from)
    w = job.profile
    step_key = w.step_key
    steps = _step_memo(step_key, cache)
    model_parallel = w.tensor_parallel * w.pipeline_parallel * w.context_parallel
    # Everything a pool's skeleton depends on besides the pool: the job less its tokens (its
    # profile: precision, framework, shape, layout), its placement and spot rules, whether it
    # checkpoints and how often.
    job_key = (
        step_key,
        _model_key(spec.placement),
        _model_key(spec.spot),
        spec.checkpoint is None,
        job.checkpoint_interval,
    )
    jc = _job_cache(job_key, cache)
    skeletons = jc.skeletons
    get = catalog.accelerators.get
    todo: list[tuple[PoolOffer, _Skeleton]] = []

    def add(offer: PoolOffer) -> None:
        pool = offer.spec
        key = _offer_key(offer, get(pool.accelerator), catalog)
        sk = skeletons.get(key)
        if sk is None:
            counts = _device_counts(
                pool.devices_per_node, pool.max_nodes, pool.tpu_topology, model_parallel, cache=cache
            )
            sk = skeletons[key] = _skeleton(job, offer, catalog, counts, steps=steps, jc=jc, cache=cache)
        todo.append((offer, sk))

    left = index.left_out_pools(spec.placement) if index is not None else None
    if left is not None and index is not None and offered is not None and len(offered) == len(pools):
        # The pools left to the job by position, found once per placement and list of offered
        # pools: a plan looks at its own pools, not at every pool of the fleet.
        positions, left_out = left.split(offered, index.pools)
        for i in positions:
            add(pools[i])
        return _price(job, todo, jc, name, spec_digest, left_out=left_out)
    reasons = left.reasons if left is not None else {}
    out: list[str] = []  # the offered pools left out, in the order offered
    for offer in pools:
        if reasons and offer.name in reasons and index is not None:
            known = index.pools.get(offer.name)
            if known is not None and known.accelerator == offer.spec.accelerator:  # not a stale index
                out.append(offer.name)
                continue
        add(offer)
    left_out = left.summary(tuple(out)) if left is not None and out else cand.NO_LEFT_OUT
    return _price(job, todo, jc, name, spec_digest, left_out=left_out)


def _price(
    job: JobTerms,
    skeletons: Sequence[tuple[PoolOffer, _Skeleton]],
    jc: _JobCache,
    name: str | None,
    digest: bytes = b"",
    *,
    left_out: cand.LeftOut = cand.NO_LEFT_OUT,
) -> Plan:
    speeds: list[throughput.ThroughputEstimate | None] = [None] * len(jc.speeds)
    priced: list[_Priced | None] = [None] * len(jc.costs)
    steps: dict[int, int] = {}  # optimizer steps (or generate() calls) per data-parallel degree
    feasible: list[tuple[tuple[float, float, int, str], tuple[object, ...]]] = []
    rest: list[Candidate] = []
    for offer, sk in skeletons:
        _candidates(job, offer, sk, speeds=speeds, steps=steps, priced=priced, feasible=feasible, rest=rest)
    return _decide(job, feasible, rest, name, digest, left_out=left_out)


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
    jc = _JobCache()
    return _price(job, [(offer, _skeleton(job, offer, catalog, [devices], steps={}, jc=jc, cache=None))], jc, name)


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
