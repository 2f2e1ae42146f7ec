# ruff: noqa: N802 - the methods carry pynvml's names, so the fake can stand in for the module.
"""A fake NVML, as real code: the unit tests run the real NVML backend against it.

:class:`FakeNvml` implements the :class:`~accel_agent.backends.nvml.NvmlApi` surface over plain
mutable :class:`FakeDevice` values, answers with pynvml's own result structures where pynvml
returns one (memory, utilization, PCI info, attributes, GPM support: the backend reads the very
types it reads on a node) and raises pynvml's own ``NVMLError`` subclasses, so the backend's
error handling is exercised exactly as on a node. Besides answering, it

- records every call (``calls``) and can be reset between tests;
- can be told to fail the next call, or the next call of one function, with a given NVML code
  (``fail_next``);
- answers "Not Supported" for the functions a device lists in ``unsupported``;
- loses devices (``lose_device``: calls answer GPU_IS_LOST) or drops them from the count
  (``remove_device``: the driver no longer enumerates them);
- ends processes between two calls (``after_call(function, action)`` runs ``action`` right after
  the next call of ``function`` returned, e.g. ``end_process``);
- queues XID critical-error events (``inject_xid``);
- answers GPM (``FakeDevice.gpm``: the counters a GPM read between two samples returns; a device
  with ``gpm_supported = False`` is an older card, which answers PCIe throughput alone) and keeps
  the GPM samples it handed out (``gpm_samples_held``), so a test sees a leak;
- behaves as a node without the library (``library_missing``) or whose driver went away
  (``driver_loaded = False``).

``python -m accel_agent --backend fake`` samples :meth:`FakeNvml.h100` so the whole agent can be
run on a machine with no GPU.
"""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pynvml

from accel_agent.backends import nvml
from accel_agent.backends import nvml_errors as errs
from accel_agent.backends.nvml import EVENT_TYPE_XID_CRITICAL_ERROR, NO_GPU_INSTANCE
from accel_api import catalog

MIB = 1024 * 1024
_H100 = catalog.default().accelerators["h100-80gb"]
H100_MEMORY = _H100.memory_bytes  # what NVML reports for an H100 80GB HBM3 (the catalog's figure)


@dataclass
class FakeProcess:
    pid: int
    used_memory_bytes: int | None = 1024 * MIB
    gpu_instance_id: int | None = None


@dataclass
class FakeMigInstance:
    gpu_instance_id: int
    profile: str = "1g.10gb"
    slices: int = 1
    memory_mb: int = 9856
    uuid: str | None = None


@dataclass(frozen=True)
class FakeGpm:
    """What GPM says a device did between two samples (percent; PCIe and NVLink in MiB/s, as
    NVML). ``None``: the card does not have that metric (answered per metric, as NVML does)."""

    sm_active: float | None = 0.0
    sm_occupancy: float | None = 0.0
    tensor_active: float | None = 0.0
    dram_bandwidth: float | None = 0.0
    pcie_tx_mib: float | None = 0.0
    pcie_rx_mib: float | None = 0.0
    nvlink_tx_mib: float | None = 0.0
    nvlink_rx_mib: float | None = 0.0

    def by_metric(self) -> dict[int, float | None]:
        return {
            nvml.GPM_SM_UTIL: self.sm_active,
            nvml.GPM_SM_OCCUPANCY: self.sm_occupancy,
            nvml.GPM_ANY_TENSOR_UTIL: self.tensor_active,
            nvml.GPM_DRAM_BW_UTIL: self.dram_bandwidth,
            nvml.GPM_PCIE_TX_PER_SEC: self.pcie_tx_mib,
            nvml.GPM_PCIE_RX_PER_SEC: self.pcie_rx_mib,
            nvml.GPM_NVLINK_TOTAL_TX_PER_SEC: self.nvlink_tx_mib,
            nvml.GPM_NVLINK_TOTAL_RX_PER_SEC: self.nvlink_rx_mib,
        }


