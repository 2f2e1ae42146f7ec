# ruff: noqa: N802 - NvmlApi spells pynvml's function names, so the module itself satisfies it.
"""The NVML backend: reads every GPU on the node through pynvml (NVIDIA's nvidia-ml-py).

One pass asks each device for identity, memory, utilization, compute processes, power, temperature,
SM clock, clocks-event (throttle) reasons, volatile uncorrectable ECC, remapped rows and MIG
layout, and drains the XID critical-error events registered at init. It also reads the profiling
counters a diagnosis needs (``profile``): on Hopper and newer, NVML's GPM metrics (SM activity and
occupancy, tensor-core activity, DRAM bandwidth, PCIe and NVLink bytes) between this pass's GPM
sample and the last one, so each value is the average over the whole sampling interval; elsewhere
(``nvmlGpmQueryDeviceSupport`` says no, or MIG is on) the PCIe throughput counters. A field the device answers
"Not Supported" for is listed in ``not_supported`` and the pass goes on; a device that is lost is
reported lost; a missing library or driver makes the whole sample unavailable (and the node
unhealthy) instead of raising. How an NVML error is treated is decided in
:mod:`accel_agent.backends.nvml_errors`, not here.

The NVML surface is the :class:`NvmlApi` Protocol: the real ``pynvml`` module satisfies it, and so
does :class:`accel_agent.backends.fake.FakeNvml`, which the unit tests run this very code against.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

import pynvml

from accel_agent.backends import CallError, DeviceSample, MigSample, NodeSample, ProcessSample
from accel_agent.backends import nvml_errors as errs
from accel_agent.backends.nvml_errors import Fault
from accel_api.enums import AcceleratorKind, AgentBackend, ProfileSource
from accel_api.nodereport import DeviceProfile, RemappedRows

log = logging.getLogger(__name__)

# nvml.h constants the calls below pass (stable ABI values; see nvml_errors for why not pynvml's).
TEMPERATURE_GPU: Final = 0
CLOCK_SM: Final = 1
MEMORY_ERROR_TYPE_UNCORRECTED: Final = 1
VOLATILE_ECC: Final = 0
EVENT_TYPE_XID_CRITICAL_ERROR: Final = 0x8
MIG_ENABLE: Final = 1
NO_GPU_INSTANCE: Final = 0xFFFFFFFF  # gpuInstanceId of a process outside MIG
MAX_EVENTS_PER_PASS: Final = 256  # an XID storm must not stall a pass

PCIE_UTIL_TX_BYTES: Final = 0
PCIE_UTIL_RX_BYTES: Final = 1
KIB: Final = 1024
MIB: Final = 1024 * 1024
# GPM metric ids (nvml.h nvmlGpmMetricId_t) and the profile field each fills; GPM's PCIe and
# NVLink rates are in MiB/s.
GPM_SM_UTIL: Final = 2
GPM_SM_OCCUPANCY: Final = 3
GPM_ANY_TENSOR_UTIL: Final = 5
GPM_DRAM_BW_UTIL: Final = 10
GPM_PCIE_TX_PER_SEC: Final = 20
GPM_PCIE_RX_PER_SEC: Final = 21
GPM_NVLINK_TOTAL_RX_PER_SEC: Final = 60
GPM_NVLINK_TOTAL_TX_PER_SEC: Final = 61
GPM_METRICS_GET_VERSION: Final = 1
GPM_PERCENT: Final[dict[int, str]] = {
    GPM_SM_UTIL: "sm_active_percent",
    GPM_SM_OCCUPANCY: "sm_occupancy_percent",
    GPM_ANY_TENSOR_UTIL: "tensor_active_percent",
    GPM_DRAM_BW_UTIL: "dram_bandwidth_percent",
}
GPM_MIB_PER_SECOND: Final[dict[int, str]] = {
    GPM_PCIE_TX_PER_SEC: "pcie_tx_bytes_per_second",
    GPM_PCIE_RX_PER_SEC: "pcie_rx_bytes_per_second",
    GPM_NVLINK_TOTAL_TX_PER_SEC: "nvlink_tx_bytes_per_second",
    GPM_NVLINK_TOTAL_RX_PER_SEC: "nvlink_rx_bytes_per_second",
}
GPM_METRICS: Final = (*GPM_PERCENT, *GPM_MIB_PER_SECOND)

_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+me)?)")


class NvmlApi(Protocol):
    """The pynvml functions the agent calls (names as in pynvml). Handles are opaque."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int: ...
    def nvmlDeviceGetAttributes(self, handle: Any) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...
    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int: ...
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any: ...
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any: ...
    def nvmlGpmSampleFree(self, sample: Any) -> None: ...
    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any: ...


