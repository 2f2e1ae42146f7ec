"""The engine's collector thresholds: set by ``collector.tune`` and by the processes that run the engine."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel_operator.cli import main
from accel_operator.engine import collector
from tests.unit.cli.test_simulate import POOLS

CPYTHON_DEFAULT = (700, 10, 10)


@pytest.fixture
def default_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*CPYTHON_DEFAULT)
    yield
    gc.set_threshold(*before)


def test_tune_sets_the_engines_thresholds_and_returns_the_old(default_thresholds: None) -> None:
    assert collector.tune() == CPYTHON_DEFAULT
    assert gc.get_threshold() == (collector.YOUNG, collector.MIDDLE, collector.OLD)
    assert CPYTHON_DEFAULT[0] < collector.YOUNG and CPYTHON_DEFAULT[2] < collector.OLD


def test_accelctl_simulate_runs_the_engine_with_them(
    default_thresholds: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    assert main.main(["simulate", "generate", "--jobs", "3", "--days", "1", "-o", str(path)]) == 0
    assert gc.get_threshold() == CPYTHON_DEFAULT  # generating a trace runs no engine
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    assert main.main(["simulate", "--trace", str(path), "--pools", str(pools), "--workers", "1", "-o", "json"]) == 0
    assert gc.get_threshold() == (collector.YOUNG, collector.MIDDLE, collector.OLD)


def test_the_operators_main_tunes_the_collector(default_thresholds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from accel_operator import app, logs

    seen: list[tuple[int, int, int]] = []

    def run(settings: object) -> None:
        seen.append(gc.get_threshold())

    async def arun(settings: object) -> None:
        run(settings)

    monkeypatch.setattr(app, "run", arun)
    monkeypatch.setattr(logs, "configure", lambda fmt: None)  # the root logger stays pytest's
    assert app.main() == 0
    assert seen == [(collector.YOUNG, collector.MIDDLE, collector.OLD)]
