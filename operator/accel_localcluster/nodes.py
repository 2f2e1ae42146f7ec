"""Simulated accelerator nodes: KWOK Node objects that look like the real cloud's.

``node_manifests`` is pure: an AcceleratorPool spec in, Node dicts out, with the labels, taints,
allocatable and provider ID that EKS/Karpenter, GKE and the NVIDIA GPU operator put on real
nodes. ``ensure_nodes`` creates them through the API server (idempotent).
"""

import hashlib
from typing import Any

from kubernetes import client

from accel_api import catalog as catalog_mod
from accel_api import vocabulary as v
from accel_api.enums import AcceleratorKind, CapacityType, Provider
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import kubeapi


def _instance_id(pool: str, index: int) -> str:
    return "i-0" + hashlib.sha256(f"{pool}/{index}".encode()).hexdigest()[:16]


def node_name(pool: str, index: int) -> str:
    return f"{pool}-{index}"


def node_manifests(
    pool: str,
    spec: AcceleratorPoolSpec,
    count: int | None = None,
    catalog: catalog_mod.Catalog | None = None,
    *,
    start: int = 0,
) -> list[dict[str, Any]]:
    """``count`` nodes (default ``spec.maxNodes``) of ``pool`` as Node manifests, numbered from
    ``start`` (``<pool>-<start>``, ...: a pool that grows asks for indexes not in use).

    The product label and memory come from the accelerator catalog (the planner's), so a
    simulated node says exactly what the planner assumes of it."""
    hw = (catalog or catalog_mod.default()).get(spec.accelerator)
    if hw is None:
        raise ValueError(f"spec.accelerator: {spec.accelerator!r} is not in the accelerator catalog")
    tpu = hw.kind is AcceleratorKind.TPU
    n = spec.max_nodes if count is None else count
    spot = spec.capacity_type is CapacityType.SPOT
    zone = spec.zone or ("us-east-1a" if spec.provider is Provider.AWS else "us-central1-a")
    region = spec.region or zone[:-1].rstrip("-")
    out = []
    for i in range(start, start + n):
        name = node_name(pool, i)
        labels: dict[str, str] = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            v.LABEL_POOL: pool,
            v.LABEL_ZONE: zone,
            "topology.kubernetes.io/region": region,
        }
        if spec.instance_type:
            labels[v.LABEL_INSTANCE_TYPE] = spec.instance_type
        if spec.provider is Provider.AWS:
            labels[v.LABEL_KARPENTER_CAPACITY] = spec.capacity_type.value
            labels[v.LABEL_EKS_CAPACITY] = "SPOT" if spot else "ON_DEMAND"
            provider_id = f"aws:///{zone}/{_instance_id(pool, i)}"
        elif spec.provider is Provider.GCP:
            if spot:
                labels[v.LABEL_GKE_SPOT] = "true"
            labels["cloud.google.com/gke-nodepool"] = pool
            provider_id = f"gce://accel-local/{zone}/{name}"
        else:
            provider_id = f"kwok://{name}"
        taints: list[dict[str, str]]
        if tpu:
            resource = v.RESOURCE_GOOGLE_TPU
            labels[v.LABEL_TPU_ACCELERATOR] = hw.product
            if spec.tpu_topology:
                labels[v.LABEL_TPU_TOPOLOGY] = spec.tpu_topology
            taints = [{"key": v.TAINT_TPU, "value": "present", "effect": "NoSchedule"}]
        else:
            resource = v.RESOURCE_NVIDIA_GPU
            labels[v.LABEL_GPU_PRODUCT] = hw.product
            labels[v.LABEL_GPU_MEMORY_MIB] = str(hw.memory_bytes // 2**20)
            labels[v.LABEL_GPU_COUNT] = str(spec.devices_per_node)
            labels[v.LABEL_GPU_PRESENT] = "true"
            taints = [{"key": v.TAINT_GPU, "value": "present", "effect": "NoSchedule"}]
        labels.update(spec.node_selector)  # the pool's selector must match its own nodes
        resources = {
            "cpu": "192",
            "memory": "2048Gi",
            "pods": "110",
            "ephemeral-storage": "7000Gi",
            resource: str(spec.devices_per_node),
        }
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        v.ANNOTATION_SIMULATED: "true",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                },
                "spec": {"providerID": provider_id, "taints": taints},
                "status": {"allocatable": resources, "capacity": resources},
            }
        )
    return out


def ensure_nodes(core: client.CoreV1Api, manifests: list[dict[str, Any]]) -> list[str]:
    """Create the nodes that do not exist yet; return the names of all of them."""
    for m in manifests:
        with kubeapi.ignoring(409):
            core.create_node(m)
    return [m["metadata"]["name"] for m in manifests]
