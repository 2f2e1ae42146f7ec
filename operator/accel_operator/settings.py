"""The operator's settings: one class, read once from ACCEL_OPERATOR_* variables, passed in."""

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ACCEL_OPERATOR_", frozen=True)

    namespaces: list[str] = Field(default_factory=list, description="Watch these namespaces; empty: all.")
    catalog: Path | None = Field(default=None, description="An accelerator catalog YAML overriding the built-in one.")
    liveness_port: int = Field(default=8081, ge=0, le=65535)
    resync_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="The safety net: every job is decided again this often even without an event.",
    )
    bind_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        le=86_400,
        description="Fixed pools: an admitted gang whose pods do not all get a node this long is released.",
    )
    log_format: Literal["text", "json"] = Field(default="text", description="text for people, json for pipelines.")
    api_threads: int = Field(
        default=16,
        ge=1,
        le=128,
        description="Threads (and pooled connections) for the API calls that apply decisions: status patches, "
        "workloads, events.",
    )
    metrics_port: int = Field(default=8080, ge=0, le=65535, description="Prometheus /metrics; 0: off.")
    metrics_address: str = Field(default="0.0.0.0", max_length=64, description="Bind address of /metrics.")
    lease: str = Field(
        default="",
        max_length=63,
        description="A coordination.k8s.io Lease in lease_namespace that elects one active replica; empty: "
        "this process acts alone (one replica, or tests).",
    )
    lease_namespace: str = Field(default="accel-system", max_length=63)
    lease_seconds: float = Field(default=15.0, ge=3, le=300, description="How long a leader's Lease holds.")
    # Spot recovery (README, "The checkpoint contract"): where S3 checkpoints are read, how long a
    # lookup may take, and the window after which a spot job falls back to on-demand pools.
    s3_endpoint_url: str | None = Field(
        default=None, max_length=256, description="S3 endpoint for checkpoint lookups; empty: AWS's own."
    )
    s3_region: str | None = Field(default=None, max_length=64, description="Region of the checkpoint buckets.")
    checkpoint_lookup_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300, description="One lookup of a job's latest complete checkpoint, at most."
    )
    spot_fallback_preemptions: int = Field(
        default=3,
        ge=0,
        le=16,
        description="A spot.policy prefer job preempted this often within the window falls back to on-demand; 0: off.",
    )
    spot_fallback_window_seconds: float = Field(default=3600.0, gt=0, le=7 * 86_400)
