"""The planner against published Megatron-LM and MaxText throughput, held out (tests/data/published/).

Floors from the planner issue: every configuration that really ran on its hardware is predicted to
fit; tokens/s per device within 15 % (median) and 35 % (worst). Nothing in the model was fitted to
these rows; bench/plan_stacks.py prints the table. One floor is not met (see the xfail).
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

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


def test_every_published_row_is_read() -> None:
    assert [r.case.source for r in RESULTS].count("megatron") == 10
    assert [r.case.source for r in RESULTS].count("maxtext") == 8


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
    errors = [abs(r.error()) for r in RESULTS]
    assert statistics.median(errors) <= 0.15
    assert max(errors) <= 0.35


def test_every_megatron_configuration_that_ran_is_predicted_to_fit() -> None:
    assert [r.case.label for r in RESULTS if r.case.source == "megatron" and not r.mem.fits] == []


@pytest.mark.xfail(
    strict=True,
    reason="MaxText 32B on v5p-128 (7 sequences per chip, remat_policy minimal) is predicted at 112 GB per "
    "chip against 95 GiB: the policy's saved products do not fit, and XLA's compiler rematerialises "
    "beyond the policy when memory is short, which the planner does not model",
)
def test_every_configuration_that_ran_is_predicted_to_fit() -> None:
    assert [r.case.label for r in RESULTS if not r.mem.fits] == []
