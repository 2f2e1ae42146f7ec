"""The simulated (KWOK) and TPU backends over an in-memory cluster view, and the wiring."""

from pathlib import Path
from typing import Any

import pytest

from accel_agent import app, health, kube
from accel_agent.backends.simulated import (
    ANNOTATION_SIM_FAULTS,
    ANNOTATION_SIM_MEMORY_FRACTION,
    ANNOTATION_SIM_UTILIZATION,
    SimulatedBackend,
    parse_faults,
)
from accel_agent.backends.tpu import TpuBackend, local_chips
from accel_agent.settings import AgentSettings, BackendChoice
from accel_agent.sink import InMemoryReportSink
from accel_api.enums import AcceleratorKind, AgentBackend
from accel_api.nodereport import PodRef

MIB = 1 << 20


def gpu_node(name: str = "kwok-gpu-0", gpus: int = 8, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": "node-uid-1",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"},
            "annotations": annotations or {},
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}},
    }


def tpu_node(name: str = "kwok-tpu-0", chips: int = 4) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}},
        "status": {"allocatable": {"google.com/tpu": str(chips)}},
    }


def a_pod(
    name: str,
    gpus: int,
    *,
    node: str = "kwok-gpu-0",
    created: str = "2026-11-13T10:00:00Z",
    phase: str = "Running",
    resource: str = "nvidia.com/gpu",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": annotations or {},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": {resource: str(gpus)}}}]},
        "status": {"phase": phase},
    }


def test_simulated_devices_follow_the_pods() -> None:
    view = kube.StaticClusterView(
        nodes={"kwok-gpu-0": gpu_node()},
        pods=[
            a_pod("b", 2, created="2026-11-13T11:00:00Z", annotations={ANNOTATION_SIM_UTILIZATION: "40"}),
            a_pod("a", 4),
            a_pod("done", 2, phase="Succeeded"),
            a_pod("elsewhere", 8, node="kwok-gpu-1"),
        ],
    )
    s = SimulatedBackend(view, "kwok-gpu-0").sample()
    assert s.available and s.backend is AgentBackend.SIMULATED and s.accelerator_kind is AcceleratorKind.GPU
    assert len(s.devices) == 8
    held = [d.allocated_pods[0].name if d.allocated_pods else None for d in s.devices]
    assert held == ["a", "a", "a", "a", "b", "b", None, None]  # oldest pod first
    a0, b0, idle = s.devices[0], s.devices[4], s.devices[7]
    assert (a0.utilization_gpu_percent, b0.utilization_gpu_percent, idle.utilization_gpu_percent) == (90.0, 40.0, 0.0)
    assert a0.memory_total_bytes == 81559 * MIB and a0.memory_used_bytes == int(81559 * MIB * 0.75)
    assert idle.memory_used_bytes == 0 and idle.processes == ()
    assert a0.processes[0].pod == PodRef(namespace="ml", name="a", container="main")
    assert a0.name == "NVIDIA H100 80GB HBM3"
    assert a0.uuid != b0.uuid and a0.uuid == SimulatedBackend(view, "kwok-gpu-0").sample().devices[0].uuid
    frag = health.fragmentation(s.devices)
    assert (frag.free_devices, frag.partially_used_devices, frag.whole_node_available) == (2, 6, False)


def test_simulated_node_annotations_and_faults() -> None:
    notes = {ANNOTATION_SIM_MEMORY_FRACTION: "0.5", ANNOTATION_SIM_FAULTS: "0=ecc, 1=lost,2=thermal,3=xid79,x=junk"}
    view = kube.StaticClusterView(nodes={"n": gpu_node("n", 4, notes)}, pods=[a_pod("p", 4, node="n")])
    devices = SimulatedBackend(view, "n").sample().devices
    assert devices[0].memory_used_bytes == int(81559 * MIB * 0.5)
    problems = [health.device_problems(d) for d in devices]
    assert problems[0] == ["uncorrectable ECC errors since driver load: 1"]
    assert problems[1][0].startswith("device lost")
    assert problems[2] == ["throttled by HwThermalSlowdown"]
    assert problems[3] == ["XID 79: GPU has fallen off the bus"]


def test_parse_faults() -> None:
    assert parse_faults("1=ecc,3=lost, 1=xid48 ,bad,=x,2=") == {1: ["ecc", "xid48"], 3: ["lost"]}


@pytest.mark.parametrize(
    ("view", "problem"),
    [
        (kube.StaticClusterView(), "node kwok-gpu-0 not found"),
        (kube.StaticClusterView(fail_next=kube.KubeError("API down")), "API down"),
    ],
)
def test_simulated_without_its_node(view: kube.StaticClusterView, problem: str) -> None:
    s = SimulatedBackend(view, "kwok-gpu-0").sample()
    assert not s.available and s.problems == (problem,)


def test_simulated_tpu_node() -> None:
    view = kube.StaticClusterView(
        nodes={"kwok-tpu-0": tpu_node()}, pods=[a_pod("t", 4, node="kwok-tpu-0", resource="google.com/tpu")]
    )
    s = SimulatedBackend(view, "kwok-tpu-0").sample()
    assert s.accelerator_kind is AcceleratorKind.TPU and len(s.devices) == 4
    assert s.devices[0].memory_total_bytes == 16 << 30 and s.devices[0].uuid is not None
    assert s.devices[0].uuid.startswith("TPU-")


def test_simulated_tpu_of_unknown_type_has_free_chips() -> None:
    node = tpu_node()
    node["metadata"]["labels"] = {}
    s = SimulatedBackend(kube.StaticClusterView(nodes={"kwok-tpu-0": node}), "kwok-tpu-0").sample()
    assert s.devices[0].memory_total_bytes is None and "memoryUsedBytes" in s.devices[0].not_supported
    assert health.fragmentation(s.devices).free_devices == 4


