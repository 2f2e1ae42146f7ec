"""Simulated accelerator nodes: KWOK Node objects that look like the real cloud's.

``node_manifests`` is pure: an AcceleratorPool spec in, Node dicts out, with the labels, taints,
allocatable and provider ID that EKS/Karpenter, GKE and the NVIDIA GPU operator put on real
nodes. ``ensure_nodes`` creates them through the API server (idempotent).
"""

import hashlib
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import vocabulary as v
from accel_api.enums import CapacityType, Provider
from accel_api.pool import AcceleratorPoolSpec


@dataclass(frozen=True)
class Hardware:
    """What the node's labels say about its devices."""

    tpu: bool
    product: str  # nvidia.com/gpu.product or cloud.google.com/gke-tpu-accelerator
    memory_mib: int = 0


# The values real clusters show: GPU feature discovery's product names, GKE's TPU accelerators.
HARDWARE: dict[str, Hardware] = {
    "t4": Hardware(False, "Tesla-T4", 15360),
    "l4": Hardware(False, "NVIDIA-L4", 23034),
    "a10g": Hardware(False, "NVIDIA-A10G", 23028),
    "a100-40gb": Hardware(False, "NVIDIA-A100-SXM4-40GB", 40960),
    "a100-80gb": Hardware(False, "NVIDIA-A100-SXM4-80GB", 81920),
    "h100-80gb": Hardware(False, "NVIDIA-H100-80GB-HBM3", 81559),
    "h200-141gb": Hardware(False, "NVIDIA-H200", 143771),
    "b200": Hardware(False, "NVIDIA-B200", 183359),
    "tpu-v4": Hardware(True, "tpu-v4-podslice"),
    "tpu-v5e": Hardware(True, "tpu-v5-lite-podslice"),
    "tpu-v5p": Hardware(True, "tpu-v5p-slice"),
    "tpu-v6e": Hardware(True, "tpu-v6e-slice"),
}


def _instance_id(pool: str, index: int) -> str:
    return "i-0" + hashlib.sha256(f"{pool}/{index}".encode()).hexdigest()[:16]


def node_name(pool: str, index: int) -> str:
    return f"{pool}-{index}"


def node_manifests(pool: str, spec: AcceleratorPoolSpec, count: int | None = None) -> list[dict[str, Any]]:
    """``count`` nodes (default ``spec.maxNodes``) of ``pool`` as Node manifests."""
    hw = HARDWARE.get(spec.accelerator)
    if hw is None:
        raise ValueError(f"spec.accelerator: {spec.accelerator!r} has no simulated hardware; known: {sorted(HARDWARE)}")
    n = spec.max_nodes if count is None else count
    spot = spec.capacity_type is CapacityType.SPOT
    zone = spec.zone or ("us-east-1a" if spec.provider is Provider.AWS else "us-central1-a")
    region = spec.region or zone[:-1].rstrip("-")
    out = []
    for i in range(n):
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
        if hw.tpu:
            resource = v.RESOURCE_GOOGLE_TPU
            labels[v.LABEL_TPU_ACCELERATOR] = hw.product
            if spec.tpu_topology:
                labels[v.LABEL_TPU_TOPOLOGY] = spec.tpu_topology
            taints = [{"key": v.TAINT_TPU, "value": "present", "effect": "NoSchedule"}]
        else:
            resource = v.RESOURCE_NVIDIA_GPU
            labels[v.LABEL_GPU_PRODUCT] = hw.product
            labels[v.LABEL_GPU_MEMORY_MIB] = str(hw.memory_mib)
            labels[v.LABEL_GPU_COUNT] = str(spec.devices_per_node)
            labels["nvidia.com/gpu.present"] = "true"
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
        try:
            core.create_node(m)
        except ApiException as exc:
            if exc.status != 409:
                raise
    return [m["metadata"]["name"] for m in manifests]
