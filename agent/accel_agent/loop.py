"""The sampling loop: sample → map pods → build report → decide → write → metrics.

:class:`Agent` holds the pieces (all injected, so tests and the cluster test assemble their own)
and runs one pass with :meth:`Agent.run_once`; :meth:`Agent.run_forever` repeats it every interval
until told to stop; :func:`run_local` repeats it for a fixed time and returns timing statistics
(the ``--loop-seconds`` mode that is run on a real GPU). A pass never raises for device or API
trouble: the backend reports device trouble, and a failed write is counted, logged and retried on
the next pass (the last *written* report stays the baseline for change detection).
"""

from __future__ import annotations

import logging
import platform
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from accel_agent import health, kube, logtext, report
from accel_agent.backends import GpuBackend, NodeSample
from accel_agent.metrics import AgentMetrics
from accel_agent.podmap import PodMapper
from accel_agent.report import WriteDecision
from accel_agent.server import LoopHealth
from accel_agent.sink import ReportSink, SinkError
from accel_api.nodereport import AcceleratorNodeReport

log = logging.getLogger(__name__)


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told (``advance``): for tests and reproducible runs."""

    def __init__(self, start: datetime | None = None) -> None:
        self.mono = 1000.0
        self.wall = start or datetime(2026, 1, 1, tzinfo=UTC)

    def monotonic(self) -> float:
        return self.mono

    def now(self) -> datetime:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)


@dataclass(frozen=True)
class PassResult:
    sample: NodeSample
    report: AcceleratorNodeReport  # as built this pass (heartbeatTime set only when written)
    decision: WriteDecision
    written: bool
    write_error: str | None
    wall_seconds: float
    cpu_seconds: float


class Agent:
    def __init__(
        self,
        *,
        node_name: str,
        backend: GpuBackend,
        sink: ReportSink,
        metrics: AgentMetrics,
        mapper: PodMapper | None = None,
        clock: Clock | None = None,
        interval_seconds: float = 15.0,
        heartbeat_seconds: float = 300.0,
        thresholds: report.ChangeThresholds | None = None,
        policy: health.HealthPolicy = health.DEFAULT_POLICY,
        node_uid: Callable[[], str | None] | None = None,
        loop_health: LoopHealth | None = None,
    ) -> None:
        self.node_name = node_name
        self.backend = backend
        self.sink = sink
        self.metrics = metrics
        self.mapper = mapper
        self.clock = clock or SystemClock()
        self.interval_seconds = interval_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.thresholds = thresholds or report.ChangeThresholds()
        self.policy = policy
        self.loop_health = loop_health or LoopHealth(interval_seconds)
        self._node_uid = node_uid
        self.last_written: AcceleratorNodeReport | None = None
        self._last_write_at: float | None = None

    def _map(self, sample: NodeSample) -> NodeSample:
        if self.mapper is None:
            return sample
        try:
            return self.mapper.apply(sample)
        except kube.KubeError as exc:
            log.warning("pods not mapped this pass: %s", logtext.shorten(exc))
            return sample

    def _uid(self) -> str | None:
        if self._node_uid is None:
            return None
        try:
            return self._node_uid()
        except kube.KubeError as exc:
            log.warning("node uid unknown this pass (no owner reference): %s", logtext.shorten(exc))
            return None

    def run_once(self) -> PassResult:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        sample = self._map(self.backend.sample())
        built = report.build(
            sample, node_name=self.node_name, sample_time=self.clock.now(), policy=self.policy, node_uid=self._uid()
        )
        since = None if self._last_write_at is None else self.clock.monotonic() - self._last_write_at
        decision = report.decide(
            self.last_written,
            built,
            seconds_since_write=since,
            heartbeat_seconds=self.heartbeat_seconds,
            thresholds=self.thresholds,
        )
        written, error = False, None
        if decision.write:
            stamped = report.stamp_heartbeat(built, self.clock.now())
            try:
                self.sink.write(stamped)
            except SinkError as exc:
                error = str(exc)
                self.metrics.report_writes.labels(result="error").inc()
                why = "will retry" if exc.retryable else "check RBAC/CRD"
                log.warning("report not written (%s): %s", why, logtext.shorten(exc))
            else:
                written = True
                self.last_written, self._last_write_at = stamped, self.clock.monotonic()
                self.metrics.report_writes.labels(result="ok").inc()
                self.metrics.last_write.set(time.time())
                log.info("report written: %s", "; ".join(decision.reasons))
        else:
            self.metrics.report_skipped.inc()
        for failed in sample.call_errors:
            self.metrics.nvml_errors.labels(function=failed.function, error=failed.error).inc()
        self.metrics.samples.labels(backend=sample.backend.value).inc()
        self.metrics.observe_report(built, sample)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        self.metrics.sample_seconds.observe(wall)
        self.loop_health.pass_done()
        return PassResult(sample, built, decision, written, error, wall, cpu)

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = self.clock.monotonic()
            self.run_once()
            stop.wait(max(0.0, self.interval_seconds - (self.clock.monotonic() - started)))

    def close(self) -> None:
        self.backend.close()


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "mean": statistics.fmean(values),
        "p50": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def run_local(
    agent: Agent, *, seconds: float, sleep: Callable[[float], None] = time.sleep
) -> tuple[PassResult, dict[str, Any]]:
    """Sample every interval for ``seconds`` (at least one pass); the last result and statistics."""
    results: list[PassResult] = []
    started = time.monotonic()
    while True:
        pass_started = time.monotonic()
        results.append(agent.run_once())
        elapsed = time.monotonic() - started
        if elapsed + agent.interval_seconds > seconds:
            break
        sleep(max(0.0, agent.interval_seconds - (time.monotonic() - pass_started)))
    last = results[-1]
    errors: Counter[str] = Counter(f"{e.function}: {e.error}" for r in results for e in r.sample.call_errors)
    status = last.report.status
    stats: dict[str, Any] = {
        "node": agent.node_name,
        "backend": last.sample.backend.value,
        "samples": len(results),
        "interval_seconds": agent.interval_seconds,
        "duration_seconds": round(time.monotonic() - started, 3),
        "cpu_seconds_per_sample": _summary([r.cpu_seconds for r in results]),
        "wall_seconds_per_sample": _summary([r.wall_seconds for r in results]),
        "first_sample_wall_seconds": results[0].wall_seconds,
        "calls_per_sample": _summary([float(r.sample.calls) for r in results]),
        "not_supported_calls": sorted({c for r in results for c in r.sample.unsupported_calls}),
        "not_supported_fields": sorted(
            {f for r in results for f in r.sample.not_supported}
            | {f for r in results for d in r.sample.devices for f in d.not_supported}
        ),
        "call_errors": dict(sorted(errors.items())),
        "writes": sum(1 for r in results if r.written),
        "skipped": sum(1 for r in results if not r.decision.write),
        "write_reasons": [list(r.decision.reasons) for r in results if r.decision.write],
        "devices": len(last.sample.devices),
        "processes": sum(len(d.processes) for d in last.sample.devices),
        "healthy": bool(status and status.healthy),
        "problems": list(status.problems) if status else [],
        "python": platform.python_version(),
        "agent_version": report.AGENT_VERSION,
    }
    return last, stats
