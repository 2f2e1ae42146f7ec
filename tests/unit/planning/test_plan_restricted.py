"""The planner over the pools a job may use gives the plan the planner over every pool gave.

With a :class:`eligible.PoolIndex`, ``selection.plan`` plans only the pools that the job's
placement filters (``placement.pools``, ``acceleratorKinds``, ``acceleratorTypes``) leave it, and
builds nothing for the other pools: the plan's ``left_out`` counts them per reason (the filters'
sentences) with the first few names. Over random jobs and random fleets: the same winner (pool,
devices, nodes, spot, price, duration), the same ranked candidates, every candidate of every pool
left to the job unchanged (a pool the restriction dropped that the job could use fails here),
every other pool counted under exactly the filters' sentences the full planner wrote first for
it, and ``status.plan`` with the same alternatives among the pools weighed and the left-out pools
counted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_operator.planning import candidates, eligible, explain, selection
from accel_operator.planning.cache import PlanCache
from accel_operator.reconcile.job.status import plan_status
from tests.support.builders import LLAMA_1B, LLAMA_8B, LLAMA_125M, job, pool

CAT = catalog.default()
CACHE = PlanCache()  # one for the module, as the scheduler keeps one

# Pool templates a fleet is drawn from: GPU and TPU, spot and on-demand, a stated price, a
# preemption rate, an accelerator the catalog lacks.
TEMPLATES: list[dict[str, Any]] = [
    {"accelerator": "h100-80gb", "max_nodes": 4},
    {"accelerator": "h100-80gb", "spot": True, "max_nodes": 8, "preemption_rate": 0.05},
    {"accelerator": "h100-80gb", "max_nodes": 2, "price": 2.5},
    {"accelerator": "a100-80gb", "max_nodes": 16},
    {"accelerator": "a100-80gb", "spot": True, "max_nodes": 4, "preemption_rate": 0.1},
    {"accelerator": "l4", "devices_per_node": 4, "max_nodes": 4},
    {"accelerator": "tpu-v5e", "devices_per_node": 4, "max_nodes": 8, "topology": "2x4"},
    {"accelerator": "tpu-v5e", "spot": True, "devices_per_node": 4, "max_nodes": 4, "topology": "2x4"},
    {"accelerator": "tpu-v5p", "devices_per_node": 4, "max_nodes": 4},
    {"accelerator": "no-such-accelerator", "max_nodes": 2},
]
FILTERS = ("not in placement.pools (", "; placement.acceleratorKinds is ", " not in placement.acceleratorTypes (")


@st.composite
def _fleets(draw: st.DrawFn) -> list[candidates.PoolOffer]:
    picks = draw(st.lists(st.sampled_from(range(len(TEMPLATES))), min_size=1, max_size=12))
    out = []
    for i, t in enumerate(picks):
        offer = pool(f"p{i:02d}-{TEMPLATES[t]['accelerator']}", **TEMPLATES[t])
        if draw(st.integers(0, 3)) == 0:
            offer = dataclasses.replace(offer, free_devices=draw(st.integers(0, 16)))
        out.append(offer)
    return sorted(out, key=lambda o: o.name)  # as the scheduler offers them


@st.composite
def _cases(draw: st.DrawFn) -> tuple[AcceleratorJobSpec, list[candidates.PoolOffer]]:
    fleet = draw(_fleets())
    b = job().arch(draw(st.sampled_from([LLAMA_125M, LLAMA_1B, LLAMA_8B])))
    b.objective(draw(st.sampled_from(["cost", "time"])))
    b.spot(draw(st.sampled_from(["never", "prefer", "require"])), draw(st.sampled_from([None, 3])))
    if draw(st.booleans()):
        b.checkpoint(30.0)
    if draw(st.booleans()):
        b.max_cost(draw(st.sampled_from([5.0, 500.0])))
    placement: dict[str, Any] = {}
    if draw(st.booleans()):
        names = [o.name for o in fleet] + ["ghost"]  # a pool that does not exist
        placement["pools"] = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    if draw(st.integers(0, 2)) == 0:
        placement["acceleratorKinds"] = draw(st.lists(st.sampled_from(["gpu", "tpu"]), min_size=1, unique=True))
    if draw(st.integers(0, 3)) == 0:
        kinds = ["h100-80gb", "a100-80gb", "l4", "tpu-v5e"]
        placement["acceleratorTypes"] = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=2, unique=True))
    if draw(st.booleans()):
        placement["minDevices"] = draw(st.sampled_from([1, 2, 8, 16]))
    b.placement(**placement)
    try:
        return b.spec(), fleet
    except ValueError:  # a combination the API refuses
        reject()


def _index(offers: list[candidates.PoolOffer]) -> eligible.PoolIndex:
    return eligible.PoolIndex.of(((o.name, o.spec.accelerator) for o in offers), CAT)


def _by_pool(plan: candidates.Plan) -> dict[str, list[candidates.Candidate]]:
    out: dict[str, list[candidates.Candidate]] = {}
    for c in plan.candidates:
        out.setdefault(c.pool, []).append(c)
    return out


def _same_where_it_matters(spec: AcceleratorJobSpec, offers: list[candidates.PoolOffer]) -> None:
    full = selection.plan(spec, offers, CAT)
    index = _index(offers)
    got = selection.plan(spec, offers, CAT, cache=CACHE, index=index)
    # The scheduler's way (the offered pools' names kept, the pools left out found once per
    # placement and list of offered pools) plans the same, candidate for candidate.
    names = tuple((o.name, o.spec.accelerator) for o in offers)
    for _ in range(2):  # made, then found again
        kept = selection.plan(spec, offers, CAT, cache=CACHE, index=index, offered=names)
        assert kept == got and kept.candidates == got.candidates and kept.left_out == got.left_out
    # The same decision: winner and every ranked candidate (figures, rank, who it lost to).
    assert got.winner == full.winner
    ranked = [c for c in got.candidates if c.rank is not None]
    assert ranked == [c for c in full.candidates if c.rank is not None]
    if full.schedulable:
        assert got.reason == full.reason
    else:
        assert got.reason.split(":")[0] == full.reason.split(":")[0]  # "no feasible placement in N pools"
    # The pools the filters leave out are counted, not planned; the others are planned as before.
    mine, theirs = _by_pool(got), _by_pool(full)
    filtered = {
        name: why
        for name, want in theirs.items()
        if (why := tuple(p for p in want[0].source.problems if any(f in p for f in FILTERS)))
    }
    assert list(mine) == [name for name in theirs if name not in filtered]
    for name in mine:
        assert mine[name] == theirs[name], name
    left = got.left_out
    assert left.count == len(filtered) == sum(g.total for g in left.groups)
    for g in left.groups:
        members = [name for name in theirs if filtered.get(name) == g.reasons]  # in the order offered
        assert g.total == len(members) and g.pools == tuple(members[: candidates.LEFT_OUT_SAMPLE])
    assert [g.total for g in left.groups] == sorted((g.total for g in left.groups), reverse=True)
    # status.plan: the same pick and figures, the same alternatives among the pools weighed, and
    # the left-out pools counted per reason.
    weighed = dataclasses.replace(full, candidates=tuple(c for c in full.candidates if c.pool not in filtered))
    a, b = plan_status(got), plan_status(weighed)
    for key in ("pool", "devices", "nodes", "spot", "cost_usd", "duration_seconds", "accelerator"):
        assert getattr(a, key) == getattr(b, key), key
    assert a.alternatives == b.alternatives
    if filtered:
        assert a.left_out is not None and a.left_out.count == len(filtered)
        assert [r.reason for r in a.left_out.by_reason] == ["; ".join(g.reasons) for g in left.groups][:8]
        assert explain.left_out(left)
    else:
        assert a.left_out is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_cases())
def test_random_jobs_and_fleets_plan_as_over_every_pool(case: tuple[AcceleratorJobSpec, list[Any]]) -> None:
    _same_where_it_matters(*case)


def test_a_pinned_job_plans_only_its_pool_and_counts_the_others() -> None:
    offers = [pool(f"h{i}", max_nodes=2) for i in range(8)]
    offers.append(pool("t0", "tpu-v5e", devices_per_node=4, topology="2x4"))
    spec = job().arch(LLAMA_125M).placement(pools=["h3"]).spec()
    got = selection.plan(spec, offers, CAT, index=_index(offers))
    assert got.winner is not None and got.winner.pool == "h3"
    assert {c.pool for c in got.candidates} == {"h3"}  # nothing built for the other pools
    assert got.left_out == candidates.LeftOut(
        8, (candidates.LeftOutGroup(("not in placement.pools (h3)",), 8, ("h0", "h1", "h2", "h4", "h5")),)
    )
    status = plan_status(got)
    assert status.left_out is not None and status.left_out.model_dump(by_alias=True) == {
        "count": 8,
        "byReason": [{"reason": "not in placement.pools (h3)", "count": 8, "pools": ["h0", "h1", "h2", "h4", "h5"]}],
    }
    _same_where_it_matters(spec, offers)


def test_no_pool_of_the_kind_says_so() -> None:
    offers = [pool("h0"), pool("a0", "a100-80gb"), pool("t0", "tpu-v5e", devices_per_node=4, topology="2x4")]
    spec = job().arch(LLAMA_125M).placement(acceleratorKinds=["tpu"], pools=["t0"]).spec()
    got = selection.plan(spec, offers, CAT, index=_index(offers))
    assert got.schedulable
    spec = job().arch(LLAMA_125M).placement(acceleratorKinds=["tpu"]).spec()
    got = selection.plan(spec, offers[:2], CAT, index=_index(offers))
    assert not got.schedulable and not got.candidates
    assert got.reason == "no feasible placement in 2 pools: h0, a0: gpu pool; placement.acceleratorKinds is tpu"


def test_many_left_out_pools_are_named_in_a_bounded_sentence() -> None:
    # 40 GPU pools of four accelerators, a job that takes TPUs only and names one pool that is
    # not there: every pool is left out, the sentence names three groups and counts the rest.
    kinds = ["h100-80gb", "a100-80gb", "l4", "h200-141gb"]
    offers = [pool(f"g{i:02d}", kinds[i % 4]) for i in range(40)]
    spec = job().arch(LLAMA_125M).placement(acceleratorTypes=["tpu-v5e"]).spec()
    got = selection.plan(spec, offers, CAT, index=_index(offers))
    assert got.left_out.count == 40 and len(got.left_out.groups) == 4
    assert got.reason.startswith("no feasible placement in 40 pools: g00, g04, g08, g12, g16 and 5 more: ")
    assert got.reason.endswith("; and 10 more pools left out by the placement")
    assert len(got.reason) < 1000


def test_a_stale_index_plans_the_pool_in_full() -> None:
    # The index was built when "p1" held TPUs; it now holds H100s the job may use (kind gpu).
    old = [pool("p0"), pool("p1", "tpu-v5e", devices_per_node=4, topology="2x4")]
    new = [pool("p0", price=90.0), pool("p1")]
    spec = job().arch(LLAMA_125M).placement(acceleratorKinds=["gpu"]).spec()
    got = selection.plan(spec, new, CAT, index=_index(old))
    assert got.winner is not None and got.winner.pool == "p1"
    assert got == selection.plan(spec, new, CAT)
    names = tuple((o.name, o.spec.accelerator) for o in new)
    kept = selection.plan(spec, new, CAT, index=_index(old), offered=names)
    assert kept == got and kept.candidates == got.candidates
