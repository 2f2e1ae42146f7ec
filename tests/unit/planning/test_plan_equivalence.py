"""The fast selection path gives the plan the unoptimised one gave, field for field.

``selection.plan`` caches per job less its tokens (in the PlanCache it is passed) and shares speeds
and prices between pools (skeletons, slot tables); ``tests/support/plan_reference.py`` is the selection as it was before
that work, every estimate made afresh. Both must give equal ``Plan`` values — every candidate, its
rank, cost, notes, failed checks and the candidate it lost to, the decision — and so the same
``status.plan`` and reasons, for the example jobs, the calibration and published rows, and random
specs, across the speed bench's 50 pools and a mix of pools built to share (or not) cost terms.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import candidates, explain, selection
from accel_operator.planning.cache import PlanCache
from accel_operator.reconcile.job.status import plan_status
from tests.support import plan_reference
from tests.support.builders import GPT2_355M, LLAMA_1B, LLAMA_8B, LLAMA_125M, job, pool

ROOT = Path(__file__).resolve().parents[3]
CAT = catalog.default()


def _bench(name: str) -> ModuleType:
    found = sys.modules.get(name)
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


BENCH_POOLS = _bench("plan_speed").pools(CAT)

# Pools that share cost terms (the same accelerator, capacity, prices and rate under other names
# and sizes) beside pools that differ in one term each: a stated price, an observed or a missing
# preemption rate, a faster network, free devices or nodes, a TPU slice, an unknown accelerator.
MIXED = [
    pool("h100-a", "h100-80gb", max_nodes=4),
    pool("h100-b", "h100-80gb", max_nodes=2),
    pool("h100-priced", "h100-80gb", max_nodes=4, price=2.5),
    pool("h100-spot-a", "h100-80gb", spot=True, max_nodes=4, preemption_rate=0.05),
    pool("h100-spot-b", "h100-80gb", spot=True, max_nodes=8, preemption_rate=0.05),
    pool("h100-spot-fast-preempt", "h100-80gb", spot=True, max_nodes=4, preemption_rate=0.9),
    pool("h100-spot-unstated", "h100-80gb", spot=True, max_nodes=2),
    pool("h100-spot-observed", "h100-80gb", spot=True, max_nodes=2, preemption_rate=0.05, observed_rate=0.2),
    pool("h100-busy", "h100-80gb", max_nodes=4, free_devices=3),
    dataclasses.replace(pool("h100-nodes-busy", "h100-80gb", max_nodes=4), free_nodes=1),
    candidates.PoolOffer(
        name="h100-ib",
        spec=pool("x", "h100-80gb", max_nodes=4).spec.model_copy(update={"inter_node_bytes_per_second": 400e9}),
    ),
    pool("a100-a", "a100-80gb", max_nodes=2),
    pool("a100-b", "a100-80gb", max_nodes=16),
    pool("a100-spot", "a100-80gb", spot=True, max_nodes=4, preemption_rate=0.1),
    pool("l4-a", "l4", devices_per_node=4, max_nodes=2),
    pool("l4-b", "l4", devices_per_node=4, max_nodes=4, price=0.5),
    pool("t4", "t4", devices_per_node=4, max_nodes=2),
    pool("v5e-16", "tpu-v5e", devices_per_node=4, max_nodes=8, topology="4x4"),
    pool("v5e-spot", "tpu-v5e", spot=True, devices_per_node=4, max_nodes=4, topology="2x4", preemption_rate=0.1),
    pool("v5p", "tpu-v5p", devices_per_node=4, max_nodes=4),
    pool("nowhere", "no-such-accelerator", max_nodes=2),
]
POOL_SETS = {"bench-50": BENCH_POOLS, "mixed": MIXED, "defaults": list(selection.default_pools(CAT))}
# One cache for every plan of this module, as the scheduler holds one for the process: a plan is
# made through what the plans before it left there.
CACHE = PlanCache()


def _same(spec: AcceleratorJobSpec, pools: list[candidates.PoolOffer], name: str | None = None) -> None:
    want = plan_reference.plan(spec, pools, CAT, name=name)
    cold = selection.plan(spec, pools, CAT, name=name, cache=CACHE)
    warm = selection.plan(spec, pools, CAT, name=name, cache=CACHE)  # through every memo the first call filled
    alone = selection.plan(spec, pools, CAT, name=name)  # no cache: a memo for this call alone
    for got in (cold, warm, alone):
        difference = _difference(got, want)
        assert difference is None, difference
        assert [explain.reasons(c) for c in got.candidates] == [explain.reasons(c) for c in want.candidates]
        assert explain.pool_reasons(got) == explain.pool_reasons(want)
        assert plan_status(got).model_dump() == plan_status(want).model_dump()


def _difference(got: candidates.Plan, want: candidates.Plan) -> str | None:
    """Where two plans first differ, briefly (a plan's repr runs to megabytes)."""
    if got == want:
        return None
    if len(got.candidates) != len(want.candidates):
        return f"{len(got.candidates)} candidates, expected {len(want.candidates)}"
    for i, (g, w) in enumerate(zip(got.candidates, want.candidates, strict=True)):
        for field in candidates.Candidate._fields:
            if field != "winner" and getattr(g, field) != getattr(w, field):
                return f"candidate {i} ({w.label}): {field} {getattr(g, field)!r:.300} != {getattr(w, field)!r:.300}"
        lost_to, expected = (g.winner and g.winner.label), (w.winner and w.winner.label)
        if lost_to != expected:
            return f"candidate {i} ({w.label}) lost to {lost_to}, expected {expected}"
    return (
        f"reason {got.reason!r} != {want.reason!r}" if got.reason != want.reason else "plans differ outside candidates"
    )


def _example_jobs() -> list[tuple[str, AcceleratorJobSpec]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == "AcceleratorJob":
                out.append((path.name, AcceleratorJobSpec.model_validate(doc["spec"])))
    return out


def _example_pools() -> list[candidates.PoolOffer]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == "AcceleratorPool":
                spec = AcceleratorPoolSpec.model_validate(doc["spec"])
                out.append(candidates.PoolOffer(name=doc["metadata"]["name"], spec=spec))
    return out


EXAMPLES = _example_jobs()


def _row_specs() -> list[tuple[str, AcceleratorJobSpec]]:
    accuracy, published, stacks = _bench("plan_accuracy"), _bench("plan_published"), _bench("plan_stacks")
    files = [*accuracy.calibration_files(), *accuracy.multi_gpu_files(), *accuracy.pipeline_files()]
    out = [(f"calibration-{i}", accuracy.spec_for(row)) for i, row in enumerate(accuracy.read_rows(files))]
    out += [(f"published-{i}", published.spec_for(row)) for i, row in enumerate(published.read_rows())]
    out += [(f"stacks-{c.source}-{i}", c.spec) for i, c in enumerate(stacks.cases(CAT))]
    return out


ROWS = _row_specs()


def test_there_are_jobs_to_compare() -> None:
    assert len(EXAMPLES) >= 4
    sources = {name.split("-")[0] for name, _ in ROWS}
    assert {"calibration", "published", "stacks"} <= sources
    assert len(ROWS) >= 100


@pytest.mark.parametrize("pools", list(POOL_SETS), ids=str)
@pytest.mark.parametrize(("example", "spec"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_jobs_plan_as_before(example: str, spec: AcceleratorJobSpec, pools: str) -> None:
    _same(spec, POOL_SETS[pools], name=example)


def test_example_jobs_on_the_example_pools_plan_as_before() -> None:
    pools = _example_pools()
    assert pools
    for _, spec in EXAMPLES:
        _same(spec, pools)


@pytest.mark.parametrize("pools", ["bench-50", "mixed"], ids=str)
def test_calibration_and_published_rows_plan_as_before(pools: str) -> None:
    for _, spec in ROWS:
        _same(spec, POOL_SETS[pools])


def test_jobs_that_differ_only_in_tokens_plan_as_before() -> None:
    # The bench's case: the skeletons and step estimates of the first job serve the others.
    base = _bench("plan_speed").job(10**10)
    for tokens in (10**10 + 1, 3 * 10**9, 7, 10**14):
        _same(base.model_copy(update={"workload": base.workload.model_copy(update={"tokens": tokens})}), BENCH_POOLS)


def test_evaluate_gives_the_plan_it_gave_before() -> None:
    for _, spec in EXAMPLES:
        for accelerator, devices in (("h100-80gb", 8), ("l4", 2), ("tpu-v5e", 16), ("missing", 4)):
            got = selection.evaluate(spec, accelerator, devices, CAT)
            assert got == plan_reference.evaluate(spec, accelerator, devices, CAT)


ARCHS = {"125m": LLAMA_125M, "1b": LLAMA_1B, "8b": LLAMA_8B, "gpt2": GPT2_355M}


@st.composite
def _specs(draw: st.DrawFn) -> AcceleratorJobSpec:
    b = job()
    if draw(st.booleans()):
        b.arch(ARCHS[draw(st.sampled_from(sorted(ARCHS)))])
    else:
        b.parameters(draw(st.sampled_from([10**8, 3 * 10**9, 13 * 10**9, 70 * 10**9])))
    if draw(st.integers(0, 4)) == 0:
        b.inference(batch=draw(st.sampled_from([1, 16, 64])), prompt=draw(st.sampled_from([128, 2048])))
    else:
        framework = draw(st.sampled_from(["hf", "fsdp", "deepspeed", "megatron", "maxtext"]))
        workload: dict[str, Any] = {
            "framework": framework,
            "precision": draw(st.sampled_from(["amp-bf16", "amp-fp16", "bf16", "fp32", "fp8"])),
            "optimizer": draw(st.sampled_from(["adamw", "sgd", "adafactor", "adamw-8bit"])),
            "sharding": draw(st.sampled_from(["none", "zero1", "zero2", "zero3", "fsdp"])),
            "microBatch": draw(st.integers(1, 16)),
            "seqLen": draw(st.sampled_from([512, 2048, 8192])),
            "tokens": draw(st.integers(1, 10**13)),
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        }
        if framework == "megatron":
            workload["tensorParallel"] = draw(st.sampled_from([1, 2, 4]))
            workload["pipelineParallel"] = draw(st.sampled_from([1, 2, 3]))
            workload["gradientAccumulation"] = draw(st.sampled_from([1, 4, 8]))
        b.workload(**workload)
    b.objective(draw(st.sampled_from(["cost", "time"])))
    if draw(st.booleans()):
        b.deadline(draw(st.sampled_from(["30m", "6h", "2d", "30d"])))
    if draw(st.booleans()):
        b.max_cost(draw(st.sampled_from([5.0, 500.0, 50_000.0])))
    b.spot(draw(st.sampled_from(["never", "prefer", "require"])), draw(st.sampled_from([None, 0, 3, 50])))
    if draw(st.booleans()):
        b.checkpoint(draw(st.sampled_from([5.0, 30.0, 240.0])))
    placement: dict[str, Any] = {}
    if draw(st.booleans()):
        placement["minDevices"] = draw(st.sampled_from([1, 2, 8, 64]))
    if draw(st.booleans()):
        placement["maxNodes"] = draw(st.sampled_from([1, 2, 16]))
    if draw(st.integers(0, 3)) == 0:
        placement["acceleratorKinds"] = [draw(st.sampled_from(["gpu", "tpu"]))]
    if placement.get("minDevices", 1) <= 8 and draw(st.integers(0, 3)) == 0:
        placement["maxDevices"] = 8
    b.placement(**placement)
    try:
        return b.spec()
    except ValueError:  # pydantic's ValidationError: a combination the API refuses
        reject()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_specs(), pools=st.sampled_from(["bench-50", "mixed"]))
def test_random_specs_plan_as_before(spec: AcceleratorJobSpec, pools: str) -> None:
    _same(spec, POOL_SETS[pools])


def test_a_job_fed_new_pools_and_prices_every_plan_keeps_a_bounded_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The operator builds its offers afresh from each snapshot (new objects, equal values: the
    # same skeletons), and pools come and go with live prices: each plan adds a skeleton (a new
    # pool) and cost slots (its new price) to the job's cache, which starts again past its
    # bounds, and the plans stay the ones made afresh.
    monkeypatch.setattr(selection, "_JOB_SKELETONS", len(MIXED) + 3)
    monkeypatch.setattr(selection, "_JOB_SLOTS", 200)
    cache = PlanCache()  # this job's cache alone, whatever ran before
    spec = job().arch(LLAMA_1B).checkpoint().spot("prefer").spec()
    sizes = []
    for i in range(8):
        offers = [dataclasses.replace(o) for o in MIXED]
        offers += [pool(f"h100-live-{i}", "h100-80gb", spot=True, max_nodes=16, price=2.0 + i / 100)]
        got = selection.plan(spec, offers, CAT, cache=cache)
        assert _difference(got, plan_reference.plan(spec, offers, CAT)) is None
        sizes.append(max((len(c.skeletons), len(c.costs)) for c in cache.memo(selection._JOBS).values()))
    assert max(s for s, _ in sizes) <= 3 * (len(MIXED) + 1)
    assert max(c for _, c in sizes) <= 200 + 100
    assert len(set(sizes)) > 1  # it grew, then started again
    assert any(later < earlier for earlier, later in itertools.pairwise(sizes))  # started again
