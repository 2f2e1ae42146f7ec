"""AcceleratorJob: a training or inference job, described by its model and workload.

The spec says *what* to run (image, model, workload) and the constraints (placement, objective,
deadline, budget, spot policy, checkpointing); the operator decides *where* and writes the
decision, the run's progress and its cost into the status.
"""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from accel_api import durations, patterns, vocabulary
from accel_api.base import ApiModel, Condition, ObjectMeta
from accel_api.enums import (
    AcceleratorKind,
    Attention,
    CapacityType,
    JobPhase,
    MlpKind,
    Objective,
    Optimizer,
    Precision,
    Sharding,
    SpotPolicy,
    WorkloadMode,
)

PositiveInt = Annotated[int, Field(ge=1)]
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=patterns.DNS_LABEL)]


class EnvVar(ApiModel):
    name: str = Field(min_length=1, pattern=patterns.ENV_NAME)
    value: str = ""


class Architecture(ApiModel):
    """A decoder-only transformer, enough to count parameters, FLOPs and activations."""

    layers: PositiveInt
    hidden: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt | None = Field(default=None, description="Key/value heads (GQA); defaults to heads.")
    intermediate: PositiveInt | None = Field(
        default=None, description="MLP width; defaults to 4×hidden (gelu) or the Llama 8/3×hidden rounded (swiglu)."
    )
    vocab: PositiveInt
    mlp: MlpKind = MlpKind.SWIGLU
    tied_embeddings: bool = False
    norm: Literal["rmsnorm", "layernorm"] | None = Field(
        default=None, description="Defaults to rmsnorm for swiglu models, layernorm for gelu models."
    )
    max_positions: PositiveInt | None = Field(
        default=None, description="Learned position embeddings (GPT-2 style); omit for rotary."
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> Self:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads_or_default:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kvHeads ({self.kv_heads})")
        return self

    @property
    def kv_heads_or_default(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def intermediate_or_default(self) -> int:
        if self.intermediate is not None:
            return self.intermediate
        if self.mlp is MlpKind.GELU:
            return 4 * self.hidden
        return 256 * ((8 * self.hidden // 3 + 255) // 256)

    @property
    def norm_or_default(self) -> str:
        if self.norm is not None:
            return self.norm
        return "rmsnorm" if self.mlp is MlpKind.SWIGLU else "layernorm"


class ModelSpec(ApiModel):
    """Either the architecture (preferred: exact memory and FLOPs) or just a parameter count."""

    name: str | None = Field(default=None, description="Free text, e.g. llama-3-8b; for people.")
    architecture: Architecture | None = None
    parameters: PositiveInt | None = Field(
        default=None, description="Total parameters, used when the architecture is not given."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.architecture is None and self.parameters is None:
            raise ValueError("give model.architecture (preferred) or model.parameters")
        return self


class Workload(ApiModel):
    mode: WorkloadMode = WorkloadMode.TRAINING
    precision: Precision = Precision.AMP_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    micro_batch: PositiveInt = Field(default=1, description="Sequences per device per step (training).")
    seq_len: PositiveInt = Field(default=2048, description="Tokens per sequence (training).")
    gradient_checkpointing: bool = False
    sharding: Sharding = Sharding.NONE
    tensor_parallel: PositiveInt = Field(default=1, description="Tensor-parallel degree within a node.")
    attention: Attention = Attention.SDPA
    tokens: PositiveInt | None = Field(
        default=None,
        description="Training: tokens to train on. Inference: new tokens to generate in all "
        "(defaults to one batch of newTokens).",
    )
    batch: PositiveInt = Field(default=1, description="Concurrent sequences (inference).")
    prompt_len: PositiveInt = Field(default=512, description="Prompt tokens per sequence (inference).")
    new_tokens: PositiveInt = Field(default=128, description="Generated tokens per sequence (inference).")

    @model_validator(mode="after")
    def _mode_needs(self) -> Self:
        if self.mode is WorkloadMode.TRAINING and self.tokens is None:
            raise ValueError("training needs workload.tokens (how many tokens to train on)")
        return self


class Placement(ApiModel):
    accelerator_kinds: list[AcceleratorKind] = Field(default_factory=list, description="Empty: any kind.")
    accelerator_types: list[str] = Field(
        default_factory=list, description="Catalog ids such as h100-80gb or tpu-v5e; empty: any."
    )
    pools: list[str] = Field(default_factory=list, description="AcceleratorPool names; empty: any allowed.")
    min_devices: PositiveInt = 1
    max_devices: PositiveInt | None = None
    max_nodes: PositiveInt | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_devices is not None and self.max_devices < self.min_devices:
            raise ValueError(f"maxDevices ({self.max_devices}) must be >= minDevices ({self.min_devices})")
        return self


class Spot(ApiModel):
    policy: SpotPolicy = SpotPolicy.NEVER
    max_preemptions: Annotated[int, Field(ge=0)] = Field(
        default=10, description="Give up (phase Failed) after this many preemptions."
    )


class Checkpoint(ApiModel):
    uri: str = Field(pattern=patterns.CHECKPOINT_URI, description="s3://bucket/prefix or pvc://claim/path")
    interval_minutes: Annotated[float, Field(gt=0, le=10080)] = 30.0

    @property
    def scheme(self) -> str:
        return self.uri.split("://", 1)[0]


class AcceleratorJobSpec(ApiModel):
    team: Name
    image: str = Field(min_length=1)
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)
    model: ModelSpec
    workload: Workload
    placement: Placement = Field(default_factory=Placement)
    objective: Objective = Objective.COST
    deadline: str | None = Field(
        default=None,
        pattern=patterns.DURATION,
        description="Longest acceptable run time from admission, e.g. 36h or 2d12h.",
    )
    max_cost: Annotated[float, Field(gt=0)] | None = Field(default=None, description="USD ceiling for the run.")
    spot: Spot = Field(default_factory=Spot)
    checkpoint: Checkpoint | None = None

    @property
    def deadline_seconds(self) -> float | None:
        return None if self.deadline is None else durations.parse_seconds(self.deadline)


class Alternative(ApiModel):
    pool: str
    accelerator: str
    devices: int
    capacity_type: CapacityType | None = None
    cost_usd: float | None = None
    duration_seconds: float | None = None
    reason: str


class PlanStatus(ApiModel):
    pool: str | None = None
    accelerator: str | None = None
    devices: int | None = None
    nodes: int | None = None
    capacity_type: CapacityType | None = None
    spot: bool | None = None
    peak_allocated_bytes_per_device: int | None = None
    footprint_bytes_per_device: int | None = None
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    duration_seconds: float | None = None
    cost_usd: float | None = None
    reason: str | None = None
    alternatives: list[Alternative] = Field(default_factory=list)


class CheckpointStatus(ApiModel):
    uri: str
    step: int | None = None
    time: str | None = None


class CostStatus(ApiModel):
    spent_usd: float = 0.0
    lost_to_preemption_usd: float = 0.0
    device_seconds: float = 0.0


class AcceleratorJobStatus(ApiModel):
    phase: JobPhase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    plan: PlanStatus | None = None
    attempt: int = 0
    preemptions: int = 0
    last_checkpoint: CheckpointStatus | None = None
    cost: CostStatus | None = None
    start_time: str | None = None
    completion_time: str | None = None
    observed_generation: int | None = None
    message: str | None = None


class AcceleratorJob(ApiModel):
    """An ML team's job. Namespaced; short names ``aj``, ``ajob``."""

    api_version: Literal["accel.dev/v1alpha1"] = vocabulary.API_VERSION  # type: ignore[assignment]
    kind: Literal["AcceleratorJob"] = "AcceleratorJob"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AcceleratorJobSpec
    status: AcceleratorJobStatus | None = None
