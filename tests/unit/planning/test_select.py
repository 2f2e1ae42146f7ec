"""Pool selection: objective, spot policy, deadline, maxCost, placement, reasons, status and JSON shape."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_api import catalog
from accel_api.enums import CapacityType
from accel_api.job import AcceleratorJobSpec, PlanStatus
from accel_operator.cli import render
from accel_operator.planning import candidates, explain, selection
from accel_operator.planning.cache import PlanCache
from accel_operator.reconcile.job.status import plan_status
from tests.support.builders import LLAMA_1B, LLAMA_8B, LLAMA_125M, job, pool

CAT = catalog.default()

POOLS = [
    pool("h100-od", "h100-80gb", max_nodes=2),
    pool("h100-spot", "h100-80gb", spot=True, max_nodes=2, preemption_rate=0.05),
    pool("a100-od", "a100-80gb", max_nodes=2),
    pool("l4-od", "l4", devices_per_node=4, max_nodes=2),
]


def winner(p: candidates.Plan) -> candidates.Candidate:
    assert p.winner is not None, p.reason
    return p.winner


def test_cost_objective_picks_the_cheapest_feasible_placement() -> None:
    p = selection.plan(job().checkpoint().spot("prefer").spec(), POOLS, CAT)
    w = winner(p)
    feasible = [c for c in p.candidates if c.feasible]
    assert w.cost is not None
    assert all(
        w.cost.expected_usd <= c.cost.expected_usd * (1 + 1e-9)
        for c in feasible
        if c.cost is not None and c.capacity_type is w.capacity_type
    )
    assert w.rank == 1 and explain.reasons(w) == ()


def test_time_objective_picks_the_fastest() -> None:
    p = selection.plan(job().objective("time").spec(), POOLS, CAT)
    w = winner(p)
    assert w.cost is not None
    assert all(w.cost.expected_seconds <= c.cost.expected_seconds for c in p.candidates if c.feasible and c.cost)
    assert w.devices == 16  # the most devices the pools offer


def test_spot_never_uses_only_on_demand_pools() -> None:
    p = selection.plan(job().spot("never").spec(), POOLS, CAT)
    assert winner(p).capacity_type is CapacityType.ON_DEMAND
    spot = [c for c in p.candidates if c.pool == "h100-spot"]
    assert spot and all(not c.feasible and "spot.policy is never" in "; ".join(explain.reasons(c)) for c in spot)


def test_spot_require_uses_only_spot_pools() -> None:
    p = selection.plan(job().spot("require").checkpoint().spec(), POOLS, CAT)
    assert winner(p).pool == "h100-spot"
    assert all("spot.policy is require" in "; ".join(explain.reasons(c)) for c in p.candidates if c.pool != "h100-spot")


def test_spot_prefer_without_a_checkpoint_refuses_spot_with_a_reason() -> None:
    p = selection.plan(job().spot("prefer").spec(), POOLS, CAT)
    assert winner(p).capacity_type is CapacityType.ON_DEMAND
    spot = next(c for c in p.candidates if c.pool == "h100-spot")
    assert "without spec.checkpoint" in explain.reasons(spot)[0]


def test_spot_prefer_wins_close_calls() -> None:
    # Same price on both capacity types: spot's preemption overhead makes it slightly dearer,
    # and the preference still picks it.
    pools = [pool("od", price=2.5), pool("sp", spot=True, price=2.5, preemption_rate=0.01)]
    p = selection.plan(job().spot("prefer").checkpoint(10).spec(), pools, CAT)
    assert winner(p).pool == "sp"
    od = next(c for c in p.candidates if c.pool == "od" and c.rank is not None)
    assert "spot.policy prefer" in explain.reasons(od)[0]


def test_an_unreachable_deadline_is_unschedulable_with_a_reason_for_every_pool() -> None:
    p = selection.plan(job().workload(tokens=10**12).deadline("1h").spec(), POOLS, CAT)
    assert not p.schedulable and p.winner is None
    reasons = dict(explain.pool_reasons(p))
    assert set(reasons) == {"h100-od", "h100-spot", "a100-od", "l4-od"}
    assert "misses deadline 1h: takes" in reasons["h100-od"]
    assert p.reason.startswith("no feasible placement in 4 pools")
    status = plan_status(p)
    assert status.pool is None and status.reason == p.reason
    assert {a.pool for a in status.alternatives} == set(reasons)


def test_max_cost_makes_it_unschedulable() -> None:
    p = selection.plan(job().workload(tokens=10**11).max_cost(100).spec(), POOLS, CAT)
    assert not p.schedulable
    assert all("> maxCost $100" in why for _, why in explain.pool_reasons(p) if "memory" not in why)


def test_nothing_fits_is_unschedulable_not_an_exception() -> None:
    p = selection.plan(job().arch(LLAMA_8B).workload(microBatch=8, seqLen=8192).spec(), POOLS, CAT)
    assert not p.schedulable
    assert all("GB per device >" in why for _, why in explain.pool_reasons(p))


@pytest.mark.parametrize(
    ("placement", "allowed"),
    [
        ({"maxDevices": 1}, lambda c: c.devices == 1),
        ({"minDevices": 8}, lambda c: c.devices >= 8),
        ({"maxNodes": 1}, lambda c: c.nodes == 1),
        ({"acceleratorTypes": ["a100-80gb"]}, lambda c: c.accelerator == "a100-80gb"),
        ({"acceleratorKinds": ["tpu"]}, lambda c: False),
        ({"pools": ["l4-od"]}, lambda c: c.pool == "l4-od"),
    ],
)
def test_placement_constraints(placement: dict[str, object], allowed: object) -> None:
    spec = job().arch(LLAMA_125M).workload(microBatch=4, seqLen=1024).placement(**placement).spec()
    p = selection.plan(spec, POOLS, CAT)
    for c in p.candidates:
        if c.feasible:
            assert allowed(c), c  # type: ignore[operator]
    if placement == {"acceleratorKinds": ["tpu"]}:
        assert not p.schedulable
        assert "placement.acceleratorKinds is tpu" in p.reason


def test_losers_say_why_they_lost() -> None:
    p = selection.plan(job().arch(LLAMA_125M).workload(microBatch=4, seqLen=1024).spec(), POOLS, CAT)
    w = winner(p)
    for c in p.candidates:
        if c is w:
            continue
        assert explain.reasons(c), c
        if c.rank is not None:
            assert w.label in explain.reasons(c)[0]
            assert "the cost of" in explain.reasons(c)[0] or "same cost" in explain.reasons(c)[0]


def test_device_counts_are_powers_of_two_then_whole_nodes() -> None:
    assert selection.device_counts(pool("p", devices_per_node=8, max_nodes=4).spec) == [1, 2, 4, 8, 16, 32]
    assert selection.device_counts(pool("p", devices_per_node=4, max_nodes=6).spec) == [1, 2, 4, 8, 16]
    assert selection.device_counts(pool("t", "tpu-v5e", devices_per_node=4, max_nodes=16, topology="2x4").spec) == [
        8,
        16,
        32,
        64,
    ]


def test_unknown_accelerator_is_a_reason_not_an_error() -> None:
    p = selection.plan(job().spec(), [pool("x", "mi300x")], CAT)
    assert not p.schedulable
    assert "not in the catalog" in p.reason


def test_no_pools() -> None:
    p = selection.plan(job().spec(), [], CAT)
    assert not p.schedulable and p.reason == "no pools to consider"


def test_observed_preemption_rate_wins_over_the_spec() -> None:
    calm = selection.plan(job().spot("require").checkpoint().spec(), [pool("s", spot=True, preemption_rate=0.01)], CAT)
    stormy = selection.plan(
        job().spot("require").checkpoint().spec(), [pool("s", spot=True, preemption_rate=0.01, observed_rate=0.5)], CAT
    )
    assert winner(stormy).cost.expected_usd > winner(calm).cost.expected_usd  # type: ignore[union-attr]


def test_max_preemptions() -> None:
    p = selection.plan(
        job().workload(tokens=10**11).spot("require", max_preemptions=0).checkpoint().spec(),
        [pool("s", spot=True, preemption_rate=0.5)],
        CAT,
    )
    assert not p.schedulable
    assert "> spot.maxPreemptions 0" in p.reason


def test_status_shape() -> None:
    p = selection.plan(job().spec(), POOLS, CAT, name="j")
    status = plan_status(p)
    assert isinstance(status, PlanStatus)
    w = winner(p)
    assert (status.pool, status.devices, status.accelerator) == (w.pool, w.devices, w.accelerator)
    assert status.peak_allocated_bytes_per_device and status.footprint_bytes_per_device
    assert status.cost_usd and status.duration_seconds and status.tokens_per_second
    assert status.reason == p.reason and status.alternatives
    assert len({a.pool for a in status.alternatives}) == len(status.alternatives)
    PlanStatus.model_validate(status.to_wire())  # round-trips through the CRD's wire form


CANDIDATE_KEYS = {
    "pool",
    "accelerator",
    "devices",
    "nodes",
    "capacityType",
    "fits",
    "peakAllocatedBytes",
    "footprintBytes",
    "stepSeconds",
    "tokensPerSecond",
    "durationSeconds",
    "costUSD",
    "reasons",
    "rank",
}


def test_json_contract() -> None:
    out = json.loads(json.dumps(render.plan_json(selection.plan(job().spec(), POOLS, CAT, name="j"))))
    assert set(out) == {"job", "candidates", "decision"}
    assert out["job"]["name"] == "j"
    for c in out["candidates"]:
        assert set(c) >= CANDIDATE_KEYS, CANDIDATE_KEYS - set(c)
        assert isinstance(c["fits"], bool) and isinstance(c["reasons"], list)
        assert set(c["costUSD"]) >= {"onDemand", "spot", "expected"}
        assert (c["rank"] == 1) == (c["reasons"] == [])
    d = out["decision"]
    assert d["schedulable"] is True
    assert {"pool", "accelerator", "devices", "capacityType", "reason"} <= set(d)
    ranks = [c["rank"] for c in out["candidates"] if c["rank"] is not None]
    assert ranks == list(range(1, len(ranks) + 1))


def test_evaluate_one_placement() -> None:
    p = selection.evaluate(job().spec(), "h100-80gb", 8, CAT)
    assert len(p.candidates) == 1
    assert winner(p).devices == 8 and winner(p).nodes == 1
    bad = selection.evaluate(job().spec(), "h100-80gb", 3, CAT)
    assert bad.schedulable  # 3 devices on one node is a valid data-parallel layout
    tp = selection.evaluate(job().workload(tensorParallel=4).spec(), "h100-80gb", 6, CAT)
    assert not tp.schedulable and "not a multiple of tensorParallel 4" in tp.reason


def test_default_pools_cover_the_catalog() -> None:
    pools = selection.default_pools(CAT)
    assert len(pools) == 2 * len(CAT.ids())
    assert {p.spec.capacity_type for p in pools} == {CapacityType.SPOT, CapacityType.ON_DEMAND}


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.integers(10**6, 10**12),
    micro_batch=st.integers(1, 16),
    objective=st.sampled_from(["cost", "time"]),
    policy=st.sampled_from(["never", "prefer", "require"]),
    deadline=st.sampled_from([None, "1h", "1d", "30d"]),
)
def test_planning_never_raises_and_costs_are_non_negative(
    tokens: int, micro_batch: int, objective: str, policy: str, deadline: str | None
) -> None:
    b = job().workload(tokens=tokens, microBatch=micro_batch).objective(objective).spot(policy).checkpoint()
    if deadline:
        b = b.deadline(deadline)
    p = selection.plan(b.spec(), POOLS, CAT)
    for c in p.candidates:
        if c.cost is not None:
            assert c.cost.expected_usd >= 0 and c.cost.on_demand_usd >= 0 and c.cost.spot_usd >= 0
        assert c.feasible or explain.reasons(c)
    assert p.schedulable == any(c.feasible for c in p.candidates)
    json.dumps(render.plan_json(p))
    plan_status(p)


def test_free_capacity_is_noted_not_refused() -> None:
    p = selection.plan(job().spec(), [pool("h", max_nodes=2, free_devices=4)], CAT)
    eight = next(c for c in p.candidates if c.devices == 8)
    assert eight.feasible and "4 devices free now" in eight.notes[0]


def _precision_job(precision: str) -> AcceleratorJobSpec:
    return AcceleratorJobSpec.model_validate(
        {
            "team": "t",
            "image": "i",
            "model": {"architecture": {"layers": 4, "hidden": 512, "heads": 8, "vocab": 32000}},
            "workload": {"precision": precision, "tokens": 10**6},
        }
    )


@pytest.mark.parametrize(
    ("precision", "accelerator", "problem"),
    [
        ("fp8", "a100-80gb", "precision fp8 needs FP8 tensor cores; a100-80gb has none"),
        ("fp8", "a10g", "precision fp8 needs FP8 tensor cores; a10g has none"),
        ("fp8", "t4", "precision fp8 needs FP8 tensor cores; t4 has none"),
        ("fp8", "rtx-a6000", "precision fp8 needs FP8 tensor cores; rtx-a6000 has none"),
        ("amp-bf16", "t4", "precision amp-bf16 needs bf16; t4 has none"),
        ("bf16", "t4", "precision bf16 needs bf16; t4 has none"),
    ],
)
def test_precision_the_accelerator_lacks_is_refused(precision: str, accelerator: str, problem: str) -> None:
    plan = selection.evaluate(_precision_job(precision), accelerator, 1, catalog.default())
    assert not plan.schedulable
    assert any(problem in p for c in plan.candidates for p in c.source.problems)


@pytest.mark.parametrize(
    ("precision", "accelerator"),
    [("fp8", "h100-80gb"), ("fp8", "l4"), ("fp8", "l40s"), ("fp8", "rtx-4090"), ("amp-fp16", "t4")],
)
def test_precision_the_accelerator_has_is_planned(precision: str, accelerator: str) -> None:
    assert selection.evaluate(_precision_job(precision), accelerator, 1, catalog.default()).schedulable


def test_a_pool_network_overrides_the_catalog_default() -> None:
    spec = job().arch(LLAMA_8B).workload(microBatch=1, seqLen=2048).placement(minDevices=32).spec()
    slow, fast = pool("slow", max_nodes=4), pool("fast", max_nodes=4)
    fast = candidates.PoolOffer(name="fast", spec=fast.spec.model_copy(update={"inter_node_bytes_per_second": 100e9}))
    plan = selection.plan(spec, [slow, fast], catalog.default())
    speed = {c.pool: c.speed.tokens_per_second for c in plan.candidates if c.devices == 32 and c.speed}
    assert speed["fast"] > speed["slow"] * 1.02


def test_megatron_on_a_tpu_pool_is_refused_with_a_reason() -> None:
    spec = job().arch(LLAMA_1B).workload(framework="megatron").spec()
    plan = selection.evaluate(spec, "tpu-v5p", 4, catalog.default())
    assert not plan.schedulable
    problem = "framework megatron runs on GPUs (CUDA); tpu-v5p is a TPU (use maxtext)"
    assert any(problem in p for c in plan.candidates for p in c.source.problems)
    maxtext = job().arch(LLAMA_1B).workload(framework="maxtext", sharding="fsdp").spec()
    assert selection.evaluate(maxtext, "tpu-v5p", 4, catalog.default()).schedulable


def test_a_model_parallel_group_that_is_not_a_power_of_two_is_offered_whole_nodes() -> None:
    # tensorParallel 8 × pipelineParallel 3 = 24 GPUs per replica: 3, 6, 12 ... nodes of 8.
    spec = job().arch(LLAMA_8B).workload(tensorParallel=8, pipelineParallel=4, gradientAccumulation=8).spec()
    three = job().arch(LLAMA_8B).workload(tensorParallel=8, pipelineParallel=3, gradientAccumulation=8).spec()
    pools = [pool("h100-od", "h100-80gb", max_nodes=16)]
    counts = sorted({c.devices for c in selection.plan(three, pools, CAT).candidates if c.speed is not None})
    assert counts == [24, 48, 96]
    assert {c.devices for c in selection.plan(spec, pools, CAT).candidates if c.speed is not None} == {32, 64, 128}


def _summary(p: candidates.Plan) -> list[tuple[object, ...]]:
    return [
        (c.pool, c.devices, c.failed, c.rank, c.cost.expected_usd if c.cost else None, c.notes, explain.reasons(c))
        for c in p.candidates
    ]


def test_pool_skeletons_reused_across_plans_give_the_plan_made_afresh() -> None:
    # plan() keeps each pool's token-independent terms per job-less-its-tokens in its cache and
    # reuses them for pools of equal values (new objects too); a job that differs in anything
    # else they depend on gets its own.
    base = job().arch(LLAMA_1B).workload(microBatch=4, seqLen=2048).checkpoint().spot("prefer")
    variants = [
        base.spec(),
        base.workload(tokens=3 * 10**9).spec(),
        base.placement(maxDevices=2).spec(),
        base.placement(minDevices=8).spec(),
        job().arch(LLAMA_1B).workload(microBatch=4, seqLen=2048).spot("prefer").spec(),  # no checkpoint
        base.checkpoint(5).spec(),
        base.spot("never").spec(),
        base.workload(microBatch=8).spec(),
        base.workload(precision="fp32").spec(),
        base.max_cost(50).spec(),
    ]
    cache = PlanCache()
    sizes = []
    for spec in variants * 2:  # the second round reuses every skeleton the first made
        again = selection.plan(spec, POOLS, CAT, cache=cache)
        copies = selection.plan(spec, [dataclasses.replace(o) for o in POOLS], CAT, cache=cache)  # equal values
        fresh = selection.plan(spec, POOLS, CAT)  # no cache
        assert _summary(again) == _summary(copies) == _summary(fresh)
        sizes.append(sum(len(c.skeletons) for c in cache.memo(selection._JOBS).values()))
    assert sizes[len(variants) - 1] == sizes[-1]  # the second round made no skeleton
    # The same pool observed with fewer free devices shares its skeleton: its note follows the offer.
    busy = [dataclasses.replace(o, free_devices=1) for o in POOLS]
    busy_plan = selection.plan(variants[0], busy, CAT, cache=cache)
    assert any("devices free now" in n for c in busy_plan.candidates for n in c.notes)
    assert sum(len(c.skeletons) for c in cache.memo(selection._JOBS).values()) == sizes[-1]
