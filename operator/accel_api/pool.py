"""AcceleratorPool: one node pool the operator may place jobs on (cluster-scoped).

The spec says what the nodes are (accelerator, devices per node, capacity type, how to select
and tolerate them, price) and how far the pool may grow; the status is what the operator
observes of it (nodes, free devices, fragmentation, utilization, preemption rate).
"""

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from accel_api import bounds, patterns
from accel_api.base import ApiModel, CelRule, Conditions, Resource
from accel_api.enums import CapacityType, PoolScaling, PriceSource, Provider, TaintEffect, TolerationOperator

PricePerHour = Annotated[float, Field(ge=0, le=bounds.PRICE_MAX)]
LabelKey = Annotated[str, Field(max_length=bounds.LABEL_KEY_LENGTH, pattern=patterns.LABEL_KEY)]
LabelValue = Annotated[str, Field(max_length=bounds.DNS_LABEL_LENGTH, pattern=patterns.LABEL_VALUE)]


class Toleration(ApiModel):
    key: LabelKey | None = None
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: LabelValue | None = None
    effect: TaintEffect | None = None


class Price(ApiModel):
    """USD per device-hour, 0 (owned hardware) to 1000 (list prices are $0.2-$15)."""

    source: PriceSource = PriceSource.STATIC
    on_demand_per_device_hour: PricePerHour | None = Field(
        default=None, description="USD; defaults to the catalog's list price."
    )
    spot_per_device_hour: PricePerHour | None = Field(default=None, description="USD; defaults to the catalog's.")


class AcceleratorPoolSpec(ApiModel):
    """Bounds: 1-64 devices per node, 1-65536 nodes, 32 selector entries and tolerations,
    preemptions ≤ 60 per node-hour, restarts ≤ a day."""

    # Catalog ids of TPUs start with "tpu-" (a unit test holds the catalog to it): the API server
    # cannot read the catalog, so the rule is spelled on the id.
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="tpu-topology-only-for-tpus",
            cel="!has(self.tpuTopology) || self.accelerator.startsWith('tpu-')",
            message="tpuTopology is only for TPU accelerators (catalog ids tpu-*)",
            check=lambda p: p.tpu_topology is None or p.accelerator.startswith("tpu-"),
            field_path=".tpuTopology",
            got=lambda p: f"accelerator {p.accelerator!r}",
        ),
    )

    provider: Provider
    accelerator: str = Field(
        min_length=1, max_length=bounds.SHORT_TEXT_LENGTH, description="Catalog id, e.g. h100-80gb, tpu-v5e."
    )
    devices_per_node: Annotated[int, Field(ge=1, le=bounds.DEVICES_PER_NODE)]
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=bounds.SELECTOR_ITEMS)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=bounds.SELECTOR_ITEMS)
    max_nodes: Annotated[int, Field(ge=1, le=bounds.NODES)] = 1
    region: bounds.ShortText | None = None
    zone: bounds.ShortText | None = None
    instance_type: bounds.ShortText | None = None
    tpu_topology: str | None = Field(
        default=None, max_length=16, pattern=patterns.TPU_TOPOLOGY, description="e.g. 2x4; every dimension >= 1"
    )
    price: Price = Field(default_factory=Price)
    inter_node_bytes_per_second: Annotated[float, Field(gt=0, le=bounds.LINK_BYTES_PER_SECOND_MAX)] | None = Field(
        default=None,
        description="Network bandwidth per device, one direction, between this pool's nodes (bytes/s); "
        "defaults to the catalog's figure for the accelerator.",
    )
    preemption_rate_per_hour: Annotated[float, Field(ge=0, le=bounds.PREEMPTION_RATE_MAX)] | None = Field(
        default=None,
        description="Expected preemptions per node-hour, for planning (spot); the observed rate "
        "in status wins once there is enough history.",
    )
    restart_seconds: Annotated[float, Field(ge=0, le=bounds.RESTART_SECONDS_MAX)] = Field(
        default=300.0, description="Time to get a replacement node and restart."
    )
    scaling: PoolScaling = Field(
        default=PoolScaling.FIXED,
        description="fixed: capacity is the nodes that exist; autoscaled: nodes appear for pending pods up to "
        "maxNodes (Karpenter, the cluster autoscaler).",
    )
    scale_up_timeout_seconds: Annotated[float, Field(ge=1, le=bounds.SCALE_UP_TIMEOUT_MAX)] = Field(
        default=600.0,
        description="Autoscaled pools: a gang whose pods are not all bound this long after admission is "
        "released and planned again.",
    )


class AcceleratorPoolStatus(ApiModel):
    nodes: bounds.Count = 0
    ready_nodes: bounds.Count = 0
    total_devices: bounds.Count = 0
    free_devices: bounds.Count = 0
    allocated_devices: bounds.Count = 0
    whole_free_nodes: bounds.Count = 0
    stranded_memory_bytes: bounds.Bytes = 0
    utilization_percent: bounds.Percent | None = None
    unhealthy_devices: bounds.Count = 0
    observed_preemptions: bounds.Count = 0
    observed_preemption_rate_per_hour: bounds.StatusRate = None
    conditions: Conditions = Field(default_factory=list)
    observed_generation: bounds.Generation | None = None


class AcceleratorPool(Resource[AcceleratorPoolSpec, AcceleratorPoolStatus]):
    """A node pool. Cluster-scoped; short name ``ap``."""

    kind: Literal["AcceleratorPool"] = "AcceleratorPool"
