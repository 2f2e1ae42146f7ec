"""The PlanCache: bounded memos keyed on values, filled only through the ``cache=`` a caller passes."""

from __future__ import annotations

import dataclasses

from accel_api import catalog
from accel_operator.planning import blocks, candidates, selection
from accel_operator.planning.cache import Kind, Memo, PlanCache, memoised
from accel_operator.reconcile.job.status import plan_status, plan_wire
from tests.support.builders import LLAMA_1B, job, pool

CAT = catalog.default()
POOLS = [pool("h100", max_nodes=2), pool("a100", "a100-80gb", max_nodes=2), pool("spot", spot=True, max_nodes=2)]


def test_a_memo_drops_its_oldest_entry_past_its_limit() -> None:
    memo: Memo[str, int] = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    memo.put("b", 3)  # replaced, not added
    assert (memo.get("a"), memo.get("b"), len(memo)) == (1, 3, 2)
    memo.put("c", 4)
    assert (memo.get("a"), memo.get("b"), memo.get("c"), len(memo)) == (None, 3, 4, 2)


def test_a_memoised_function_keeps_results_only_in_the_cache_it_is_passed() -> None:
    calls: list[tuple[int, int]] = []

    @memoised(8)
    def add(x: int, y: int, *, cache: PlanCache | None = None) -> int:
        calls.append((x, y))
        return x + y

    assert add(1, 2) == add(1, 2) == 3
    assert len(calls) == 2  # no cache: computed each time
    one, two = PlanCache(), PlanCache()
    assert add(1, 2, cache=one) == add(1, 2, cache=one) == add(1, 2, cache=two) == 3
    assert len(calls) == 4  # once per cache
    assert sum(one.sizes().values()) == 1


def test_equal_values_share_an_entry() -> None:
    cache = PlanCache()
    shape = job().arch(LLAMA_1B).profile().shape
    first = blocks.block(shape, job().profile().numerics, job().profile().attention, 0.0, cache=cache)
    again = blocks.block(
        dataclasses.replace(shape), job().profile().numerics, job().profile().attention, 0.0, cache=cache
    )
    assert again is first  # a copy of the shape is the same key


def test_a_plan_made_through_a_cache_is_the_plan_made_without() -> None:
    cache = PlanCache()
    spec = job().arch(LLAMA_1B).checkpoint().spot("prefer").spec()
    with_cache = [selection.plan(spec, POOLS, CAT, cache=cache) for _ in range(2)]
    alone = selection.plan(spec, POOLS, CAT)
    assert with_cache[0] == with_cache[1] == alone
    assert cache.memo(selection._JOBS).values()  # the job's skeletons were kept


def test_a_plans_ranking_and_status_form_are_kept_per_plan_value() -> None:
    cache = PlanCache()
    spec = job().arch(LLAMA_1B).spec()
    plan = selection.plan(spec, POOLS, CAT)
    twin = selection.plan(spec, POOLS, CAT)  # another object, equal value
    assert twin is not plan and twin == plan and hash(twin) == hash(plan)
    ranked = candidates.ranked_per_pool(plan, cache=cache)
    assert candidates.ranked_per_pool(twin, cache=cache) is ranked
    assert ranked == candidates.ranked_per_pool(plan)
    chosen = ranked[-1]
    wire = plan_wire(plan, chosen, cache=cache)
    assert plan_wire(twin, chosen, cache=cache) is wire
    assert wire == plan_status(plan, chosen).model_dump(by_alias=True, mode="json") == plan_wire(plan, chosen)
    assert plan_wire(plan, cache=cache) == plan_wire(plan)
    other = selection.plan(job().arch(LLAMA_1B).workload(tokens=7 * 10**9).spec(), POOLS, CAT)
    assert plan_wire(other, cache=cache) is not plan_wire(plan, cache=cache)


def test_a_kind_is_a_value() -> None:
    assert Kind("x", 4) == Kind("x", 4)
    cache = PlanCache()
    assert cache.memo(Kind[str, int]("x", 4)) is cache.memo(Kind[str, int]("x", 4))
