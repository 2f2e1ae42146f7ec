"""Every metric the agent exports, on one injected ``CollectorRegistry``.

Device series have names of the agent's own, ``accel_agent_gpu_*`` in base units, so they never
collide with NVIDIA's DCGM exporter where both run on a node: ``accel_agent_gpu_utilization_percent``,
``_memory_utilization_percent``, ``_memory_used_bytes``/``_free_bytes``/``_total_bytes``,
``_power_watts``, ``_power_limit_watts``, ``_temperature_celsius``, ``_sm_clock_hertz``,
``_clock_throttle_reasons`` (bitmask of NVML clocks-event reasons), ``_last_xid`` (gauges);
``_ecc_uncorrectable_volatile_errors_total``, ``_remapped_rows_uncorrectable_total``,
``_remapped_rows_correctable_total`` (counters), ``_row_remap_failed`` (gauge); and
``accel_agent_device_healthy``. Labels: ``gpu`` (index), ``uuid``, ``device`` (``nvidia<i>``),
``pci_bus_id``, ``model_name``, ``hostname`` and ``namespace``/``pod``/``container`` (empty when not
mapped; with several pods on one device, the first by name, as one series per device keeps sums
right; a device's processes' pods first, else the pods the kubelet allocated it to).

With ``dcgm_compat`` (``ACCEL_AGENT_DCGM_COMPAT=true``, for clusters without the DCGM exporter) the
same figures are exported a second time under the DCGM exporter's names, units, types and labels
(``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED`` in MiB, ``DCGM_FI_DEV_SM_CLOCK`` in MHz, the
counters ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` and ``DCGM_FI_DEV_*_REMAPPED_ROWS`` without a ``_total``
suffix, as it writes them; labels ``UUID``, ``modelName``, ``Hostname``, ...), so its dashboards and
alerts work unchanged. Never turn it on where the DCGM exporter runs: the two would write the same
series.

They are produced by a collector from the last report, so a device or pod that disappears leaves
no stale series behind. The agent's own process metrics are ``accel_agent_*`` too.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accel_agent import health
from accel_agent.backends import NodeSample
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import AcceleratorNodeReport, Device, PodRef

MIB: Final = 1024 * 1024
MHZ: Final = 1_000_000
# The agent's own labels, and the DCGM exporter's for the same values (in the same order).
DEVICE_LABELS: Final = (
    "gpu",
    "uuid",
    "device",
    "pci_bus_id",
    "model_name",
    "hostname",
    "container",
    "namespace",
    "pod",
)
DCGM_LABELS: Final = ("gpu", "UUID", "device", "pci_bus_id", "modelName", "Hostname", "container", "namespace", "pod")


def _throttle_mask(d: Device) -> float:
    names = set(d.throttle_reasons)
    return float(sum(bit for bit, name in health.THROTTLE_REASONS if name in names))


def _fb_free(d: Device) -> float | None:
    if d.memory_total_bytes is None or d.memory_used_bytes is None:
        return None
    return float(d.memory_total_bytes - d.memory_used_bytes)


@dataclass(frozen=True)
class DeviceSeries:
    """One device figure: its own name (a counter's without ``_total``, which the exposition adds),
    its type, help, value in base units, and the DCGM exporter's name and unit for the same figure
    (``dcgm_scale``: base units per DCGM unit)."""

    name: str
    kind: Literal["gauge", "counter"]
    doc: str
    value: Callable[[Device], float | None]
    dcgm: str | None = None
    dcgm_scale: float = 1.0


DEVICE_SERIES: Final[tuple[DeviceSeries, ...]] = (
    DeviceSeries(
        "accel_agent_gpu_utilization_percent",
        "gauge",
        "GPU utilization (in %).",
        lambda d: d.utilization_gpu_percent,
        "DCGM_FI_DEV_GPU_UTIL",
    ),
    DeviceSeries(
        "accel_agent_gpu_memory_utilization_percent",
        "gauge",
        "Memory (copy) utilization (in %).",
        lambda d: d.utilization_memory_percent,
        "DCGM_FI_DEV_MEM_COPY_UTIL",
    ),
    DeviceSeries(
        "accel_agent_gpu_memory_used_bytes",
        "gauge",
        "Framebuffer memory used (bytes).",
        lambda d: None if d.memory_used_bytes is None else float(d.memory_used_bytes),
        "DCGM_FI_DEV_FB_USED",
        MIB,
    ),
    DeviceSeries(
        "accel_agent_gpu_memory_free_bytes",
        "gauge",
        "Framebuffer memory free (bytes).",
        _fb_free,
        "DCGM_FI_DEV_FB_FREE",
        MIB,
    ),
    DeviceSeries(
        "accel_agent_gpu_memory_total_bytes",
        "gauge",
        "Framebuffer memory total (bytes).",
        lambda d: None if d.memory_total_bytes is None else float(d.memory_total_bytes),
        "DCGM_FI_DEV_FB_TOTAL",
        MIB,
    ),
    DeviceSeries(
        "accel_agent_gpu_power_watts", "gauge", "Power draw (W).", lambda d: d.power_watts, "DCGM_FI_DEV_POWER_USAGE"
    ),
    DeviceSeries(
        "accel_agent_gpu_power_limit_watts",
        "gauge",
        "Enforced power limit (W).",
        lambda d: d.power_limit_watts,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    ),
    DeviceSeries(
        "accel_agent_gpu_temperature_celsius",
        "gauge",
        "GPU temperature (C).",
        lambda d: d.temperature_celsius,
        "DCGM_FI_DEV_GPU_TEMP",
    ),
    DeviceSeries(
        "accel_agent_gpu_sm_clock_hertz",
        "gauge",
        "SM clock frequency (Hz).",
        lambda d: None if d.sm_clock_mhz is None else float(d.sm_clock_mhz * MHZ),
        "DCGM_FI_DEV_SM_CLOCK",
        MHZ,
    ),
    DeviceSeries(
        "accel_agent_gpu_clock_throttle_reasons",
        "gauge",
        "Current clock throttle reasons (bitmask of NVML clocks-event reasons).",
        lambda d: None if "throttleReasons" in d.not_supported else _throttle_mask(d),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    ),
    DeviceSeries(
        "accel_agent_gpu_ecc_uncorrectable_volatile_errors",
        "counter",
        "Uncorrectable (double-bit) ECC errors since the driver loaded.",
        lambda d: d.ecc_uncorrected,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    ),
    DeviceSeries(
        "accel_agent_gpu_remapped_rows_uncorrectable",
        "counter",
        "Rows remapped for uncorrectable errors.",
        lambda d: None if d.remapped_rows is None else d.remapped_rows.uncorrectable,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ),
    DeviceSeries(
        "accel_agent_gpu_remapped_rows_correctable",
        "counter",
        "Rows remapped for correctable errors.",
        lambda d: None if d.remapped_rows is None else d.remapped_rows.correctable,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    ),
    DeviceSeries(
        "accel_agent_gpu_row_remap_failed",
        "gauge",
        "1 when remapping rows has failed.",
        lambda d: None if d.remapped_rows is None else float(d.remapped_rows.failed),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ),
    DeviceSeries(
        "accel_agent_device_healthy", "gauge", "1 when the device has no health problem.", lambda d: float(d.healthy)
    ),
)
XID_SERIES: Final = DeviceSeries(
    "accel_agent_gpu_last_xid",
    "gauge",
    "Value of the last XID error seen (0: none).",
    lambda d: None,
    "DCGM_FI_DEV_XID_ERRORS",
)
# The DCGM exporter's counters carry no ``_total`` suffix; render() writes their headers as it does.
DCGM_COUNTERS: Final = frozenset(s.dcgm for s in DEVICE_SERIES if s.kind == "counter" and s.dcgm)


def _family(name: str, kind: str, doc: str, labels: tuple[str, ...]) -> CounterMetricFamily | GaugeMetricFamily:
    if kind == "counter":
        return CounterMetricFamily(name, doc, labels=list(labels))
    return GaugeMetricFamily(name, doc, labels=list(labels))


class _DeviceCollector(Collector):
    def __init__(self, hostname: str, *, dcgm_compat: bool) -> None:
        self._hostname = hostname
        self._dcgm_compat = dcgm_compat
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
        named: list[PodRef] = [p.pod for p in d.processes if p.pod is not None] or list(d.allocated_pods)
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

    def _families(self, series: DeviceSeries, values: list[tuple[list[str], float]]) -> Iterator[Metric]:
        family = _family(series.name, series.kind, series.doc, DEVICE_LABELS)
        for labels, value in values:
            family.add_metric(labels, value)
        yield family
        if self._dcgm_compat and series.dcgm:
            # DCGM's own name, unit and type; a counter's samples are named as the family.
            dcgm = Metric(series.dcgm, series.doc, series.kind)
            for labels, value in values:
                dcgm.add_sample(series.dcgm, dict(zip(DCGM_LABELS, labels, strict=True)), value / series.dcgm_scale)
            yield dcgm

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            report, last_xid, xid_supported = self._report, self._last_xid, self._xid_supported
        status = report.status if report is not None else None
        devices = status.devices if status is not None else []
        prefix = "accel" if status is not None and status.accelerator_kind is AcceleratorKind.TPU else "nvidia"
        for series in DEVICE_SERIES:
            values = [(self._labels(d, prefix), float(v)) for d in devices if (v := series.value(d)) is not None]
            yield from self._families(series, values)
        if xid_supported:
            values = [(self._labels(d, prefix), float(last_xid.get(d.index, 0))) for d in devices]
            yield from self._families(XID_SERIES, values)

    def describe(self) -> Iterator[Metric]:
        # Registering must not call collect() before the first sample exists.
        return iter(())


_DCGM_COUNTER_HEADER: Final = re.compile(
    rb"^# (HELP|TYPE) (" + b"|".join(re.escape(n.encode()) for n in sorted(DCGM_COUNTERS)) + rb")_total ", re.M
)


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry``. The client library names a counter's header
    ``<name>_total``; the DCGM exporter's counters (dcgm_compat) have no such suffix, so their
    headers are written as that exporter writes them, matching their samples."""
    return _DCGM_COUNTER_HEADER.sub(rb"# \1 \2 ", generate_latest(registry))


class AgentMetrics:
    """The agent's metrics. Create one per registry; tests pass a fresh ``CollectorRegistry``."""

    def __init__(self, registry: CollectorRegistry, *, hostname: str, dcgm_compat: bool = False) -> None:
        self.registry = registry
        self._devices = _DeviceCollector(hostname, dcgm_compat=dcgm_compat)
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
