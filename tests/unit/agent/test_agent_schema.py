"""Every report the agent writes passes the generated CRD schema; the real-GPU report too."""

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from accel_agent import kube, report
from accel_agent.backends import DeviceSample, MigSample, NodeSample
from accel_agent.backends.fake import FakeMigInstance, FakeNvml, FakeProcess
from accel_agent.backends.nvml import NvmlBackend
from accel_agent.backends.simulated import SimulatedBackend
from accel_agent.backends.tpu import TpuBackend
from accel_api import crdgen, registry
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import AcceleratorNodeReport
from tests.support import structural

SCHEMA = crdgen.openapi_schema(registry.NODE_REPORT)
T0 = datetime(2026, 11, 13, 12, 0, tzinfo=UTC)
H100_REPORT = Path(__file__).resolve().parents[2] / "data" / "agent" / "h100-report.json"


def wire_of(sample: NodeSample) -> dict[str, Any]:
    r = report.build(sample, node_name="gpu-1", sample_time=T0, node_uid="uid-1")
    return report.stamp_heartbeat(r, T0).to_wire()


def busy_nvml() -> FakeNvml:
    nvml = FakeNvml.h100(3)
    nvml.devices[0].processes = [FakeProcess(10, 10 << 30), FakeProcess(11, None)]
    nvml.devices[0].util_gpu = 99
    nvml.devices[1].mig_mode = 1
    nvml.devices[1].mig_instances = [FakeMigInstance(1, "3g.40gb", 3, 40192)]
    nvml.devices[1].processes = [FakeProcess(12, 1 << 30, gpu_instance_id=1)]
    nvml.devices[2].ecc_uncorrected = 1
    nvml.devices[2].throttle_mask = 0x40 | 0x200
    nvml.devices[2].remapped_rows = (1, 1, 1, 1)
    nvml.devices[2].unsupported = {"nvmlDeviceGetPowerUsage"}
    return nvml


def simulated() -> NodeSample:
    node = {"metadata": {"name": "n", "uid": "u"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "pu"},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    return SimulatedBackend(kube.StaticClusterView(nodes={"n": node}, pods=[pod]), "n").sample()


def lost_after_removal() -> NodeSample:
    nvml = FakeNvml.h100(2)
    backend = NvmlBackend(nvml)
    backend.sample()
    nvml.remove_device(1)
    nvml.inject_xid(0, 79)
    return backend.sample()


def library_missing() -> NodeSample:
    nvml = FakeNvml.h100(1)
    nvml.library_missing = True
    return NvmlBackend(nvml).sample()


SAMPLES: dict[str, Callable[[], NodeSample]] = {
    "idle H100s": lambda: NvmlBackend(FakeNvml.h100(8)).sample(),
    "busy, MIG, faults, not supported": lambda: NvmlBackend(busy_nvml()).sample(),
    "device lost after removal": lost_after_removal,
    "NVML library missing": library_missing,
    "simulated": simulated,
    "TPU without the API": lambda: TpuBackend("t", view=None, dev_root=Path("/nonexistent")).sample(),
    "read errors": lambda: NodeSample(
        AgentBackend.NVML,
        AcceleratorKind.GPU,
        devices=(
            DeviceSample(
                index=0,
                errors=("powerWatts: x failed: NoPermission",),
                mig_enabled=True,
                mig_instances=(MigSample(1, "1g.10gb"),),
            ),
        ),
    ),
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_reports_pass_the_crd_schema(name: str) -> None:
    wire = wire_of(SAMPLES[name]())
    assert structural.validate(wire, SCHEMA) == []
    assert AcceleratorNodeReport.model_validate(wire).to_wire() == wire  # round trip


def test_the_validator_can_fail() -> None:
    wire = wire_of(SAMPLES["idle H100s"]())
    wire["status"]["devices"][0]["smClockMhz"] = "fast"
    wire["status"]["backend"] = "dcgm"
    wire["status"]["devices"][0]["surprise"] = 1
    problems = structural.validate(wire, SCHEMA)
    assert any("smClockMhz: expected integer" in p for p in problems)
    assert any("backend" in p and "not in" in p for p in problems)
    assert any("surprise: unknown field" in p for p in problems)


def test_the_report_model_has_what_the_agent_fills() -> None:
    """Fields the agent sets must exist in the model: a rename there fails here, not on a node."""
    wire = wire_of(SAMPLES["busy, MIG, faults, not supported"]())
    device = wire["status"]["devices"][0]
    for key in ("utilizationGpuPercent", "memoryUsedBytes", "processes", "throttleReasons", "remappedRows"):
        assert key in device


def _h100_report_path() -> Path:
    return Path(os.environ.get("ACCEL_AGENT_H100_REPORT", str(H100_REPORT)))


@pytest.mark.skipif(
    not _h100_report_path().exists(),
    reason=f"no real-GPU report at {H100_REPORT} yet: run agent/gpu_check/run.sh on an H100 and add "
    "$OUT/h100-report.json there (see agent/gpu_check/README.md)",
)
def test_the_real_h100_report() -> None:
    wire = json.loads(_h100_report_path().read_text())
    assert structural.validate(wire, SCHEMA) == []
    r = AcceleratorNodeReport.model_validate(wire)
    s = r.status
    assert s is not None and s.backend is AgentBackend.NVML and s.accelerator_kind is AcceleratorKind.GPU
    assert s.healthy, s.problems
    assert s.driver_version and s.cuda_driver_version
    assert s.devices, "the report has no devices"
    d = s.devices[0]
    assert d.name and ("H100" in d.name or "H200" in d.name)
    assert d.uuid and d.uuid.startswith("GPU-") and d.pci_bus_id
    assert d.memory_total_bytes and d.memory_total_bytes > 70 << 30
    # taken while a training loop ran: a process holding memory, the GPU busy
    assert d.processes and all(p.pid > 0 for p in d.processes)
    assert d.memory_used_bytes and d.memory_used_bytes > 1 << 30
    assert d.utilization_gpu_percent is not None and d.utilization_gpu_percent > 0
    assert d.power_watts and d.power_limit_watts and d.power_watts <= d.power_limit_watts * 1.1
    assert d.temperature_celsius and 10 < d.temperature_celsius < 100
    assert d.sm_clock_mhz and d.sm_clock_mhz > 0
    assert d.ecc_uncorrected == 0 and d.remapped_rows is not None and not d.remapped_rows.failed
    assert d.mig_enabled is False
    # what the calibration notes say this machine answers: none of the agent's fields unsupported
    assert d.not_supported == []
    assert s.fragmentation.total_devices == len(s.devices) and s.fragmentation.partially_used_devices >= 1
