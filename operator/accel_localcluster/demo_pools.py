"""What the demo's own-pool steps share (:mod:`demo_reschedule`, :mod:`demo_consolidate`): an
H100 pool on KWOK nodes of its own, removing it again, the example job placed on it, and reading
a job's status."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from accel_api import load_documents, registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import kubeapi, nodes
from accel_localcluster.control_plane import REPO


def pool_manifest(name: str, *, max_nodes: int, devices_per_node: int = 8, **spec: Any) -> dict[str, Any]:
    """AcceleratorPool ``name`` of on-demand H100 nodes tolerating the GPU taint (``spec`` adds or
    overrides fields, e.g. ``capacityType="spot"``)."""
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPool",
        "metadata": {"name": name},
        "spec": {
            "provider": "aws",
            "accelerator": "h100-80gb",
            "devicesPerNode": devices_per_node,
            "maxNodes": max_nodes,
            "tolerations": [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
            **spec,
        },
    }


def make_pool(api: client.ApiClient, name: str, count: int, **spec: Any) -> list[str]:
    """AcceleratorPool ``name`` (``pool_manifest``) with ``count`` simulated nodes of 8 H100s each,
    applied with its nodes; the nodes' names."""
    pool = pool_manifest(name, max_nodes=count, **spec)
    kubeapi.apply(api, pool)
    pool_spec = AcceleratorPoolSpec.model_validate(pool["spec"])
    return nodes.ensure_nodes(client.CoreV1Api(api), nodes.node_manifests(name, pool_spec, count))


def remove_pool(api: client.ApiClient, name: str, *, reports: bool = False) -> None:
    """Pool ``name`` and its nodes gone (with ``reports``, their AcceleratorNodeReports too)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    with kubeapi.ignoring(404):
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)
    for node in core.list_node(label_selector=f"{v.LABEL_POOL}={name}").items:
        if reports:
            with kubeapi.ignoring(404):
                custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, node.metadata.name)
        with kubeapi.ignoring(404):
            core.delete_node(node.metadata.name)


def example_job(namespace: str, name: str, pool: str, devices: int) -> dict[str, Any]:
    """examples/01 (a 1.1B fine-tune) as ``name`` on ``devices`` GPUs of ``pool``, checkpointing
    to the PVC ``pvc://checkpoints/<name>``."""
    doc = copy.deepcopy(next(iter(load_documents((REPO / "examples" / "01-finetune-single-gpu.yaml").read_text()))))
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["placement"] = {"pools": [pool], "minDevices": devices, "maxDevices": devices}
    doc["spec"]["checkpoint"] = {"uri": f"pvc://checkpoints/{name}", "intervalMinutes": 10}
    return dict(doc)


def job_status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    """The AcceleratorJob's status ({} before the operator wrote one)."""
    obj = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name)
    st: dict[str, Any] = obj.get("status") or {}
    return st
