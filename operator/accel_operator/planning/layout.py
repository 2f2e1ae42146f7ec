"""How a job is laid out over devices: devices, nodes, tensor- and data-parallel degrees."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Layout:
    devices: int
    nodes: int
    tensor_parallel: int = 1

    @property
    def data_parallel(self) -> int:
        """Replicas of the model (training: data-parallel ranks; inference: independent servers)."""
        return max(1, self.devices // self.tensor_parallel)

    @property
    def devices_per_node(self) -> int:
        return max(1, self.devices // max(1, self.nodes))

    def problem(self, devices_per_node: int) -> str | None:
        """Why this layout cannot be built on nodes of ``devices_per_node``, or None."""
        tp = self.tensor_parallel
        if self.devices < 1 or self.nodes < 1:
            return "needs at least one device and one node"
        if tp > devices_per_node:
            return f"tensorParallel {tp} > {devices_per_node} devices per node"
        if self.devices % tp:
            return f"{self.devices} devices are not a multiple of tensorParallel {tp}"
        if self.devices > self.nodes * devices_per_node:
            return f"{self.devices} devices do not fit on {self.nodes} node(s) of {devices_per_node}"
        return None
