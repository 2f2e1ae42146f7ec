"""AcceleratorPool: one node pool the operator may place jobs on (cluster-scoped).

The spec says what the nodes are (accelerator, devices per node, capacity type, how to select
and tolerate them, price) and how far the pool may grow; the status is what the operator
observes of it (nodes, free devices, fragmentation, utilization, preemption rate).
"""

from typing import Annotated, Literal

from pydantic import Field

from accel_api import patterns, vocabulary
from accel_api.base import ApiModel, Condition, ObjectMeta
from accel_api.enums import CapacityType, PriceSource, Provider, TaintEffect, TolerationOperator

NonNegative = Annotated[float, Field(ge=0)]


class Toleration(ApiModel):
    key: str | None = None
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str | None = None
    effect: TaintEffect | None = None


class Price(ApiModel):
    source: PriceSource = PriceSource.STATIC
    on_demand_per_device_hour: NonNegative | None = Field(
        default=None, description="USD; defaults to the catalog's list price."
    )
    spot_per_device_hour: NonNegative | None = Field(default=None, description="USD; defaults to the catalog's.")


class AcceleratorPoolSpec(ApiModel):
    provider: Provider
    accelerator: str = Field(min_length=1, description="Catalog id, e.g. h100-80gb, tpu-v5e.")
    devices_per_node: Annotated[int, Field(ge=1, le=64)]
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    max_nodes: Annotated[int, Field(ge=1)] = 1
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    tpu_topology: str | None = Field(default=None, pattern=patterns.TPU_TOPOLOGY, description="e.g. 2x4")
    price: Price = Field(default_factory=Price)
    preemption_rate_per_hour: NonNegative | None = Field(
        default=None,
        description="Expected preemptions per node-hour, for planning (spot); the observed rate "
        "in status wins once there is enough history.",
    )
    restart_seconds: NonNegative = Field(default=300.0, description="Time to get a replacement node and restart.")


class AcceleratorPoolStatus(ApiModel):
    nodes: int = 0
    ready_nodes: int = 0
    total_devices: int = 0
    free_devices: int = 0
    allocated_devices: int = 0
    whole_free_nodes: int = 0
    stranded_memory_bytes: int = 0
    utilization_percent: float | None = None
    unhealthy_devices: int = 0
    observed_preemptions: int = 0
    observed_preemption_rate_per_hour: float | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class AcceleratorPool(ApiModel):
    """A node pool. Cluster-scoped; short name ``ap``."""

    api_version: Literal["accel.dev/v1alpha1"] = vocabulary.API_VERSION  # type: ignore[assignment]
    kind: Literal["AcceleratorPool"] = "AcceleratorPool"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AcceleratorPoolSpec
    status: AcceleratorPoolStatus | None = None
