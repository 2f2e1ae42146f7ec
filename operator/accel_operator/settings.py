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
    cost_interval_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="How often the cost ledger accrues (leader only)."
    )
    cost_write_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="A running job's status.cost is written at most this often (at once when an attempt starts "
        "or ends or a budget is crossed); team spending and metrics follow every accrual.",
    )
    aws_region: str = Field(
        default="", max_length=32, description="Live EC2 spot prices for `price.source: live` pools; empty: off."
    )
    gcp_project: str = Field(
        default="", max_length=64, description="TPU types per zone for `price.source: live` TPU pools; empty: off."
    )
    tpu_endpoint: str = Field(default="", max_length=256, description="The TPU API endpoint; empty: Google's.")
    price_ttl_seconds: float = Field(default=300.0, gt=0, le=86_400, description="How long a live price is kept.")
