"""The operator's loop exception handler quiets exactly kopf's watch-stream shutdown race."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from accel_operator import app


async def infinite_watch() -> AsyncIterator[int]:  # the name kopf's watch-stream generator has
    yield 1


async def other_stream() -> AsyncIterator[int]:
    yield 1


def _errors_logged(context: dict[str, object], caplog: pytest.LogCaptureFixture) -> list[str]:
    loop = asyncio.new_event_loop()
    try:
        app._install_shutdown_filter(loop)
        with caplog.at_level(logging.DEBUG):
            caplog.clear()
            loop.call_exception_handler(context)
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        loop.close()


def test_the_kopf_watch_shutdown_race_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    context: dict[str, object] = {
        "message": "an error occurred during closing of asynchronous generator",
        "asyncgen": infinite_watch(),
        "exception": RuntimeError("generator didn't stop after athrow()"),
    }
    assert _errors_logged(context, caplog) == []
    assert any("kopf watch-stream closed at shutdown" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "context",
    [
        {"message": "closing", "asyncgen": other_stream(), "exception": RuntimeError("didn't stop after athrow()")},
        {"message": "closing", "asyncgen": infinite_watch(), "exception": RuntimeError("something else")},
        {"message": "closing", "asyncgen": infinite_watch(), "exception": ValueError("didn't stop after athrow()")},
        {"message": "Task exception was never retrieved", "exception": RuntimeError("boom")},
    ],
)
def test_every_other_loop_error_is_still_logged(context: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    assert len(_errors_logged(context, caplog)) == 1
