"""Consolidation against the real API server with KWOK nodes: a fixed pool of three 8-GPU nodes,
two of them each holding a 4-GPU job that checkpoints (to a PVC: the job reports its checkpoints
on its pod), and a 2-node × 8 gang that the 16 free devices would hold but not as two whole nodes.

Without a policy's consent the gang waits with a condition that names the proposal and nothing
moves; once an AcceleratorPolicy allows it, one job is asked to checkpoint, moves off its node
after the checkpoint, resumes from it on the third node, and the gang starts with both pods. An
operator restarted while a move waits for its checkpoint carries it out once: no duplicate
workloads, one move, the rate counted once."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import kubeapi
from accel_operator.settings import OperatorSettings
from tests.support.cluster import unexpected_errors, wait_for
from tests.support.jobs import create_job, events_of, gpu_pool, job_doc, pods_of, status, wait_phase, workloads_of
from tests.support.operator import running_operator


@pytest.fixture(autouse=True)
def _checkpoint_claim(api: client.ApiClient, namespace: str) -> None:
    """The claim the jobs' pvc:// checkpoints name (their pods mount it: a missing claim keeps
    them unscheduled)."""
    kubeapi.ensure_claim(api, namespace, "checkpoints")


def _settings(namespace: str, *, grace: float = 3.0, metrics_port: int = 0) -> OperatorSettings:
    return OperatorSettings(
        namespaces=[namespace],
        liveness_port=0,
        metrics_port=metrics_port,
        metrics_address="127.0.0.1",
        resync_seconds=2.0,
        bind_timeout_seconds=30.0,
        checkpoint_grace_seconds=grace,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _checked(runner: Any) -> None:
    assert runner.exception is None, runner.exception
    errors = unexpected_errors(runner.output, [])
    assert not errors, "the operator logged errors the test did not expect:\n" + "\n".join(errors)


@contextmanager
def _policy(api: client.ApiClient, name: str, **consolidation: Any) -> Iterator[None]:
    doc = {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": name},
        # Only consolidation is under test: no spot checkpoint rule for the gang.
        "spec": {"spot": {"requireCheckpoint": False}, "consolidation": consolidation},
    }
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, doc)
    try:
        yield
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, name)


def _uri(job: str) -> str:
    return f"pvc://checkpoints/{job}"


def _running_pods(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> list[Any]:
    return [
        p
        for p in pods_of(core, namespace, job)
        if p.metadata.labels.get(v.LABEL_ATTEMPT) == str(attempt)
        and p.status.phase == "Running"
        and p.metadata.deletion_timestamp is None
    ]


def _report_checkpoint(core: client.CoreV1Api, namespace: str, job: str, attempt: int, step: int) -> None:
    """What the job does after each checkpoint: its URI on its pod."""
    for p in _running_pods(core, namespace, job, attempt):
        core.patch_namespaced_pod(
            p.metadata.name,
            namespace,
            {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT: f"{_uri(job)}/step-{step}"}}},
        )


def _condition(api: client.ApiClient, namespace: str, job: str, type_: str) -> dict[str, Any] | None:
    return next((c for c in status(api, namespace, job).get("conditions", []) if c["type"] == type_), None)


def _marker(api: client.ApiClient, namespace: str, job: str) -> dict[str, Any] | None:
    m: dict[str, Any] | None = (status(api, namespace, job).get("health") or {}).get("consolidation")
    return m


def _fragmented(api: client.ApiClient, core: client.CoreV1Api, namespace: str, pool: str, nodes: list[str]) -> str:
    """x on one node, y on another (the first cordoned while y is placed), both with a checkpoint
    reported, then the gang; returns the node left empty."""
    create_job(api, job_doc(namespace, pool, devices=4, name="x", checkpoint={"uri": _uri("x"), "intervalMinutes": 10}))
    wait_phase(api, namespace, "x", "Running", timeout=90)
    x_node = wait_for(lambda: _running_pods(core, namespace, "x", 0), timeout=30, what="x's pod")[0].spec.node_name
    core.patch_node(x_node, {"spec": {"unschedulable": True}})
    try:
        create_job(
            api, job_doc(namespace, pool, devices=4, name="y", checkpoint={"uri": _uri("y"), "intervalMinutes": 10})
        )
        wait_phase(api, namespace, "y", "Running", timeout=90)
        y_pods = wait_for(lambda: _running_pods(core, namespace, "y", 0), timeout=30, what="y's pod")
    finally:
        core.patch_node(x_node, {"spec": {"unschedulable": False}})
    y_node = y_pods[0].spec.node_name
    assert y_node != x_node
    for job in ("x", "y"):
        _report_checkpoint(core, namespace, job, 0, 5)
    wait_for(
        lambda: all((status(api, namespace, j).get("lastCheckpoint") or {}).get("step") == 5 for j in ("x", "y")),
        timeout=30,
        what="both checkpoints in status",
    )
    create_job(api, job_doc(namespace, pool, devices=16, name="gang"))
    return next(n for n in nodes if n not in (x_node, y_node))


def _moved_one(api: client.ApiClient, namespace: str) -> str:
    """The one job with a consolidation marker (the other has none)."""
    marked = [j for j in ("x", "y") if _marker(api, namespace, j)]
    assert len(marked) == 1, marked
    return marked[0]


def test_a_fragmented_pool_is_consolidated_only_when_a_policy_allows_it(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, cluster: Any, crds: list[str]
) -> None:
    pool = f"{namespace}-frag"
    port = _free_port()
    with gpu_pool(api, pool, count=3) as nodes, running_operator(_settings(namespace, metrics_port=port)) as runner:
        empty = _fragmented(api, core, namespace, pool, nodes)

        # No policy says anything: the proposal is on the gang, and nothing moves.
        proposed = wait_for(
            lambda: (
                (c := _condition(api, namespace, "gang", "Consolidation"))
                and c["reason"] == "ConsolidationProposed"
                and c
            ),
            timeout=60,
            what="the proposal on the waiting gang",
        )
        assert "not performed: no AcceleratorPolicy allows it" in proposed["message"], proposed
        assert f"move {namespace}/" in proposed["message"], proposed
        time.sleep(4)  # two resyncs: still nothing moved
        assert status(api, namespace, "gang")["phase"] == "Pending"
        for job in ("x", "y"):
            st = status(api, namespace, job)
            assert st["phase"] == "Running" and st.get("attempt", 0) == 0 and not _marker(api, namespace, job)

        with _policy(api, f"{namespace}-consolidate", allowed=True, maxMovesPerHour=1, minRemainingMinutes=5):
            moving = wait_for(
                lambda: [j for j in ("x", "y") if _marker(api, namespace, j)], timeout=60, what="a job asked to move"
            )
            assert len(moving) == 1, moving
            mover = moving[0]
            pod = _running_pods(core, namespace, mover, 0)[0]
            from_node = pod.spec.node_name
            assert v.ANNOTATION_CHECKPOINT_NOW in (pod.metadata.annotations or {}) or wait_for(
                lambda: (
                    v.ANNOTATION_CHECKPOINT_NOW
                    in (core.read_namespaced_pod(pod.metadata.name, namespace).metadata.annotations or {})
                ),
                timeout=30,
                what="the checkpoint-now request on the moving job's pod",
            )
            _report_checkpoint(core, namespace, mover, 0, 6)  # the job answers the request

            gang_pods = wait_for(
                lambda: len(p := _running_pods(core, namespace, "gang", 0)) == 2 and p,
                timeout=90,
                what="both pods of the gang running",
            )
            assert sorted(p.spec.node_name for p in gang_pods) == sorted([from_node, empty])
            wait_phase(api, namespace, "gang", "Running", timeout=30)
            resumed = wait_for(
                lambda: _running_pods(core, namespace, mover, 1), timeout=60, what="the moved job's next attempt"
            )
            # Placed away from the gang's nodes: next to the job that stayed.
            assert resumed[0].spec.node_name not in (from_node, empty)
            terms = resumed[0].spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
            kept_off = {f.values[0] for f in terms.node_selector_terms[0].match_fields if f.operator == "NotIn"}
            assert kept_off == {from_node, empty}
            st = wait_phase(api, namespace, mover, "Running", timeout=30)
            assert st["attempt"] == 1 and st["resume"]["resumeFrom"] == f"{_uri(mover)}/step-6", st.get("resume")
            m = st["health"]["consolidation"]
            assert (
                m["state"] == "moved"
                and m["gang"] == f"{namespace}/gang"
                and sorted(m["targets"]) == sorted([from_node, empty])
            )
            assert st["health"]["moves"] == 1
            other = "y" if mover == "x" else "x"
            assert status(api, namespace, other).get("attempt", 0) == 0 and not _marker(api, namespace, other)

            moved_events = wait_for(
                lambda: [m for r, m in events_of(core, namespace, mover) if r == "Consolidating"],
                timeout=30,
                what="the Consolidating events on the moved job",
            )
            assert any("make room for" in e and "/gang" in e for e in moved_events), moved_events
            assert any(
                r == "Moved" and "the checkpoint it just wrote" in m for r, m in events_of(core, namespace, mover)
            )
            gang_events = [m for r, m in events_of(core, namespace, "gang") if r == "Consolidating"]
            assert gang_events and f"move {namespace}/{mover}" in gang_events[0], gang_events
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                metrics = resp.read().decode()
            assert 'accel_operator_consolidation_moves_total{stage="requested"} 1.0' in metrics
            assert 'accel_operator_consolidation_moves_total{stage="moved"} 1.0' in metrics
            assert 'accel_operator_moves_total{reason="consolidation"} 1.0' in metrics
            assert [w.metadata.name for w in workloads_of(api, namespace, mover)] == [f"{mover}-a1"]
    _checked(runner)


def test_an_operator_restarted_mid_consolidation_moves_once_and_duplicates_nothing(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, cluster: Any, crds: list[str]
) -> None:
    pool = f"{namespace}-restart"
    with gpu_pool(api, pool, count=3) as nodes, _policy(api, f"{namespace}-consolidate", allowed=True):
        # The first operator asks for the checkpoint and is stopped while the move waits for it.
        with running_operator(_settings(namespace, grace=600.0)) as first:
            _fragmented(api, core, namespace, pool, nodes)
            moving = wait_for(
                lambda: [j for j in ("x", "y") if _marker(api, namespace, j)], timeout=60, what="a job asked to move"
            )
            mover = moving[0]
            asked = _marker(api, namespace, mover)
            assert asked is not None and asked["state"] == "requested"
        _checked(first)
        assert status(api, namespace, mover).get("attempt", 0) == 0  # not moved yet
        # The second one: the grace has passed, so it moves from the latest complete checkpoint.
        with running_operator(_settings(namespace, grace=1.0)) as second:
            wait_for(lambda: len(_running_pods(core, namespace, "gang", 0)) == 2, timeout=90, what="the gang running")
            wait_for(lambda: _running_pods(core, namespace, mover, 1), timeout=60, what="the moved job running again")
            time.sleep(4)  # two resyncs: nothing more happens
            st = status(api, namespace, mover)
            assert st["attempt"] == 1 and st["health"]["moves"] == 1
            done = st["health"]["consolidation"]
            assert done["state"] == "moved" and done["requestedTime"] == asked["requestedTime"]
            assert st["resume"]["resumeFrom"] == f"{_uri(mover)}/step-5"
            assert _moved_one(api, namespace) == mover
            names = sorted(w.metadata.name for j in ("x", "y", "gang") for w in workloads_of(api, namespace, j))
            other = "y" if mover == "x" else "x"
            assert names == sorted([f"{mover}-a1", f"{other}-a0", "gang-a0"]), names
            asks = [
                m for r, m in events_of(core, namespace, mover) if r == "Consolidating" and "checkpoint requested" in m
            ]
            assert len(asks) == 1, asks
        _checked(second)