def load_pynvml() -> Any:
    """The pynvml module (nvidia-ml-py, a dependency of the agent; it loads libnvidia-ml only
    when ``nvmlInit`` is called, so importing it works on machines without a GPU)."""
    return pynvml


def _error_types(pynvml: Any) -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [pynvml.NVMLError]
    mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and issubclass(mismatch, BaseException):
        types.append(mismatch)
    return tuple(types)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _CallFailed(Exception):
    def __init__(self, function: str, fault: Fault, error: str, detail: str) -> None:
        super().__init__(f"{function}: {error} ({detail})")
        self.function = function
        self.fault = fault
        self.error = error
        self.detail = detail


class _DeviceLost(Exception):
    def __init__(self, failed: _CallFailed) -> None:
        super().__init__(str(failed))
        self.failed = failed


class _DriverGone(Exception):
    def __init__(self, failed: _CallFailed) -> None:
        super().__init__(str(failed))
        self.failed = failed


class _Pass:
    """One sampling pass: every NVML call goes through :meth:`call`, which counts it and turns
    pynvml's exceptions into :class:`_CallFailed` carrying the agent's classification."""

    def __init__(self, api: Any, error_types: tuple[type[BaseException], ...]) -> None:
        self.api = api
        self.error_types = error_types
        self.calls = 0
        self.call_errors: list[CallError] = []
        self.unsupported_calls: set[str] = set()

    def call(self, functions: str | Sequence[str], *args: Any, expected: frozenset[str] = frozenset()) -> Any:
        """Call the first of ``functions`` this pynvml and driver have (newer names first).

        Errors named in ``expected`` (e.g. ``Timeout`` from a non-blocking event wait) are normal
        answers and are not counted as failed calls."""
        names = (functions,) if isinstance(functions, str) else tuple(functions)
        last: _CallFailed | None = None
        for name in names:
            fn = getattr(self.api, name, None)
            if fn is None:  # an older pynvml without this wrapper: try the next name
                self.unsupported_calls.add(name)
                last = _CallFailed(name, Fault.NOT_SUPPORTED, "FunctionNotFound", "not in this pynvml")
                continue
            self.calls += 1
            try:
                return fn(*args)
            except self.error_types as exc:
                error = errs.name_of(exc)
                fault = errs.classify(exc)
                if fault is Fault.NOT_SUPPORTED:  # an answer, not a failure: kept apart for the stats
                    self.unsupported_calls.add(name)
                elif error not in expected:
                    self.call_errors.append(CallError(name, error))
                last = _CallFailed(name, fault, error, str(exc))
                if errs.code_of(exc) != errs.FUNCTION_NOT_FOUND:
                    raise last from None
        assert last is not None  # names is never empty
        raise last


@dataclass
class _DeviceReader:
    """Reads one device's fields, keeping its not-supported list and read errors."""

    nvml: _Pass
    not_supported: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def read(self, fields: str | tuple[str, ...], functions: str | Sequence[str], *args: Any) -> Any | None:
        names = (fields,) if isinstance(fields, str) else fields
        try:
            return self.nvml.call(functions, *args)
        except _CallFailed as failed:
            if failed.fault is Fault.NOT_SUPPORTED:
                self.not_supported.extend(n for n in names if n not in self.not_supported)
                return None
            if failed.fault is Fault.DEVICE_LOST:
                raise _DeviceLost(failed) from None
            if failed.fault is Fault.DRIVER:
                raise _DriverGone(failed) from None
            self.errors.extend(f"{n}: {failed.function} failed: {failed.error}" for n in names)
            return None


@dataclass(frozen=True)
class _Seen:
    index: int
    name: str | None
    pci_bus_id: str | None