@dataclass
class FakeDevice:
    uuid: str
    name: str = _H100.product.replace("-", " ")
    pci_bus_id: str = "00000000:18:00.0"
    memory_total_bytes: int = H100_MEMORY
    # Memory used apart from the processes' (driver reservations, contexts of other tenants).
    base_memory_used_bytes: int = 0
    util_gpu: int = 0
    util_memory: int = 0
    power_mw: int = 70_000
    power_limit_mw: int = 700_000
    temperature_c: int = 30
    sm_clock_mhz: int = 345
    throttle_mask: int = 0x1  # GpuIdle
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failed
    mig_mode: int = 0
    mig_max_devices: int = 7
    mig_instances: list[FakeMigInstance] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)  # NVML function names answering NotSupported
    lost: bool = False
    gpm_supported: bool = True  # Hopper and newer
    gpm: FakeGpm = field(default_factory=FakeGpm)
    pcie_tx_kib: int = 0  # nvmlDeviceGetPcieThroughput, KB/s
    pcie_rx_kib: int = 0

    @property
    def memory_used_bytes(self) -> int:
        return self.base_memory_used_bytes + sum(p.used_memory_bytes or 0 for p in self.processes)


@dataclass(frozen=True)
class FakeHandle:
    """Refers to a device by UUID, as NVML's handles point at a device rather than a slot."""

    uuid: str
    gpu_instance_id: int | None = None  # set for MIG device handles


@dataclass(frozen=True)
class _Process:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's field name
    gpuInstanceId: int  # noqa: N815
    computeInstanceId: int  # noqa: N815


@dataclass(frozen=True)
class _Event:
    device: FakeHandle
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815


@dataclass
class _Hook:
    function: str
    action: Callable[[], None]


def _attributes(slices: int, memory_mb: int) -> Any:
    return pynvml.c_nvmlDeviceAttributes(gpuInstanceSliceCount=slices, memorySizeMB=memory_mb)


def _error(code: int) -> BaseException:
    error: BaseException = pynvml.NVMLError(code)
    return error


