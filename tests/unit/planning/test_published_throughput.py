"""The planner against LLM Foundry's published MPT throughput (tests/data/published/).

Floors from the planner issue: every configuration that really ran on its hardware is predicted
to fit; tokens/s per device within 15 % (median) and 35 % (worst). The comparison lives in
bench/plan_published.py, which prints the table.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_published", ROOT / "bench" / "plan_published.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("plan_published", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
RESULTS = BENCH.compare(BENCH.read_rows())


def test_every_published_row_is_read() -> None:
    assert len(RESULTS) == 216
    assert {c.row["gpu"] for c in RESULTS} == {"h100_80gb", "a100_80gb", "a100_40gb"}


def test_the_model_matches_the_published_parameter_counts() -> None:
    # MPT's benchmark configs keep biases and learned positions: NumParams is exact.
    for c in RESULTS:
        assert c.job.shape.params == c.row["n_params"], c.label


def test_every_configuration_that_ran_is_predicted_to_fit() -> None:
    assert [c.label for c in RESULTS if not c.mem.fits] == []


def test_tokens_per_second_per_device() -> None:
    errors = [abs(c.error()) for c in RESULTS]
    assert statistics.median(errors) <= 0.15
    assert max(errors) <= 0.35
