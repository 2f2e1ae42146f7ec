"""The demo's consolidation step: a fragmented pool, a gang that waits, and one job that moves.

On a pool of its own (three KWOK nodes, 8 H100s each) two 4-GPU jobs with checkpoints run on two
different nodes (the first node is cordoned while the second job is placed, as scattered arrivals
would leave them); each reports a checkpoint on its pod, as a training program does. A 2-node ×
8-GPU job then waits: 16 devices are free, but only one node is whole. Without a policy's consent
the operator only proposes which job to move; once an AcceleratorPolicy says
``consolidation: {allowed: true}``, it asks that job to checkpoint now, ends its attempt after the
checkpoint, resumes it away from the nodes the gang needs, and the gang starts on two whole nodes.
The policy is removed afterwards (it is cluster-wide).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import demo_pools, kubeapi

POOL = "demo-h100-frag"
POLICY = "demo-consolidation"
SMALL = ("tokenizer", "evaluator")  # the two 4-GPU jobs
GANG = "pretrain"

Wait = Callable[[str, Callable[[], Any], float], bool]


def clean(api: client.ApiClient) -> None:
    """Remove what an earlier run left: the pool, its nodes and the policy."""
    custom = client.CustomObjectsApi(api)
    with kubeapi.ignoring(404):
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, POLICY)
    demo_pools.remove_pool(api, POOL)


def _job(namespace: str, name: str, devices: int) -> dict[str, Any]:
    return demo_pools.example_job(namespace, name, POOL, devices)


def _status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return demo_pools.job_status(custom, namespace, name)


def _pods(core: client.CoreV1Api, namespace: str, name: str, attempt: int) -> list[Any]:
    return [
        p
        for p in core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}={name}").items
        if p.metadata.labels.get(v.LABEL_ATTEMPT) == str(attempt)
        and p.status.phase == "Running"
        and p.metadata.deletion_timestamp is None
    ]


def _report_checkpoint(core: client.CoreV1Api, namespace: str, name: str, attempt: int, step: int) -> None:
    for p in _pods(core, namespace, name, attempt):
        uri = f"pvc://checkpoints/{name}/step-{step}"
        core.patch_namespaced_pod(
            p.metadata.name, namespace, {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT: uri}}}
        )


def _condition(custom: client.CustomObjectsApi, namespace: str) -> dict[str, Any]:
    conds = _status(custom, namespace, GANG).get("conditions") or []
    return next((c for c in conds if c["type"] == "Consolidation"), {})


def _where(core: client.CoreV1Api, namespace: str) -> str:
    out = []
    for name in (*SMALL, GANG):
        for attempt in range(3):
            placed = sorted(p.spec.node_name for p in _pods(core, namespace, name, attempt))
            if placed:
                out.append(f"{name} (attempt {attempt}) on {', '.join(placed)}")
    return "; ".join(out)


def run(api: client.ApiClient, namespace: str, wait: Wait, timeout: float) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    made = demo_pools.make_pool(api, POOL, 3)
    print(f"pool {POOL}: 8x h100-80gb on three simulated nodes {', '.join(made)}")
    kubeapi.ensure_namespace(api, namespace)
    first, second = SMALL
    kubeapi.apply(api, _job(namespace, first, 4))
    if not wait(f"{first} running", lambda: _pods(core, namespace, first, 0), timeout):
        return
    taken = _pods(core, namespace, first, 0)[0].spec.node_name
    core.patch_node(taken, {"spec": {"unschedulable": True}})  # scatter the arrivals
    try:
        kubeapi.apply(api, _job(namespace, second, 4))
        wait(f"{second} running", lambda: _pods(core, namespace, second, 0), timeout)
    finally:
        core.patch_node(taken, {"spec": {"unschedulable": False}})
    for name in SMALL:
        _report_checkpoint(core, namespace, name, 0, 5)
    wait(
        "their checkpoints in status",
        lambda: all(_status(custom, namespace, n).get("lastCheckpoint") for n in SMALL),
        timeout,
    )
    kubeapi.apply(api, _job(namespace, GANG, 16))
    print(f"now: {_where(core, namespace)}; {GANG} needs 2 whole nodes (16 GPUs are free, one node is whole)")
    wait("the proposal", lambda: _condition(custom, namespace).get("reason") == "ConsolidationProposed", timeout)
    print(f"{GANG} waits. Consolidation: {_condition(custom, namespace).get('message')}")

    print(f"\n-- AcceleratorPolicy {POLICY}: consolidation: {{allowed: true, maxMovesPerHour: 2}}")
    policy = {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": POLICY},
        "spec": {"spot": {"requireCheckpoint": False}, "consolidation": {"allowed": True, "maxMovesPerHour": 2}},
    }
    kubeapi.apply(api, policy)
    t0 = time.monotonic()
    try:

        def mover() -> str | None:
            return next(
                (n for n in SMALL if (_status(custom, namespace, n).get("health") or {}).get("consolidation")), None
            )

        wait("a job asked to move", mover, timeout)
        moving = mover()
        if moving is None:
            return
        print(f"{moving} is asked to checkpoint now; it reports step 6 on its pod")
        _report_checkpoint(core, namespace, moving, 0, 6)
        wait(f"{GANG} running", lambda: len(_pods(core, namespace, GANG, 0)) == 2, timeout)
        wait(f"{moving} running again", lambda: _pods(core, namespace, moving, 1), timeout)
        st = _status(custom, namespace, moving)
        print(f"after {time.monotonic() - t0:.1f}s: {_where(core, namespace)}")
        print(f"{moving} resumed from {(st.get('resume') or {}).get('resumeFrom')}")
        for e in core.list_namespaced_event(namespace).items:
            obj = e.involved_object
            if obj and obj.name in (moving, GANG) and e.reason in ("Consolidating", "Moved"):
                print(f"  event {obj.name} {e.reason}: {e.message}")
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, POLICY)
