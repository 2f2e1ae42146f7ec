"""The scheduler's checkpoint lookup (the I/O beside the pure resume decision): its answer, its
error and its timeout reach the next decision of that job only."""

from __future__ import annotations

import asyncio
import threading

from accel_api import vocabulary as v
from accel_operator.adapters.aws.checkpoints import FakeCheckpointStore
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common.checkpoints import Checkpoint
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import T0, World

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
