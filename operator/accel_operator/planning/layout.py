"""How a job is laid out over devices: devices, nodes, and the tensor-, pipeline-, context- and
data-parallel degrees (devices = tensor × pipeline × context × data)."""

from __future__ import annotations

from dataclasses import dataclass

from accel_operator.planning.profile import JobProfile


@dataclass(frozen=True, slots=True)
class Layout:
    devices: int
    nodes: int
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_parallel: int = 1
    hybrid_shard: int = 0  # HSDP: the sharding group (data × context ranks); 0: all of them

    @classmethod
    def of(cls, job: JobProfile, devices: int, nodes: int) -> Layout:
        """The layout ``job`` asks for on ``devices`` over ``nodes``."""
        return cls(
            devices, nodes, job.tensor_parallel, job.pipeline_parallel, job.context_parallel, job.hybrid_shard_degree
        )

    @property
    def model_parallel(self) -> int:
        """Devices that hold one replica of the model between them."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    @property
    def data_parallel(self) -> int:
        """Replicas of the model (training: data-parallel ranks; inference: independent servers)."""
        return max(1, self.devices // self.model_parallel)

    @property
    def devices_per_node(self) -> int:
        return max(1, self.devices // max(1, self.nodes))

    def problem(self, devices_per_node: int) -> str | None:
        """Why this layout cannot be built on nodes of ``devices_per_node``, or None."""
        tp, mp = self.tensor_parallel, self.model_parallel
        if self.devices < 1 or self.nodes < 1:
            return "needs at least one device and one node"
        if tp > devices_per_node:
            return f"tensorParallel {tp} > {devices_per_node} devices per node"
        if self.devices % mp:
            if mp == tp:
                return f"{self.devices} devices are not a multiple of tensorParallel {tp}"
            return (
                f"{self.devices} devices are not a multiple of tensorParallel × pipelineParallel × "
                f"contextParallel = {mp}"
            )
        ranks = self.data_parallel * self.context_parallel
        if self.hybrid_shard and ranks % self.hybrid_shard:
            return (
                f"{ranks} data-parallel ranks are not a multiple of hybridShardDegree {self.hybrid_shard} "
                "(groups that shard, replicated across)"
            )
        if self.devices > self.nodes * devices_per_node:
            return f"{self.devices} devices do not fit on {self.nodes} node(s) of {devices_per_node}"
        return None
