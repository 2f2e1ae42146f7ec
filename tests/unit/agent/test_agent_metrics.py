"""Metrics exposition (the agent's own names by default; the DCGM exporter's names, units, types and
labels only with dcgm_compat) and the HTTP endpoints."""

import re
import urllib.error
import urllib.request
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from accel_agent import metrics as agent_metrics
from accel_agent import report
from accel_agent.backends import DeviceSample, NodeSample, ProcessSample
from accel_agent.metrics import AgentMetrics
from accel_agent.server import LoopHealth, serve
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import PodRef, RemappedRows

MIB = 1 << 20


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by the name they are served under (read from the text as a scraper reads it: the
    client library's parser would rename a counter's samples without ``_total``)."""
    text = agent_metrics.render(registry).decode()
    list(text_string_to_metric_families(text))  # well-formed exposition
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        found = _SAMPLE.match(line)
        assert found, line
        labels = dict(_LABEL.findall(found.group(2) or ""))
        out.setdefault(found.group(1), []).append((labels, float(found.group(3))))
    return out


def types(registry: CollectorRegistry) -> dict[str, str]:
    """``# TYPE`` of every family as served, by the name the header gives."""
    lines = agent_metrics.render(registry).decode().splitlines()
    return {parts[2]: parts[3] for line in lines if line.startswith("# TYPE ") and (parts := line.split())}


def node_sample(*, xid: tuple[int, ...] = (), pods: bool = True) -> NodeSample:
    pod = PodRef(namespace="ml", name="train-0", container="trainer") if pods else None
    return NodeSample(
        AgentBackend.NVML,
        AcceleratorKind.GPU,
        devices=(
            DeviceSample(
                index=0,
                uuid="GPU-aaa",
                name="NVIDIA H100 80GB HBM3",
                pci_bus_id="00000000:18:00.0",
                memory_total_bytes=81559 * MIB,
                memory_used_bytes=20000 * MIB,
                utilization_gpu_percent=97.0,
                utilization_memory_percent=40.0,
                power_watts=612.5,
                power_limit_watts=700.0,
                temperature_celsius=66.0,
                sm_clock_mhz=1980,
                throttle_mask=0x4,
                ecc_uncorrected=0,
                remapped_rows=RemappedRows(correctable=2),
                processes=(ProcessSample(pid=1, used_memory_bytes=19000 * MIB, pod=pod),),
                xid_errors=xid,
            ),
            DeviceSample(
                index=1,
                uuid="GPU-bbb",
                name="NVIDIA H100 80GB HBM3",
                memory_total_bytes=81559 * MIB,
                memory_used_bytes=0,
            ),
        ),
    )


def observed(sample: NodeSample, *, dcgm_compat: bool = False) -> AgentMetrics:
    metrics = AgentMetrics(CollectorRegistry(), hostname="gpu-1", dcgm_compat=dcgm_compat)
    r = report.build(sample, node_name="gpu-1", sample_time=datetime(2026, 11, 13, tzinfo=UTC))
    metrics.observe_report(r, sample)
    metrics.samples.labels(backend="nvml").inc()
    metrics.report_writes.labels(result="ok").inc()
    metrics.report_skipped.inc()
    metrics.nvml_errors.labels(function="nvmlDeviceGetPowerUsage", error="Unknown").inc()
    metrics.sample_seconds.observe(0.002)
    return metrics


