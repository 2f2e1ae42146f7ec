"""AcceleratorPolicy: the platform team's rules, enforced at admission (cluster-scoped).

Spot jobs must checkpoint often enough to an allowed place; teams have budgets per period;
teams may use only the pools granted to them, and checkpoint only under the S3 prefixes granted
to them. Several policies combine: every rule applies.
"""

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from accel_api import bounds, errors, patterns
from accel_api.base import ApiModel, Conditions, Resource
from accel_api.enums import BudgetAction, BudgetPeriod, IdleAction

CheckpointScheme = Literal["s3", "pvc"]


def _all_schemes() -> list[CheckpointScheme]:
    return ["s3", "pvc"]


TeamName = Annotated[str, Field(min_length=1, max_length=bounds.DNS_LABEL_LENGTH, pattern=patterns.DNS_LABEL)]


class SpotRules(ApiModel):
    require_checkpoint: bool = True
    max_checkpoint_interval_minutes: (
        Annotated[float, Field(ge=bounds.CHECKPOINT_MINUTES_MIN, le=bounds.CHECKPOINT_MINUTES_MAX)] | None
    ) = Field(default=60.0, description="1 to 10080 (a week).")
    allowed_checkpoint_schemes: list[CheckpointScheme] = Field(default_factory=_all_schemes, max_length=2)


Usd = Annotated[float, Field(gt=0, le=bounds.USD_MAX)]


class Budget(ApiModel):
    team: str = Field(min_length=1, max_length=bounds.DNS_LABEL_LENGTH, pattern=patterns.DNS_LABEL)
    period: BudgetPeriod = BudgetPeriod.MONTHLY
    limit_usd: Usd = Field(description="USD per period, at most 1e9.")
    include_lost_work: bool = Field(default=True, description="Count preemption waste against the budget.")
    on_exhausted: BudgetAction = Field(
        default=BudgetAction.QUEUE,
        description="When the team has spent the budget: queue (accept; the job waits for the next period "
        "or a larger budget) or refuse (at admission, and the reconciler does not admit it).",
    )


class PoolAccess(ApiModel):
    teams: list[Annotated[str, Field(max_length=bounds.DNS_LABEL_LENGTH, pattern=patterns.TEAM_OR_ANY)]] = Field(
        min_length=1, max_length=bounds.POLICY_ITEMS, description="Team names, or * for every team."
    )
    pools: list[Annotated[str, Field(max_length=bounds.DNS_SUBDOMAIN_LENGTH, pattern=patterns.POOL_OR_ANY)]] = Field(
        min_length=1, max_length=bounds.POLICY_ITEMS, description="AcceleratorPool names, or * for all."
    )


_PREFIX_ESCAPE_MESSAGE = (
    "must name one directory: no '.', '..' (also %2e) or empty path segments, only a single trailing '/'"
)


def _one_directory(prefix: str) -> str:
    if re.search(patterns.CHECKPOINT_PREFIX_ESCAPE, prefix):
        raise ValueError(f"{_PREFIX_ESCAPE_MESSAGE} (got {errors.clip(prefix)})")
    return prefix


CheckpointPrefix = Annotated[
    str,
    Field(
        min_length=len("s3://") + 1,
        max_length=bounds.CHECKPOINT_PREFIX_LENGTH,
        pattern=patterns.CHECKPOINT_PREFIX,
        json_schema_extra=patterns.refused_in_crd(patterns.CHECKPOINT_PREFIX_ESCAPE, _PREFIX_ESCAPE_MESSAGE),
    ),
    AfterValidator(_one_directory),
]


class CheckpointAccess(ApiModel):
    """S3 prefixes the teams may checkpoint under. The operator lists a job's ``s3://`` checkpoint
    URI with its own credentials to find the resume point: without these rules a tenant could
    name another team's bucket (an oracle on its contents, and a planted complete step resumed
    by a job of theirs). Matched segment by segment: ``s3://b/teams/ml`` grants
    ``s3://b/teams/ml/run`` but not ``s3://b/teams/ml-other/run``."""

    teams: list[Annotated[str, Field(max_length=bounds.DNS_LABEL_LENGTH, pattern=patterns.TEAM_OR_ANY)]] = Field(
        min_length=1, max_length=bounds.POLICY_ITEMS, description="Team names, or * for every team."
    )
    prefixes: list[CheckpointPrefix] = Field(
        min_length=1,
        max_length=bounds.CHECKPOINT_PREFIX_ITEMS,
        description="s3://bucket/ or s3://bucket/path/ (at most 16, of 256 characters each): a job's "
        "spec.checkpoint.uri must lie at or below one of them.",
    )


