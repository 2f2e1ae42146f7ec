"""AcceleratorNodeReport: what one node's devices are really doing (cluster-scoped).

Written by the node agent as a status patch, one object per node, named after the node. The
spec only names the node; everything observed lives in the status. Fields NVML could not answer
are listed in ``status.notSupported`` rather than guessed.
"""

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from accel_api import bounds
from accel_api.base import ApiModel, Conditions, Resource
from accel_api.enums import AcceleratorKind, AgentBackend, ProfileSource

Problems = Annotated[
    list[bounds.Message],
    BeforeValidator(bounds.keep_first(bounds.STATUS_PROBLEMS)),
    Field(max_length=bounds.STATUS_PROBLEMS),
]
Names = Annotated[
    list[bounds.ShortText],
    BeforeValidator(bounds.keep_first(bounds.STATUS_PROBLEMS)),
    Field(max_length=bounds.STATUS_PROBLEMS),
]


class PodRef(ApiModel):
    namespace: str = Field(max_length=bounds.DNS_LABEL_LENGTH)
    name: bounds.ObjectName
    container: bounds.ObjectName | None = None


PodRefs = Annotated[
    list[PodRef],
    BeforeValidator(bounds.keep_first(bounds.STATUS_PROCESSES)),
    Field(max_length=bounds.STATUS_PROCESSES),
]


class DeviceProcess(ApiModel):
    pid: Annotated[int, Field(ge=0, le=bounds.PID_MAX)]
    used_memory_bytes: bounds.Bytes | None = None
    pod: PodRef | None = None
    pod_uid: bounds.Uid | None = Field(
        default=None,
        description="The UID of the pod the process runs in (from its cgroup); the operator names the pod "
        "from it where the agent does not list pods.",
    )


class RemappedRows(ApiModel):
    correctable: bounds.Count = 0
    uncorrectable: bounds.Count = 0
    pending: bool = False
    failed: bool = False


class MigInstance(ApiModel):
    gpu_instance_id: Annotated[int, Field(ge=0, le=bounds.GPU_INSTANCE_ID_MAX)]
    profile: bounds.ShortText
    memory_bytes: bounds.Bytes | None = None
    slices: Annotated[int, Field(ge=0, le=bounds.GPU_INSTANCE_ID_MAX)] | None = None
    in_use: bool = False


class DeviceProfile(ApiModel):
    """What the device's engines did over the last sampling interval: the counters that say *why*
    a device is not busy (``kubectl accel top`` diagnoses from them). Every field is optional: a
    card answers what it supports. Percentages are averages over ``intervalSeconds``; with
    ``source: basic`` only the PCIe rates are filled here (utilization and memory are the device's
    own fields)."""

    source: ProfileSource
    interval_seconds: Annotated[float, Field(ge=0, le=bounds.STATUS_SECONDS_MAX)] | None = None
    sm_active_percent: bounds.Percent | None = Field(
        default=None, description="Share of SMs with at least one warp assigned (GPM SM_UTIL)."
    )
    sm_occupancy_percent: bounds.Percent | None = None
    tensor_active_percent: bounds.Percent | None = Field(
        default=None, description="Share of time the SMs ran any tensor-core instruction (GPM ANY_TENSOR_UTIL)."
    )
    dram_bandwidth_percent: bounds.Percent | None = Field(
        default=None, description="Device-memory bandwidth used, of the theoretical peak (GPM DRAM_BW_UTIL)."
    )
    pcie_tx_bytes_per_second: bounds.Bytes | None = None
    pcie_rx_bytes_per_second: bounds.Bytes | None = None
    nvlink_tx_bytes_per_second: bounds.Bytes | None = None
    nvlink_rx_bytes_per_second: bounds.Bytes | None = None


Celsius = Annotated[float, Field(ge=bounds.CELSIUS_MIN, le=bounds.CELSIUS_MAX)]
Watts = Annotated[float, Field(ge=0, le=bounds.WATTS_MAX)]