def test_own_names_values_types_and_labels_by_default() -> None:
    registry = observed(node_sample(xid=(79,))).registry
    got = scrape(registry)
    assert not [name for name in got if name.startswith("DCGM_")]  # no collision with the DCGM exporter
    labels, value = got["accel_agent_gpu_utilization_percent"][0]
    assert value == 97.0
    assert labels == {
        "gpu": "0",
        "uuid": "GPU-aaa",
        "device": "nvidia0",
        "pci_bus_id": "00000000:18:00.0",
        "model_name": "NVIDIA H100 80GB HBM3",
        "hostname": "gpu-1",
        "container": "trainer",
        "namespace": "ml",
        "pod": "train-0",
    }
    first = {name: samples[0][1] for name, samples in got.items() if samples}
    assert first["accel_agent_gpu_memory_used_bytes"] == 20000.0 * MIB
    assert first["accel_agent_gpu_memory_free_bytes"] == 61559.0 * MIB
    assert first["accel_agent_gpu_memory_total_bytes"] == 81559.0 * MIB
    assert first["accel_agent_gpu_power_watts"] == 612.5
    assert first["accel_agent_gpu_power_limit_watts"] == 700.0
    assert first["accel_agent_gpu_temperature_celsius"] == 66.0
    assert first["accel_agent_gpu_sm_clock_hertz"] == 1980e6
    assert first["accel_agent_gpu_memory_utilization_percent"] == 40.0
    assert first["accel_agent_gpu_clock_throttle_reasons"] == 4.0
    assert first["accel_agent_gpu_ecc_uncorrectable_volatile_errors_total"] == 0.0
    assert first["accel_agent_gpu_remapped_rows_correctable_total"] == 2.0
    assert first["accel_agent_gpu_remapped_rows_uncorrectable_total"] == 0.0
    assert first["accel_agent_gpu_row_remap_failed"] == 0.0
    assert first["accel_agent_gpu_last_xid"] == 79.0
    assert first["accel_agent_device_healthy"] == 0.0  # XID 79 is a device fault
    # Types as the DCGM exporter gives the same figures: error counts are counters, the rest gauges.
    served = types(registry)
    for name in ("ecc_uncorrectable_volatile_errors", "remapped_rows_uncorrectable", "remapped_rows_correctable"):
        assert served[f"accel_agent_gpu_{name}_total"] == "counter"
    for name in ("utilization_percent", "memory_used_bytes", "row_remap_failed", "last_xid", "sm_clock_hertz"):
        assert served[f"accel_agent_gpu_{name}"] == "gauge"
    # the idle second device: no pod labels, no utilization series (not read)
    idle = next(labels for labels, _ in got["accel_agent_gpu_memory_used_bytes"] if labels["gpu"] == "1")
    assert (idle["pod"], idle["namespace"], idle["container"]) == ("", "", "")
    assert [labels["gpu"] for labels, _ in got["accel_agent_gpu_utilization_percent"]] == ["0"]


def test_a_device_known_only_by_its_allocation_is_labelled_with_that_pod() -> None:
    """Without the pod list a process carries only its pod's UID; the kubelet's allocation names it."""
    holder = PodRef(namespace="ml", name="train-0", container="trainer")
    device = DeviceSample(
        index=0,
        uuid="GPU-aaa",
        utilization_gpu_percent=50.0,
        allocated_pods=(holder,),
        processes=(ProcessSample(pid=7, pod_uid="1f6c2a4e-93b5-4d7e-8c11-0a2b3c4d5e6f"),),
    )
    got = scrape(observed(NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, devices=(device,))).registry)
    ((labels, _),) = got["accel_agent_gpu_utilization_percent"]
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("ml", "train-0", "trainer")


