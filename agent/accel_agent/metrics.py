"""Every metric the agent exports, on one injected ``CollectorRegistry``.

Device series use the names and units of NVIDIA's DCGM exporter, so dashboards and alerts written
for it work unchanged: ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_MEM_COPY_UTIL`` (%),
``DCGM_FI_DEV_FB_USED``/``_FREE``/``_TOTAL`` (MiB, as DCGM), ``DCGM_FI_DEV_POWER_USAGE`` (W),
``DCGM_FI_DEV_GPU_TEMP`` (°C), ``DCGM_FI_DEV_SM_CLOCK`` (MHz), ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``
(bitmask), ``DCGM_FI_DEV_XID_ERRORS`` (the last XID seen), ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (volatile
uncorrectable ECC), ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``/``_CORRECTABLE_``,
``DCGM_FI_DEV_ROW_REMAP_FAILURE``, with DCGM's labels ``gpu``, ``UUID``, ``device``, ``pci_bus_id``,
``modelName``, ``Hostname`` and ``pod``/``namespace``/``container`` (empty when not mapped; with
several pods on one device, the first by name, as one series per device keeps sums right).

They are produced by a collector from the last report, so a device or pod that disappears leaves
no stale series behind. The agent's own metrics are ``accel_agent_*``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from accel_agent import health
from accel_agent.backends import NodeSample
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import AcceleratorNodeReport, Device

MIB: Final = 1024 * 1024
DEVICE_LABELS: Final = ("gpu", "UUID", "device", "pci_bus_id", "modelName", "Hostname", "container", "namespace", "pod")


def _throttle_mask(d: Device) -> float:
    names = set(d.throttle_reasons)
    return float(sum(bit for bit, name in health.THROTTLE_REASONS if name in names))


def _fb_free(d: Device) -> float | None:
    if d.memory_total_bytes is None or d.memory_used_bytes is None:
        return None
    return (d.memory_total_bytes - d.memory_used_bytes) / MIB


# name, help, value of a device (None: not exported for that device)
_DEVICE_SERIES: Final[tuple[tuple[str, str, Callable[[Device], float | None]], ...]] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda d: d.utilization_gpu_percent),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda d: d.utilization_memory_percent),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        lambda d: None if d.memory_used_bytes is None else d.memory_used_bytes / MIB,
    ),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    (
        "DCGM_FI_DEV_FB_TOTAL",
        "Framebuffer memory total (in MiB).",
        lambda d: None if d.memory_total_bytes is None else d.memory_total_bytes / MIB,
    ),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda d: d.power_watts),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Enforced power limit (in W).", lambda d: d.power_limit_watts),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda d: d.temperature_celsius),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda d: d.sm_clock_mhz),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (bitmask of NVML clocks-event reasons).",
        lambda d: None if "throttleReasons" in d.not_supported else _throttle_mask(d),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total uncorrectable (double-bit) volatile ECC errors.",
        lambda d: d.ecc_uncorrected,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
        lambda d: None if d.remapped_rows is None else d.remapped_rows.uncorrectable,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
        lambda d: None if d.remapped_rows is None else d.remapped_rows.correctable,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed.",
        lambda d: None if d.remapped_rows is None else float(d.remapped_rows.failed),
    ),
    ("accel_agent_device_healthy", "1 when the device has no health problem.", lambda d: float(d.healthy)),
)


class _DeviceCollector(Collector):
    def __init__(self, hostname: str) -> None:
        self._hostname = hostname
        self._lock = threading.Lock()
        self._report: AcceleratorNodeReport | None = None
        self._last_xid: dict[int, int] = {}
        self._xid_supported = True

    def update(self, report: AcceleratorNodeReport, sample: NodeSample | None) -> None:
        last_xid = {d.index: d.xid_errors[-1] for d in sample.devices if d.xid_errors} if sample else {}
        xid_supported = sample is not None and sample.backend is AgentBackend.NVML
        xid_supported = xid_supported and sample is not None and "xidErrors" not in sample.not_supported
        with self._lock:
            self._report = report
            self._last_xid = last_xid
            self._xid_supported = xid_supported

    def _labels(self, d: Device, prefix: str) -> list[str]:
        # Processes' pods first; else the pods the kubelet allocated the device to (a process known
        # only by its pod's UID, without the opt-in pod list, still gets its pod's name that way).
        named = [p.pod for p in d.processes if p.pod is not None] or list(d.allocated_pods)
        pods = sorted(named, key=lambda p: (p.namespace, p.name, p.container or ""))
        pod = pods[0] if pods else None
        return [
            str(d.index),
            d.uuid or "",
            f"{prefix}{d.index}",
            d.pci_bus_id or "",
            d.name or "",
            self._hostname,
            (pod.container or "") if pod else "",
            pod.namespace if pod else "",
            pod.name if pod else "",
        ]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            report, last_xid, xid_supported = self._report, self._last_xid, self._xid_supported
        status = report.status if report is not None else None
        devices = status.devices if status is not None else []
        prefix = "accel" if status is not None and status.accelerator_kind is AcceleratorKind.TPU else "nvidia"
        for name, doc, value_of in _DEVICE_SERIES:
            family = GaugeMetricFamily(name, doc, labels=list(DEVICE_LABELS))
            for d in devices:
                value = value_of(d)
                if value is not None:
                    family.add_metric(self._labels(d, prefix), float(value))
            yield family
        if xid_supported:
            family = GaugeMetricFamily(
                "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=list(DEVICE_LABELS)
            )
            for d in devices:
                family.add_metric(self._labels(d, prefix), float(last_xid.get(d.index, 0)))
            yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registering must not call collect() before the first sample exists.
        return iter(())


class AgentMetrics:
    """The agent's metrics. Create one per registry; tests pass a fresh ``CollectorRegistry``."""

    def __init__(self, registry: CollectorRegistry, *, hostname: str) -> None:
        self.registry = registry
        self._devices = _DeviceCollector(hostname)
        registry.register(self._devices)
        self.samples = Counter("accel_agent_samples", "Sampling passes run.", ["backend"], registry=registry)
        self.sample_seconds = Histogram(
            "accel_agent_sample_seconds",
            "Wall time of one sampling pass (backend, pod mapping and report), in seconds.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=registry,
        )
        self.report_writes = Counter(
            "accel_agent_report_writes",
            "Report writes attempted, by result (ok, error).",
            ["result"],
            registry=registry,
        )
        self.report_skipped = Counter(
            "accel_agent_report_skipped",
            "Passes whose report was not written: nothing changed enough.",
            registry=registry,
        )
        self.nvml_errors = Counter(
            "accel_agent_nvml_errors",
            "Failed NVML calls by function and error (Not Supported answers excluded).",
            ["function", "error"],
            registry=registry,
        )
        self.node_healthy = Gauge("accel_agent_node_healthy", "1 when the node report is healthy.", registry=registry)
        self.free_devices = Gauge(
            "accel_agent_free_devices", "Devices with no process and under 5% memory used.", registry=registry
        )
        self.total_devices = Gauge("accel_agent_devices", "Devices on the node.", registry=registry)
        self.stranded_memory = Gauge(
            "accel_agent_stranded_memory_bytes", "Free memory on devices that are partly in use.", registry=registry
        )
        self.unusable_mig_slices = Gauge(
            "accel_agent_unusable_mig_slices", "MIG slices that cannot be combined right now.", registry=registry
        )
        self.last_write = Gauge(
            "accel_agent_last_report_write_timestamp_seconds",
            "Unix time of the last successful report write.",
            registry=registry,
        )

    def observe_report(self, report: AcceleratorNodeReport, sample: NodeSample | None = None) -> None:
        self._devices.update(report, sample)
        status = report.status
        if status is None:
            return
        self.node_healthy.set(1.0 if status.healthy else 0.0)
        self.free_devices.set(status.fragmentation.free_devices)
        self.total_devices.set(status.fragmentation.total_devices)
        self.stranded_memory.set(status.fragmentation.stranded_memory_bytes)
        self.unusable_mig_slices.set(status.fragmentation.unusable_mig_slices)