class FakeNvml:
    """In-memory NVML; see the module docstring for what it can be told to do."""

    def __init__(
        self,
        devices: list[FakeDevice] | None = None,
        *,
        driver_version: str = "580.159.04",
        cuda_driver_version: int = 13000,
    ) -> None:
        self.devices: list[FakeDevice] = list(devices or [])
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.library_missing = False
        self.driver_loaded = True
        self.events_supported = True
        self.initialized = False
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._fail: list[tuple[str | None, int]] = []
        self._hooks: list[_Hook] = []
        self._events: deque[_Event] = deque()
        self._event_devices: set[str] = set()
        # GPM samples handed out, by address: the struct kept alive, and what was read into it.
        self._gpm_samples: dict[int, tuple[Any, FakeGpm | None]] = {}

    @classmethod
    def h100(cls, count: int = 1) -> FakeNvml:
        """An idle node of ``count`` H100 80GB cards."""
        return cls(
            [
                FakeDevice(uuid=f"GPU-00000000-0000-4000-8000-{i:012d}", pci_bus_id=f"00000000:{0x18 + i:02X}:00.0")
                for i in range(count)
            ]
        )

    # --- control --------------------------------------------------------------------------------
    def fail_next(self, code: int, function: str | None = None) -> None:
        """Make the next call (of ``function``, or of anything) raise NVML error ``code``."""
        self._fail.append((function, code))

    def after_call(self, function: str, action: Callable[[], None]) -> None:
        """Run ``action`` right after the next call of ``function`` returned its answer."""
        self._hooks.append(_Hook(function, action))

    def device(self, uuid: str) -> FakeDevice:
        for d in self.devices:
            if d.uuid == uuid:
                return d
        raise KeyError(uuid)

    def remove_device(self, index: int) -> FakeDevice:
        """The driver stops enumerating the device: the count drops, later indices shift."""
        return self.devices.pop(index)

    def lose_device(self, index: int) -> None:
        """The device falls off the bus: every call about it answers GPU_IS_LOST."""
        self.devices[index].lost = True

    def end_process(self, pid: int) -> None:
        for d in self.devices:
            d.processes = [p for p in d.processes if p.pid != pid]

    def inject_xid(self, index: int, xid: int) -> None:
        uuid = self.devices[index].uuid
        if uuid in self._event_devices:
            self._events.append(_Event(FakeHandle(uuid), EVENT_TYPE_XID_CRITICAL_ERROR, xid))

    def reset(self) -> None:
        self.calls.clear()
        self._fail.clear()
        self._hooks.clear()

    def set_gpm(self, index: int, **counters: float | None) -> None:
        """What the next GPM read of device ``index`` returns (FakeGpm's field names)."""
        device = self.devices[index]
        device.gpm = replace(device.gpm, **counters)

    @property
    def gpm_samples_held(self) -> int:
        return len(self._gpm_samples)

    def count(self, function: str) -> int:
        return sum(1 for name, _ in self.calls if name == function)

    # --- plumbing -------------------------------------------------------------------------------
    def _enter(self, function: str, *args: Any, needs_init: bool = True) -> None:
        self.calls.append((function, args))
        for i, (name, code) in enumerate(self._fail):
            if name is None or name == function:
                del self._fail[i]
                raise _error(code)
        if needs_init and not self.driver_loaded:
            raise _error(errs.DRIVER_NOT_LOADED)
        if needs_init and not self.initialized:
            raise _error(errs.UNINITIALIZED)

    def _exit(self, function: str) -> None:
        for i, hook in enumerate(self._hooks):
            if hook.function == function:
                del self._hooks[i]
                hook.action()
                return

    def _answer(self, function: str, value: Any) -> Any:
        self._exit(function)
        return value

    def _dev(self, function: str, handle: FakeHandle) -> FakeDevice:
        try:
            device = self.device(handle.uuid)
        except KeyError:
            raise _error(errs.GPU_IS_LOST) from None
        if device.lost:
            raise _error(errs.GPU_IS_LOST)
        if function in device.unsupported:
            raise _error(errs.NOT_SUPPORTED)
        return device

    def _device_answer(self, function: str, handle: FakeHandle, value: Callable[[FakeDevice], Any], *args: Any) -> Any:
        """A call about one device answered with ``value(device)``: recorded, failed when told to,
        refused as the device is lost or lacks ``function``, its hooks run after."""
        self._enter(function, handle, *args)
        return self._answer(function, value(self._dev(function, handle)))

    def _mig(self, device: FakeDevice, handle: FakeHandle) -> FakeMigInstance:
        for m in device.mig_instances:
            if m.gpu_instance_id == handle.gpu_instance_id:
                return m
        raise _error(errs.NOT_FOUND)

    # --- the NVML surface ----------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit", needs_init=False)
        if self.library_missing:
            raise _error(errs.LIBRARY_NOT_FOUND)
        if not self.driver_loaded:
            raise _error(errs.DRIVER_NOT_LOADED)
        self.initialized = True
        self._exit("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False
        self._exit("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return str(self._answer("nvmlSystemGetDriverVersion", self.driver_version))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return int(self._answer("nvmlSystemGetCudaDriverVersion", self.cuda_driver_version))

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return int(self._answer("nvmlDeviceGetCount", len(self.devices)))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.devices):
            raise _error(errs.INVALID_ARGUMENT)
        device = self.devices[index]
        if device.lost:
            raise _error(errs.GPU_IS_LOST)
        return self._answer("nvmlDeviceGetHandleByIndex", FakeHandle(device.uuid))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        device = self._dev("nvmlDeviceGetUUID", handle)
        if handle.gpu_instance_id is not None:
            mig = self._mig(device, handle)
            uuid = mig.uuid or f"MIG-{device.uuid[4:]}-{mig.gpu_instance_id}"
            return str(self._answer("nvmlDeviceGetUUID", uuid))
        return str(self._answer("nvmlDeviceGetUUID", device.uuid))

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName", handle)
        device = self._dev("nvmlDeviceGetName", handle)
        if handle.gpu_instance_id is not None:
            return str(self._answer("nvmlDeviceGetName", f"{device.name} MIG {self._mig(device, handle).profile}"))
        return str(self._answer("nvmlDeviceGetName", device.name))

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self._device_answer(
            "nvmlDeviceGetPciInfo", handle, lambda d: pynvml.nvmlPciInfo_t(busId=d.pci_bus_id.encode())
        )

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        def memory(d: FakeDevice) -> Any:
            # Unsigned fields, as NVML's: free never drops below zero.
            free = max(d.memory_total_bytes - d.memory_used_bytes, 0)
            return pynvml.c_nvmlMemory_t(total=d.memory_total_bytes, free=free, used=d.memory_used_bytes)

        return self._device_answer("nvmlDeviceGetMemoryInfo", handle, memory)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        d = self._dev("nvmlDeviceGetUtilizationRates", handle)
        if d.mig_mode:  # NVML cannot attribute utilization on a partitioned GPU
            raise _error(errs.NOT_SUPPORTED)
        return self._answer(
            "nvmlDeviceGetUtilizationRates", pynvml.c_nvmlUtilization_t(gpu=d.util_gpu, memory=d.util_memory)
        )

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._device_answer("nvmlDeviceGetPowerUsage", handle, lambda d: d.power_mw))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return int(self._device_answer("nvmlDeviceGetEnforcedPowerLimit", handle, lambda d: d.power_limit_mw))

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int:
        return int(self._device_answer("nvmlDeviceGetTemperatureV", handle, lambda d: d.temperature_c, sensor))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return int(self._device_answer("nvmlDeviceGetTemperature", handle, lambda d: d.temperature_c, sensor))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        return int(self._device_answer("nvmlDeviceGetClockInfo", handle, lambda d: d.sm_clock_mhz, clock_type))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._device_answer("nvmlDeviceGetCurrentClocksEventReasons", handle, lambda d: d.throttle_mask))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return int(self._device_answer("nvmlDeviceGetCurrentClocksThrottleReasons", handle, lambda d: d.throttle_mask))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        return int(
            self._device_answer(
                "nvmlDeviceGetTotalEccErrors", handle, lambda d: d.ecc_uncorrected, error_type, counter_type
            )
        )

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        rows: tuple[int, int, int, int] = self._device_answer(
            "nvmlDeviceGetRemappedRows", handle, lambda d: d.remapped_rows
        )
        return rows

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        mode: tuple[int, int] = self._device_answer("nvmlDeviceGetMigMode", handle, lambda d: (d.mig_mode, d.mig_mode))
        return mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return int(self._device_answer("nvmlDeviceGetMaxMigDeviceCount", handle, lambda d: d.mig_max_devices))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
        d = self._dev("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not 0 <= index < len(d.mig_instances):
            raise _error(errs.NOT_FOUND)
        mig = FakeHandle(d.uuid, d.mig_instances[index].gpu_instance_id)
        return self._answer("nvmlDeviceGetMigDeviceHandleByIndex", mig)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        d = self._dev("nvmlDeviceGetGpuInstanceId", handle)
        if handle.gpu_instance_id is None:
            raise _error(errs.INVALID_ARGUMENT)
        return int(self._answer("nvmlDeviceGetGpuInstanceId", self._mig(d, handle).gpu_instance_id))

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetAttributes", handle)
        d = self._dev("nvmlDeviceGetAttributes", handle)
        if handle.gpu_instance_id is None:
            return self._answer("nvmlDeviceGetAttributes", _attributes(d.mig_max_devices, d.memory_total_bytes // MIB))
        m = self._mig(d, handle)
        return self._answer("nvmlDeviceGetAttributes", _attributes(m.slices, m.memory_mb))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        d = self._dev("nvmlDeviceGetComputeRunningProcesses", handle)
        procs = [
            _Process(
                p.pid,
                p.used_memory_bytes,
                NO_GPU_INSTANCE if p.gpu_instance_id is None else p.gpu_instance_id,
                NO_GPU_INSTANCE if p.gpu_instance_id is None else 0,
            )
            for p in d.processes
            if handle.gpu_instance_id is None or p.gpu_instance_id == handle.gpu_instance_id
        ]
        result: list[Any] = self._answer("nvmlDeviceGetComputeRunningProcesses", procs)
        return result

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        if not self.events_supported:
            raise _error(errs.NOT_SUPPORTED)
        return self._answer("nvmlEventSetCreate", "fake-event-set")

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle, event_types, event_set)
        d = self._dev("nvmlDeviceRegisterEvents", handle)
        self._event_devices.add(d.uuid)
        self._exit("nvmlDeviceRegisterEvents")

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2", event_set, timeout_ms)
        if not self._events:
            raise _error(errs.TIMEOUT)
        return self._answer("nvmlEventSetWait_v2", self._events.popleft())

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._enter("nvmlEventSetFree", event_set)
        self._exit("nvmlEventSetFree")

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        def rate(d: FakeDevice) -> int:
            return d.pcie_tx_kib if counter == nvml.PCIE_UTIL_TX_BYTES else d.pcie_rx_kib

        return int(self._device_answer("nvmlDeviceGetPcieThroughput", handle, rate, counter))

    # --- GPM: samples are real pynvml sample pointers, so the backend's request is pynvml's own --
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        return self._device_answer(
            "nvmlGpmQueryDeviceSupport",
            handle,
            lambda d: pynvml.c_nvmlGpmSupport_t(version=1, isSupportedDevice=1 if d.gpm_supported else 0),
        )

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        target = pynvml.struct_c_nvmlGpmSample_t()
        sample = ctypes.pointer(target)
        self._gpm_samples[ctypes.addressof(target)] = (target, None)
        return self._answer("nvmlGpmSampleAlloc", sample)

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        def read(d: FakeDevice) -> Any:
            if not d.gpm_supported:
                raise _error(errs.NOT_SUPPORTED)
            address = ctypes.addressof(sample.contents)
            if address not in self._gpm_samples:
                raise _error(errs.INVALID_ARGUMENT)  # freed, or never allocated
            self._gpm_samples[address] = (self._gpm_samples[address][0], d.gpm)
            return sample

        return self._device_answer("nvmlGpmSampleGet", handle, read)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree", sample)
        if self._gpm_samples.pop(ctypes.addressof(sample.contents), None) is None:
            raise _error(errs.INVALID_ARGUMENT)
        self._exit("nvmlGpmSampleFree")

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        """Fills ``metrics_get`` (pynvml's ``c_nvmlGpmMetricsGet_t``) from what its second sample read."""
        self._enter("nvmlGpmMetricsGet", metrics_get)
        first = self._gpm_samples.get(_address(metrics_get.sample1) or 0)
        second = self._gpm_samples.get(_address(metrics_get.sample2) or 0)
        if metrics_get.version != nvml.GPM_METRICS_GET_VERSION or first is None or first[1] is None:
            raise _error(errs.INVALID_ARGUMENT)
        if second is None or second[1] is None:  # freed, never allocated, or never read into
            raise _error(errs.INVALID_ARGUMENT)
        counters = second[1].by_metric()
        for i in range(int(metrics_get.numMetrics)):
            metric = metrics_get.metrics[i]
            value = counters.get(int(metric.metricId))
            metric.nvmlReturn = errs.NOT_SUPPORTED if value is None else 0
            metric.value = 0.0 if value is None else float(value)
        return self._answer("nvmlGpmMetricsGet", metrics_get)


def _address(sample: Any) -> int | None:
    return ctypes.cast(sample, ctypes.c_void_p).value