def test_dcgm_compat_adds_the_dcgm_exporters_names_units_types_and_labels() -> None:
    registry = observed(node_sample(xid=(79,)), dcgm_compat=True).registry
    got = scrape(registry)
    labels, value = got["DCGM_FI_DEV_GPU_UTIL"][0]
    assert value == 97.0
    assert labels == {
        "gpu": "0",
        "UUID": "GPU-aaa",
        "device": "nvidia0",
        "pci_bus_id": "00000000:18:00.0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "gpu-1",
        "container": "trainer",
        "namespace": "ml",
        "pod": "train-0",
    }
    first = {name: samples[0][1] for name, samples in got.items() if samples}
    assert first["DCGM_FI_DEV_FB_USED"] == 20000.0  # MiB, as DCGM
    assert first["DCGM_FI_DEV_FB_FREE"] == 61559.0
    assert first["DCGM_FI_DEV_FB_TOTAL"] == 81559.0
    assert first["DCGM_FI_DEV_POWER_USAGE"] == 612.5
    assert first["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 700.0
    assert first["DCGM_FI_DEV_GPU_TEMP"] == 66.0
    assert first["DCGM_FI_DEV_SM_CLOCK"] == 1980.0  # MHz, as DCGM
    assert first["DCGM_FI_DEV_MEM_COPY_UTIL"] == 40.0
    assert first["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 4.0
    assert first["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0.0
    assert first["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 2.0
    assert first["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 0.0
    assert first["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0.0
    assert first["DCGM_FI_DEV_XID_ERRORS"] == 79.0
    assert first["accel_agent_gpu_utilization_percent"] == 97.0  # the own names stay (the dashboard's)
    # The DCGM exporter's types, with headers named as its samples (its counters have no _total).
    served = types(registry)
    for name in ("ECC_DBE_VOL_TOTAL", "UNCORRECTABLE_REMAPPED_ROWS", "CORRECTABLE_REMAPPED_ROWS"):
        assert served[f"DCGM_FI_DEV_{name}"] == "counter"
    for name in ("GPU_UTIL", "FB_USED", "XID_ERRORS", "ROW_REMAP_FAILURE", "SM_CLOCK", "CLOCK_THROTTLE_REASONS"):
        assert served[f"DCGM_FI_DEV_{name}"] == "gauge"
    assert not [n for n in served if n.startswith("DCGM_") and n.endswith("_total")]


def test_agent_metrics() -> None:
    got = scrape(observed(node_sample()).registry)
    single = {name: samples[0] for name, samples in got.items() if samples}
    assert single["accel_agent_samples_total"] == ({"backend": "nvml"}, 1.0)
    assert single["accel_agent_report_writes_total"] == ({"result": "ok"}, 1.0)
    assert single["accel_agent_report_skipped_total"][1] == 1.0
    assert single["accel_agent_nvml_errors_total"] == ({"function": "nvmlDeviceGetPowerUsage", "error": "Unknown"}, 1.0)
    assert single["accel_agent_sample_seconds_count"][1] == 1.0
    assert single["accel_agent_node_healthy"][1] == 1.0
    assert single["accel_agent_free_devices"][1] == 1.0
    assert single["accel_agent_devices"][1] == 2.0
    assert single["accel_agent_stranded_memory_bytes"][1] == float(61559 * MIB)


def test_vanished_devices_leave_no_series() -> None:
    metrics = observed(node_sample())
    empty = NodeSample(AgentBackend.NVML, AcceleratorKind.GPU, available=False, problems=("driver gone",))
    metrics.observe_report(
        report.build(empty, node_name="gpu-1", sample_time=datetime(2026, 11, 13, tzinfo=UTC)), empty
    )
    got = scrape(metrics.registry)
    assert "accel_agent_gpu_utilization_percent" not in got
    assert got["accel_agent_node_healthy"][0][1] == 0.0


def test_xid_series_only_where_nvml_can_tell() -> None:
    sim = NodeSample(AgentBackend.SIMULATED, AcceleratorKind.GPU, devices=(DeviceSample(index=0),))
    metrics = AgentMetrics(CollectorRegistry(), hostname="n", dcgm_compat=True)
    metrics.observe_report(report.build(sim, node_name="n", sample_time=datetime(2026, 11, 13, tzinfo=UTC)), sim)
    got = scrape(metrics.registry)
    assert "accel_agent_gpu_last_xid" not in got and "DCGM_FI_DEV_XID_ERRORS" not in got


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_http_endpoints() -> None:
    now = [0.0]
    loop = LoopHealth(15.0, monotonic=lambda: now[0])
    metrics = observed(node_sample())
    server = serve(metrics.registry, loop, port=0, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(base + "/readyz")[0] == 503  # no pass yet
        assert get(base + "/healthz")[0] == 200
        loop.pass_done()
        assert get(base + "/readyz") == (200, "ok\n")
        status, body = get(base + "/metrics")
        assert status == 200 and "accel_agent_gpu_utilization_percent{" in body and "accel_agent_samples_total" in body
        now[0] = 100.0  # more than 3 intervals without a pass: not ready, still live
        assert get(base + "/readyz")[0] == 503 and get(base + "/healthz")[0] == 200
        now[0] = 1000.0  # stuck: not live
        assert get(base + "/healthz")[0] == 503
        assert get(base + "/nothing")[0] == 404
    finally:
        server.stop()
