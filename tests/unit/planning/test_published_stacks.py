"""The planner against published Megatron-LM and MaxText throughput, held out (tests/data/published/).

Floors from the planner issue: every configuration that really ran on its hardware is predicted to
fit; tokens/s per device within 15 % (median) and 35 % (worst). Nothing in the model was fitted to
these rows (the v5e rows, held in, gave the TPU matrix efficiency); bench/plan_stacks.py prints the table.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from accel_operator.planning import memory, throughput

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_stacks", ROOT / "bench" / "plan_stacks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("plan_stacks", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
RESULTS = BENCH.compare()


HELD_OUT = [r for r in RESULTS if r.case.source in ("megatron", "maxtext")]
V5E = [r for r in RESULTS if r.case.source == "maxtext-v5e"]


def test_every_published_row_is_read() -> None:
    assert [r.case.source for r in RESULTS].count("megatron") == 10
    assert [r.case.source for r in RESULTS].count("maxtext") == 8
    assert len(V5E) == 3


def test_the_models_match_the_published_sizes() -> None:
    for r in RESULTS:
        params = r.job.shape.params
        if r.case.source == "megatron":
            # The paper rounds: its 1.7B is 1.65B by its own formula, the others within 0.5 %.
            assert params == pytest.approx(r.case.row["params_billion"] * 1e9, rel=0.03), r.case.label
        else:
            # MaxText's sizes are names (32b ... 1024b); global_parameter_scale gives about that many.
            assert params == pytest.approx(r.case.row["global_parameter_scale"] * 1e9, rel=0.05), r.case.label


def test_tokens_per_second_per_device() -> None:
    errors = [abs(r.error()) for r in HELD_OUT]
    assert statistics.median(errors) <= 0.15
    assert max(errors) <= 0.35


def test_maxtext_tokens_per_second_per_device() -> None:
    # MaxText on its own meets the floors too since the TPU terms came from first principles: the
    # matrix-unit efficiency bounded by the v5e table (held in), XLA's asynchronous
    # tensor-parallel collectives, and its rematerialization under memory pressure.
    errors = [abs(r.error()) for r in HELD_OUT if r.case.source == "maxtext"]
    assert statistics.median(errors) <= 0.15
    assert max(errors) <= 0.35


def test_v5e_rows_the_tpu_matrix_efficiency_came_from() -> None:
    # Held in: the catalog's v5e/v5p matrix efficiency is the lower bound these rows give (their
    # HFU), not a fit; the model is still slow on them (the 64B row is bound by the FSDP
    # collectives over the catalog's per-link ICI bandwidth).
    errors = [r.error() for r in V5E]
    assert all(e < 0 for e in errors)
    assert statistics.median([abs(e) for e in errors]) <= 0.15


def test_every_configuration_that_ran_is_predicted_to_fit() -> None:
    assert [r.case.label for r in RESULTS if not r.mem.fits] == []


def test_maxtext_32b_fits_because_xla_rematerialises_beyond_the_policy() -> None:
    # remat_policy minimal at 7 sequences per chip saves more than 95 GiB; XLA recomputes part of
    # it to fit (memory.xla_remat_fraction), and the step pays for that recomputation.
    r = next(r for r in HELD_OUT if r.case.label.startswith("MaxText 32b"))
    assert "XLA recomputes" in r.mem.peak_at
    assert r.mem.footprint_bytes <= r.mem.usable_bytes
    f = memory.xla_remat_fraction(r.job, r.case.accelerator, r.case.layout)
    assert 0 < f < 1
    # On a chip with twice the memory the policy fits as it is: nothing recomputed, a shorter step.
    roomy = dataclasses.replace(r.case.accelerator, memory_bytes=2 * r.case.accelerator.memory_bytes)
    assert memory.xla_remat_fraction(r.job, roomy, r.case.layout) == 0
    assert not memory.estimate(r.job, roomy, r.case.layout).peak_at.endswith("to fit")
    assert throughput.estimate(r.job, roomy, r.case.layout).step_seconds < r.speed.step_seconds
    # On a chip too small for even full remat, nothing is recomputed and it does not fit.
    tight = dataclasses.replace(r.case.accelerator, memory_bytes=r.case.accelerator.memory_bytes // 8)
    assert memory.xla_remat_fraction(r.job, tight, r.case.layout) == 0
    assert not memory.estimate(r.job, tight, r.case.layout).fits
