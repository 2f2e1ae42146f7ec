"""AcceleratorPolicy: the platform team's rules, enforced at admission (cluster-scoped).

Spot jobs must checkpoint often enough to an allowed place; teams have budgets per period;
teams may use only the pools granted to them. Several policies combine: every rule applies.
"""

from typing import Annotated, Literal

from pydantic import Field

from accel_api import vocabulary
from accel_api.base import ApiModel, Condition, ObjectMeta
from accel_api.enums import BudgetPeriod

CheckpointScheme = Literal["s3", "pvc"]


def _all_schemes() -> list[CheckpointScheme]:
    return ["s3", "pvc"]


class SpotRules(ApiModel):
    require_checkpoint: bool = True
    max_checkpoint_interval_minutes: Annotated[float, Field(gt=0)] | None = 60.0
    allowed_checkpoint_schemes: list[CheckpointScheme] = Field(default_factory=_all_schemes)


class Budget(ApiModel):
    team: str = Field(min_length=1)
    period: BudgetPeriod = BudgetPeriod.MONTHLY
    limit_usd: Annotated[float, Field(gt=0)]
    include_lost_work: bool = Field(default=True, description="Count preemption waste against the budget.")


class PoolAccess(ApiModel):
    teams: list[str] = Field(min_length=1, description="Team names, or * for every team.")
    pools: list[str] = Field(min_length=1, description="AcceleratorPool names, or * for all.")


class AcceleratorPolicySpec(ApiModel):
    spot: SpotRules = Field(default_factory=SpotRules)
    budgets: list[Budget] = Field(default_factory=list)
    pool_access: list[PoolAccess] = Field(default_factory=list, description="Empty: every team may use every pool.")
    max_devices_per_job: Annotated[int, Field(ge=1)] | None = None


class TeamSpend(ApiModel):
    team: str
    period: BudgetPeriod
    spent_usd: float
    limit_usd: float


class AcceleratorPolicyStatus(ApiModel):
    conditions: list[Condition] = Field(default_factory=list)
    spend: list[TeamSpend] = Field(default_factory=list)
    observed_generation: int | None = None


class AcceleratorPolicy(ApiModel):
    """Cluster-scoped; short name ``apol``."""

    api_version: Literal["accel.dev/v1alpha1"] = vocabulary.API_VERSION  # type: ignore[assignment]
    kind: Literal["AcceleratorPolicy"] = "AcceleratorPolicy"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AcceleratorPolicySpec = Field(default_factory=AcceleratorPolicySpec)
    status: AcceleratorPolicyStatus | None = None
