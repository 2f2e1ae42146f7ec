"""The operator's log lines are bounded and cannot be forged by tenant text, in both formats."""

import json
import logging
import sys

import pytest

from accel_operator import logs

HOSTILE = "job x: " + "a" * 100_000 + "\n2026-01-01 00:00:00,000 ERROR accel_operator forged\r\x1b[2J"


def _record(message: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("b" * 50_000)
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("accel_operator", logging.INFO, __file__, 1, "%s", (message,), info)


def test_text_lines_are_clipped_and_on_one_line() -> None:
    line = logs.TextFormatter().format(_record(HOSTILE))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert len(line) < logs.MESSAGE_LIMIT + 100
    assert line.endswith(f"…(+{len(HOSTILE) - logs.MESSAGE_LIMIT} chars)")
    assert " INFO accel_operator job x: aaa" in line


def test_a_short_message_is_kept_as_it_is() -> None:
    assert (
        logs.TextFormatter()
        .format(_record("admitted ns/job on pool-a"))
        .endswith(" INFO accel_operator admitted ns/job on pool-a")
    )


def test_text_tracebacks_are_bounded() -> None:
    text = logs.TextFormatter().format(_record("failed", exc=True))
    first, _, trace = text.partition("\n")
    assert first.endswith(" INFO accel_operator failed")
    assert len(trace) <= logs.MESSAGE_LIMIT and trace.rstrip().endswith("b" * 100)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_configure_installs_a_bounded_formatter(fmt: str) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure(fmt)
        line = root.handlers[0].format(_record(HOSTILE))
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    assert "\n" not in line and len(line) < logs.MESSAGE_LIMIT + 200
    if fmt == "json":
        assert json.loads(line)["message"].startswith("job x: aaa")
