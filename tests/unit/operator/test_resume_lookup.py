"""The scheduler's checkpoint lookup (the I/O beside the pure resume decision): its answer, its
error and its timeout reach the next decision of that job only."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from accel_api import vocabulary as v
from accel_operator.adapters.aws.checkpoints import FakeCheckpointStore, Limits, S3CheckpointStore
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.checkpoints import Checkpoint
from accel_operator.settings import OperatorSettings
from tests.support.moto_server import CREDENTIALS
from tests.support.reconcile import T0, World
from tests.unit.operator.test_aws_checkpoints import silent_endpoint

ASK = act.ResolveCheckpoint(1, "s3://b/run")


def test_a_found_checkpoint_is_handed_to_the_next_decision() -> None:
    w = World()
    found = Checkpoint("s3://b/run/step-4", 4, T0)
    w.scheduler.applier.checkpoints = FakeCheckpointStore(latest={"s3://b/run": found})

    async def go() -> None:
        await w.scheduler.applier._resolve(("ns", "a"), ASK)

    asyncio.run(go())
    lookup = w.scheduler.applier.lookups[("ns", "a")]
    assert (lookup.attempt, lookup.checkpoint, lookup.error) == (1, found, None)
    assert ("ns", "a") in w.scheduler.marks.dirty


def test_a_store_error_is_recorded_and_the_job_woken_again() -> None:
    w = World()
    store = FakeCheckpointStore(fail_next=CloudUnavailable("connection refused"))
    w.scheduler.applier.checkpoints = store

    async def go() -> None:
        await w.scheduler.applier._resolve(("ns", "a"), ASK)

    asyncio.run(go())
    lookup = w.scheduler.applier.lookups[("ns", "a")]
    assert lookup.checkpoint is None and lookup.error is not None and "connection refused" in lookup.error
    assert store.calls == ["s3://b/run"]
    assert w.scheduler.metrics.reconcile_errors.labels("checkpoint_lookup")._value.get() == 1


def test_a_lookup_that_hangs_ends_at_the_timeout() -> None:
    release = threading.Event()

    class Hanging(FakeCheckpointStore):
        def latest_complete(self, uri: str) -> Checkpoint | None:
            release.wait(10)
            return None

    w = World()
    w.scheduler.settings = OperatorSettings(checkpoint_lookup_timeout_seconds=0.2)
    w.scheduler.applier.checkpoints = Hanging()

    async def go() -> None:
        await w.scheduler.applier._resolve(("ns", "a"), ASK)

    try:
        asyncio.run(go())
    finally:
        release.set()
    error = w.scheduler.applier.lookups[("ns", "a")].error
    assert error is not None and "no answer within" in error


def test_a_timed_out_lookup_leaves_no_thread_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real S3 store against an endpoint that never answers: the lookup ends by its own
    bound, in its own thread, and when the job has its answer no thread of it is left (before,
    the wait gave up at the timeout and the executor's thread went on with boto3's retries)."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    w = World()
    w.scheduler.settings = OperatorSettings(checkpoint_lookup_timeout_seconds=0.4)

    async def go() -> tuple[set[threading.Thread], set[threading.Thread], float]:
        before = set(threading.enumerate())
        started = time.monotonic()
        await w.scheduler.applier._resolve(("ns", "a"), ASK)
        return before, set(threading.enumerate()), time.monotonic() - started

    with silent_endpoint() as endpoint:
        store = S3CheckpointStore.connect(region="us-east-1", endpoint_url=endpoint, limits=Limits(0.4))
        with contextlib.suppress(CloudUnavailable):
            store.latest_complete(ASK.uri)  # makes the client (imports, service model) outside the timing
        w.scheduler.applier.checkpoints = store
        before, after, elapsed = asyncio.run(go())
    assert after - before == set(), [t.name for t in after - before]
    assert not w.scheduler.applier.lookup_threads or not any(t.is_alive() for t in w.scheduler.applier.lookup_threads)
    error = w.scheduler.applier.lookups[("ns", "a")].error
    assert error is not None and "timeout" in error.lower(), error
    assert elapsed < 0.4 * 1.5 + 0.2, elapsed  # the store's own bound


def test_threads_a_hung_store_leaves_behind_are_bounded() -> None:
    """A store that does not bound itself: the wait gives up (a backstop), the thread it leaves is
    counted, and once LOOKUP_THREADS are left no new lookup starts until they end."""
    from accel_operator.engine import apply

    release = threading.Event()
    calls: list[str] = []

    class Hanging(FakeCheckpointStore):
        def latest_complete(self, uri: str) -> Checkpoint | None:
            calls.append(uri)
            release.wait(30)
            return None

    w = World()
    w.scheduler.settings = OperatorSettings(checkpoint_lookup_timeout_seconds=0.01)
    w.scheduler.applier.checkpoints = Hanging()

    async def go() -> None:
        for i in range(apply.LOOKUP_THREADS + 2):
            await w.scheduler.applier._resolve(("ns", f"j{i}"), ASK)

    try:
        asyncio.run(go())
        assert len(calls) == apply.LOOKUP_THREADS
        error = w.scheduler.applier.lookups[("ns", f"j{apply.LOOKUP_THREADS + 1}")].error
        assert error == f"{apply.LOOKUP_THREADS} earlier checkpoint lookups have not ended yet"
    finally:
        release.set()
    for t in list(w.scheduler.applier.lookup_threads):
        t.join(5)
    assert not any(t.is_alive() for t in w.scheduler.applier.lookup_threads)


def test_without_a_store_an_s3_resume_waits_with_a_reason() -> None:
    w = World()

    async def go() -> None:
        await w.scheduler.applier._resolve(("ns", "a"), ASK)

    asyncio.run(go())
    assert w.scheduler.applier.lookups[("ns", "a")].error == "no checkpoint store is configured"


def _pod(annotations: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {
            "name": "a-a0-0",
            "namespace": "ns",
            "labels": {v.LABEL_MANAGED_BY: v.MANAGED_BY_VALUE, v.LABEL_JOB: "a", v.LABEL_ATTEMPT: "0"},
            "annotations": annotations,
        },
        "spec": {"nodeName": "n"},
        "status": {"phase": "Running"},
    }


def test_a_pod_view_carries_the_reported_checkpoint_clipped() -> None:
    view = views.pod_view(_pod({v.ANNOTATION_CHECKPOINT: "pvc://c/r/step-3"}))
    assert view is not None and view.reported_checkpoint == "pvc://c/r/step-3"
    huge = views.pod_view(_pod({v.ANNOTATION_CHECKPOINT: "x" * 100_000}))
    assert huge is not None and huge.reported_checkpoint is not None and len(huge.reported_checkpoint) == 1025