class NvmlBackend:
    """Samples every GPU through NVML. Safe to call ``sample`` again after the driver came back."""

    def __init__(
        self,
        api: NvmlApi | None = None,
        *,
        xid_events: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api: Any = api
        self._monotonic = monotonic
        # GPM: per device UUID, whether the card supports it (asked once) and the last pass's sample.
        self._gpm_supported: dict[str, bool] = {}
        self._gpm_last: dict[str, tuple[Any, float]] = {}
        self._xid_events = xid_events
        self._pynvml: Any | None = None
        self._initialized = False
        self._event_set: Any = None
        self._events_not_supported = False
        self._driver_version: str | None = None
        self._cuda_version: str | None = None
        self._xids: dict[str, list[int]] = {}
        self._seen: dict[str, _Seen] = {}
        self._registered: set[str] = set()

    @property
    def kind(self) -> AgentBackend:
        return AgentBackend.NVML

    # --- lifecycle ----------------------------------------------------------------------------
    def _unavailable(self, nvml: _Pass | None, reason: str) -> NodeSample:
        return NodeSample(
            backend=AgentBackend.NVML,
            accelerator_kind=AcceleratorKind.GPU,
            available=False,
            problems=(reason,),
            calls=nvml.calls if nvml else 0,
            call_errors=tuple(nvml.call_errors) if nvml else (),
            unsupported_calls=tuple(sorted(nvml.unsupported_calls)) if nvml else (),
        )

    def _init(self, nvml: _Pass) -> None:
        nvml.call("nvmlInit")
        self._initialized = True
        try:
            self._driver_version = _text(nvml.call("nvmlSystemGetDriverVersion"))
        except _CallFailed:
            self._driver_version = None
        try:
            raw = int(nvml.call("nvmlSystemGetCudaDriverVersion"))
            self._cuda_version = f"{raw // 1000}.{(raw % 1000) // 10}"
        except _CallFailed:
            self._cuda_version = None
        self._events_not_supported = False
        if self._xid_events:
            try:
                self._event_set = nvml.call("nvmlEventSetCreate")
            except _CallFailed as failed:
                if failed.fault is Fault.DRIVER:
                    raise
                self._events_not_supported = True

    def _reset(self, nvml: _Pass) -> None:
        """Forget the NVML session (driver gone): the next pass initializes again."""
        for sample, _ in self._gpm_last.values():
            try:
                nvml.call("nvmlGpmSampleFree", sample)
            except _CallFailed as failed:
                log.debug("freeing a GPM sample failed: %s", failed)
        if self._event_set is not None:
            try:
                nvml.call("nvmlEventSetFree", self._event_set)
            except _CallFailed as failed:
                log.debug("freeing the event set failed: %s", failed)
        if self._initialized:
            try:
                nvml.call("nvmlShutdown")
            except _CallFailed as failed:
                log.debug("nvmlShutdown failed: %s", failed)
        self._gpm_last = {}
        self._gpm_supported = {}
        self._event_set = None
        self._initialized = False
        self._registered = set()

    def close(self) -> None:
        if self._pynvml is None or not self._initialized:
            return
        self._reset(_Pass(self._api, _error_types(self._pynvml)))

    # --- sampling -----------------------------------------------------------------------------
    def sample(self) -> NodeSample:
        if self._pynvml is None:
            self._pynvml = load_pynvml()
        if self._api is None:
            self._api = self._pynvml
        nvml = _Pass(self._api, _error_types(self._pynvml))
        if not self._initialized:
            try:
                self._init(nvml)
            except _CallFailed as failed:
                self._reset(nvml)
                return self._unavailable(nvml, _driver_reason(failed))
        try:
            return self._sample(nvml)
        except _DriverGone as gone:
            self._reset(nvml)
            return self._unavailable(nvml, _driver_reason(gone.failed))

    def _sample(self, nvml: _Pass) -> NodeSample:
        try:
            count = int(nvml.call("nvmlDeviceGetCount"))
        except _CallFailed as failed:
            if failed.fault is Fault.DRIVER:
                raise _DriverGone(failed) from None
            return self._unavailable(nvml, f"NVML could not count the devices: {failed.error} ({failed.detail})")
        node_not_supported: list[str] = []
        devices: list[DeviceSample] = []
        handles: dict[str, Any] = {}
        for index in range(count):
            device, handle = self._device(nvml, index)
            devices.append(device)
            if device.uuid is not None and handle is not None:
                handles[device.uuid] = handle
        if self._xid_events:
            if not self._register_events(nvml, handles):
                node_not_supported.append("xidErrors")
            self._drain_events(nvml)
            devices = [d if d.uuid is None else _with_xids(d, self._xids.get(d.uuid, [])) for d in devices]
        present = {d.uuid for d in devices if d.uuid is not None}
        for uuid, seen in sorted(self._seen.items(), key=lambda kv: kv[1].index):
            if uuid not in present:
                devices.append(
                    DeviceSample(
                        index=seen.index,
                        uuid=uuid,
                        name=seen.name,
                        pci_bus_id=seen.pci_bus_id,
                        lost=True,
                        errors=("no longer enumerated by NVML (fell off the bus or was unbound)",),
                        xid_errors=tuple(self._xids.get(uuid, [])),
                    )
                )
        for d in devices:
            if d.uuid is not None and not d.lost:
                self._seen[d.uuid] = _Seen(d.index, d.name, d.pci_bus_id)
        return NodeSample(
            backend=AgentBackend.NVML,
            accelerator_kind=AcceleratorKind.GPU,
            devices=tuple(devices),
            not_supported=tuple(node_not_supported),
            driver_version=self._driver_version,
            cuda_driver_version=self._cuda_version,
            calls=nvml.calls,
            call_errors=tuple(nvml.call_errors),
            unsupported_calls=tuple(sorted(nvml.unsupported_calls)),
        )

    def _device(self, nvml: _Pass, index: int) -> tuple[DeviceSample, Any]:
        reader = _DeviceReader(nvml)
        handle: Any = None
        values: dict[str, Any] = {}
        try:
            handle = nvml.call("nvmlDeviceGetHandleByIndex", index)
            values["uuid"] = _opt_text(reader.read("uuid", "nvmlDeviceGetUUID", handle))
            values["name"] = _opt_text(reader.read("name", "nvmlDeviceGetName", handle))
            pci = reader.read("pciBusId", "nvmlDeviceGetPciInfo", handle)
            values["pci_bus_id"] = _opt_text(getattr(pci, "busId", None)) if pci is not None else None
            self._read_device(reader, handle, values)
        except _DeviceLost as lost:
            return self._lost(index, values, reader, lost.failed), None
        except _CallFailed as failed:  # the handle itself could not be had
            if failed.fault is Fault.DRIVER:
                raise _DriverGone(failed) from None
            # Lost, gone, or refused (permissions): a device NVML cannot open is unusable to jobs too.
            return self._lost(index, values, reader, failed), None
        return (
            DeviceSample(
                index=index,
                **values,
                errors=tuple(reader.errors),
                not_supported=tuple(reader.not_supported),
            ),
            handle,
        )

    def _lost(self, index: int, values: dict[str, Any], reader: _DeviceReader, failed: _CallFailed) -> DeviceSample:
        uuid = values.get("uuid")
        seen = self._seen.get(uuid) if uuid else None
        if uuid is None:  # the handle failed before the UUID was read: recognise it by its old index
            for known_uuid, known in self._seen.items():
                if known.index == index:
                    uuid, seen = known_uuid, known
                    break
        return DeviceSample(
            index=index,
            uuid=uuid,
            name=values.get("name") or (seen.name if seen else None),
            pci_bus_id=values.get("pci_bus_id") or (seen.pci_bus_id if seen else None),
            lost=True,
            errors=(*reader.errors, f"{failed.function}: {failed.error}"),
            xid_errors=tuple(self._xids.get(uuid, [])) if uuid else (),
        )

    def _read_device(self, reader: _DeviceReader, handle: Any, values: dict[str, Any]) -> None:
        mode = reader.read("migEnabled", "nvmlDeviceGetMigMode", handle)
        mig_enabled = None if mode is None else int(mode[0]) == MIG_ENABLE
        values["mig_enabled"] = mig_enabled
        # Processes before memory: a process that ends in between then shows as a process whose
        # memory is already free, never as memory used by nobody. On a MIG device the parent's list
        # needs privileges and lacks the instance: the per-instance lists (read below) are the truth.
        procs = None if mig_enabled else reader.read("processes", "nvmlDeviceGetComputeRunningProcesses", handle)
        processes = [_process(p) for p in procs or []]
        mem = reader.read(("memoryTotalBytes", "memoryUsedBytes"), "nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            values["memory_total_bytes"] = int(mem.total)
            values["memory_used_bytes"] = int(mem.used)
        util = reader.read(
            ("utilizationGpuPercent", "utilizationMemoryPercent"), "nvmlDeviceGetUtilizationRates", handle
        )
        if util is not None:
            values["utilization_gpu_percent"] = float(util.gpu)
            values["utilization_memory_percent"] = float(util.memory)
        power = reader.read("powerWatts", "nvmlDeviceGetPowerUsage", handle)
        values["power_watts"] = power / 1000.0 if power is not None else None
        limit = reader.read("powerLimitWatts", "nvmlDeviceGetEnforcedPowerLimit", handle)
        values["power_limit_watts"] = limit / 1000.0 if limit is not None else None
        temp = reader.read(
            "temperatureCelsius", ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), handle, TEMPERATURE_GPU
        )
        values["temperature_celsius"] = float(temp) if temp is not None else None
        sm = reader.read("smClockMhz", "nvmlDeviceGetClockInfo", handle, CLOCK_SM)
        values["sm_clock_mhz"] = int(sm) if sm is not None else None
        mask = reader.read(
            "throttleReasons",
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            handle,
        )
        values["throttle_mask"] = int(mask) if mask is not None else None
        ecc = reader.read(
            "eccUncorrected", "nvmlDeviceGetTotalEccErrors", handle, MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC
        )
        values["ecc_uncorrected"] = int(ecc) if ecc is not None else None
        rows = reader.read("remappedRows", "nvmlDeviceGetRemappedRows", handle)
        values["profile"] = self._profile(reader, handle, values.get("uuid"), gpm=not mig_enabled)
        if rows is not None:
            corr, unc, pending, failed = rows
            values["remapped_rows"] = RemappedRows(
                correctable=int(corr), uncorrectable=int(unc), pending=bool(pending), failed=bool(failed)
            )
        if mig_enabled:
            instances, mig_processes, max_slices = self._mig(reader, handle)
            values["mig_instances"] = instances
            values["mig_max_slices"] = max_slices
            processes = mig_processes
        values["processes"] = tuple(sorted(processes, key=lambda p: p.pid))

    def _mig(self, reader: _DeviceReader, handle: Any) -> tuple[tuple[MigSample, ...], list[ProcessSample], int | None]:
        max_count = reader.read("migInstances", "nvmlDeviceGetMaxMigDeviceCount", handle)
        if max_count is None:
            return (), [], None
        instances: list[MigSample] = []
        processes: list[ProcessSample] = []
        for i in range(int(max_count)):
            try:
                mig = reader.nvml.call(
                    "nvmlDeviceGetMigDeviceHandleByIndex", handle, i, expected=frozenset({"NotFound"})
                )
            except _CallFailed as failed:
                if failed.fault in (Fault.NOT_FOUND, Fault.OTHER):  # no instance in this slot
                    continue
                if failed.fault is Fault.NOT_SUPPORTED:
                    reader.not_supported.append("migInstances")
                    break
                if failed.fault is Fault.DRIVER:
                    raise _DriverGone(failed) from None
                raise _DeviceLost(failed) from None
            gi = reader.read("migInstances", "nvmlDeviceGetGpuInstanceId", mig)
            if gi is None:
                continue
            attrs = reader.read("migInstances", "nvmlDeviceGetAttributes", mig)
            name = _opt_text(reader.read("migInstances", "nvmlDeviceGetName", mig))
            uuid = _opt_text(reader.read("migInstances", "nvmlDeviceGetUUID", mig))
            slices = int(attrs.gpuInstanceSliceCount) if attrs is not None else None
            memory = int(attrs.memorySizeMB) * 1024 * 1024 if attrs is not None else None
            instances.append(
                MigSample(
                    gpu_instance_id=int(gi),
                    profile=_mig_profile(name, slices, memory),
                    uuid=uuid,
                    memory_bytes=memory,
                    slices=slices,
                )
            )
            for p in reader.read("processes", "nvmlDeviceGetComputeRunningProcesses", mig) or []:
                processes.append(ProcessSample(pid=int(p.pid), used_memory_bytes=_mem(p), gpu_instance_id=int(gi)))
        return tuple(sorted(instances, key=lambda m: m.gpu_instance_id)), processes, int(max_count)

    # --- profiling counters -------------------------------------------------------------------
    def _profile(self, reader: _DeviceReader, handle: Any, uuid: str | None, *, gpm: bool) -> DeviceProfile | None:
        """GPM counters between the last pass and this one where the card has GPM (and MIG is
        off: a MIG device is sampled per instance, which the agent does not do), else the PCIe
        throughput counters. A GPM read that fails falls back to PCIe for this pass."""
        if gpm and uuid is not None and self._gpm_supports(reader.nvml, handle, uuid):
            try:
                return self._gpm(reader.nvml, handle, uuid)
            except _CallFailed as failed:
                if failed.fault is Fault.DEVICE_LOST:
                    raise _DeviceLost(failed) from None
                if failed.fault is Fault.DRIVER:
                    raise _DriverGone(failed) from None
                self._forget_gpm(reader.nvml, uuid)
                log.debug("GPM read of %s failed, PCIe counters instead: %s", uuid, failed)
        tx = reader.read("profile", "nvmlDeviceGetPcieThroughput", handle, PCIE_UTIL_TX_BYTES)
        rx = reader.read("profile", "nvmlDeviceGetPcieThroughput", handle, PCIE_UTIL_RX_BYTES)
        if tx is None and rx is None:
            return None
        return DeviceProfile(
            source=ProfileSource.BASIC,
            pcie_tx_bytes_per_second=_rate(tx, KIB),  # NVML's PCIe throughput is in KB/s
            pcie_rx_bytes_per_second=_rate(rx, KIB),
        )

    def _gpm_supports(self, nvml: _Pass, handle: Any, uuid: str) -> bool:
        known = self._gpm_supported.get(uuid)
        if known is not None:
            return known
        try:
            support = nvml.call("nvmlGpmQueryDeviceSupport", handle)
            supported = bool(int(getattr(support, "isSupportedDevice", 0)))
        except _CallFailed as failed:
            if failed.fault is Fault.DEVICE_LOST:
                raise _DeviceLost(failed) from None
            if failed.fault is Fault.DRIVER:
                raise _DriverGone(failed) from None
            if failed.fault is not Fault.NOT_SUPPORTED:
                return False  # ask again next pass
            supported = False
        self._gpm_supported[uuid] = supported
        return supported

    def _forget_gpm(self, nvml: _Pass, uuid: str) -> None:
        last = self._gpm_last.pop(uuid, None)
        if last is not None:
            try:
                nvml.call("nvmlGpmSampleFree", last[0])
            except _CallFailed as failed:
                log.debug("freeing a GPM sample failed: %s", failed)

    def _gpm(self, nvml: _Pass, handle: Any, uuid: str) -> DeviceProfile | None:
        """This pass's GPM sample, and the metrics between the last pass's and it (None on the first)."""
        sample = nvml.call("nvmlGpmSampleAlloc")
        try:
            nvml.call("nvmlGpmSampleGet", handle, sample)
        except _CallFailed:
            nvml.call("nvmlGpmSampleFree", sample)
            raise
        now = self._monotonic()
        last = self._gpm_last.get(uuid)
        self._gpm_last[uuid] = (sample, now)
        if last is None:
            return None
        before, then = last
        try:
            request = self._gpm_request(before, sample)
            got = nvml.call("nvmlGpmMetricsGet", request)
        finally:
            nvml.call("nvmlGpmSampleFree", before)
        fields: dict[str, Any] = {}
        for i in range(int(got.numMetrics)):
            metric = got.metrics[i]
            value = float(metric.value)
            if int(metric.nvmlReturn) != 0 or not math.isfinite(value):
                continue  # this metric is not available on this card
            metric_id = int(metric.metricId)
            if metric_id in GPM_PERCENT:
                fields[GPM_PERCENT[metric_id]] = min(max(value, 0.0), 100.0)
            elif metric_id in GPM_MIB_PER_SECOND:
                fields[GPM_MIB_PER_SECOND[metric_id]] = _rate(value, MIB)
        return DeviceProfile(source=ProfileSource.GPM, interval_seconds=round(max(now - then, 0.0), 3), **fields)

    def _gpm_request(self, before: Any, after: Any) -> Any:
        """pynvml's ``c_nvmlGpmMetricsGet_t`` asking for :data:`GPM_METRICS` between two samples."""
        assert self._pynvml is not None  # sample() loaded it
        request = self._pynvml.c_nvmlGpmMetricsGet_t()
        request.version = GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = before
        request.sample2 = after
        for i, metric_id in enumerate(GPM_METRICS):
            request.metrics[i].metricId = metric_id
        return request

    # --- XID events ---------------------------------------------------------------------------
    def _register_events(self, nvml: _Pass, handles: dict[str, Any]) -> bool:
        """Register new devices for XID critical errors; False where the driver cannot."""
        if self._event_set is None or self._events_not_supported:
            return False
        for uuid, handle in handles.items():
            if uuid in self._registered:
                continue
            try:
                nvml.call("nvmlDeviceRegisterEvents", handle, EVENT_TYPE_XID_CRITICAL_ERROR, self._event_set)
            except _CallFailed as failed:
                if failed.fault is Fault.DRIVER:
                    raise _DriverGone(failed) from None
                if failed.fault is Fault.NOT_SUPPORTED:
                    self._events_not_supported = True
                    return False
                log.warning("registering XID events for %s failed: %s", uuid, failed)
                continue
            self._registered.add(uuid)
        return True

    def _drain_events(self, nvml: _Pass) -> None:
        if self._event_set is None or self._events_not_supported:
            return
        for _ in range(MAX_EVENTS_PER_PASS):
            try:
                event = nvml.call("nvmlEventSetWait_v2", self._event_set, 0, expected=frozenset({"Timeout"}))
            except _CallFailed as failed:
                if failed.fault is Fault.DRIVER:
                    raise _DriverGone(failed) from None
                # Timeout is the normal "no event waiting"; anything else: try again next pass.
                if failed.error != "Timeout":
                    log.debug("waiting for NVML events failed: %s", failed)
                return
            if not int(event.eventType) & EVENT_TYPE_XID_CRITICAL_ERROR:
                continue
            try:
                uuid = _text(nvml.call("nvmlDeviceGetUUID", event.device))
            except _CallFailed:
                uuid = "unknown"
            self._xids.setdefault(uuid, []).append(int(event.eventData))


def _rate(value: Any, unit: int) -> int | None:
    """A non-negative whole rate in bytes per second from ``value`` units per second."""
    if value is None:
        return None
    rate = float(value) * unit
    return int(min(max(rate, 0.0), 2.0**60)) if math.isfinite(rate) else None


def _driver_reason(failed: _CallFailed) -> str:
    if failed.error == "LibraryNotFound":
        return "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver on this node, or not mounted"
    if failed.error == "DriverNotLoaded":
        return "NVIDIA driver not loaded"
    return f"NVML unusable: {failed.function} failed with {failed.error} ({failed.detail})"


def _opt_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _mem(p: Any) -> int | None:
    used = getattr(p, "usedGpuMemory", None)
    return int(used) if used is not None else None


def _process(p: Any) -> ProcessSample:
    gi = getattr(p, "gpuInstanceId", None)
    return ProcessSample(
        pid=int(p.pid),
        used_memory_bytes=_mem(p),
        gpu_instance_id=None if gi is None or int(gi) == NO_GPU_INSTANCE else int(gi),
    )


def _mig_profile(name: str | None, slices: int | None, memory_bytes: int | None) -> str:
    if name:
        found = _MIG_PROFILE.search(name)
        if found:
            return found.group(1)
    if slices is not None and memory_bytes is not None:
        return f"{slices}g.{round(memory_bytes / 2**30)}gb"
    return "unknown"


def _with_xids(device: DeviceSample, xids: list[int]) -> DeviceSample:
    if not xids:
        return device
    return replace(device, xid_errors=tuple(xids))
