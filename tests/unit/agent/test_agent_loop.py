"""The loop end to end on the fake NVML: writes, skips, heartbeats, retries; the CLI; settings."""

import json
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from accel_agent import cli
from accel_agent.backends.fake import FakeNvml, FakeProcess
from accel_agent.backends.nvml import NvmlBackend
from accel_agent.loop import Agent, ManualClock, run_local
from accel_agent.metrics import AgentMetrics
from accel_agent.settings import AgentSettings, BackendChoice
from accel_agent.sink import InMemoryReportSink, SinkError
from accel_api.nodereport import AcceleratorNodeReport

GIB = 1 << 30


def make_agent(nvml: FakeNvml, clock: ManualClock, sink: InMemoryReportSink | None = None) -> Agent:
    return Agent(
        node_name="gpu-1",
        backend=NvmlBackend(nvml),
        sink=sink or InMemoryReportSink(),
        metrics=AgentMetrics(CollectorRegistry(), hostname="gpu-1"),
        clock=clock,
        interval_seconds=15,
        heartbeat_seconds=300,
    )


def metric(agent: Agent, name: str, **labels: str) -> float:
    value = agent.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_writes_only_on_change_or_heartbeat(nvml: FakeNvml, clock: ManualClock) -> None:
    sink = InMemoryReportSink()
    agent = make_agent(nvml, clock, sink)
    steps: list[tuple[str, bool]] = []

    def step(label: str) -> None:
        result = agent.run_once()
        steps.append((label, result.written))
        clock.advance(15)

    step("first pass")
    for i in range(5):
        nvml.devices[0].util_gpu = i  # drifts by less than 10 points
        step(f"quiet {i}")
    nvml.devices[0].util_gpu = 50
    step("utilization jump")
    nvml.devices[1].processes = [FakeProcess(7, 2 * GIB)]
    step("a process starts")
    for i in range(19):  # 15 s apart: the last one 285 s after the last write
        step(f"quiet again {i}")
    step("heartbeat")  # 300 s after the last write
    assert [label for label, written in steps if written] == [
        "first pass",
        "utilization jump",
        "a process starts",
        "heartbeat",
    ]
    assert len(sink.writes) == 4
    assert metric(agent, "accel_agent_report_writes_total", result="ok") == 4
    assert metric(agent, "accel_agent_report_skipped_total") == len(steps) - 4
    assert metric(agent, "accel_agent_samples_total", backend="nvml") == len(steps)
    last = sink.get("gpu-1")
    assert last is not None and last.status is not None and last.status.heartbeat_time is not None


def test_drift_is_measured_from_the_last_written_report(nvml: FakeNvml, clock: ManualClock) -> None:
    agent = make_agent(nvml, clock)
    written = []
    for util in (0, 6, 12):  # 6 points per pass; 12 from the written baseline
        nvml.devices[0].util_gpu = util
        written.append(agent.run_once().written)
        clock.advance(15)
    assert written == [True, False, True]


def test_a_failed_write_is_retried_next_pass(nvml: FakeNvml, clock: ManualClock) -> None:
    sink = InMemoryReportSink()
    agent = make_agent(nvml, clock, sink)
    sink.next_error = SinkError("HTTP 503", retryable=True, status=503)
    first = agent.run_once()
    assert first.decision.write and not first.written and first.write_error == "HTTP 503"
    clock.advance(15)
    assert agent.run_once().written  # nothing changed, but nothing was written yet
    assert metric(agent, "accel_agent_report_writes_total", result="error") == 1


def test_library_missing_gives_an_unhealthy_report_not_a_crash(clock: ManualClock) -> None:
    nvml = FakeNvml.h100(1)
    nvml.library_missing = True
    sink = InMemoryReportSink()
    agent = make_agent(nvml, clock, sink)
    result = agent.run_once()
    assert result.written
    stored = sink.get("gpu-1")
    assert stored is not None and stored.status is not None
    assert not stored.status.healthy and "NVML library not found" in stored.status.problems[0]
    assert metric(agent, "accel_agent_node_healthy") == 0.0
    # the driver appears later: the agent recovers by itself
    nvml.library_missing = False
    clock.advance(15)
    recovered = agent.run_once()
    assert recovered.written and recovered.report.status is not None and recovered.report.status.healthy


