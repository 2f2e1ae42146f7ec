"""Wiring: settings → backend, pod mapper, sink, metrics → :class:`~accel_agent.loop.Agent`.

:func:`build_agent` is what the CLI calls and what the cluster test calls with its own
``ApiClient``; every piece can also be passed in ready-made.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector

from accel_agent import health, kube, podmap, report
from accel_agent.backends import GpuBackend
from accel_agent.backends.nvml import NvmlBackend, load_pynvml
from accel_agent.backends.simulated import SimulatedBackend
from accel_agent.backends.tpu import TpuBackend, local_chips
from accel_agent.loop import Agent, Clock, PassResult
from accel_agent.metrics import AgentMetrics
from accel_agent.server import LoopHealth
from accel_agent.settings import AgentSettings, BackendChoice
from accel_agent.sink import InMemoryReportSink, KubernetesReportSink, ReportSink
from accel_api import vocabulary

log = logging.getLogger(__name__)


def node_name(settings: AgentSettings) -> str:
    return settings.node_name or socket.gethostname()


def _nvml_loads() -> bool:
    pynvml = load_pynvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def choose_backend(settings: AgentSettings, view: kube.ClusterView | None) -> BackendChoice:
    """``auto``: NVML where it loads; TPU where the host or the node shows TPU chips; else NVML,
    which then reports the node unhealthy with the reason (better than reporting nothing)."""
    if settings.backend is not BackendChoice.AUTO:
        return settings.backend
    if _nvml_loads():
        return BackendChoice.NVML
    if local_chips(settings.dev_root) > 0:
        return BackendChoice.TPU
    if view is not None:
        try:
            node = view.node(node_name(settings))
        except kube.KubeError:
            node = None
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        if node and (
            kube.allocatable(node, vocabulary.RESOURCE_GOOGLE_TPU) or vocabulary.LABEL_TPU_ACCELERATOR in labels
        ):
            return BackendChoice.TPU
    return BackendChoice.NVML


def make_backend(settings: AgentSettings, view: kube.ClusterView | None) -> GpuBackend:
    choice = choose_backend(settings, view)
    if choice is BackendChoice.FAKE:
        from accel_agent.backends.fake import FakeNvml  # pynvml's error classes; dev machines have it

        return NvmlBackend(FakeNvml.h100(8), xid_events=settings.xid_events)
    if choice is BackendChoice.SIMULATED:
        if view is None:
            raise ValueError("the simulated backend reads pods from the Kubernetes API: give it access")
        return SimulatedBackend(view, node_name(settings))
    if choice is BackendChoice.TPU:
        # Without the pod list, the chips pods hold come from the kubelet's pod-resources API (podmap).
        return TpuBackend(node_name(settings), view=view, dev_root=settings.dev_root, list_pods=settings.pod_list)
    return NvmlBackend(xid_events=settings.xid_events)


def _process_registry() -> CollectorRegistry:
    """A fresh registry with the process_* metrics (CPU, memory) of the agent itself."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


class _NodeUid:
    """The Node's UID for the report's owner reference, read once and kept."""

    def __init__(self, view: kube.ClusterView, name: str) -> None:
        self._view, self._name, self._uid = view, name, None

    def __call__(self) -> str | None:
        if self._uid is None:
            node = self._view.node(self._name)
            self._uid = ((node or {}).get("metadata") or {}).get("uid")
        return self._uid


def build_agent(
    settings: AgentSettings,
    *,
    api_client: Any | None = None,
    view: kube.ClusterView | None = None,
    sink: ReportSink | None = None,
    backend: GpuBackend | None = None,
    registry: CollectorRegistry | None = None,
    clock: Clock | None = None,
    loop_health: LoopHealth | None = None,
) -> Agent:
    """An agent assembled from ``settings``. With Kubernetes in use (daemon mode, or
    ``settings.kubernetes``), ``api_client`` defaults to in-cluster/kubeconfig; local runs
    (``--once``/``--loop-seconds``) write to an in-memory sink unless ``sink`` is given."""
    name = node_name(settings)
    if settings.uses_kubernetes and (view is None or (sink is None and not settings.local_run)):
        api_client = api_client if api_client is not None else kube.load_api_client(settings.kubeconfig)
        view = view if view is not None else kube.KubeClusterView(api_client)
        if sink is None and not settings.local_run:
            sink = KubernetesReportSink.from_api_client(api_client)
    # Pods are listed only when asked for (settings.pod_list): by default the agent holds no pod
    # permission, and processes carry their pod's UID for the operator to name.
    pods = None
    if view is not None and settings.pod_list:
        pods = podmap.PodIndex(view, name, min_refresh_seconds=settings.pod_refresh_seconds)
    mapper = podmap.PodMapper(
        proc_root=settings.proc_root,
        pods=pods,
        allocations=podmap.PodResourcesClient(Path(settings.pod_resources_socket)),
    )
    return Agent(
        node_name=name,
        backend=backend if backend is not None else make_backend(settings, view),
        sink=sink if sink is not None else InMemoryReportSink(),
        metrics=AgentMetrics(
            registry if registry is not None else _process_registry(), hostname=name, dcgm_compat=settings.dcgm_compat
        ),
        mapper=mapper,
        clock=clock,
        interval_seconds=settings.interval_seconds,
        heartbeat_seconds=settings.heartbeat_seconds,
        thresholds=report.ChangeThresholds(
            utilization_points=settings.utilization_change_points,
            memory_fraction=settings.memory_change_fraction,
            memory_min_bytes=settings.memory_change_min_bytes,
        ),
        policy=health.HealthPolicy(free_memory_fraction=settings.free_memory_fraction),
        node_uid=_NodeUid(view, name) if view is not None and not settings.local_run else None,
        loop_health=loop_health,
    )


def run_cluster_pass(
    api_client: Any, *, node_name: str, backend: BackendChoice = BackendChoice.SIMULATED, **overrides: Any
) -> PassResult:
    """One pass of the real loop against a cluster, writing the report: the cluster test's entry.

    ``overrides`` are further :class:`AgentSettings` fields (e.g. ``heartbeat_seconds``, or
    ``pod_list=True``, which the simulated backend needs).
    """
    settings = AgentSettings(node_name=node_name, backend=backend, kubernetes=True, **overrides)
    agent = build_agent(settings, api_client=api_client)
    try:
        return agent.run_once()
    finally:
        agent.close()
