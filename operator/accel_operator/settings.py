"""The operator's settings: one class, read once from ACCEL_OPERATOR_* variables, passed in."""

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ACCEL_OPERATOR_", frozen=True)

    namespaces: list[str] = Field(default_factory=list, description="Watch these namespaces; empty: all.")
    catalog: Path | None = Field(default=None, description="An accelerator catalog YAML overriding the built-in one.")
    liveness_port: int = Field(default=8081, ge=0, le=65535)
    replan_seconds: float = Field(
        default=60.0, gt=0, description="How often Pending/Unschedulable jobs are planned again (pools change)."
    )
