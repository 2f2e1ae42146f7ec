"""AcceleratorPolicy: the platform team's rules, enforced at admission (cluster-scoped).

Spot jobs must checkpoint often enough to an allowed place; teams have budgets per period;
teams may use only the pools granted to them. Several policies combine: every rule applies.
"""

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from accel_api import bounds, errors, patterns, vocabulary
from accel_api.base import ApiModel, Conditions, ObjectMeta
from accel_api.enums import BudgetAction, BudgetPeriod, IdleAction

CheckpointScheme = Literal["s3", "pvc"]


def _all_schemes() -> list[CheckpointScheme]:
    return ["s3", "pvc"]


class SpotRules(ApiModel):
    require_checkpoint: bool = True
    max_checkpoint_interval_minutes: (
        Annotated[float, Field(ge=bounds.CHECKPOINT_MINUTES_MIN, le=bounds.CHECKPOINT_MINUTES_MAX)] | None
    ) = Field(default=60.0, description="1 to 10080 (a week).")
    allowed_checkpoint_schemes: list[CheckpointScheme] = Field(default_factory=_all_schemes, max_length=2)


Usd = Annotated[float, Field(gt=0, le=bounds.USD_MAX)]


class Budget(ApiModel):
    team: str = Field(min_length=1, max_length=bounds.DNS_LABEL_LENGTH)
    period: BudgetPeriod = BudgetPeriod.MONTHLY
    limit_usd: Usd = Field(description="USD per period, at most 1e9.")
    include_lost_work: bool = Field(default=True, description="Count preemption waste against the budget.")
    on_exhausted: BudgetAction = Field(
        default=BudgetAction.QUEUE,
        description="When the team has spent the budget: queue (accept; the job waits for the next period "
        "or a larger budget) or refuse (at admission, and the reconciler does not admit it).",
    )


class PoolAccess(ApiModel):
    teams: list[Annotated[str, Field(max_length=bounds.DNS_LABEL_LENGTH)]] = Field(
        min_length=1, max_length=bounds.POLICY_ITEMS, description="Team names, or * for every team."
    )
    pools: list[bounds.ObjectName] = Field(
        min_length=1, max_length=bounds.POLICY_ITEMS, description="AcceleratorPool names, or * for all."
    )


class IdleRules(ApiModel):
    """What happens to a running job whose devices sit near 0% (the node agents' reports)."""

    stop_after_minutes: Annotated[int, Field(ge=bounds.IDLE_MINUTES_MIN, le=bounds.IDLE_MINUTES_MAX)] = Field(
        default=120, description="Minutes of idle devices before the action; 5 to 43200 (30 days)."
    )
    action: IdleAction = Field(
        default=IdleAction.WARN,
        description="warn: a condition and an event. stop: the job is asked to checkpoint now, then its "
        "attempt ends and it is Stopped until a user sets the accel.dev/resume annotation.",
    )
    stop_without_checkpoint: bool = Field(
        default=False,
        description="Also stop a job that has no spec.checkpoint (its work is lost). Off: such a job "
        "only gets the warning.",
    )
    teams: list[Annotated[str, Field(min_length=1, max_length=bounds.DNS_LABEL_LENGTH)]] = Field(
        default_factory=list, max_length=bounds.POLICY_ITEMS, description="Teams it applies to; empty: every team."
    )


class AcceleratorPolicySpec(ApiModel):
    """Bounds: 256 budgets and access rules, 64 reserved names, at most 65536 devices per job."""

    spot: SpotRules = Field(default_factory=SpotRules)
    budgets: list[Budget] = Field(default_factory=list, max_length=bounds.POLICY_ITEMS)
    pool_access: list[PoolAccess] = Field(
        default_factory=list,
        max_length=bounds.POLICY_ITEMS,
        description="Empty: every team may use every pool.",
    )
    max_devices_per_job: Annotated[int, Field(ge=1, le=bounds.DEVICES)] | None = None
    idle: IdleRules | None = Field(default=None, description="Idle reservations: warn, or stop at a checkpoint.")
    reserved_env: list[Annotated[str, Field(min_length=1, max_length=bounds.ENV_NAME_LENGTH)]] = Field(
        default_factory=list,
        max_length=bounds.RESERVED_ENV_ITEMS,
        description="Environment variable names jobs may not set, besides the built-in ones "
        "(ACCEL_*, NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, LD_*, ...). NAME or PREFIX_*.",
    )

    @field_validator("reserved_env")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(patterns.ENV_NAME, name.removesuffix("*")):
                raise ValueError(f"{errors.clip(name)}: must be an environment variable name, or a prefix ending in *")
        return names


_StatusUsd = Annotated[float, Field(ge=0, le=bounds.STATUS_USD_MAX)]


class TeamSpend(ApiModel):
    """A team's spending in the current budget period, summed by the operator's ledger from the
    jobs' status. ``spentUsd`` is what counts against the budget (without lost work when the
    budget says ``includeLostWork: false``); lost and idle are parts of it, shown apart."""

    team: str = Field(max_length=bounds.DNS_LABEL_LENGTH)
    period: BudgetPeriod
    spent_usd: _StatusUsd
    limit_usd: _StatusUsd
    lost_to_preemption_usd: _StatusUsd = 0.0
    idle_usd: _StatusUsd = 0.0
    period_start: bounds.Time | None = None
    used_fraction: Annotated[float, Field(ge=0, le=bounds.STATUS_USD_MAX)] | None = None
    jobs: bounds.Count = 0


class AcceleratorPolicyStatus(ApiModel):
    conditions: Conditions = Field(default_factory=list)
    spend: list[TeamSpend] = Field(default_factory=list, max_length=bounds.POLICY_ITEMS)
    observed_generation: bounds.Generation | None = None


class AcceleratorPolicy(ApiModel):
    """Cluster-scoped; short name ``apol``."""

    api_version: Literal["accel.dev/v1alpha1"] = vocabulary.API_VERSION  # type: ignore[assignment]
    kind: Literal["AcceleratorPolicy"] = "AcceleratorPolicy"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AcceleratorPolicySpec = Field(default_factory=AcceleratorPolicySpec)
    status: AcceleratorPolicyStatus | None = None
