"""The operator running in-process for a cluster test: the same ``accel_operator.app.run`` that
``python -m accel_operator`` runs, in a thread, with its log captured for the error check."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from accel_operator import app
from accel_operator.settings import OperatorSettings
from tests.support.cluster import unexpected_errors


class RunningOperator:
    def __init__(self, log: io.StringIO, thread: threading.Thread) -> None:
        self._log = log
        self.thread = thread
        self.exception: BaseException | None = None

    @property
    def output(self) -> str:
        return self._log.getvalue()


@contextmanager
def running_operator(settings: OperatorSettings, *, timeout: float = 60) -> Iterator[RunningOperator]:
    """Start the operator, wait until kopf is ready, yield, then stop it and wait for it."""
    stop, ready = threading.Event(), threading.Event()
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    previous_level = root.level
    root.setLevel(logging.DEBUG)

    def target() -> None:
        try:
            asyncio.run(app.run(settings, stop_flag=stop, ready_flag=ready))
        except BaseException as exc:  # reported to the test, which fails on it
            running.exception = exc
            ready.set()

    running = RunningOperator(log, threading.Thread(target=target, name="operator", daemon=True))
    running.thread.start()
    try:
        if not ready.wait(timeout):
            raise TimeoutError(f"the operator was not ready in {timeout}s:\n{log.getvalue()[-3000:]}")
        if running.exception is not None:
            raise RuntimeError(f"the operator failed to start: {running.exception!r}")
        yield running
    finally:
        stop.set()
        running.thread.join(timeout)
        root.removeHandler(handler)
        root.setLevel(previous_level)


def settings_for(namespace: str, **overrides: Any) -> OperatorSettings:
    """Settings of an operator under test: it watches ``namespace`` only (cluster-scoped pools and
    nodes as always), serves no liveness or metrics port, decides every job again every 3 s and
    releases an unbound gang after 8 s, writes an admission held back for its pods' nodes after
    5 s (within the 8 s: tests see Admitted before a gang is released), writes a waiting job's
    status at once, and keeps its cost rollup
    in ``namespace``; ``overrides`` (any settings field) on top."""
    base: dict[str, Any] = {
        "namespaces": [namespace],
        "liveness_port": 0,
        "metrics_port": 0,
        "resync_seconds": 3.0,
        "bind_timeout_seconds": 8.0,
        "admitted_status_seconds": 5.0,
        "waiting_status_seconds": 0.0,  # a waiting job's status at once: the tests read it
        "cost_rollup_namespace": namespace,  # the durable cost rollup: one per test
    }
    return OperatorSettings(**{**base, **overrides})


@contextmanager
def checked_operator(settings: OperatorSettings, *expected: str) -> Iterator[RunningOperator]:
    """:func:`running_operator`; afterwards the test fails if the operator did not stop, raised, or
    logged an error line that matches none of the ``expected`` patterns."""
    with running_operator(settings) as runner:
        yield runner
    assert not runner.thread.is_alive(), "the operator did not stop"
    assert runner.exception is None, runner.exception
    errors = unexpected_errors(runner.output, list(expected))
    assert not errors, "the operator logged errors the test did not expect:\n" + "\n".join(errors)