class Device(ApiModel):
    """One device. Lists are cut, not refused: 256 processes and pods, the latest 64 XIDs, 32
    problems; problem text is clipped to 1024 characters."""

    index: Annotated[int, Field(ge=0, le=bounds.GPU_INSTANCE_ID_MAX)]
    uuid: bounds.ShortText | None = None
    name: bounds.ShortText | None = None
    pci_bus_id: bounds.ShortText | None = None
    memory_total_bytes: bounds.Bytes | None = None
    memory_used_bytes: bounds.Bytes | None = None
    utilization_gpu_percent: bounds.Percent | None = None
    utilization_memory_percent: bounds.Percent | None = None
    power_watts: Watts | None = None
    power_limit_watts: Watts | None = None
    temperature_celsius: Celsius | None = None
    sm_clock_mhz: Annotated[int, Field(ge=0, le=bounds.MHZ_MAX)] | None = None
    throttle_reasons: Names = Field(default_factory=list)
    ecc_uncorrected: bounds.Count | None = None
    remapped_rows: RemappedRows | None = None
    mig_enabled: bool | None = None
    mig_instances: Annotated[
        list[MigInstance], BeforeValidator(bounds.keep_first(bounds.STATUS_MIG)), Field(max_length=bounds.STATUS_MIG)
    ] = Field(default_factory=list)
    processes: Annotated[
        list[DeviceProcess],
        BeforeValidator(bounds.keep_first(bounds.STATUS_PROCESSES)),
        Field(max_length=bounds.STATUS_PROCESSES),
    ] = Field(default_factory=list)
    allocated_pods: PodRefs = Field(
        default_factory=list, description="Pods the kubelet gave this device to (held even before first use)."
    )
    xid_errors: Annotated[
        list[Annotated[int, Field(ge=0, le=bounds.XID_MAX)]],
        BeforeValidator(bounds.keep_last(bounds.STATUS_XIDS)),
        Field(max_length=bounds.STATUS_XIDS),
    ] = Field(default_factory=list, description="XID errors seen since the agent started (the latest 64).")
    profile: DeviceProfile | None = Field(
        default=None, description="Profiling counters over the last sampling interval (absent before the second pass)."
    )
    healthy: bool = True
    problems: Problems = Field(default_factory=list)
    not_supported: Names = Field(default_factory=list)


class Fragmentation(ApiModel):
    total_devices: bounds.Count = 0
    free_devices: bounds.Count = Field(default=0, description="Devices with no process and under 5% memory used.")
    partially_used_devices: bounds.Count = 0
    stranded_memory_bytes: bounds.Bytes = Field(
        default=0, description="Free memory on devices that are in use: hard to give to a new job."
    )
    whole_node_available: bool = False
    largest_free_memory_bytes: bounds.Bytes = 0
    unusable_mig_slices: bounds.Count = 0


class AcceleratorNodeReportSpec(ApiModel):
    node_name: str = Field(min_length=1, max_length=bounds.DNS_SUBDOMAIN_LENGTH)


class AcceleratorNodeReportStatus(ApiModel):
    accelerator_kind: AcceleratorKind | None = None
    backend: AgentBackend = AgentBackend.NONE
    healthy: bool = True
    problems: Problems = Field(default_factory=list)
    driver_version: bounds.ShortText | None = None
    cuda_driver_version: bounds.ShortText | None = None
    devices: Annotated[
        list[Device], BeforeValidator(bounds.keep_first(bounds.STATUS_DEVICES)), Field(max_length=bounds.STATUS_DEVICES)
    ] = Field(default_factory=list)
    fragmentation: Fragmentation = Field(default_factory=Fragmentation)
    not_supported: Names = Field(default_factory=list)
    sample_time: bounds.Time | None = None
    heartbeat_time: bounds.Time | None = None
    agent_version: bounds.ShortText | None = None
    conditions: Conditions = Field(default_factory=list)


class AcceleratorNodeReport(Resource[AcceleratorNodeReportSpec, AcceleratorNodeReportStatus]):
    """Cluster-scoped; one per node; short name ``anr``."""

    kind: Literal["AcceleratorNodeReport"] = "AcceleratorNodeReport"
