"""Plans as cache keys: a plan is named by a digest of what the planner reads of its spec
(``candidates.plan_key``), so that the memos keyed on plans (their ranking, their status form) and
the scheduler's plans by spec never compare two specs model by model, specs equal where the
planner reads (another team, priority, image) share one plan, and a spec changed where the planner
reads never gets a stale one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_operator.engine.plans import Plans
from accel_operator.planning import candidates, eligible, selection
from accel_operator.planning.cache import PlanCache
from accel_operator.reconcile.common.snapshot import Gang
from accel_operator.reconcile.job.status import plan_write
from tests.support import builders
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
    assert plan.digest == candidates.plan_key(b.spec, candidates.OWN_MAX_DEVICES)  # type: ignore[arg-type]


def test_a_changed_spec_gets_its_own_plan_and_status_form() -> None:
    w = _world()
    plans = Plans(catalog=catalog.default())
    job = w.job("a", "p", devices=8)
    snap = w.snapshot()
    first = plans.plan(job, snap)
    assert job.spec is not None and first is not None
    # A change the planner does not read (the priority): the same plan.
    reprioritised = dataclasses.replace(job, generation=2, spec=job.spec.model_copy(update={"priority": 5}))
    assert plans.plan(reprioritised, snap) is first
    # A change the planner reads but its figures do not show (a deadline no placement misses):
    # a plan of its own, whose status says what the first's says: one status form, written once.
    late = dataclasses.replace(job, generation=3, spec=job.spec.model_copy(update={"deadline": "8000h"}))
    second = plans.plan(late, snap)
    assert second is not None and second is not first and second.spec.deadline == "8000h"
    assert second != first and second.digest != first.digest
    assert plan_write(second, cache=plans.cache) is plan_write(first, cache=plans.cache)
    # A change the figures show (another pool): a plan for the new spec, never the old one's.
    moved = dataclasses.replace(job, generation=4, spec=job.spec.model_copy(update={"placement": _pinned(job, "q")}))
    third = plans.plan(moved, snap)
    assert third is not None and third.winner is not None and third.winner.pool == "q"
    assert plan_write(third, cache=plans.cache).wire["pool"] == "q"
    assert plans.plan(job, snap) is first  # the first generation's plan is still its own


def _pinned(job: Any, pool: str) -> Any:
    return job.spec.placement.model_copy(update={"pools": [pool]})


def test_looking_plans_up_never_compares_two_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _world()
    plans = Plans(catalog=catalog.default())
    jobs = [w.job(f"j{i}", "p", devices=8, deadline=f"{2000 + i}h") for i in range(40)]  # one figure set, 40 plans
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
    # Forty specs that differ in their deadline (one no placement misses), priority and team:
    # forty plans, one serialisation of their status; a spec whose figures differ (more tokens)
    # gets its own, with its figures.
    w = _world()
    plans = Plans(catalog=catalog.default())
    jobs = [w.job(f"j{i}", "p", devices=8, priority=i, team=f"t{i % 3}", deadline=f"{2000 + i}h") for i in range(40)]
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


# --- what the planner reads of a spec, and the plans it shares -----------------------------------


def _recording(model: Any, read: set[str], prefix: str = "") -> Any:
    """``model`` (a spec) as an instance that records each of its fields read, as ``name``; a
    field whose sub-fields alone are in the key (``PLANNED_FIELDS`` maps it to those) is itself
    recorded, its sub-fields read as ``name.sub``."""
    cls = type(model)
    fields = set(cls.model_fields)

    class Recording(cls):  # type: ignore[misc, valid-type]
        def __getattribute__(self, name: str) -> Any:
            if name in fields:
                read.add(prefix + name)
            return super().__getattribute__(name)

    values = {k: getattr(model, k) for k in fields}
    if not prefix:
        for name, sub in candidates.PLANNED_FIELDS.items():
            if isinstance(sub, Mapping) and values.get(name) is not None:
                values[name] = _recording(values[name], read, f"{name}.")
    out = Recording.model_construct(**values)
    out.__pydantic_fields_set__ = set(model.model_fields_set)
    return out


def _in_key(name: str) -> bool:
    top, _, sub = name.partition(".")
    want = candidates.PLANNED_FIELDS.get(top)
    return want is True or (isinstance(want, Mapping) and (not sub or sub in want))


def _specs() -> list[AcceleratorJobSpec]:
    b = builders.job
    return [
        b().spec(),
        b().arch(builders.LLAMA_8B).checkpoint(30.0).max_cost(50.0).deadline("48h").objective("time").spec(),
        b().parameters(7_000_000_000).spot("prefer", 3).checkpoint(10.0).placement(minDevices=2, maxDevices=16).spec(),
        b().inference(tokens=10**7).placement(acceleratorKinds=["tpu"], pools=["t0"]).spec(),
        b().spot("require").checkpoint(20.0).placement(acceleratorTypes=["h100-80gb"]).workload(sharding="fsdp").spec(),
    ]


def test_the_plan_key_holds_every_field_the_planner_reads() -> None:
    # Every field (and every sub-field of the checkpoint) the planner (selection.plan and what it
    # calls) reads of a spec is one the key digests: a field read but left out of PLANNED_FIELDS
    # would let two specs that plan differently share one plan. Fails when a read field is
    # dropped from the key (or the checkpoint's interval from its sub-fields).
    offers = [
        builders.pool("h0", max_nodes=2),
        builders.pool("s0", spot=True, max_nodes=4, preemption_rate=0.1),
        builders.pool("t0", "tpu-v5e", devices_per_node=4, topology="2x4"),
    ]
    cat = catalog.default()
    index = eligible.PoolIndex.of(((o.name, o.spec.accelerator) for o in offers), cat)
    names = tuple((o.name, o.spec.accelerator) for o in offers)
    read: set[str] = set()
    for spec in _specs():
        for cache in (None, PlanCache()):
            for kw in ({}, {"index": index}, {"index": index, "offered": names}):
                digest = candidates.plan_key(spec)
                selection.plan(_recording(spec, read), offers, cat, cache=cache, spec_digest=digest, **kw)
    assert sorted(r for r in read if not _in_key(r)) == []
    # The recording works: it sees the fields and the checkpoint's interval read.
    assert {"model", "workload", "placement", "spot", "checkpoint", "checkpoint.interval_minutes"} <= read


def test_a_checkpoint_path_is_not_in_the_key_and_its_interval_is() -> None:
    spec = builders.job().checkpoint(30.0).spec()
    assert spec.checkpoint is not None
    moved = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(update={"uri": "s3://other/team"})})
    oftener = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(update={"interval_minutes": 10.0})})
    assert candidates.plan_key(moved) == candidates.plan_key(spec)
    assert candidates.plan_key(oftener) != candidates.plan_key(spec)
    assert candidates.plan_key(builders.job().spec()) != candidates.plan_key(spec)  # none at all


@pytest.mark.parametrize("field", sorted(candidates.PLANNED_FIELDS))
def test_a_spec_changed_in_any_planned_field_gets_another_key(field: str) -> None:
    a, *others = _specs()
    b = next(o for o in others if getattr(o, field) != getattr(a, field))
    changed = a.model_copy(update={field: getattr(b, field)})
    assert candidates.plan_key(changed) != candidates.plan_key(a)


def test_jobs_of_one_template_in_other_teams_share_one_plan_and_write_their_own_status() -> None:
    # One template, 12 jobs in three teams at four priorities with two images: one plan, and each
    # job's status plan is the one its own spec planned alone gives.
    w = _world()
    plans = Plans(catalog=catalog.default())
    jobs = [
        w.job(f"j{i}", "p", devices=8, team=f"t{i % 3}", priority=10 * (i % 4), image=f"img:{i % 2}") for i in range(12)
    ]
    snap = w.snapshot()
    made = [plans.plan(j, snap) for j in jobs]
    assert len({id(p) for p in made}) == 1 and len(plans.by_spec) == 1
    for job, plan in zip(jobs, made, strict=True):
        assert job.spec is not None and plan is not None
        alone = Plans(catalog=catalog.default()).plan(job, snap)
        assert alone is not None and alone.spec == job.spec and alone.digest == plan.digest
        # The same plan but for the spec it holds (the first job's): every candidate's figures,
        # checks, notes and rank, the reason, and the status form.
        assert _figures(alone) == _figures(plan) and alone.reason == plan.reason and alone.profile == plan.profile
        assert plan_write(alone, cache=None).wire == plan_write(plan, cache=plans.cache).wire


def _figures(plan: candidates.Plan) -> list[tuple[Any, ...]]:
    return [
        (c.pool, c.devices, c.nodes, c.capacity_type, c.memory, c.speed, c.cost, c.failed, c.notes, c.rank)
        for c in plan.candidates
    ]


def test_a_team_a_grant_leaves_other_pools_gets_its_own_plan() -> None:
    # The team acts through the policy's grants: a team granted only "q" is planned over "q"
    # alone, even where its spec equals another team's granted every pool.
    w = _world().policy("grants", poolAccess=[{"teams": ["a"], "pools": ["q"]}, {"teams": ["b"], "pools": ["*"]}])
    plans = Plans(catalog=catalog.default())
    ja = w.job("ja", "p", devices=8, team="a", pinned=False)
    jb = w.job("jb", "p", devices=8, team="b", pinned=False)
    snap = w.snapshot()
    pa, pb = plans.plan(ja, snap), plans.plan(jb, snap)
    assert pa is not None and pb is not None and pa is not pb and pa.digest != pb.digest
    assert {c.pool for c in pa.candidates} == {"q"} and {c.pool for c in pb.candidates} == {"p", "q"}


def test_a_policy_cap_is_part_of_the_plan_key() -> None:
    # A cap lowers maxDevices and names its policy in the planner's sentences: another key.
    w = _world()
    plans = Plans(catalog=catalog.default())
    placement = {"pools": ["p"], "minDevices": 1, "maxDevices": 16}
    job = w.job("a", "p", placement=placement)
    free = plans.plan(job, w.snapshot())
    capped_world = _world().policy("cap", maxDevicesPerJob=4)
    capped_job = capped_world.job("a", "p", placement=placement)
    plans.pools_changed()  # as the policy handler does
    capped = plans.plan(capped_job, capped_world.snapshot())
    assert free is not None and capped is not None and capped.digest != free.digest
    assert capped.spec.placement.max_devices == 4
