"""Plans as cache keys: a plan is named by a digest of its spec, so that the memos keyed on plans
(their ranking, their status form) and the scheduler's plans by spec never compare two specs
model by model, while equal specs still share one plan and a changed spec never gets a stale one."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_operator.engine.plans import Plans
from accel_operator.planning import candidates
from accel_operator.reconcile.common.snapshot import Gang
from accel_operator.reconcile.job.status import plan_write
from tests.support.reconcile import World


def _world() -> World:
    return World().pool("p", nodes=2).pool("q", nodes=2)


def test_jobs_of_equal_specs_share_one_plan() -> None:
    w = _world()
    plans = Plans(catalog=catalog.default())
    a, b = w.job("a", "p", devices=8), w.job("b", "p", devices=8)
    assert a.spec is not b.spec and a.spec == b.spec  # two parses of one template
    snap = w.snapshot()
    plan = plans.plan(a, snap)
    assert plan is not None and plans.plan(b, snap) is plan
    assert plan.digest == candidates.spec_digest(b.spec)  # type: ignore[arg-type]


def test_a_changed_spec_gets_its_own_plan_and_status_form() -> None:
    w = _world()
    plans = Plans(catalog=catalog.default())
    job = w.job("a", "p", devices=8)
    snap = w.snapshot()
    first = plans.plan(job, snap)
    assert job.spec is not None and first is not None
    # A change the planner's figures do not show (the priority): its own plan all the same.
    reprioritised = dataclasses.replace(job, generation=2, spec=job.spec.model_copy(update={"priority": 5}))
    second = plans.plan(reprioritised, snap)
    assert second is not None and second is not first and second.spec.priority == 5
    assert second != first and second.digest != first.digest
    # Its status says what the first's says (the same figures): one status form, written once.
    assert plan_write(second, cache=plans.cache) is plan_write(first, cache=plans.cache)
    # A change the figures show (another pool): a plan for the new spec, never the old one's.
    moved = dataclasses.replace(job, generation=3, spec=job.spec.model_copy(update={"placement": _pinned(job, "q")}))
    third = plans.plan(moved, snap)
    assert third is not None and third.winner is not None and third.winner.pool == "q"
    assert plan_write(third, cache=plans.cache).wire["pool"] == "q"
    assert plans.plan(job, snap) is first  # the first generation's plan is still its own


def _pinned(job: Any, pool: str) -> Any:
    return job.spec.placement.model_copy(update={"pools": [pool]})


def test_looking_plans_up_never_compares_two_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _world()
    plans = Plans(catalog=catalog.default())
    jobs = [w.job(f"j{i}", "p", devices=8, priority=i) for i in range(40)]  # one figure set, 40 specs
    snap = w.snapshot()
    made = [plans.plan(j, snap) for j in jobs]

    def refuse(self: AcceleratorJobSpec, other: object) -> bool:
        raise AssertionError("a plan lookup compared two specs model by model")

    monkeypatch.setattr(AcceleratorJobSpec, "__eq__", refuse)
    for plan in [*made, *made]:
        assert plan is not None
        candidates.ranked_per_pool(plan, cache=plans.cache)
        plan_write(plan, cache=plans.cache)
    assert len({p.digest for p in made if p is not None}) == 40


def test_more_jobs_than_distinct_plans_keep_their_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound on distinct plans is not a bound on the jobs that hold one: a queue longer than
    the plans kept (one template, many jobs) keeps every job's plan, so a waiting job is still
    found planned (and skippable) on the next pass; only a new spec beyond the bound starts the
    plans by spec again, and the jobs already planned keep theirs."""
    monkeypatch.setattr("accel_operator.engine.plans.MAX_PLANS", 2)
    w = _world()
    plans = Plans(catalog=catalog.default())
    snap = w.snapshot()
    jobs = [w.job(f"j{i}", "p", devices=8) for i in range(5)]
    for job in jobs:
        plans.plan(job, snap)
    assert all(plans.entry(job) is not None for job in jobs)
    others = [w.job(f"k{i}", "p", devices=d) for i, d in enumerate((1, 2, 4))]  # three new specs
    for job in others:
        plans.plan(job, snap)
    assert len(plans.by_spec) <= 2
    assert all(plans.entry(job) is not None for job in [*jobs, *others])


def test_the_pools_offered_to_a_new_plan_are_read_again_only_where_capacity_changed() -> None:
    """A new plan is offered every pool with its free devices now; an admission replaces one
    pool's capacity, and only that pool's offer is made again (the others are not read again
    node by node), with the figures a fresh read gives."""
    w = _world()
    plans = Plans(catalog=catalog.default())
    snap = w.snapshot()
    first = plans.pool_offers(snap)
    assert [o.name for o in first] == ["p", "q"] and [o.free_devices for o in first] == [16, 16]
    after = snap.with_admission(("ns", "x"), "p", Gang(1, 8), None)
    second = plans.pool_offers(after)
    assert second[1] is first[1]  # q: the same capacity, the same offer
    assert second[0] is not first[0] and (second[0].free_devices, second[0].free_nodes) == (8, 1)


def test_the_plans_kept_whole_are_the_operators_setting() -> None:
    # ACCEL_OPERATOR_PLANS_KEPT bounds the plans kept whole: past it the plan used longest ago is
    # let go (its entry keeps what a pass reads), and is made again, equal, when asked for.
    from accel_operator.settings import OperatorSettings

    w = _world()
    w.settings = OperatorSettings(plans_kept=2)
    plans = w.scheduler.plans
    assert plans.max_built == 2
    jobs = [w.job(f"j{i}", "p", devices=2**i) for i in range(4)]  # four specs, four plans
    snap = w.snapshot()
    made = [plans.plan(j, snap) for j in jobs]
    assert len(plans.built) == 2 and [e.plan for e in plans.built.values()] == made[2:]
    entry = plans.entry(jobs[0])
    assert entry is not None and entry.plan is None and entry.shapes(plans.cache)
    assert plans.plan(jobs[0], snap) == made[0]
    with pytest.raises(ValueError, match="plans_kept"):
        OperatorSettings(plans_kept=-1)


def test_plans_that_say_the_same_share_one_status_form_and_others_do_not() -> None:
    # Forty specs that differ in their priority and team only: forty plans, one serialisation of
    # their status; a spec whose figures differ (more tokens) gets its own, with its figures.
    w = _world()
    plans = Plans(catalog=catalog.default())
    jobs = [w.job(f"j{i}", "p", devices=8, priority=i, team=f"t{i % 3}") for i in range(40)]
    snap = w.snapshot()
    made = [plans.plan(j, snap) for j in jobs]
    forms = {id(plan_write(p, cache=plans.cache)) for p in made if p is not None}
    assert len({p.digest for p in made if p is not None}) == 40 and len(forms) == 1
    seventh = made[7]
    assert seventh is not None
    fresh = plan_write(seventh, cache=None)  # made afresh: the same value
    shared = plan_write(seventh, cache=plans.cache)
    assert fresh.wire == shared.wire and fresh.model == shared.model and fresh.stored == shared.stored
    spec = jobs[0].spec
    assert spec is not None
    longer = w.job("long", "p", devices=8)
    longer = dataclasses.replace(
        longer, spec=spec.model_copy(update={"workload": spec.workload.model_copy(update={"tokens": 10**10})})
    )
    other = plans.plan(longer, snap)
    assert other is not None
    form = plan_write(other, cache=plans.cache)
    assert id(form) not in forms and form.wire["costUsd"] != shared.wire["costUsd"]
    assert form.wire == plan_write(other, cache=None).wire