def make_dev(tmp_path: Path, accel: int = 0, vfio: int = 0) -> Path:
    for i in range(accel):
        (tmp_path / f"accel{i}").touch()
    if vfio:
        (tmp_path / "vfio").mkdir()
        (tmp_path / "vfio" / "vfio").touch()  # the control node, not a chip
        for i in range(vfio):
            (tmp_path / "vfio" / str(i)).touch()
    return tmp_path


@pytest.mark.parametrize(("accel", "vfio", "chips"), [(0, 0, 0), (4, 0, 4), (0, 8, 8), (2, 8, 2)])
def test_local_tpu_chips(tmp_path: Path, accel: int, vfio: int, chips: int) -> None:
    assert local_chips(make_dev(tmp_path, accel, vfio)) == chips


def test_tpu_backend_from_the_node_and_the_host(tmp_path: Path) -> None:
    view = kube.StaticClusterView(
        nodes={"kwok-tpu-0": tpu_node()}, pods=[a_pod("t", 1, node="kwok-tpu-0", resource="google.com/tpu")]
    )
    s = TpuBackend("kwok-tpu-0", view=view, dev_root=make_dev(tmp_path, accel=4)).sample()
    assert s.available and s.backend is AgentBackend.TPU and s.accelerator_kind is AcceleratorKind.TPU
    assert len(s.devices) == 4 and not any(d.lost for d in s.devices)
    assert s.devices[0].utilization_gpu_percent is None and "utilizationGpuPercent" in s.devices[0].not_supported
    assert "utilizationGpuPercent" in s.not_supported
    assert s.devices[0].allocated_pods and not s.devices[1].allocated_pods
    assert health.fragmentation(s.devices).free_devices == 3


def test_tpu_backend_missing_chips_are_lost(tmp_path: Path) -> None:
    view = kube.StaticClusterView(nodes={"kwok-tpu-0": tpu_node(chips=4)})
    s = TpuBackend("kwok-tpu-0", view=view, dev_root=make_dev(tmp_path, accel=3)).sample()
    assert [d.lost for d in s.devices] == [False, False, False, True]


@pytest.mark.parametrize(("with_view", "accel"), [(False, 0), (True, 0)])
def test_tpu_backend_with_nothing_to_see(tmp_path: Path, with_view: bool, accel: int) -> None:
    view = kube.StaticClusterView(nodes={"n": {"metadata": {"name": "n"}}}) if with_view else None
    s = TpuBackend("n", view=view, dev_root=make_dev(tmp_path, accel=accel)).sample()
    assert not s.available and "no TPU chips" in s.problems[-1]


def test_tpu_backend_without_the_api_uses_the_host(tmp_path: Path) -> None:
    s = TpuBackend("n", view=None, dev_root=make_dev(tmp_path, accel=4)).sample()
    assert s.available and len(s.devices) == 4 and s.devices[0].name == "tpu"


# --- wiring ------------------------------------------------------------------------------------------
def test_build_agent_simulated_writes_through_the_sink() -> None:
    view = kube.StaticClusterView(nodes={"kwok-gpu-0": gpu_node()}, pods=[a_pod("a", 8)])
    sink = InMemoryReportSink()
    settings = AgentSettings(node_name="kwok-gpu-0", backend=BackendChoice.SIMULATED, pod_list=True)
    agent = app.build_agent(settings, view=view, sink=sink)
    result = agent.run_once()
    assert result.written
    stored = sink.get("kwok-gpu-0")
    assert stored is not None and stored.status is not None
    assert stored.status.fragmentation.free_devices == 0 and stored.status.backend is AgentBackend.SIMULATED
    owner = stored.metadata.model_dump(by_alias=True)["ownerReferences"][0]
    assert owner["uid"] == "node-uid-1"  # the report goes when the node goes
    assert stored.status.devices[0].processes[0].pod == PodRef(namespace="ml", name="a", container="main")


@pytest.mark.parametrize(
    ("choice", "backend"),
    [
        (BackendChoice.SIMULATED, AgentBackend.SIMULATED),
        (BackendChoice.TPU, AgentBackend.TPU),
        (BackendChoice.FAKE, AgentBackend.NVML),
        (BackendChoice.NVML, AgentBackend.NVML),
    ],
)
def test_make_backend(choice: BackendChoice, backend: AgentBackend) -> None:
    view = kube.StaticClusterView(nodes={"n": gpu_node("n")})
    assert app.make_backend(AgentSettings(node_name="n", backend=choice, pod_list=True), view).kind is backend


def test_the_simulated_backend_asks_for_the_pod_list_by_name() -> None:
    with pytest.raises(ValueError, match="ACCEL_AGENT_POD_LIST=true"):
        AgentSettings(node_name="n", backend=BackendChoice.SIMULATED)


def test_auto_picks_tpu_from_the_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(app, "_nvml_loads", lambda: False)
    settings = AgentSettings(node_name="t", backend=BackendChoice.AUTO, dev_root=tmp_path)
    assert app.choose_backend(settings, kube.StaticClusterView(nodes={"t": tpu_node("t")})) is BackendChoice.TPU
    assert app.choose_backend(settings, kube.StaticClusterView(nodes={"t": gpu_node("t")})) is BackendChoice.NVML
    monkeypatch.setattr(app, "_nvml_loads", lambda: True)
    assert app.choose_backend(settings, kube.StaticClusterView(nodes={"t": tpu_node("t")})) is BackendChoice.NVML
