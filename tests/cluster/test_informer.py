"""The lean informer (adapters/kube/informer.py) against the local API server: the first
listing, watch events (added, changed, deleted), reconnecting when the server ends each watch,
and an object deleted while the informer was stopped reported as deleted by the next listing;
the operator's node informer, which drops heartbeats."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from kubernetes import client

from accel_operator.adapters.kube.informer import Informer, ObjKey
from tests.support.cluster import free_port, wait_for
from tests.support.jobs import create_job, gpu_pool, job_doc, status, wait_phase
from tests.support.operator import checked_operator, settings_for


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"step": "0"}},
        "spec": {"containers": [{"name": "c", "image": "none"}], "nodeSelector": {"nowhere": "true"}},
    }


async def _until(what: Callable[[], bool], timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not what():
        assert time.monotonic() - t0 < timeout, "timed out"
        await asyncio.sleep(0.05)


def test_the_informer_follows_pods_through_list_watch_reconnects_and_a_relist(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    changes: list[tuple[ObjKey, Any, Any]] = []

    def view(obj: Mapping[str, Any]) -> tuple[str, str] | None:
        meta = obj["metadata"]
        return (meta["name"], meta["labels"]["step"]) if meta.get("namespace") == namespace else None

    def keys(key: ObjKey, v: tuple[str, str]) -> list[Hashable]:
        return [v[1]]  # indexed by the "step" label

    core.create_namespaced_pod(namespace, _pod("a"))
    # The server ends every watch after 2 s: the informer keeps reconnecting from its last version.
    inf: Informer[tuple[str, str]] = Informer(
        "test-pods",
        api,
        "v1",
        "pods",
        view=view,
        keys=keys,
        on_change=lambda k, b, a: changes.append((k, b, a)),
        timeout_seconds=2,
    )

    async def run() -> None:
        inf.start()
        try:
            await _until(lambda: inf.listed)
            assert inf.store == {(namespace, "a"): ("a", "0")}
            core.create_namespaced_pod(namespace, _pod("b"))
            await _until(lambda: (namespace, "b") in inf.store)
            await asyncio.sleep(5)  # at least two reconnects
            core.patch_namespaced_pod("b", namespace, {"metadata": {"labels": {"step": "1"}}})
            await _until(lambda: inf.store.get((namespace, "b")) == ("b", "1"))
            assert list(inf.index["1"]) == [("b", "1")] and list(inf.index["0"]) == [("a", "0")]
            core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
            await _until(lambda: (namespace, "a") not in inf.store)
            assert "0" not in inf.index
            # Stopped, then b is deleted: no watch sees it; the next listing must.
            inf.stop()
            await asyncio.sleep(3)
            core.delete_namespaced_pod("b", namespace, grace_period_seconds=0)
            await _until(lambda: not any(p.metadata.name == "b" for p in core.list_namespaced_pod(namespace).items))
            inf.start()
            await _until(lambda: (namespace, "b") not in inf.store)
        finally:
            inf.stop()

    asyncio.run(run())
    ns = namespace
    assert changes == [
        ((ns, "a"), None, ("a", "0")),
        ((ns, "b"), None, ("b", "0")),
        ((ns, "b"), ("b", "0"), ("b", "1")),
        ((ns, "a"), ("a", "0"), None),
        ((ns, "b"), ("b", "1"), None),
    ]
    assert inf.events >= 3


def _metric(port: int, line_start: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(line_start + " "):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_nodes_come_through_an_informer_that_drops_heartbeats(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str]
) -> None:
    """The operator watches nodes with a lean informer: a heartbeat (the Ready condition's
    lastHeartbeatTime rewritten, as the kubelet does every few seconds) is counted and dropped in
    the watch thread, while a cordon and its lifting still reach the scheduler (a job waits on
    the cordoned node's pool and is admitted once it is lifted)."""
    port = free_port()
    settings = settings_for(namespace, metrics_port=port, metrics_address="127.0.0.1")
    pool = f"{namespace}-beat"
    with gpu_pool(api, pool, count=1) as (node,), checked_operator(settings):
        listed = 'accel_operator_watch_listed{resource="nodes"}'
        wait_for(lambda: _metric(port, listed) == 1.0, timeout=30, what="the node informer's first listing")
        dropped = 'accel_operator_watch_unchanged_total{resource="nodes"}'
        before = _metric(port, dropped) or 0.0
        for i in range(5):
            beat = f"2030-01-01T00:00:{i:02d}Z"
            conditions = core.read_node_status(node).status.conditions
            body = [
                {"type": c.type, "status": c.status, "reason": c.reason, "lastHeartbeatTime": beat} for c in conditions
            ]
            core.patch_node_status(node, {"status": {"conditions": body}})
        wait_for(lambda: (_metric(port, dropped) or 0.0) >= before + 5, timeout=30, what="five heartbeats dropped")
        core.patch_node(node, {"spec": {"unschedulable": True}})
        create_job(api, job_doc(namespace, pool, devices=1, name="cordoned"))
        wait_for(
            lambda: status(api, namespace, "cordoned").get("phase") == "Pending",
            timeout=30,
            what="the job waiting: its only node is cordoned",
        )
        core.patch_node(node, {"spec": {"unschedulable": False}})
        wait_phase(api, namespace, "cordoned", "Running", timeout=60)
