"""Small fluent builders for planner tests: ``job().llama_1b().training(...).spec()``, ``pool(...)``."""

from __future__ import annotations

import copy
from typing import Any, Self

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning import candidates, profile
from accel_operator.planning.layout import Layout


def mi300x_catalog_entry(price: str) -> str:
    """A user catalog file's YAML lines adding an ``mi300x`` accelerator (every field the
    catalog needs) with ``price`` as its price mapping, e.g. ``{onDemandPerDeviceHour: 6.0}``."""
    return (
        "  mi300x:\n"
        "    kind: gpu\n    product: AMD-MI300X\n    memoryBytes: 205520809984\n    bf16Flops: 1.3e15\n"
        "    fp32Flops: 1.6e14\n    hbmBytesPerSecond: 5.3e12\n    intraNodeBytesPerSecond: 3.0e11\n"
        "    interNodeBytesPerSecond: 5.0e10\n    devicesPerNode: 8\n    computeUnits: 304\n    mfu: 0.6\n"
        "    attentionEfficiency: 0.3\n    bandwidthEfficiency: 0.7\n    unalignedMatmulEfficiency: 0.2\n"
        "    kernelSeconds: 2.0e-6\n    hostSecondsPerOp: 2.0e-5\n    contextBytes: 1000000000\n"
        "    workspaceBytes: 0\n"
        f"    price: {price}\n"
    )


LLAMA_125M: dict[str, Any] = {
    "layers": 12,
    "hidden": 768,
    "heads": 12,
    "kvHeads": 12,
    "intermediate": 2048,
    "vocab": 32000,
}
LLAMA_1B: dict[str, Any] = {
    "layers": 22,
    "hidden": 2048,
    "heads": 32,
    "kvHeads": 4,
    "intermediate": 5632,
    "vocab": 32000,
}
LLAMA_8B: dict[str, Any] = {
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kvHeads": 8,
    "intermediate": 14336,
    "vocab": 128256,
}
# One device on one node: the layout most estimator tests use.
ONE = Layout(1, 1)

GPT2_355M: dict[str, Any] = {
    "layers": 24,
    "hidden": 1024,
    "heads": 16,
    "vocab": 50257,
    "mlp": "gelu",
    "tiedEmbeddings": True,
    "maxPositions": 1024,
}


def accel(accelerator_id: str) -> catalog.Accelerator:
    """A shipped catalog entry (a test fails loudly if it is missing)."""
    found = catalog.default().get(accelerator_id)
    if found is None:
        raise LookupError(f"{accelerator_id} is not in the shipped catalog")
    return found


class JobBuilder:
    def __init__(self) -> None:
        self.doc: dict[str, Any] = {
            "team": "research",
            "image": "trainer:1",
            "model": {"architecture": dict(LLAMA_1B)},
            "workload": {
                "mode": "training",
                "precision": "amp-bf16",
                "optimizer": "adamw",
                "microBatch": 4,
                "seqLen": 2048,
                "tokens": 100_000_000,
            },
        }

    def arch(self, arch: dict[str, Any], **overrides: Any) -> Self:
        self.doc["model"] = {"architecture": {**arch, **overrides}}
        return self

    def parameters(self, n: int) -> Self:
        self.doc["model"] = {"parameters": n}
        return self

    def workload(self, **fields: Any) -> Self:
        self.doc["workload"].update(fields)
        return self

    def inference(self, batch: int = 16, prompt: int = 1024, new: int = 128, tokens: int | None = None) -> Self:
        self.doc["workload"] = {
            "mode": "inference",
            "precision": "bf16",
            "batch": batch,
            "promptLen": prompt,
            "newTokens": new,
        }
        if tokens is not None:
            self.doc["workload"]["tokens"] = tokens
        return self

    def placement(self, **fields: Any) -> Self:
        self.doc["placement"] = fields
        return self

    def objective(self, objective: str) -> Self:
        self.doc["objective"] = objective
        return self

    def deadline(self, text: str) -> Self:
        self.doc["deadline"] = text
        return self

    def max_cost(self, usd: float) -> Self:
        self.doc["maxCost"] = usd
        return self

    def spot(self, policy: str, max_preemptions: int | None = None) -> Self:
        self.doc["spot"] = {"policy": policy}
        if max_preemptions is not None:
            self.doc["spot"]["maxPreemptions"] = max_preemptions
        return self

    def checkpoint(self, minutes: float = 30) -> Self:
        self.doc["checkpoint"] = {"uri": "s3://ckpt/job", "intervalMinutes": minutes}
        return self

    def spec(self) -> AcceleratorJobSpec:
        return AcceleratorJobSpec.model_validate(copy.deepcopy(self.doc))

    def profile(self) -> profile.JobProfile:
        """What the estimators read: the spec, normalised."""
        return profile.from_spec(self.spec())


def job() -> JobBuilder:
    return JobBuilder()


def pool(
    name: str,
    accelerator: str = "h100-80gb",
    *,
    spot: bool = False,
    devices_per_node: int = 8,
    max_nodes: int = 4,
    price: float | None = None,
    preemption_rate: float | None = None,
    topology: str | None = None,
    observed_rate: float | None = None,
    free_devices: int | None = None,
) -> candidates.PoolOffer:
    doc: dict[str, Any] = {
        "provider": "gcp" if accelerator.startswith("tpu") else "aws",
        "accelerator": accelerator,
        "devicesPerNode": devices_per_node,
        "capacityType": "spot" if spot else "on-demand",
        "maxNodes": max_nodes,
    }
    if price is not None:
        doc["price"] = {"spotPerDeviceHour" if spot else "onDemandPerDeviceHour": price}
    if preemption_rate is not None:
        doc["preemptionRatePerHour"] = preemption_rate
    if topology is not None:
        doc["tpuTopology"] = topology
    return candidates.PoolOffer(
        name=name,
        spec=AcceleratorPoolSpec.model_validate(doc),
        observed_preemption_rate_per_hour=observed_rate,
        free_devices=free_devices,
    )
