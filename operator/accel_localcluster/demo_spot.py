"""The demo's spot step: a preemption, the resume from the latest checkpoint, the lost work, and
the fallback to on-demand after ``spot.maxPreemptions``.

A GKE spot pool of H100 nodes (two) and an on-demand pool (one node). One 8-GPU job, ``spot.policy:
prefer``, ``maxPreemptions: 1``, checkpointing to a PVC path. The demo plays the training program:
it reports each checkpoint by annotating the running pod ``accel.dev/last-checkpoint`` (what a job
on a PVC does, docs/concepts.md, "The checkpoint contract"), then preempts the pod's node the GKE way (taint,
pods failed by the kubelet's shutdown, node deleted). The operator starts a new attempt whose
``ACCEL_RESUME_FROM`` is the reported step, with the lost device-seconds in the status and an
event; the second preemption moves the job to the on-demand pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import demo_pools, kubeapi, nodes, preempt

SPOT_POOL = "demo-h100-gke-spot"
OD_POOL = "demo-h100-gke-on-demand"
JOB = "resumable"
URI = "pvc://demo-checkpoints/llama-1b"


def _pool(name: str, capacity: str, price: dict[str, float]) -> dict[str, Any]:
    return demo_pools.pool_manifest(
        name, max_nodes=2, provider="gcp", capacityType=capacity, price={"source": "static", **price}
    )


def _job(namespace: str, base: dict[str, Any]) -> dict[str, Any]:
    doc = dict(base)
    doc["metadata"] = {"name": JOB, "namespace": namespace}
    doc["spec"] = {
        **base["spec"],
        "placement": {"pools": [SPOT_POOL, OD_POOL], "minDevices": 8, "maxDevices": 8},
        "spot": {"policy": "prefer", "maxPreemptions": 1},
        "checkpoint": {"uri": URI, "intervalMinutes": 10},
    }
    return doc


def clean(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
    """Remove what an earlier run left (its job is removed with the demo namespace's jobs)."""
    for pool in (SPOT_POOL, OD_POOL):
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, pool)
        for node in core.list_node(label_selector=f"{v.LABEL_POOL}={pool}").items:
            preempt.delete_node(core, node.metadata.name)


def run(
    api: client.ApiClient,
    namespace: str,
    base_job: dict[str, Any],
    *,
    wait: Callable[[str, Callable[[], bool], float], bool],
    timeout: float,
) -> None:
    core, custom, batch = client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api)
    spot = _pool(SPOT_POOL, "spot", {"spotPerDeviceHour": 3.7})
    od = _pool(OD_POOL, "on-demand", {"onDemandPerDeviceHour": 11.1})
    for pool, count in ((spot, 2), (od, 1)):
        kubeapi.apply(api, pool)
        spec = AcceleratorPoolSpec.model_validate(pool["spec"])
        made = nodes.ensure_nodes(core, nodes.node_manifests(pool["metadata"]["name"], spec, count))
        print(f"pool {pool['metadata']['name']}: 8x h100-80gb {spec.capacity_type.value}, nodes {', '.join(made)}")

    def st() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, JOB)
        got: dict[str, Any] = obj.get("status") or {}
        return got

    def running_pod(attempt: int) -> Any:
        for p in core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}={JOB}").items:
            if p.metadata.labels.get(v.LABEL_ATTEMPT) == str(attempt) and p.status.phase == "Running":
                return p
        return None

    kubeapi.apply(api, _job(namespace, base_job))
    for attempt, step in ((0, 120), (1, 240)):

        def started(a: int = attempt) -> bool:
            return st().get("phase") == "Running" and running_pod(a) is not None

        def recorded(n: int = step) -> bool:
            return (st().get("lastCheckpoint") or {}).get("step") == n

        def resumed(a: int = attempt) -> bool:
            s = st()
            return s.get("attempt") == a + 1 and s.get("phase") == "Running"

        if not wait(f"attempt {attempt} running", started, timeout):
            return
        s = st()
        plan = s.get("plan") or {}
        pod = running_pod(attempt)
        print(
            f"\n-- attempt {attempt} runs on {plan.get('pool')} ({plan.get('capacityType')}), node {pod.spec.node_name}"
        )
        core.patch_namespaced_pod(
            pod.metadata.name, namespace, {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT: f"{URI}/step-{step}"}}}
        )
        wait("the checkpoint recorded", recorded, timeout)
        print(f"   the job reports checkpoint {URI}/step-{step}; status.lastCheckpoint follows")
        time.sleep(3)  # work after the checkpoint: what the preemption will throw away
        print(f"   GKE preempts {pod.spec.node_name}: impending-termination taint, pods shut down, node deleted")
        preempt.gke_preemption(core, pod.spec.node_name)
        if not wait(f"attempt {attempt + 1} running", resumed, timeout):
            return
        s = st()
        workload = batch.read_namespaced_job(s["workload"], namespace)
        env = {e.name: e.value or "" for e in workload.spec.template.spec.containers[0].env or []}
        failure = s.get("lastFailure") or {}
        conds = {c["type"]: c for c in s.get("conditions", [])}
        print(f"   attempt {attempt + 1} ({s['workload']}): {v.ENV_RESUME_FROM}={env.get(v.ENV_RESUME_FROM)!r}")
        pod_spec = workload.spec.template.spec
        claims = {
            vol.name: vol.persistent_volume_claim.claim_name for vol in pod_spec.volumes if vol.persistent_volume_claim
        }
        for m in pod_spec.containers[0].volume_mounts or []:
            if m.name in claims:
                print(
                    f"   claim {claims[m.name]} path {m.sub_path} mounted at {m.mount_path} (every attempt); "
                    f"{v.ENV_RESUME_FROM_DIR}={env.get(v.ENV_RESUME_FROM_DIR)!r}"
                )
        print(
            f"   lost work: {failure.get('lostDeviceSeconds', 0):,.0f} device-seconds this time, "
            f"{(s.get('spot') or {}).get('lostDeviceSeconds', 0):,.0f} in all; "
            f"preemptions {s.get('preemptions')} of spot.maxPreemptions 1"
        )
        print(f"   condition Resumed: {conds.get('Resumed', {}).get('message')}")
        if "SpotFallback" in conds:
            plan = s.get("plan") or {}
            print(f"   condition SpotFallback: {conds['SpotFallback'].get('message')}")
            print(f"   now on {plan.get('pool')} ({plan.get('capacityType')})")
