"""The agent's one settings class: environment ``ACCEL_AGENT_*``, command-line flags on top.

Loaded once in :mod:`accel_agent.cli` and passed in; nothing else reads the environment. The node
name also comes from ``NODE_NAME``, which the DaemonSet sets from the downward API
(``spec.nodeName``).
"""

from enum import StrEnum
from pathlib import Path
from typing import Self

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class BackendChoice(StrEnum):
    AUTO = "auto"  # NVML where libnvidia-ml loads, else TPU where the node has TPU chips, else NVML (unhealthy)
    NVML = "nvml"
    SIMULATED = "simulated"  # KWOK nodes: devices follow the pods (needs the Kubernetes API)
    FAKE = "fake"  # the fake NVML with idle H100s: the agent end to end on a machine without GPU
    TPU = "tpu"


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ACCEL_AGENT_", frozen=True, extra="ignore", populate_by_name=True)

    node_name: str = Field(
        default="",
        validation_alias=AliasChoices("node_name", "ACCEL_AGENT_NODE_NAME", "NODE_NAME"),
        description="The node this agent reports on; empty: the host name.",
    )
    backend: BackendChoice = BackendChoice.NVML
    interval_seconds: float = Field(default=15.0, gt=0, description="Seconds between two samples.")
    heartbeat_seconds: float = Field(default=300.0, gt=0, description="Write at least this often, changed or not.")
    utilization_change_points: float = Field(default=10.0, ge=0)
    memory_change_fraction: float = Field(default=0.05, ge=0, le=1)
    memory_change_min_bytes: int = Field(default=1 << 30, ge=0)
    free_memory_fraction: float = Field(default=0.05, ge=0, le=1)
    port: int = Field(default=9402, ge=0, le=65535, description="Metrics and probes; 0 picks a free port.")
    bind_address: str = Field(
        default="0.0.0.0",
        description="Address the metrics port listens on ('::' for every IPv6 one).",
    )
    http_workers: int = Field(default=4, ge=1, le=64, description="Threads answering metrics and probe requests.")
    http_max_connections: int = Field(
        default=64, ge=1, le=4096, description="Connections held open waiting for a request; the oldest gives way."
    )
    http_idle_timeout_seconds: float = Field(
        default=10.0, gt=0, description="A connection without a complete request after this long is closed."
    )
    once: bool = False
    output: Path | None = None
    stats_output: Path | None = None
    loop_seconds: float | None = Field(default=None, gt=0)
    kubernetes: bool | None = Field(
        default=None, description="Use the API (pod names, node, report writes); None: only when running as a daemon."
    )
    kubeconfig: Path | None = None
    proc_root: Path = Path("/proc")
    dev_root: Path = Path("/dev")
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    pod_list: bool = Field(
        default=False,
        description="List the pods on this node (RBAC: list on pods, cluster-wide) to name processes' pods and "
        "to drive the simulated backend. Off: processes carry their pod's UID and the operator names the pod.",
    )
    pod_refresh_seconds: float = Field(default=30.0, ge=0)
    xid_events: bool = True
    dcgm_compat: bool = Field(
        default=False,
        description="Also export the device figures under the DCGM exporter's names (DCGM_FI_DEV_*), for "
        "clusters without it; never where it runs (the same series twice).",
    )
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _heartbeat_not_below_interval(self) -> Self:
        if self.heartbeat_seconds < self.interval_seconds:
            raise ValueError(
                f"heartbeat_seconds ({self.heartbeat_seconds}) must be >= interval_seconds ({self.interval_seconds})"
            )
        return self

    @model_validator(mode="after")
    def _simulated_needs_the_pod_list(self) -> Self:
        if self.backend is BackendChoice.SIMULATED and not self.pod_list:
            raise ValueError(
                "backend simulated decides which devices pods hold from the pods on the node: set pod_list "
                "(ACCEL_AGENT_POD_LIST=true or --pod-list) and grant the agent list on pods"
            )
        return self

    @property
    def local_run(self) -> bool:
        """``--once`` or ``--loop-seconds``: write files, not the API."""
        return self.once or self.loop_seconds is not None

    @property
    def uses_kubernetes(self) -> bool:
        if self.kubernetes is not None:
            return self.kubernetes
        return not self.local_run or self.backend is BackendChoice.SIMULATED
