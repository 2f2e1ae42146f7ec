"""Early warnings: the pure response to a notice (reconcile.early_warning), the wiring that acts
on it with fakes (handlers.signals: queue → taint, events, checkpoint requests, ack), and the
decision that counts an attempt on a TPU node the API reports PREEMPTED as a preemption."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_localcluster.preempt import spot_interruption_event
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.aws.interruptions import FakeInterruptionQueue
from accel_operator.adapters.gcp.tpu import FakeTpuNodes, TpuUnavailable
from accel_operator.adapters.kube import views
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.nodes import FakeNodeWriter
from accel_operator.engine.signals import Signals
from accel_operator.reconcile.common import actions as act
from accel_operator.reconcile.common import decision
from accel_operator.reconcile.common.snapshot import NodeView, PodView
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import early_warning as ew
from accel_operator.settings import OperatorSettings
from tests.support.decisions import failure_of
from tests.support.reconcile import T0, World

NODE = NodeView("n1", {}, 8, uid="u1", provider_id="aws:///us-east-1a/i-0abc")
WARN = ew.NodeWarning("n1", ew.WarningSource.AWS_SPOT_INTERRUPTION, "tok-1", "i-0abc")


def _pod(name: str, job: str = "a", *, node: str = "n1", phase: str = "Running", asked: str | None = None) -> PodView:
    return PodView("ns", name, node, phase, 8, ("ns", job), 0, checkpoint_now=asked)


def _asked(r: ew.Response) -> list[str]:
    return [pod for _, pod in r.pods]


# --- the pure response ------------------------------------------------------------------------------


def test_a_spot_warning_taints_asks_every_running_pod_and_tells_each_job() -> None:
    pods = [_pod("a-0"), _pod("a-1"), _pod("b-0", "b"), _pod("c-0", "c", phase="Succeeded"), _pod("x", node="n2")]
    pods.append(PodView("other", "theirs", "n1", "Running", 8))  # not ours: never annotated
    r = ew.respond(WARN, NODE, pods)
    assert r.taint is not None and r.taint.keep_existing  # the first notice's taint is the record
    assert (r.taint.node, r.taint.key, r.taint.value) == ("n1", v.TAINT_ACCEL_INTERRUPTION, "aws-spot-interruption")
    assert r.requests == (
        act.RequestCheckpoint((("ns", "a-0"), ("ns", "a-1")), "tok-1", ew.REASON_EARLY_WARNING),
        act.RequestCheckpoint((("ns", "b-0"),), "tok-1", ew.REASON_EARLY_WARNING),
    )
    assert [(e.job, e.reason) for e in r.events] == [
        (("ns", "a"), "CheckpointRequested"),
        (("ns", "b"), "CheckpointRequested"),
    ]
    assert "asked pod(s) a-0, a-1 to checkpoint now" in r.events[0].message
    assert "EC2 spot interruption warning (2 minutes) for i-0abc" in r.events[0].message


def test_acting_twice_asks_nothing_new() -> None:
    tainted = replace(NODE, termination_taints=frozenset({v.TAINT_ACCEL_INTERRUPTION}), terminating=True)
    r = ew.respond(WARN, tainted, [_pod("a-0", asked="tok-1"), _pod("a-1", asked="tok-1")])
    assert (r.taint, r.events, r.requests) == (None, (), ())
    # One pod asked before a crash, the other not yet: only the other, one event.
    r = ew.respond(WARN, tainted, [_pod("a-0", asked="tok-1"), _pod("a-1")])
    assert _asked(r) == ["a-1"] and len(r.events) == 1
    # A new notice (another token) is a new request.
    r = ew.respond(replace(WARN, token="tok-2"), tainted, [_pod("a-0", asked="tok-1")])
    assert [q.token for q in r.requests] == ["tok-2"] and _asked(r) == ["a-0"]


def test_gke_taints_its_own_node_and_tpu_is_after_the_fact() -> None:
    gke = ew.NodeWarning("n1", ew.WarningSource.GKE_IMPENDING_TERMINATION, "g")
    r = ew.respond(gke, NODE, [_pod("a-0")])
    assert r.taint is None and _asked(r) == ["a-0"]
    tpu = ew.NodeWarning("n1", ew.WarningSource.TPU_PREEMPTED, "t", "tpu-1")
    r = ew.respond(tpu, NODE, [_pod("a-0")])
    assert r.taint is not None and r.requests == ()
    assert [e.reason for e in r.events] == ["NodePreempted"]
    # The taint is the record that it was seen: no second event.
    seen = replace(NODE, termination_taints=frozenset({v.TAINT_ACCEL_INTERRUPTION}))
    assert ew.respond(tpu, seen, [_pod("a-0")]).events == ()


def test_a_node_gone_from_the_snapshot_is_not_tainted() -> None:
    r = ew.respond(WARN, None, [_pod("a-0")])
    assert r.taint is None and _asked(r) == ["a-0"]


def test_tokens_are_stable_bounded_and_safe() -> None:
    t = ew.token(ew.WarningSource.AWS_REBALANCE, "i-1", "20261126T080000Z")
    assert t == "aws-rebalance-recommendation/i-1/20261126T080000Z"
    assert t == ew.token(ew.WarningSource.AWS_REBALANCE, "i-1", "20261126T080000Z")
    hostile = ew.token(ew.WarningSource.AWS_REBALANCE, "i-" + "\n\"'$(x)" * 100)
    assert len(hostile) == ew.TOKEN_LENGTH and all(c.isalnum() or c in "._:/@+-_" for c in hostile)


def test_hostile_pod_names_are_not_listed_without_bound() -> None:
    pods = [_pod(f"a-{i:04d}") for i in range(500)]
    r = ew.respond(WARN, NODE, pods)
    assert len(r.pods) == 500 and len(r.events) == 1
    assert "and 495 more" in r.events[0].message and len(r.events[0].message) <= decision.MESSAGE_LIMIT


def test_gke_warnings_once_per_incarnation() -> None:
    tainted = replace(NODE, termination_taints=frozenset({v.TAINT_GKE_IMPENDING_TERMINATION}))
    [w] = ew.gke_warnings([tainted, replace(NODE, name="n2")])
    assert w.node == "n1" and w.token == "gke-impending-termination/n1/u1"
    [again] = ew.gke_warnings([replace(tainted, uid="u2")])
    assert again.token != w.token


@pytest.mark.parametrize(
    ("provider_id", "host"),
    [
        ("gce://proj/us-central2-b/tpu-1", ew.TpuHost("proj", "us-central2-b", "tpu-1")),
        ("aws:///us-east-1a/i-1", None),
        ("gce://proj/zone", None),
        ("gce://proj//tpu-1", None),
        ("gce://" + "p" * 64 + "/z/n", None),
        ("", None),
    ],
)
def test_tpu_hosts_from_provider_ids(provider_id: str, host: ew.TpuHost | None) -> None:
    assert ew.tpu_host(provider_id) == host


def test_tpu_preempted_nodes() -> None:
    a = replace(NODE, name="a", provider_id="gce://p/z/tpu-a")
    b = replace(NODE, name="b", provider_id="gce://p/z/tpu-b")
    states = {ew.TpuHost("p", "z", "tpu-a"): "PREEMPTED", ew.TpuHost("p", "z", "tpu-b"): "READY"}
    assert [w.node for w in ew.tpu_preempted([a, b], states)] == ["a"]


# --- what the views carry for it -------------------------------------------------------------------


def test_the_node_view_carries_its_incarnation_provider_id_and_termination_taints() -> None:
    node = {
        "metadata": {"name": "n1", "uid": "u1"},
        "spec": {
            "providerID": "aws:///us-east-1a/i-0abc",
            "taints": [
                {"key": v.TAINT_GPU, "effect": "NoSchedule"},
                {"key": v.TAINT_ACCEL_INTERRUPTION, "value": "aws-spot-interruption", "effect": "NoSchedule"},
            ],
        },
        "status": {"allocatable": {v.RESOURCE_NVIDIA_GPU: "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    view = views.node_view(node)
    assert view is not None
    assert (view.uid, view.provider_id) == ("u1", "aws:///us-east-1a/i-0abc")
    assert view.termination_taints == {v.TAINT_ACCEL_INTERRUPTION}
    assert view.terminating and not view.usable  # our taint: nothing new is admitted there
    node["spec"]["providerID"] = "x" * 100_000  # type: ignore[index]
    hostile = views.node_view(node)
    assert hostile is not None and len(hostile.provider_id) <= 256


def test_the_pod_view_carries_the_last_request_clipped() -> None:
    pod = {
        "metadata": {
            "name": "a-a0-0",
            "namespace": "ns",
            "labels": {v.LABEL_MANAGED_BY: v.MANAGED_BY_VALUE, v.LABEL_JOB: "a", v.LABEL_ATTEMPT: "0"},
            "annotations": {v.ANNOTATION_CHECKPOINT_NOW: "tok"},
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    view = views.pod_view(pod)
    assert view is not None and view.checkpoint_now == "tok"
    pod["metadata"]["annotations"] = {v.ANNOTATION_CHECKPOINT_NOW: "y" * 100_000}  # type: ignore[index]
    clipped = views.pod_view(pod)
    assert clipped is not None and clipped.checkpoint_now is not None and len(clipped.checkpoint_now) == 256


# --- the wiring, with fakes -------------------------------------------------------------------------


def _world(*, sqs: bool = True, tpu_pools: list[str] | None = None) -> tuple[World, Signals]:
    w = World().pool("p", nodes=2)
    w.nodes["p-0"] = [replace(w.nodes["p-0"][0], uid="u0", provider_id="aws:///us-east-1a/i-0000000000000000a")]
    w.settings = OperatorSettings(sqs_wait_seconds=0, tpu_pools=tpu_pools or [])
    w.scheduler.marks.ready = True
    signals = Signals(
        w.scheduler,
        FakeNodeWriter(),
        interruptions=FakeInterruptionQueue() if sqs else None,
        tpu=FakeTpuNodes() if tpu_pools else None,
    )
    return w, signals


def _queue(s: Signals) -> FakeInterruptionQueue:
    assert isinstance(s.interruptions, FakeInterruptionQueue)
    return s.interruptions


def _fake(s: Signals) -> FakeNodeWriter:
    assert isinstance(s.node_writer, FakeNodeWriter)
    return s.node_writer


def test_a_queued_warning_is_acted_on_then_deleted() -> None:
    w, s = _world()
    w.job("a", "p", devices=8)
    w.pod("a", 0, 0, node="p-0")
    q = _queue(s)
    q.send(spot_interruption_event("aws:///us-east-1a/i-0000000000000000a"))
    assert asyncio.run(s.sqs_once()) == 1
    assert _fake(s).taints == {"p-0": {v.TAINT_ACCEL_INTERRUPTION: "aws-spot-interruption"}}
    assert _fake(s).calls[0] == ("taint", "p-0", v.TAINT_ACCEL_INTERRUPTION, "aws-spot-interruption", "keep")
    [(pod, token)] = _fake(s).annotations.items()
    assert pod == ("ns", "a-a0-0") and token.startswith("aws-spot-interruption/i-0000000000000000a/")
    assert [e[2] for e in w.scheduler.applier.writer.events] == ["CheckpointRequested"]  # type: ignore[attr-defined]
    assert len(q.acked) == 1 and not q.in_flight
    assert ("ns", "a") in w.scheduler.marks.dirty


def test_a_failed_write_leaves_the_message_and_the_redelivery_is_harmless() -> None:
    w, s = _world()
    w.job("a", "p", devices=8)
    w.pod("a", 0, 0, node="p-0")
    q = _queue(s)
    q.send(spot_interruption_event("aws:///us-east-1a/i-0000000000000000a"))
    _fake(s).fail_next = ClusterUnavailable("the API server is down")
    assert asyncio.run(s.sqs_once()) == 0
    assert not q.acked and len(q.in_flight) == 1  # not deleted: SQS will deliver it again
    q.expire_visibility()
    # Acted on, then the operator dies before deleting the message.
    [notice] = q.receive()
    assert asyncio.run(s.handle(notice))
    token = _fake(s).annotations[("ns", "a-a0-0")]
    # What the watch shows afterwards: the pod carries the request, the node our taint.
    w.pods["p-0"] = [replace(p, checkpoint_now=token) for p in w.pods["p-0"]]
    w.nodes["p-0"] = [replace(w.nodes["p-0"][0], termination_taints=frozenset({v.TAINT_ACCEL_INTERRUPTION}))]
    calls, events = len(_fake(s).calls), len(w.scheduler.applier.writer.events)  # type: ignore[attr-defined]
    q.expire_visibility()  # the visibility timeout passes: delivered again, to the restarted operator
    assert asyncio.run(s.sqs_once()) == 1
    assert len(_fake(s).calls) == calls, "acting twice wrote again"
    assert len(w.scheduler.applier.writer.events) == events, "acting twice posted a second event"  # type: ignore[attr-defined]
    assert len(q.acked) == 1 and not q.in_flight and not q.queued


def test_unknown_and_malformed_messages_are_deleted_and_never_stop_the_loop() -> None:
    _, s = _world()
    q = _queue(s)
    q.send(spot_interruption_event("aws:///us-east-1a/i-0ffffffffffffffff"))  # no node of ours
    q.send("{not json")
    q.send("[" * 50_000)
    q.send({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": 7}})
    assert asyncio.run(s.sqs_once()) == 1
    assert len(q.acked) == 1 and len(q.dropped) == 3 and not _fake(s).calls


def test_the_queue_failing_is_retried_not_fatal() -> None:
    _, s = _world()
    _queue(s).fail_next = CloudUnavailable("throttled")
    with pytest.raises(CloudUnavailable):
        asyncio.run(s.sqs_once())
    assert asyncio.run(s.sqs_once()) == 0


def test_nothing_is_done_without_the_lease() -> None:
    w, s = _world()

    class Follower:
        def leading(self) -> bool:
            return False

        def tick(self) -> bool:
            return False

    w.scheduler.elector = Follower()
    assert not s._active()


def test_gke_taint_asks_once_per_node_incarnation() -> None:
    w, s = _world(sqs=False)
    w.job("a", "p", devices=8)
    w.pod("a", 0, 0, node="p-1")
    node = w.nodes["p-1"][0]
    w.nodes["p-1"] = [replace(node, uid="u1", termination_taints=frozenset({v.TAINT_GKE_IMPENDING_TERMINATION}))]
    [r] = asyncio.run(s.gke_once())
    assert _asked(r) == ["a-a0-0"] and not _fake(s).taints
    assert asyncio.run(s.gke_once()) == []
    # The node re-created under the same name is another incarnation.
    w.nodes["p-1"] = [replace(w.nodes["p-1"][0], uid="u2")]
    assert len(asyncio.run(s.gke_once())) == 1


def test_tpu_preempted_marks_the_node_for_decide() -> None:
    w, s = _world(sqs=False, tpu_pools=["p"])
    w.nodes["p-1"] = [replace(w.nodes["p-1"][0], uid="u1", provider_id="gce://proj/zone-a/tpu-1")]
    assert isinstance(s.tpu, FakeTpuNodes)
    s.tpu.nodes[("proj", "zone-a")] = {"tpu-1": "READY"}
    asyncio.run(s.tpu_once())
    assert w.scheduler.preempted_nodes == set()
    s.tpu.nodes[("proj", "zone-a")] = {"tpu-1": "PREEMPTED"}
    [r] = asyncio.run(s.tpu_once())
    assert w.scheduler.preempted_nodes == {"p-1"}
    assert r.taint is not None and _fake(s).taints["p-1"][v.TAINT_ACCEL_INTERRUPTION] == "tpu-preempted"
    assert asyncio.run(s.tpu_once()) == []  # once
    s.tpu.fail_next = TpuUnavailable("503")
    with pytest.raises(TpuUnavailable):
        asyncio.run(s.tpu_once())
    assert w.scheduler.preempted_nodes == {"p-1"}  # kept while the API does not answer


def _running(pool: str) -> dict[str, Any]:
    return {
        "phase": "Running",
        "attempt": 0,
        "workload": "a-a0",
        "admittedTime": "2026-11-26T12:00:00Z",
        "startTime": "2026-11-26T12:00:00Z",
        "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "durationSeconds": 3600},
    }


@pytest.mark.parametrize(("preempted", "kind"), [(set(), "Failure"), ({"p-0"}, "Preemption")])
def test_an_attempt_on_a_preempted_tpu_node_is_a_preemption(preempted: set[str], kind: str) -> None:
    w = World().pool("p")
    job = w.job("a", "p", devices=8, status=_running("p"), maxRetries=1)
    message = "Container main for pod ns/a-a0-0 failed with exit code 143 matching FailJob rule at index 1"
    w.workload("a", 0, failed=1, failed_condition=True, failure_reason="PodFailurePolicy", failure_message=message)
    w.pod("a", 0, 0, node="p-0", phase="Failed", exit_code=143)
    w.preempted = preempted
    d = decide(job, w.snapshot(), T0 + dt.timedelta(seconds=30))
    assert failure_of(d).kind == kind
    assert d.phase is JobPhase.PENDING
    assert (d.status.preemptions is not None) == (kind == "Preemption")
