"""AcceleratorNodeReport: what one node's devices are really doing (cluster-scoped).

Written by the node agent as a status patch, one object per node, named after the node. The
spec only names the node; everything observed lives in the status. Fields NVML could not answer
are listed in ``status.notSupported`` rather than guessed.
"""

from typing import Literal

from pydantic import Field

from accel_api import vocabulary
from accel_api.base import ApiModel, Condition, ObjectMeta
from accel_api.enums import AcceleratorKind, AgentBackend


class PodRef(ApiModel):
    namespace: str
    name: str
    container: str | None = None


class DeviceProcess(ApiModel):
    pid: int
    used_memory_bytes: int | None = None
    pod: PodRef | None = None


class RemappedRows(ApiModel):
    correctable: int = 0
    uncorrectable: int = 0
    pending: bool = False
    failed: bool = False


class MigInstance(ApiModel):
    gpu_instance_id: int
    profile: str
    memory_bytes: int | None = None
    slices: int | None = None
    in_use: bool = False


class Device(ApiModel):
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: float | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    ecc_uncorrected: int | None = None
    remapped_rows: RemappedRows | None = None
    mig_enabled: bool | None = None
    mig_instances: list[MigInstance] = Field(default_factory=list)
    processes: list[DeviceProcess] = Field(default_factory=list)
    allocated_pods: list[PodRef] = Field(
        default_factory=list, description="Pods the kubelet gave this device to (held even before first use)."
    )
    xid_errors: list[int] = Field(default_factory=list, description="XID errors seen since the agent started.")
    healthy: bool = True
    problems: list[str] = Field(default_factory=list)
    not_supported: list[str] = Field(default_factory=list)


class Fragmentation(ApiModel):
    total_devices: int = 0
    free_devices: int = Field(default=0, description="Devices with no process and under 5% memory used.")
    partially_used_devices: int = 0
    stranded_memory_bytes: int = Field(
        default=0, description="Free memory on devices that are in use: hard to give to a new job."
    )
    whole_node_available: bool = False
    largest_free_memory_bytes: int = 0
    unusable_mig_slices: int = 0


class AcceleratorNodeReportSpec(ApiModel):
    node_name: str = Field(min_length=1)


class AcceleratorNodeReportStatus(ApiModel):
    accelerator_kind: AcceleratorKind | None = None
    backend: AgentBackend = AgentBackend.NONE
    healthy: bool = True
    problems: list[str] = Field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    devices: list[Device] = Field(default_factory=list)
    fragmentation: Fragmentation = Field(default_factory=Fragmentation)
    not_supported: list[str] = Field(default_factory=list)
    sample_time: str | None = None
    heartbeat_time: str | None = None
    agent_version: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


class AcceleratorNodeReport(ApiModel):
    """Cluster-scoped; one per node; short name ``anr``."""

    api_version: Literal["accel.dev/v1alpha1"] = vocabulary.API_VERSION  # type: ignore[assignment]
    kind: Literal["AcceleratorNodeReport"] = "AcceleratorNodeReport"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AcceleratorNodeReportSpec
    status: AcceleratorNodeReportStatus | None = None