class ConsolidationRules(ApiModel):
    """Whether the operator may move running jobs to make room for a gang that fragmentation keeps
    waiting (checkpoint now, end the attempt, resume elsewhere). Several policies combine strictly:
    consolidation is performed only when every policy that says something allows it; the lowest
    ``maxMovesPerHour`` and the highest ``minRemainingMinutes`` apply."""

    allowed: bool = Field(default=False, description="Perform the proposed moves (false: propose only).")
    max_moves_per_hour: Annotated[int, Field(ge=0, le=bounds.CONSOLIDATION_MOVES_PER_HOUR)] = Field(
        default=2, description="Moves started in any hour, across the cluster (0 to 100)."
    )
    min_remaining_minutes: Annotated[float, Field(ge=0, le=bounds.CHECKPOINT_MINUTES_MAX)] = Field(
        default=15.0, description="A job expected to end (or reach its deadline) sooner is never moved (0 to 10080)."
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
    teams: list[TeamName] = Field(
        default_factory=list, max_length=bounds.POLICY_ITEMS, description="Teams it applies to; empty: every team."
    )


class AcceleratorPolicySpec(ApiModel):
    """Bounds: 256 budgets and pool access rules, 64 checkpoint access rules (16 prefixes each),
    64 reserved names, at most 65536 devices per job."""

    spot: SpotRules = Field(default_factory=SpotRules)
    budgets: list[Budget] = Field(default_factory=list, max_length=bounds.POLICY_ITEMS)
    pool_access: list[PoolAccess] = Field(
        default_factory=list,
        max_length=bounds.POLICY_ITEMS,
        description="Empty: every team may use every pool.",
    )
    checkpoint_access: list[CheckpointAccess] = Field(
        default_factory=list,
        max_length=bounds.CHECKPOINT_ACCESS_ITEMS,
        description="The S3 prefixes each team may checkpoint under; empty: any (set it: the operator lists "
        "a job's s3:// checkpoints with its own credentials). pvc:// checkpoints are not governed.",
    )
    consolidation: ConsolidationRules | None = Field(
        default=None, description="Moving running jobs so a fragmented pool fits a gang; absent: propose only."
    )
    max_devices_per_job: Annotated[int, Field(ge=1, le=bounds.DEVICES)] | None = None
    idle: IdleRules | None = Field(default=None, description="Idle reservations: warn, or stop at a checkpoint.")
    # A pattern, not a validator: the API server refuses a malformed name too, so no stored
    # policy can carry one (a policy the models refuse switches none of its rules on).
    reserved_env: list[
        Annotated[str, Field(min_length=1, max_length=bounds.ENV_NAME_LENGTH, pattern=patterns.RESERVED_ENV_NAME)]
    ] = Field(
        default_factory=list,
        max_length=bounds.RESERVED_ENV_ITEMS,
        description="Environment variable names jobs may not set, besides the built-in ones "
        "(ACCEL_*, NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, LD_*, ...). NAME or PREFIX_*.",
    )


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


# The durable part of the team totals (``status.ledger``), bounded: the live jobs with the most
# spending in the current periods are carried (the rest are still summed while they live, but
# a deletion while the operator is down loses them), and the uids of the latest jobs folded.
LEDGER_CARRIED_JOBS = 1024
LEDGER_SETTLED_UIDS = 512
_Uid = Annotated[str, Field(min_length=1, max_length=bounds.SHORT_TEXT_LENGTH)]


class PeriodFigures(ApiModel):
    """Figures of one budget period (the one starting at ``periodStart``)."""

    period: BudgetPeriod
    period_start: bounds.Time
    spent_usd: _StatusUsd = 0.0
    lost_to_preemption_usd: _StatusUsd = 0.0
    idle_usd: _StatusUsd = 0.0


class CarriedJob(ApiModel):
    """A live job's figures in its team's current budget periods, as the ledger last summed them:
    what the team keeps when the job is deleted, even while the operator is down."""

    uid: _Uid
    team: str = Field(max_length=bounds.DNS_LABEL_LENGTH)
    periods: list[PeriodFigures] = Field(default_factory=list, max_length=len(BudgetPeriod))


class SettledSpend(PeriodFigures):
    """What the team's deleted jobs spent in the current period, folded in once each."""

    team: str = Field(max_length=bounds.DNS_LABEL_LENGTH)
    jobs: bounds.Count = 0


class SpendLedger(ApiModel):
    """The team totals that outlive the jobs: ``settled`` per (team, period), rolled over when a
    new period starts; ``carried``, each live job's figures, folded into ``settled`` (and its uid
    into ``settledUids``) in the same write that drops it, once the job is gone. ``revision``
    counts the writes, so a process never builds on an older copy than the one it wrote."""

    revision: Annotated[int, Field(ge=0, le=bounds.GENERATION_MAX)] = 0
    settled: list[SettledSpend] = Field(default_factory=list, max_length=bounds.POLICY_ITEMS)
    carried: Annotated[
        list[CarriedJob],
        BeforeValidator(bounds.keep_first(LEDGER_CARRIED_JOBS)),
        Field(max_length=LEDGER_CARRIED_JOBS),
    ] = Field(default_factory=list)
    settled_uids: Annotated[
        list[_Uid],
        BeforeValidator(bounds.keep_last(LEDGER_SETTLED_UIDS)),
        Field(max_length=LEDGER_SETTLED_UIDS),
    ] = Field(default_factory=list)


class AcceleratorPolicyStatus(ApiModel):
    conditions: Conditions = Field(default_factory=list)
    spend: list[TeamSpend] = Field(default_factory=list, max_length=bounds.POLICY_ITEMS)
    ledger: SpendLedger | None = Field(default=None, description="Team totals that outlive the jobs (the operator's).")
    observed_generation: bounds.Generation | None = None


class AcceleratorPolicy(Resource[AcceleratorPolicySpec, AcceleratorPolicyStatus]):
    """Cluster-scoped; short name ``apol``."""

    kind: Literal["AcceleratorPolicy"] = "AcceleratorPolicy"
    spec: AcceleratorPolicySpec = Field(default_factory=AcceleratorPolicySpec)