def test_run_forever_stops_when_told(nvml: FakeNvml) -> None:
    agent = make_agent(nvml, ManualClock())
    agent.interval_seconds = 0.01
    stop = threading.Event()
    thread = threading.Thread(target=agent.run_forever, args=(stop,))
    thread.start()
    while metric(agent, "accel_agent_samples_total", backend="nvml") < 3:
        stop.wait(0.01)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_run_local_statistics(nvml: FakeNvml) -> None:
    agent = make_agent(nvml, ManualClock())
    agent.interval_seconds = 0.02
    nvml.devices[1].unsupported.add("nvmlDeviceGetPowerUsage")
    last, stats = run_local(agent, seconds=0.1)
    assert stats["samples"] >= 3 and last.report.status is not None
    assert stats["not_supported_calls"] == ["nvmlDeviceGetPowerUsage"]
    assert stats["not_supported_fields"] == ["powerWatts"]
    assert stats["writes"] == 1 and stats["skipped"] == stats["samples"] - 1
    assert set(stats["cpu_seconds_per_sample"]) == {"mean", "p50", "min", "max"}
    assert stats["calls_per_sample"]["mean"] > 10


# --- the command line -----------------------------------------------------------------------------
def test_cli_once_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert cli.main(["--once", "--backend", "fake", "--node-name", "gpu-7", "--output", str(out)]) == 0
    r = AcceleratorNodeReport.model_validate(json.loads(out.read_text()))
    assert r.metadata.name == "gpu-7" and r.status is not None and len(r.status.devices) == 8
    assert r.status.heartbeat_time is not None


def test_cli_loop_writes_report_and_stats(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = [
        "--loop-seconds",
        "0.2",
        "--interval",
        "0.05",
        "--backend",
        "fake",
        "--node-name",
        "n",
        "--output",
        str(out),
    ]
    assert cli.main(args) == 0
    stats = json.loads((tmp_path / "r-stats.json").read_text())
    assert stats["samples"] >= 2 and stats["devices"] == 8 and stats["healthy"] is True


def test_cli_without_nvml_reports_unhealthy(tmp_path: Path) -> None:
    # The real pynvml on a machine without an NVIDIA driver (this one, and CI's).
    out = tmp_path / "r.json"
    base = ["--once", "--backend", "nvml", "--node-name", "n", "--output", str(out)]
    assert cli.main(base) == 0  # an unhealthy node is still a report
    assert cli.main([*base, "--fail-unhealthy"]) == 3
    status = json.loads(out.read_text())["status"]
    assert status["healthy"] is False and "NVML" in status["problems"][0], status["problems"]


def test_cli_rejects_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--once", "--backend", "fake", "--interval", "30", "--heartbeat", "10"]) == 2
    assert "heartbeat_seconds" in capsys.readouterr().err


def test_cli_simulated_needs_the_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["--once", "--backend", "simulated", "--pod-list", "--node-name", "n"]) == 2


def test_cli_simulated_needs_the_pod_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--once", "--backend", "simulated", "--node-name", "n"]) == 2
    assert "pod_list" in capsys.readouterr().err


# --- settings ------------------------------------------------------------------------------------
def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-downward-api")
    monkeypatch.setenv("ACCEL_AGENT_INTERVAL_SECONDS", "5")
    monkeypatch.setenv("ACCEL_AGENT_BACKEND", "simulated")
    monkeypatch.setenv("ACCEL_AGENT_POD_LIST", "true")
    monkeypatch.setenv("ACCEL_AGENT_PORT", "9500")
    s = AgentSettings()
    assert (s.node_name, s.interval_seconds, s.backend, s.port) == (
        "from-downward-api",
        5.0,
        BackendChoice.SIMULATED,
        9500,
    )
    assert s.heartbeat_seconds == 300 and s.uses_kubernetes  # a daemon uses the API


@pytest.mark.parametrize(
    ("kw", "uses_kubernetes"),
    [
        ({}, True),
        ({"once": True}, False),
        ({"loop_seconds": 20}, False),
        ({"once": True, "backend": "simulated", "pod_list": True}, True),
        ({"once": True, "kubernetes": True}, True),
        ({"kubernetes": False}, False),
    ],
)
def test_when_the_api_is_used(kw: dict[str, object], uses_kubernetes: bool) -> None:
    assert AgentSettings(**kw).uses_kubernetes is uses_kubernetes  # type: ignore[arg-type]


def test_settings_explicit_name_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "env")
    assert AgentSettings(node_name="arg").node_name == "arg"
