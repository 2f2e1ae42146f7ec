"""The demo's what-if step: two synthetic days replayed through the engine and both baselines,
printed as a table and written as an HTML page, with nothing of the cluster touched."""

import os
from pathlib import Path

import pytest

from accel_localcluster import demo


def test_the_what_if_step_prints_the_three_strategies_and_writes_the_page(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    demo._what_if(tmp_path, dict(os.environ))
    out = capfd.readouterr().out
    header = next(line for line in out.splitlines() if "ordered-flavors" in line and "engine" in line)
    assert "on-demand" in header
    assert "deadlines met" in out and "cost: research" in out
    page = (tmp_path / "what-if.html").read_text()
    assert page.startswith("<!DOCTYPE html>") or page.lstrip().lower().startswith("<!doctype html>")
    assert "<svg" in page and "ordered-flavors" in page
    assert len((tmp_path / "what-if-trace.jsonl").read_text().splitlines()) == 150
