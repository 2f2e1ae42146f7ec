"""The port between the agent and whatever knows the devices: one Protocol and frozen snapshots.

A backend turns "what the node's accelerators are doing now" into a :class:`NodeSample`. It does
not decide health, fragmentation or what to write: :mod:`accel_agent.health` and
:mod:`accel_agent.report` do that over these values, so every backend (real NVML, the fake NVML,
the KWOK simulation, TPU) is judged by the same code.

Field names in ``not_supported`` are the report's camelCase field names (``powerWatts``), so the
operator can read ``status.devices[i].notSupported`` next to the field it explains. A sample's
field of the same name as the report's ``Device`` field (``MigInstance``, ``DeviceProcess``) is
that field as read: :func:`accel_agent.report.build` copies it over by name.
"""

from dataclasses import dataclass
from typing import ClassVar, Protocol

from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import DeviceProfile, PodRef, RemappedRows


@dataclass(frozen=True)
class ProcessSample:
    """One compute process on a device. ``pod`` is filled by the backend when it knows it (the
    simulation) or later by :mod:`accel_agent.podmap` (NVML only knows host pids)."""

    pid: int
    used_memory_bytes: int | None = None
    gpu_instance_id: int | None = None  # MIG instance the process runs in; None without MIG
    pod: PodRef | None = None
    # The pod's UID from the process's cgroup: known without any Kubernetes read, so reported even
    # where the pod's name is not (the agent lists no pods by default; the operator names it).
    pod_uid: str | None = None


@dataclass(frozen=True)
class MigSample:
    gpu_instance_id: int
    profile: str
    uuid: str | None = None
    memory_bytes: int | None = None
    slices: int | None = None
    allocated_pods: tuple[PodRef, ...] = ()


@dataclass(frozen=True)
class DeviceSample:
    """Everything read about one device in one pass; ``None`` means not read (see not_supported/errors)."""

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
    throttle_mask: int | None = None  # NVML clocks-event (throttle) reason bitmask; decoded by health
    ecc_uncorrected: int | None = None  # volatile: since the driver last loaded
    remapped_rows: RemappedRows | None = None  # as reported: one definition of the counters
    mig_enabled: bool | None = None
    mig_max_slices: int | None = None
    mig_instances: tuple[MigSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    # Pods the kubelet allocated this device to (pod-resources API, the simulation, TPU requests).
    # A device can be allocated before its container touches it: it is not free then.
    allocated_pods: tuple[PodRef, ...] = ()
    xid_errors: tuple[int, ...] = ()  # XID critical errors seen since the agent started, oldest first
    # Profiling counters over the interval since the last pass (GPM), or the PCIe rates (basic);
    # None on the first pass of a GPM device (two samples make one reading) or where nothing answers.
    profile: DeviceProfile | None = None
    lost: bool = False  # the device fell off the bus, NVML says GPU_IS_LOST, or it vanished from the count
    errors: tuple[str, ...] = ()  # reads that failed for a reason other than "not supported"
    not_supported: tuple[str, ...] = ()


@dataclass(frozen=True)
class CallError:
    """One failed backend call, for the ``accel_agent_nvml_errors_total`` counter."""

    function: str
    error: str


@dataclass(frozen=True)
class NodeSample:
    backend: AgentBackend
    accelerator_kind: AcceleratorKind | None
    devices: tuple[DeviceSample, ...] = ()
    # False when the backend could not look at the devices at all (NVML library missing, driver
    # gone, node unknown); ``problems`` then says why and the node is reported unhealthy.
    available: bool = True
    problems: tuple[str, ...] = ()
    not_supported: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    calls: int = 0  # library or API calls this pass made, for the timing stats
    call_errors: tuple[CallError, ...] = ()  # failed calls, "not supported" answers excluded
    unsupported_calls: tuple[str, ...] = ()  # functions that answered "not supported" (or do not exist)


class GpuBackend(Protocol):
    """Samples the node's accelerators. ``sample`` never raises for device trouble: it reports it."""

    @property
    def kind(self) -> AgentBackend: ...

    def sample(self) -> NodeSample: ...

    def close(self) -> None: ...


class StatelessBackend:
    """A backend that holds nothing between passes (it reads the API server or the host afresh
    each time), so there is nothing to close; ``KIND`` names it once, for ``kind`` and its samples."""

    KIND: ClassVar[AgentBackend]

    @property
    def kind(self) -> AgentBackend:
        return self.KIND

    def close(self) -> None:
        return None


__all__ = [
    "CallError",
    "DeviceSample",
    "GpuBackend",
    "MigSample",
    "NodeSample",
    "ProcessSample",
    "StatelessBackend",
]
