"""Outside text in the agent's logs is bounded and stays on one line."""

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from accel_agent import kube, logtext, podmap
from accel_agent.backends.fake import FakeNvml, FakeProcess
from accel_agent.backends.nvml import NvmlBackend
from accel_agent.loop import Agent, ManualClock
from accel_agent.metrics import AgentMetrics
from accel_agent.sink import InMemoryReportSink, SinkError
from accel_api.nodereport import AcceleratorNodeReport


@pytest.mark.parametrize(
    ("value", "limit", "expected"),
    [
        ("train-0", 120, "train-0"),
        ("a" * 10, 10, "a" * 10),
        ("a" * 11, 10, "a" * 10 + "…(+1 chars)"),
        ("ml/train-0\nFAKE 2026 INFO root: all good", 120, "ml/train-0\\nFAKE 2026 INFO root: all good"),
        ("tab\there\r\x1b[31m", 120, "tab\\there\\r\\x1b[31m"),
        (ValueError("x" * 300), 5, "xxxxx…(+295 chars)"),
    ],
)
def test_shorten(value: object, limit: int, expected: str) -> None:
    assert logtext.shorten(value, limit) == expected


def test_shorten_keeps_log_lines_bounded() -> None:
    out = logtext.shorten("\n" * 100_000)
    assert "\n" not in out and len(out) < 2 * logtext.DEFAULT_LIMIT + 20


ANNOTATION = "accel.dev/tenant-note=" + "secret-looking-tenant-value " * 2000  # ~56 KB, as an API error could echo


class _FailingSink(InMemoryReportSink):
    def write(self, report: AcceleratorNodeReport) -> None:
        raise SinkError("patch status of the node report failed: HTTP 422 " + ANNOTATION, retryable=False)


def test_the_loop_logs_api_errors_shortened(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text("0::/kubepods/pod0b6f1c2e-9d3a-4c5b-8e7f-1a2b3c4d5e6f/" + "c" * 64 + "\n")
    nvml = FakeNvml.h100(1)
    nvml.devices[0].processes.append(FakeProcess(pid=77))
    view = kube.StaticClusterView(fail_next=kube.KubeError("listing pods on gpu-1: " + ANNOTATION + "\nINFO forged"))
    agent = Agent(
        node_name="gpu-1",
        backend=NvmlBackend(nvml, xid_events=False),
        sink=_FailingSink(),
        metrics=AgentMetrics(CollectorRegistry(), hostname="gpu-1"),
        mapper=podmap.PodMapper(proc_root=tmp_path, pods=podmap.PodIndex(view, "gpu-1")),
        clock=clock,
        interval_seconds=15,
        heartbeat_seconds=300,
    )
    with caplog.at_level(logging.WARNING):
        agent.run_once()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("pods not mapped this pass: listing pods on gpu-1") for m in messages), messages
    assert any(m.startswith("report not written (check RBAC/CRD)") for m in messages), messages
    assert all(len(m) < 400 and "\n" not in m for m in messages), [len(m) for m in messages]
