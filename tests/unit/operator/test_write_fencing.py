"""Writes carry identity and are fenced by the Lease (issue 25, finding 5): a status write for a job
that was deleted and re-created under the same name is refused (the fake, and the real writer's
read-check-patch against a stubbed API); a replica that loses its Lease while a burst of decisions
is queued drops the rest of the burst instead of writing after the new leader."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from accel_operator.adapters.kube.jobs import FakeJobWriter, JobGone, JobRef, KubeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.engine import calls
from accel_operator.engine.scheduler import Scheduler
from accel_operator.settings import OperatorSettings
from tests.support.reconcile import World


def test_the_fake_refuses_a_write_for_another_uid_under_the_same_name() -> None:
    writer = FakeJobWriter(uids={("ns", "j"): "uid-new"})
    with pytest.raises(JobGone):
        writer.patch_status(JobRef("ns", "j", "uid-old"), {"message": "old"})
    assert writer.statuses == {}
    writer.patch_status(JobRef("ns", "j", "uid-new"), {"message": "new"})
    assert writer.statuses == {("ns", "j"): {"message": "new"}}


class _Api:
    """The custom objects API, stubbed: one job, whose uid and resourceVersion the test sets; a
    patch at another resourceVersion is refused as the API server refuses it (409)."""

    def __init__(self, uid: str) -> None:
        self.uid, self.version, self.patches = uid, 1, []  # type: ignore[var-annotated]
        self.writes_between = 0  # writes by someone else between the next reads and patches
        self.reads = 0

    def get_namespaced_custom_object(self, *_: Any) -> dict[str, Any]:
        self.reads += 1
        return {"metadata": {"uid": self.uid, "resourceVersion": str(self.version)}}

    def patch_namespaced_custom_object_status(self, *args: Any) -> dict[str, Any]:
        body = args[-1]
        if self.writes_between:
            self.writes_between -= 1
            self.version += 1
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        self.patches.append(body["status"])
        self.version += 1
        return {"metadata": {"resourceVersion": str(self.version)}}


def _writer(api: _Api) -> KubeJobWriter:
    writer = KubeJobWriter.__new__(KubeJobWriter)
    writer._custom = api
    return writer


def test_the_real_writer_reads_the_uid_and_patches_at_the_version_it_read() -> None:
    api = _Api("uid-new")
    writer = _writer(api)
    with pytest.raises(JobGone):
        writer.patch_status(JobRef("ns", "j", "uid-old"), {"cost": {"spentUsd": 7.26}})
    assert api.patches == []
    # Written by someone else between the read and the patch (twice): read again, then written.
    api.writes_between = 2
    assert writer.patch_status(JobRef("ns", "j", "uid-new"), {"message": "mine"}) == str(api.version)
    assert api.patches == [{"message": "mine"}]
    # At the version the caller's view holds: one call; the view was stale: read, then written.
    reads = api.reads
    writer.patch_status(JobRef("ns", "j", "uid-new", str(api.version)), {"message": "fresh"})
    assert api.reads == reads
    writer.patch_status(JobRef("ns", "j", "uid-new", "1"), {"message": "stale"})
    assert api.reads == reads + 1 and api.patches[-2:] == [{"message": "fresh"}, {"message": "stale"}]
    # A view of the old job under the name: its version is refused, the read finds another uid.
    with pytest.raises(JobGone):
        writer.patch_status(JobRef("ns", "j", "uid-old", "1"), {"cost": {"spentUsd": 7.26}})


@dataclass
class _LosesLease:
    """An elector that leads for ``calls`` questions, then has lost the Lease."""

    calls: int

    def leading(self) -> bool:
        self.calls -= 1
        return self.calls >= 0

    def tick(self) -> bool:
        return self.leading()


def _world(threads: int, held: float = 0.0) -> tuple[World, Scheduler]:
    """``held``: ``admitted_status_seconds`` (0: an admission's status goes first, before its Job)."""
    w = World()
    sched = w.scheduler
    sched.settings = OperatorSettings(api_threads=threads, admitted_status_seconds=held)
    sched.applier.slots = calls.Slots(threads)
    return w, sched


def test_a_replica_that_loses_the_lease_mid_burst_drops_the_rest_of_it() -> None:
    w, sched = _world(threads=1)  # one write at a time: the burst is queued
    w.pool("p", nodes=4)
    for i in range(6):
        w.job(f"j{i}", "p")
    # The first admission's status and workload go out; then the Lease is gone.
    sched.elector = _LosesLease(calls=2)
    writer = sched.applier.writer
    assert isinstance(writer, FakeJobWriter)

    async def run() -> None:
        await sched.step()
        while sched.applier.in_flight:
            await asyncio.gather(*list(sched.applier.in_flight))

    asyncio.run(run())
    assert len(writer.statuses) == 1  # one decision written, the five queued behind it dropped
    workloads = sched.applier.workloads
    assert isinstance(workloads, FakeWorkloadClient)
    assert [c[0] for c in workloads.calls] == ["create"]
    assert writer.events == []  # a dropped decision posts no events, nor one cut short by the loss
    # The dropped decisions' overlays went with them: the next leader decides from the cluster.
    assert set(sched.applier.overlay) <= set(writer.statuses)
    assert (sched.metrics.registry.get_sample_value("accel_operator_fenced_writes_total") or 0) >= 5


def test_a_held_admission_is_not_written_by_a_replica_that_lost_the_lease() -> None:
    """The batch Job records the admission and goes out; the Lease is lost before the held status
    is written: it is dropped with its overlay (the next leader adopts the Job's admission), not
    written after the new leader."""
    w, sched = _world(threads=1, held=0.05)
    w.pool("p", nodes=4)
    for i in range(3):
        w.job(f"j{i}", "p")
    sched.elector = _LosesLease(calls=1)  # the first Job's create only
    writer, workloads = sched.applier.writer, sched.applier.workloads
    assert isinstance(writer, FakeJobWriter) and isinstance(workloads, FakeWorkloadClient)

    async def run() -> None:
        await sched.step()
        while sched.applier.in_flight:
            await asyncio.gather(*list(sched.applier.in_flight))
        await asyncio.sleep(0.2)  # the held status's turn
        while sched.applier.in_flight:
            await asyncio.gather(*list(sched.applier.in_flight))

    asyncio.run(run())
    assert [c[0] for c in workloads.calls] == ["create"]
    assert writer.statuses == {} and writer.events == []
    assert not sched.applier.overlay
