"""The simulated autoscaler against the real control plane: an autoscaled pool with no nodes gets
one KWOK node per pending 8-GPU pod of a gang, the scheduler binds the pods there, and once the
pods end the nodes it made are removed after the idle time."""

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import autoscaler, kubeapi, preempt, stages
from tests.support.cluster import wait_for

DELAY = 1.0
IDLE = 3.0


@pytest.fixture
def autoscaled_pool(api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str) -> Iterator[str]:
    """An autoscaled 8-GPU pool under a per-test name, with no nodes; it and its nodes go after."""
    name = f"as-{namespace}"
    kubeapi.apply(
        api,
        {
            "apiVersion": v.API_VERSION,
            "kind": "AcceleratorPool",
            "metadata": {"name": name},
            "spec": {
                "provider": "aws",
                "accelerator": "h100-80gb",
                "devicesPerNode": 8,
                "capacityType": "on-demand",
                "scaling": "autoscaled",
                "maxNodes": 3,
                "tolerations": [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    )
    yield name
    with kubeapi.ignoring(404):
        client.CustomObjectsApi(api).delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)
    for node in _pool_nodes(core, name):
        preempt.delete_node(core, node.metadata.name)


def _pool_nodes(core: client.CoreV1Api, pool: str) -> list[Any]:
    return list(core.list_node(label_selector=f"{v.LABEL_POOL}={pool}").items)


def _gang(api: client.ApiClient, ns: str, name: str, pool: str, size: int) -> None:
    """An Indexed Job of ``size`` pods, each asking for a whole 8-GPU node of ``pool``."""
    gpus = {v.RESOURCE_NVIDIA_GPU: "8"}
    pod = client.V1PodSpec(
        containers=[
            client.V1Container(
                name="train",
                image="trainer:1",
                resources=client.V1ResourceRequirements(limits=gpus, requests=gpus),
            )
        ],
        restart_policy="Never",
        node_selector={v.LABEL_POOL: pool},
        tolerations=[client.V1Toleration(key=v.TAINT_GPU, operator="Exists", effect="NoSchedule")],
    )
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name=name, namespace=ns),
        spec=client.V1JobSpec(
            completion_mode="Indexed",
            completions=size,
            parallelism=size,
            backoff_limit=0,
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": name}), spec=pod),
        ),
    )
    client.BatchV1Api(api).create_namespaced_job(ns, job)


def test_autoscaled_pool_grows_for_a_gang_and_shrinks_when_idle(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    autoscaled_pool: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = autoscaled_pool
    caplog.set_level(logging.INFO, logger=autoscaler.__name__)
    assert _pool_nodes(core, pool) == []
    with autoscaler.running(api, scale_up_delay=DELAY, idle_seconds=IDLE, interval=0.25) as scaler:
        t0 = time.monotonic()
        _gang(api, namespace, "gang", pool, size=2)

        def both_running() -> list[Any]:
            pods = core.list_namespaced_pod(namespace, label_selector="app=gang").items
            running = [p for p in pods if p.status.phase == "Running" and p.spec.node_name]
            return running if len(running) == 2 else []

        pods = wait_for(both_running, timeout=90, what="both pods of the gang Running")
        scale_up = time.monotonic() - t0
        made = {n.metadata.name: n for n in _pool_nodes(core, pool)}
        assert len(made) == 2, sorted(made)
        assert {p.spec.node_name for p in pods} == set(made), "one pod on each new node"
        for node in made.values():
            assert node.metadata.annotations[v.ANNOTATION_AUTOSCALED] == "true"
            assert node.status.allocatable[v.RESOURCE_NVIDIA_GPU] == "8"
        assert scaler.nodes_added == 2

        for p in pods:
            core.patch_namespaced_pod(
                p.metadata.name, namespace, {"metadata": {"annotations": {stages.EXIT_CODE_ANNOTATION: "0"}}}
            )
        batch = client.BatchV1Api(api)
        wait_for(
            lambda: (batch.read_namespaced_job("gang", namespace).status.succeeded or 0) == 2,
            timeout=60,
            what="the gang's Job succeeded",
        )
        t1 = time.monotonic()
        wait_for(lambda: not _pool_nodes(core, pool), timeout=30 + IDLE, what="the idle nodes removed")
        scale_down = time.monotonic() - t1
        # The scaler counts a removal after the API server took it: the deletion can be seen first.
        wait_for(lambda: scaler.nodes_removed == 2, timeout=10, what="the scaler to count both removals")
        assert (scaler.nodes_added, scaler.nodes_removed) == (2, 2)
    added = [r.getMessage() for r in caplog.records if "add node" in r.getMessage()]
    removed = [r.getMessage() for r in caplog.records if "remove node" in r.getMessage()]
    assert len(added) == 2
    assert len(removed) == 2
    print(
        f"\nautoscaler: 2 nodes added and both pods Running {scale_up:.1f}s after the Job was created "
        f"(scale-up delay {DELAY}s); nodes removed {scale_down:.1f}s after the Job succeeded (idle {IDLE}s)"
    )
