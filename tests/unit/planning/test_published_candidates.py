"""bench/plan_published_candidates.py (docs/planner.md, "LLM Foundry's A100 and FP8 tables: what
was tried"): a candidate changes the planner for its own run only, and the exact-GELU candidate
changes what it says it changes (the MPT rows' MLP activation) and nothing else."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from accel_operator.planning import blocks, throughput

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    path = ROOT / "bench" / "plan_published_candidates.py"
    spec = importlib.util.spec_from_file_location("plan_published_candidates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("plan_published_candidates", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
BASELINE = BENCH.run("baseline")


def test_a_candidate_leaves_the_planner_as_it_was() -> None:
    block, ratio = blocks.block, throughput.FP8_PEAK_RATIO
    BENCH.run("exact-gelu")
    BENCH.run("fp8-mamf")
    assert blocks.block is block
    assert ratio == throughput.FP8_PEAK_RATIO
    assert BENCH.run("baseline") == BASELINE


def test_exact_gelu_plans_the_mpt_rows_faster_and_nothing_else() -> None:
    gelu = BENCH.run("exact-gelu")
    assert gelu.keys() == BASELINE.keys()
    for name, errors in BASELINE.items():
        if name in ("megatron", "maxtext"):
            assert gelu[name] == errors, name  # their own fusion terms, no GPT-2 GELU chain
            continue
        assert all(g >= e for g, e in zip(gelu[name], errors, strict=True)), name
        assert sum(g > e for g, e in zip(gelu[name], errors, strict=True)) == len(errors), name


def test_fp8_at_the_measured_ratio_moves_only_the_fp8_rows() -> None:
    fp8 = BENCH.run("fp8-mamf")
    for name, errors in BASELINE.items():
        if name == "H100 80GB FP8":
            assert all(f < e for f, e in zip(fp8[name], errors, strict=True))
        else:
            assert fp8[name] == errors, name
