"""AcceleratorJob: a training or inference job, described by its model and workload.

The spec says *what* to run (image, model, workload) and the constraints (placement, objective,
deadline, budget, spot policy, checkpointing); the operator decides *where* and writes the
decision, the run's progress and its cost into the status.
"""

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator

from accel_api import bounds, durations, errors, patterns, vocabulary
from accel_api.base import ApiModel, CelRule, Conditions, Resource
from accel_api.enums import (
    AcceleratorKind,
    AdapterMethod,
    AdapterTargets,
    Attention,
    BaseWeights,
    BudgetPeriod,
    CapacityType,
    FailureKind,
    Framework,
    JobPhase,
    LossKernel,
    MlpKind,
    Objective,
    Optimizer,
    OptimizerOffload,
    Precision,
    Recompute,
    Sharding,
    SpotPolicy,
    WorkloadMode,
)

Name = Annotated[str, Field(min_length=1, max_length=bounds.DNS_LABEL_LENGTH, pattern=patterns.DNS_LABEL)]


class EnvVar(ApiModel):
    """One environment variable. Names the operator or the runtime own are refused (see
    ``vocabulary.RESERVED_ENV``); a policy may reserve more (``reservedEnv``)."""

    name: str = Field(
        min_length=1,
        max_length=bounds.ENV_NAME_LENGTH,
        pattern=patterns.ENV_NAME,
        json_schema_extra=patterns.refused_in_crd(
            vocabulary.reserved_env_regex(),
            "is reserved for the operator or the container runtime (ACCEL_*, NVIDIA_*, CUDA_VISIBLE_DEVICES, "
            "TPU_*, LD_*)",
        ),
    )
    value: str = Field(default="", max_length=bounds.ENV_VALUE_LENGTH)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if vocabulary.is_reserved_env(name):
            raise ValueError(
                f"{errors.clip(name)} is reserved for the operator or the container runtime; "
                f"reserved: {', '.join(vocabulary.RESERVED_ENV)}"
            )
        return name


class Architecture(ApiModel):
    """A transformer (decoder-only, or encoder-decoder with encoderLayers), enough to count
    parameters, FLOPs and activations.

    Bounds (well above any published model, low enough that every estimate stays finite):
    layers ≤ 1000, hidden ≤ 131072, heads/kvHeads ≤ 1024, intermediate ≤ 2^20, vocab and
    maxPositions ≤ 2^22.
    """

    layers: Annotated[int, Field(ge=1, le=bounds.LAYERS)]
    hidden: Annotated[int, Field(ge=1, le=bounds.HIDDEN)]
    heads: Annotated[int, Field(ge=1, le=bounds.HEADS)]
    kv_heads: Annotated[int, Field(ge=1, le=bounds.HEADS)] | None = Field(
        default=None, description="Key/value heads (GQA); defaults to heads."
    )
    intermediate: Annotated[int, Field(ge=1, le=bounds.INTERMEDIATE)] | None = Field(
        default=None, description="MLP width; defaults to 4×hidden (gelu) or the Llama 8/3×hidden rounded (swiglu)."
    )
    vocab: Annotated[int, Field(ge=1, le=bounds.VOCAB)]
    mlp: MlpKind = MlpKind.SWIGLU
    tied_embeddings: bool = False
    norm: Literal["rmsnorm", "layernorm"] | None = Field(
        default=None, description="Defaults to rmsnorm for swiglu models, layernorm for gelu models."
    )
    max_positions: Annotated[int, Field(ge=1, le=bounds.POSITIONS)] | None = Field(
        default=None, description="Learned position embeddings (GPT-2 style); omit for rotary."
    )
    head_dim: Annotated[int, Field(ge=1, le=bounds.HEAD_DIM)] | None = Field(
        default=None, description="Per-head width; defaults to hidden/heads (Gemma-style models differ)."
    )
    experts: Annotated[int, Field(ge=1, le=bounds.EXPERTS)] | None = Field(
        default=None, description="Mixture of experts: MLP experts per layer (each of width intermediate)."
    )
    active_experts: Annotated[int, Field(ge=1, le=bounds.EXPERTS)] | None = Field(
        default=None, description="Experts each token is routed to (top-k); defaults to 2 when experts is given."
    )
    encoder_layers: Annotated[int, Field(ge=1, le=bounds.LAYERS)] | None = Field(
        default=None,
        description="Encoder-decoder models (T5): the encoder's layers; layers then counts the decoder's, "
        "each with a cross-attention block over the encoder's output. Omit for decoder-only models.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="hidden-divides-into-heads",
            cel="has(self.headDim) || self.hidden % self.heads == 0",
            message="hidden must be a multiple of heads, or give headDim",
            check=lambda a: a.head_dim is not None or a.hidden % a.heads == 0,
            field_path=".hidden",
            got=lambda a: f"hidden {a.hidden}, heads {a.heads}",
        ),
        CelRule(
            name="heads-divide-into-kv-heads",
            cel="!has(self.kvHeads) || self.heads % self.kvHeads == 0",
            message="heads must be a multiple of kvHeads",
            check=lambda a: a.heads % a.kv_heads_or_default == 0,
            field_path=".kvHeads",
            got=lambda a: f"heads {a.heads}, kvHeads {a.kv_heads}",
        ),
        CelRule(
            name="active-experts-at-most-experts",
            cel="!has(self.activeExperts) || self.activeExperts <= (has(self.experts) ? self.experts : 1)",
            message="activeExperts must be at most experts (1 when unset)",
            check=lambda a: a.active_experts is None or a.active_experts <= a.experts_or_default,
            field_path=".activeExperts",
            got=lambda a: f"activeExperts {a.active_experts}, experts {a.experts_or_default}",
        ),
    )

    @property
    def head_dim_or_default(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def experts_or_default(self) -> int:
        return self.experts if self.experts is not None else 1

    @property
    def active_experts_or_default(self) -> int:
        if self.active_experts is not None:
            return self.active_experts
        return min(2, self.experts_or_default)

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

    name: str | None = Field(
        default=None, max_length=bounds.DNS_SUBDOMAIN_LENGTH, description="Free text, e.g. llama-3-8b; for people."
    )
    architecture: Architecture | None = None
    parameters: Annotated[int, Field(ge=1, le=bounds.PARAMETERS)] | None = Field(
        default=None, description="Total parameters (at most 1e14), used when the architecture is not given."
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="model-size-given",
            cel="has(self.architecture) || has(self.parameters)",
            message="give model.architecture (preferred) or model.parameters",
            check=lambda m: m.architecture is not None or m.parameters is not None,
        ),
    )


class Adapter(ApiModel):
    """LoRA or QLoRA fine-tuning: low-rank adapters trained beside a frozen base model. The base
    gets no gradients or optimizer state; the adapters (rank × (d_in + d_out) per adapted linear)
    train in fp32 with the workload's optimizer. Gradient checkpointing is the workload's."""

    method: AdapterMethod = Field(
        description="lora (Hu et al. 2021): a bf16 base; qlora (Dettmers et al. 2023): a quantised base."
    )
    rank: Annotated[int, Field(ge=1, le=bounds.LORA_RANK)] = Field(
        default=16, description="The adapters' rank r (1 to 1024)."
    )
    alpha: Annotated[float, Field(gt=0, le=bounds.LORA_ALPHA)] | None = Field(
        default=None,
        description="The scaling alpha (the update is scaled by alpha / rank); unset: 2 × rank. "
        "Not used by the planner.",
    )
    target_modules: AdapterTargets = Field(
        default=AdapterTargets.ALL_LINEAR,
        description="attention (q, k, v, o projections), mlp (the MLP's linears) or all-linear "
        "(both; never the LM head).",
    )
    base_weights: BaseWeights | None = Field(
        default=None,
        description="The frozen base's linear layers: bf16, int8 (bitsandbytes LLM.int8) or nf4 (4-bit NormalFloat); "
        "unset: bf16 for lora, nf4 for qlora. Embeddings, norms and the LM head stay bf16.",
    )
    double_quant: bool | None = Field(
        default=None,
        description="nf4 only: quantise the per-64-weight absmax scales to 8 bits (QLoRA's double quantisation, "
        "0.127 instead of 0.5 bits per weight); unset: true.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="lora-has-a-bf16-base",
            cel="self.method != 'lora' || !has(self.baseWeights) || self.baseWeights == 'bf16'",
            message="method lora trains beside a bf16 base; a quantised base (int8, nf4) is method qlora",
            check=lambda a: a.method is not AdapterMethod.LORA or a.base_weights in (None, BaseWeights.BF16),
            field_path=".baseWeights",
        ),
        CelRule(
            name="qlora-has-a-quantised-base",
            cel="self.method != 'qlora' || !has(self.baseWeights) || self.baseWeights != 'bf16'",
            message="method qlora quantises the base: baseWeights int8 or nf4 (a bf16 base is method lora)",
            check=lambda a: a.method is not AdapterMethod.QLORA or a.base_weights is not BaseWeights.BF16,
            field_path=".baseWeights",
        ),
        CelRule(
            name="double-quant-is-nf4",
            cel="!has(self.doubleQuant) || "
            "(has(self.baseWeights) ? self.baseWeights == 'nf4' : self.method == 'qlora')",
            message="doubleQuant applies to an nf4 base only; leave it unset",
            check=lambda a: a.double_quant is None or a.base_weights_or_default is BaseWeights.NF4,
            field_path=".doubleQuant",
        ),
    )

    @property
    def base_weights_or_default(self) -> BaseWeights:
        if self.base_weights is not None:
            return self.base_weights
        return BaseWeights.BF16 if self.method is AdapterMethod.LORA else BaseWeights.NF4

    @property
    def double_quant_or_default(self) -> bool:
        return self.base_weights_or_default is BaseWeights.NF4 and self.double_quant is not False


class Workload(ApiModel):
    """What the job does with the model. Bounds: microBatch and batch ≤ 65536, seqLen, promptLen
    and newTokens ≤ 2^22, tensorParallel ≤ 64 (one node), pipelineParallel ≤ 1000,
    contextParallel ≤ 1024, gradientAccumulation ≤ 65536, tokens ≤ 1e15."""

    mode: WorkloadMode = WorkloadMode.TRAINING
    framework: Framework = Field(
        default=Framework.HF,
        description="hf (transformers, eager PyTorch; sharded by zero2/zero3/fsdp: the Trainer's FSDP under a "
        "bf16 mixed-precision policy), fsdp (PyTorch FSDP/FSDP2 mixed precision), deepspeed "
        "(ZeRO 1-3), megatron (Megatron-LM/NeMo/Transformer Engine) or maxtext (JAX/XLA).",
    )
    precision: Precision = Precision.AMP_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    micro_batch: Annotated[int, Field(ge=1, le=bounds.BATCH)] = Field(
        default=1, description="Sequences per device per step (training)."
    )
    seq_len: Annotated[int, Field(ge=1, le=bounds.POSITIONS)] = Field(
        default=2048, description="Tokens per sequence (training)."
    )
    gradient_checkpointing: bool = Field(default=False, description="A synonym for recompute: full.")
    recompute: Recompute | None = Field(
        default=None,
        description="Activation recomputation: none, selective (attention's core) or full (each layer "
        "keeps only its input); defaults to full with gradientCheckpointing, else none.",
    )
    sharding: Sharding = Sharding.NONE
    hybrid_shard_degree: Annotated[int, Field(ge=1, le=bounds.DEVICES)] | None = Field(
        default=None,
        description="Hybrid sharding (HSDP: FSDP1 HYBRID_SHARD, FSDP2 on a (replicate, shard) mesh): "
        "shard over groups of this many data-parallel ranks and replicate across the groups; the "
        "data-parallel ranks (× contextParallel) must be a multiple of it. Unset: shard over all of them.",
    )
    tensor_parallel: Annotated[int, Field(ge=1, le=bounds.TENSOR_PARALLEL)] = Field(
        default=1, description="Tensor-parallel degree within a node."
    )
    sequence_parallel: bool | None = Field(
        default=None,
        description="Sequence parallelism with tensor parallelism (Korthikanti et al. 2022): the norms', "
        "dropouts' and products' inputs split along the sequence over the tensor-parallel ranks. Unset: "
        "as the framework does it: on for megatron with tensorParallel > 1 (Megatron-LM's and NeMo's "
        "recipes set --sequence-parallel with it), off for hf, fsdp and deepspeed; maxtext always shards "
        "activations over its tensor axis (false is refused there).",
    )
    compile: bool = Field(
        default=False,
        description="torch.compile on the model (PyTorch stacks): Inductor fuses each layer's chains of "
        "elementwise ops, so a layer saves what a fused stack saves and reads and writes its norms and "
        "activations once. No effect on a fused stack (fsdp with flash attention, megatron, maxtext).",
    )
    loss_kernel: LossKernel = Field(
        default=LossKernel.STANDARD,
        description="standard (the [tokens × vocab] logits in memory with their fp32 copies and gradient), "
        "chunked (a chunk of tokens at a time: Liger Kernel's fused linear cross-entropy) or fused (never "
        "in memory: Cut Cross-Entropy).",
    )
    fused_kernels: bool = Field(
        default=False,
        description="Fused eager kernels (flash-attn's fused MLP and dropout + residual add + norm): "
        "a layer saves what a fused stack saves, its elementwise chains read and write once.",
    )
    optimizer_in_backward: bool = Field(
        default=False,
        description="The optimizer step fused into backward (a post-accumulate-grad hook per parameter): "
        "each gradient is applied and freed as it is made, so the full gradient buffer is never held. "
        "Needs gradientAccumulation 1 and framework hf or fsdp.",
    )
    activation_offload: bool = Field(
        default=False,
        description="Saved activations copied to host memory in forward and back in backward, on a side "
        "stream: about two layers' activations stay on the device; the copies over PCIe that compute "
        "does not hide slow the step.",
    )
    optimizer_offload: OptimizerOffload = Field(
        default=OptimizerOffload.NONE,
        description="cpu: ZeRO-Offload (optimizer states and fp32 master weights in host memory, the "
        "optimizer step on the CPU, 16-bit gradients down and weights up over PCIe each step). Needs "
        "sharding (zero1, zero2, zero3 or fsdp); not maxtext.",
    )
    pipeline_parallel: Annotated[int, Field(ge=1, le=bounds.PIPELINE_PARALLEL)] = Field(
        default=1, description="Pipeline stages (1F1B schedule); each holds layers/stages layers."
    )
    context_parallel: Annotated[int, Field(ge=1, le=bounds.CONTEXT_PARALLEL)] = Field(
        default=1, description="Context-parallel degree: each sequence split over this many devices."
    )
    gradient_accumulation: Annotated[int, Field(ge=1, le=bounds.GRADIENT_ACCUMULATION)] = Field(
        default=1, description="Micro-batches per optimizer step (and per pipeline flush)."
    )
    attention: Attention = Attention.SDPA
    tokens: Annotated[int, Field(ge=1, le=bounds.TOKENS)] | None = Field(
        default=None,
        description="Training: tokens to train on. Inference: new tokens to generate in all "
        "(defaults to one batch of newTokens).",
    )
    batch: Annotated[int, Field(ge=1, le=bounds.BATCH)] = Field(
        default=1, description="Concurrent sequences (inference)."
    )
    prompt_len: Annotated[int, Field(ge=1, le=bounds.POSITIONS)] = Field(
        default=512, description="Prompt tokens per sequence (inference)."
    )
    new_tokens: Annotated[int, Field(ge=1, le=bounds.POSITIONS)] = Field(
        default=128, description="Generated tokens per sequence (inference)."
    )
    adapter: Adapter | None = Field(
        default=None,
        description="LoRA/QLoRA fine-tuning (training with framework hf, fsdp or deepspeed, precision amp-bf16 "
        "or bf16): adapters beside a frozen, possibly quantised base. Unset: a full fine-tune.",
    )

    # Inference: the training-only knobs must keep their neutral values (microBatch, seqLen and the
    # optimizer have non-neutral defaults and are simply not read). Training: batch, promptLen and
    # newTokens are not read; they are not refused, since their defaults are not neutral either and a
    # stored object that carries them (a client that writes defaults) must stay valid.
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="training-needs-tokens",
            cel="(has(self.mode) && self.mode == 'inference') || has(self.tokens)",
            message="training needs workload.tokens (how many tokens to train on)",
            check=lambda w: w.mode is WorkloadMode.INFERENCE or w.tokens is not None,
            field_path=".tokens",
        ),
        CelRule(
            name="gradient-checkpointing-means-full-recompute",
            cel="!has(self.gradientCheckpointing) || !self.gradientCheckpointing || !has(self.recompute) "
            "|| self.recompute == 'full'",
            message="gradientCheckpointing: true means recompute: full",
            check=lambda w: not w.gradient_checkpointing or w.recompute in (None, Recompute.FULL),
            field_path=".recompute",
            got=lambda w: f"recompute: {w.recompute.value if w.recompute else None}",
        ),
        CelRule(
            name="hybrid-shard-needs-sharding",
            cel="!has(self.hybridShardDegree) || (has(self.sharding) && self.sharding != 'none')",
            message="hybridShardDegree needs sharding zero1, zero2, zero3 or fsdp",
            check=lambda w: w.hybrid_shard_degree is None or w.sharding is not Sharding.NONE,
            field_path=".hybridShardDegree",
        ),
        CelRule(
            name="maxtext-shards-activations",
            cel="!has(self.sequenceParallel) || self.sequenceParallel || !has(self.framework) "
            "|| self.framework != 'maxtext'",
            message="maxtext shards every activation over its tensor axis (its logical axis rules): "
            "sequenceParallel false does not apply; leave it unset",
            check=lambda w: w.sequence_parallel is not False or w.framework is not Framework.MAXTEXT,
            field_path=".sequenceParallel",
        ),
        CelRule(
            name="optimizer-in-backward-without-accumulation",
            cel="!has(self.optimizerInBackward) || !self.optimizerInBackward || !has(self.gradientAccumulation) "
            "|| self.gradientAccumulation == 1",
            message="optimizerInBackward steps each gradient as soon as it is made: gradientAccumulation must be 1",
            check=lambda w: not w.optimizer_in_backward or w.gradient_accumulation == 1,
            field_path=".optimizerInBackward",
            got=lambda w: f"gradientAccumulation {w.gradient_accumulation}",
        ),
        CelRule(
            name="optimizer-in-backward-frameworks",
            cel="!has(self.optimizerInBackward) || !self.optimizerInBackward || !has(self.framework) "
            "|| self.framework == 'hf' || self.framework == 'fsdp'",
            message="optimizerInBackward is a PyTorch hook (hf or fsdp); deepspeed, megatron and maxtext "
            "run their own optimizer step",
            check=lambda w: not w.optimizer_in_backward or w.framework in (Framework.HF, Framework.FSDP),
            field_path=".optimizerInBackward",
            got=lambda w: f"framework {w.framework.value}",
        ),
        CelRule(
            name="optimizer-offload-needs-sharding",
            cel="!has(self.optimizerOffload) || self.optimizerOffload == 'none' || "
            "(has(self.sharding) && self.sharding != 'none' && (!has(self.framework) || self.framework != 'maxtext'))",
            message="optimizerOffload cpu (ZeRO-Offload) needs sharding zero1, zero2, zero3 or fsdp, and a "
            "framework other than maxtext",
            check=lambda w: (
                w.optimizer_offload is OptimizerOffload.NONE
                or (w.sharding is not Sharding.NONE and w.framework is not Framework.MAXTEXT)
            ),
            field_path=".optimizerOffload",
            got=lambda w: f"sharding {w.sharding.value}, framework {w.framework.value}",
        ),
        CelRule(
            name="adapter-is-fine-tuning",
            cel="!has(self.adapter) || ((!has(self.mode) || self.mode == 'training') && "
            "(!has(self.framework) || self.framework in ['hf', 'fsdp', 'deepspeed']) && "
            "(!has(self.precision) || self.precision in ['amp-bf16', 'bf16']))",
            message="adapter is for training with framework hf, fsdp or deepspeed and precision amp-bf16 or bf16",
            check=lambda w: (
                w.adapter is None
                or (
                    w.mode is WorkloadMode.TRAINING
                    and w.framework in (Framework.HF, Framework.FSDP, Framework.DEEPSPEED)
                    and w.precision in (Precision.AMP_BF16, Precision.BF16)
                )
            ),
            field_path=".adapter",
            got=lambda w: f"mode {w.mode.value}, framework {w.framework.value}, precision {w.precision.value}",
        ),
        CelRule(
            name="context-parallel-divides-seq-len",
            cel="!has(self.contextParallel) || (has(self.seqLen) ? self.seqLen : 2048) % self.contextParallel == 0",
            message="contextParallel must divide seqLen",
            check=lambda w: w.seq_len % w.context_parallel == 0,
            field_path=".contextParallel",
            got=lambda w: f"contextParallel {w.context_parallel}, seqLen {w.seq_len}",
        ),
        CelRule(
            name="inference-trains-nothing",
            cel="!has(self.mode) || self.mode != 'inference' || ("
            "(!has(self.gradientAccumulation) || self.gradientAccumulation == 1) && "
            "(!has(self.gradientCheckpointing) || !self.gradientCheckpointing) && "
            "(!has(self.recompute) || self.recompute == 'none'))",
            message="inference trains nothing: gradientAccumulation must be 1, gradientCheckpointing false "
            "and recompute none or unset",
            check=lambda w: (
                w.mode is not WorkloadMode.INFERENCE
                or (
                    w.gradient_accumulation == 1
                    and not w.gradient_checkpointing
                    and w.recompute in (None, Recompute.NONE)
                )
            ),
            got=lambda w: (
                f"gradientAccumulation {w.gradient_accumulation}, gradientCheckpointing "
                f"{str(w.gradient_checkpointing).lower()}, recompute {w.recompute.value if w.recompute else None}"
            ),
        ),
    )

    @property
    def recompute_or_default(self) -> Recompute:
        if self.recompute is not None:
            return self.recompute
        return Recompute.FULL if self.gradient_checkpointing else Recompute.NONE


class Placement(ApiModel):
    """Where the job may run. Devices ≤ 65536, nodes ≤ 65536, at most 64 pools or accelerator ids."""

    accelerator_kinds: list[AcceleratorKind] = Field(
        default_factory=list, max_length=len(AcceleratorKind), description="Empty: any kind."
    )
    accelerator_types: list[bounds.ShortText] = Field(
        default_factory=list,
        max_length=bounds.NAME_LIST_ITEMS,
        description="Catalog ids such as h100-80gb or tpu-v5e; empty: any.",
    )
    pools: list[Annotated[str, Field(max_length=bounds.DNS_SUBDOMAIN_LENGTH, pattern=patterns.DNS_SUBDOMAIN)]] = Field(
        default_factory=list,
        max_length=bounds.NAME_LIST_ITEMS,
        description="AcceleratorPool names; empty: any allowed.",
    )
    min_devices: Annotated[int, Field(ge=1, le=bounds.DEVICES)] = 1
    max_devices: Annotated[int, Field(ge=1, le=bounds.DEVICES)] | None = None
    max_nodes: Annotated[int, Field(ge=1, le=bounds.NODES)] | None = None

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="max-devices-at-least-min",
            cel="!has(self.maxDevices) || !has(self.minDevices) || self.maxDevices >= self.minDevices",
            message="maxDevices must be >= minDevices",
            check=lambda p: p.max_devices is None or p.max_devices >= p.min_devices,
            field_path=".maxDevices",
            got=lambda p: f"maxDevices {p.max_devices}, minDevices {p.min_devices}",
        ),
        CelRule(
            name="max-nodes-at-most-max-devices",
            cel="!has(self.maxNodes) || !has(self.maxDevices) || self.maxNodes <= self.maxDevices",
            message="maxNodes must be <= maxDevices (each node runs at least one device)",
            check=lambda p: p.max_nodes is None or p.max_devices is None or p.max_nodes <= p.max_devices,
            field_path=".maxNodes",
            got=lambda p: f"maxNodes {p.max_nodes}, maxDevices {p.max_devices}",
        ),
        CelRule(
            name="min-devices-fit-max-nodes",
            cel="!has(self.maxNodes) || !has(self.minDevices) "
            f"|| self.minDevices <= self.maxNodes * {bounds.DEVICES_PER_NODE}",
            message=f"minDevices must fit on maxNodes nodes of at most {bounds.DEVICES_PER_NODE} devices",
            check=lambda p: p.max_nodes is None or p.min_devices <= p.max_nodes * bounds.DEVICES_PER_NODE,
            field_path=".minDevices",
            got=lambda p: f"minDevices {p.min_devices}, maxNodes {p.max_nodes}",
        ),
    )


class Spot(ApiModel):
    policy: SpotPolicy = SpotPolicy.NEVER
    max_preemptions: Annotated[int, Field(ge=0, le=bounds.PREEMPTIONS)] = Field(
        default=10, description="Give up (phase Failed) after this many preemptions (at most 1000)."
    )


class Checkpoint(ApiModel):
    """Where and how often the job checkpoints: every 1 to 10080 minutes (a week), to a path that
    stays inside its bucket or claim (no ``.``, ``..`` or empty segments), at most 1024 chars."""

    uri: str = Field(
        max_length=bounds.URI_LENGTH,
        pattern=patterns.CHECKPOINT_URI,
        description="s3://bucket/prefix or pvc://claim/path",
        json_schema_extra=patterns.refused_in_crd(
            patterns.CHECKPOINT_ESCAPE,
            "must stay inside its bucket or claim: no '.', '..' (also %2e) or empty path segments and no trailing '/'",
        ),
    )
    interval_minutes: Annotated[float, Field(ge=bounds.CHECKPOINT_MINUTES_MIN, le=bounds.CHECKPOINT_MINUTES_MAX)] = 30.0

    @field_validator("uri")
    @classmethod
    def _stays_inside(cls, uri: str) -> str:
        if re.search(patterns.CHECKPOINT_ESCAPE, uri):
            raise ValueError(
                "must stay inside its bucket or claim: no '.', '..' or empty path segments and no trailing '/' "
                f"(got {errors.clip(uri)})"
            )
        return uri

    @property
    def scheme(self) -> str:
        return self.uri.split("://", 1)[0]


class AcceleratorJobSpec(ApiModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            name="spot-require-needs-checkpoint",
            cel="!has(self.spot) || !has(self.spot.policy) || self.spot.policy != 'require' || has(self.checkpoint)",
            message="spot.policy require needs spec.checkpoint: a preemption loses the work since the last one",
            check=lambda s: s.spot.policy is not SpotPolicy.REQUIRE or s.checkpoint is not None,
            field_path=".checkpoint",
        ),
        CelRule(
            name="tensor-parallel-divides-heads",
            cel="!has(self.model.architecture) || !has(self.workload.tensorParallel) || "
            "(self.model.architecture.heads % self.workload.tensorParallel == 0 && "
            "(has(self.model.architecture.kvHeads) ? self.model.architecture.kvHeads : self.model.architecture.heads)"
            " % self.workload.tensorParallel == 0)",
            message="workload.tensorParallel must divide model.architecture.heads and kvHeads",
            check=lambda s: (
                s.model.architecture is None
                or (
                    s.model.architecture.heads % s.workload.tensor_parallel == 0
                    and s.model.architecture.kv_heads_or_default % s.workload.tensor_parallel == 0
                )
            ),
            field_path=".workload.tensorParallel",
            got=lambda s: (
                f"tensorParallel {s.workload.tensor_parallel}, heads {s.model.architecture.heads}, "
                f"kvHeads {s.model.architecture.kv_heads_or_default}"
            ),
        ),
        CelRule(
            name="pipeline-parallel-at-most-layers",
            cel="!has(self.model.architecture) || !has(self.workload.pipelineParallel) || "
            "self.workload.pipelineParallel <= self.model.architecture.layers",
            message="workload.pipelineParallel must be at most model.architecture.layers",
            check=lambda s: s.model.architecture is None or s.workload.pipeline_parallel <= s.model.architecture.layers,
            field_path=".workload.pipelineParallel",
            got=lambda s: f"pipelineParallel {s.workload.pipeline_parallel}, layers {s.model.architecture.layers}",
        ),
    )

    # Immutable (CEL on the field, checked by the API server on every update): the team a job
    # is charged to is fixed when it is created, or one edit would move its spend to another team.
    team: Name = Field(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "is immutable: delete the job and create it for the other team"}
            ]
        }
    )
    image: str = Field(min_length=1, max_length=bounds.IMAGE_LENGTH)
    command: list[Annotated[str, Field(max_length=bounds.ARG_LENGTH)]] = Field(
        default_factory=list, max_length=bounds.COMMAND_ITEMS
    )
    args: list[Annotated[str, Field(max_length=bounds.ARG_LENGTH)]] = Field(
        default_factory=list, max_length=bounds.ARGS_ITEMS
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=bounds.ENV_ITEMS)
    model: ModelSpec
    workload: Workload
    placement: Placement = Field(default_factory=Placement)
    objective: Objective = Objective.COST
    deadline: str | None = Field(
        default=None,
        max_length=bounds.DURATION_LENGTH,
        pattern=patterns.DURATION,
        json_schema_extra={
            "x-kubernetes-validations": [
                *patterns.refused_in_crd(patterns.ZERO_DURATION, "must be more than 0s")["x-kubernetes-validations"],
                patterns.duration_at_most(bounds.DEADLINE_SECONDS_MAX, "must be at most 365d"),
            ]
        },
        description="Longest acceptable run time from admission, e.g. 36h or 2d12h; more than 0s, at most 365d.",
    )
    max_cost: Annotated[float, Field(gt=0, le=bounds.USD_MAX)] | None = Field(
        default=None, description="USD ceiling for the run (at most 1e9)."
    )
    spot: Spot = Field(default_factory=Spot)
    checkpoint: Checkpoint | None = None
    priority: Annotated[int, Field(ge=-bounds.PRIORITY_MAX, le=bounds.PRIORITY_MAX)] = Field(
        default=0,
        description="Admission order: higher first, then earlier submission. A higher-priority job "
        "never waits behind a lower one for capacity it can use.",
    )
    max_retries: Annotated[int, Field(ge=0, le=bounds.RETRIES_MAX)] = Field(
        default=0,
        description="Attempts after a real failure (non-zero exit on a healthy node). Preemptions "
        "count against spot.maxPreemptions instead.",
    )

    @field_validator("deadline")
    @classmethod
    def _deadline_in_range(cls, deadline: str | None) -> str | None:
        if deadline is None:
            return None
        seconds = durations.parse_seconds(deadline)
        if not 0 < seconds <= bounds.DEADLINE_SECONDS_MAX:
            raise ValueError(f"must be more than 0s and at most 365d (got {errors.clip(deadline)})")
        return deadline

    @property
    def deadline_seconds(self) -> float | None:
        return None if self.deadline is None else durations.parse_seconds(self.deadline)


class Alternative(ApiModel):
    pool: bounds.ObjectName
    accelerator: bounds.ShortText
    devices: Annotated[int, Field(ge=0, le=bounds.DEVICES)]
    capacity_type: CapacityType | None = None
    cost_usd: bounds.StatusUsd = None
    duration_seconds: bounds.StatusSeconds = None
    reason: bounds.Message


class LeftOutReason(ApiModel):
    """Pools the job's placement filters left out for the same reason: how many, and the first
    few of them by name."""

    reason: bounds.Message
    count: Annotated[int, Field(ge=0, le=bounds.STATUS_COUNT_MAX)]
    pools: Annotated[
        list[bounds.ObjectName],
        BeforeValidator(bounds.keep_first(bounds.STATUS_LEFT_OUT_SAMPLE)),
        Field(max_length=bounds.STATUS_LEFT_OUT_SAMPLE),
    ] = Field(default_factory=list)


class LeftOut(ApiModel):
    """The pools the job's placement filters (placement.pools, acceleratorKinds,
    acceleratorTypes) left out, which the planner did not weigh: their count, and per reason
    (the largest first, at most 8) a count and the first few names."""

    count: Annotated[int, Field(ge=0, le=bounds.STATUS_COUNT_MAX)]
    by_reason: Annotated[
        list[LeftOutReason],
        BeforeValidator(bounds.keep_first(bounds.STATUS_LEFT_OUT_REASONS)),
        Field(max_length=bounds.STATUS_LEFT_OUT_REASONS),
    ] = Field(default_factory=list)


class PlanStatus(ApiModel):
    """The operator's decision. Explanations are clipped to 1024 characters and at most 20
    alternatives (one per pool weighed) are kept, and the pools the placement left out are
    counted per reason, so the status stays small whatever the cluster."""

    pool: bounds.ObjectName | None = None
    accelerator: bounds.ShortText | None = None
    devices: Annotated[int, Field(ge=0, le=bounds.DEVICES)] | None = None
    nodes: Annotated[int, Field(ge=0, le=bounds.NODES)] | None = None
    capacity_type: CapacityType | None = None
    spot: bool | None = None
    peak_allocated_bytes_per_device: bounds.Bytes | None = None
    footprint_bytes_per_device: bounds.Bytes | None = None
    step_seconds: bounds.StatusSeconds = None
    tokens_per_second: bounds.StatusRate = None
    duration_seconds: bounds.StatusSeconds = None
    cost_usd: bounds.StatusUsd = None
    reason: bounds.Message | None = None
    alternatives: Annotated[
        list[Alternative],
        BeforeValidator(bounds.keep_first(bounds.STATUS_ALTERNATIVES)),
        Field(max_length=bounds.STATUS_ALTERNATIVES),
    ] = Field(default_factory=list)
    left_out: LeftOut | None = None


class CheckpointStatus(ApiModel):
    uri: str = Field(max_length=bounds.URI_LENGTH)
    step: Annotated[int, Field(ge=0, le=bounds.GENERATION_MAX)] | None = None
    time: bounds.Time | None = None


_Usd = Annotated[float, Field(ge=0, le=bounds.STATUS_USD_MAX)]


_Seconds = Annotated[float, Field(ge=0, le=bounds.STATUS_SECONDS_MAX)]
_Fraction = Annotated[float, Field(ge=0, le=1)]
_PerHour = Annotated[float, Field(ge=0, le=bounds.PRICE_MAX)]
# The ledger keeps at most this many attempts and intervals per attempt; older ones are folded
# into ``CostStatus.folded`` (totals kept, their days dropped), so status stays small.
COST_ATTEMPTS = 16
COST_INTERVALS = 16


class CostInterval(ApiModel):
    """Devices held from ``start`` to ``end`` at one price, with the share of them that node
    reports showed idle. The ledger's unit: replaying one adds nothing."""

    start: bounds.Time
    end: bounds.Time
    usd_per_device_hour: _PerHour
    idle_fraction: _Fraction = 0.0


class AttemptCost(ApiModel):
    """What one attempt cost; its intervals are the watermark a restarted operator starts from."""

    attempt: bounds.Count
    pool: bounds.ObjectName
    team: Name | None = Field(
        default=None,
        description="The team the attempt is charged to, as the job's spec said when the attempt was first "
        "accrued: the ledger keeps it should the stored spec stop parsing.",
    )
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    devices: Annotated[int, Field(ge=0, le=bounds.DEVICES)]
    on_demand_usd_per_device_hour: _PerHour = 0.0
    intervals: Annotated[
        list[CostInterval],
        BeforeValidator(bounds.keep_last(COST_INTERVALS)),
        Field(max_length=COST_INTERVALS),
    ] = Field(default_factory=list)
    end: bounds.Time | None = Field(default=None, description="When the attempt ended; nothing accrues after it.")
    pods_start: bounds.Time | None = Field(
        default=None,
        description="When its pods' own timestamps said it started (its first pod's startTime), kept as soon as the "
        "operator saw it: nothing is charged before it, whatever stood in for it earlier.",
    )
    pods_end: bounds.Time | None = Field(
        default=None,
        description="When its pods' own timestamps said it ended (its last pod's finishedAt, or its deletion), kept "
        "as soon as the operator saw it: nothing accrues after it, however late the end is recorded.",
    )
    preempted: bool = False
    lost_device_seconds: _Seconds = 0.0
    rolled_up: bool = Field(
        default=False,
        description="Folded into the operator's durable cost rollup: the cost counters and reports count it from "
        "there (it outlives the job).",
    )


class CostTotals(ApiModel):
    spent_usd: _Usd = 0.0
    lost_to_preemption_usd: _Usd = 0.0
    idle_usd: _Usd = 0.0
    on_demand_usd: _Usd = 0.0
    device_seconds: _Seconds = 0.0
    lost_device_seconds: _Seconds = 0.0
    idle_device_seconds: _Seconds = 0.0


class OverBudget(ApiModel):
    policy: bounds.ObjectName
    period: BudgetPeriod
    spent_usd: _Usd
    limit_usd: _Usd
    since: bounds.Time


class CostStatus(ApiModel):
    """The job's ledger: totals derived from ``attempts`` (each attempt's intervals), so a write
    replayed after a restart neither loses nor double-counts. ``lostToPreemptionUsd`` and
    ``idleUsd`` are parts of ``spentUsd``; ``onDemandUsd`` is what the same device-seconds would
    have cost on demand (spot savings); ``forecastUsd`` is the planner's estimate beside it."""

    spent_usd: _Usd = 0.0
    lost_to_preemption_usd: _Usd = 0.0
    idle_usd: _Usd = 0.0
    on_demand_usd: _Usd = 0.0
    forecast_usd: bounds.StatusUsd = None
    device_seconds: _Seconds = 0.0
    lost_device_seconds: _Seconds = 0.0
    idle_device_seconds: _Seconds = 0.0
    attempts: Annotated[
        list[AttemptCost],
        BeforeValidator(bounds.keep_last(COST_ATTEMPTS)),
        Field(max_length=COST_ATTEMPTS),
    ] = Field(default_factory=list)
    folded: CostTotals | None = Field(default=None, description="Attempts dropped from the list, summed.")
    rolled_up_folded: CostTotals | None = Field(
        default=None, description="Attempts dropped from the list that were in the cost rollup already, summed."
    )
    over_budget: OverBudget | None = None
    updated: bounds.Time | None = None


class RightSize(ApiModel):
    """What an idle reservation could run on instead (from the plan's alternatives, or fewer devices)."""

    accelerator: bounds.ShortText | None = None
    devices: Annotated[int, Field(ge=0, le=bounds.DEVICES)] | None = None
    reason: bounds.Message | None = None


class ConsolidationMove(ApiModel):
    """A move of this job to make room for a waiting gang (``reconcile/nodes/consolidate.py``): asked
    (checkpoint now), then carried out (the attempt ended; the next one avoids ``targets``) or
    abandoned (the gang no longer waits). Kept after the move: the rate limit and the rule that a job
    is not moved again soon are counted from it, so an operator restart resets neither."""

    gang: str = Field(
        max_length=bounds.DNS_LABEL_LENGTH + 1 + bounds.DNS_SUBDOMAIN_LENGTH,
        description="namespace/name of the waiting job the move makes room for.",
    )
    targets: Annotated[
        list[bounds.ObjectName],
        BeforeValidator(bounds.keep_first(bounds.STATUS_DEVICES)),
        Field(max_length=bounds.STATUS_DEVICES),
    ] = Field(default_factory=list, description="The nodes the gang is to get: the next attempt is kept off them.")
    attempt: bounds.Count = Field(default=0, description="The attempt the move ends.")
    requested_time: bounds.Time
    checkpoint_step: Annotated[int, Field(ge=0, le=bounds.GENERATION_MAX)] | None = Field(
        default=None, description="The step of the latest checkpoint when the move was asked: it waits for a later one."
    )
    state: Literal["requested", "moved", "abandoned"] = "requested"
    ended_time: bounds.Time | None = Field(default=None, description="When it was carried out or abandoned.")


class HealthStatus(ApiModel):
    """What the operator read from the node agents' reports about this job's devices. The markers
    (idle since, hung since, a move requested) live here so they survive an operator restart."""

    idle_since: bounds.Time | None = None
    hung_since: bounds.Time | None = None
    move_requested_time: bounds.Time | None = Field(
        default=None, description="When a checkpoint-now was asked before moving the job off a sick device."
    )
    move_checkpoint_step: Annotated[int, Field(ge=0, le=bounds.GENERATION_MAX)] | None = Field(
        default=None, description="The step of the latest checkpoint when the move was asked: it waits for a later one."
    )
    move_reason: bounds.Message | None = None
    right_size: RightSize | None = None
    moves: bounds.Count = 0
    consolidation: ConsolidationMove | None = None
    stop_requested_time: bounds.Time | None = Field(
        default=None, description="When a checkpoint-now was asked before stopping the job for idleness."
    )
    stop_checkpoint_step: Annotated[int, Field(ge=0, le=bounds.GENERATION_MAX)] | None = Field(
        default=None, description="The step of the latest checkpoint when the stop was asked: it waits for a later one."
    )
    stopped_time: bounds.Time | None = Field(default=None, description="When a policy stopped the job for idleness.")
    resume_seen: str | None = Field(
        default=None,
        max_length=bounds.RESUME_TOKEN_LENGTH,
        description="The accel.dev/resume annotation when the job was stopped: another value resumes it.",
    )
    stop_seen: str | None = Field(
        default=None,
        max_length=bounds.RESUME_TOKEN_LENGTH,
        description="The accel.dev/stop annotation a user stopped the job with: only another value stops it again.",
    )

    def ended(self, **update: Any) -> "HealthStatus":
        """These markers when the attempt ends (a move or a stop): what the ended attempt was
        being watched for (idle, hung, a move asked) is cleared, ``update`` applied on top."""
        cleared: dict[str, Any] = {
            "idle_since": None,
            "hung_since": None,
            "move_requested_time": None,
            "move_checkpoint_step": None,
        }
        return self.model_copy(update={**cleared, **update})


class AttemptHeld(ApiModel):
    """What an ended attempt held, as the job's status and Kubernetes recorded it when it ended:
    the cost ledger charges an attempt it never saw running (e.g. one that ran while the operator
    was down) from these."""

    pool: bounds.ObjectName
    devices: Annotated[int, Field(ge=0, le=bounds.DEVICES)]
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    admitted_time: bounds.Time | None = Field(default=None, description="The attempt's admission (devices held).")
    start_time: bounds.Time | None = Field(
        default=None, description="Its first pod's status.startTime, else its batch Job's status.startTime."
    )
    end_time: bounds.Time | None = Field(
        default=None,
        description="When Kubernetes recorded its end: its last pod's end (finishedAt, or its deletion), else its "
        "batch Job's completion or failure time.",
    )


EARLIER_FAILURES = 8


class AttemptFailure(ApiModel):
    """How an attempt ended when it did not succeed: a failure of the program or a preemption."""

    kind: FailureKind
    attempt: bounds.Count = 0
    reason: bounds.ShortText
    message: bounds.Message | None = None
    exit_code: Annotated[int, Field(ge=bounds.EXIT_CODE_MIN, le=bounds.EXIT_CODE_MAX)] | None = None
    pod: bounds.ObjectName | None = None
    node: bounds.ObjectName | None = None
    time: bounds.Time | None = None
    lost_device_seconds: Annotated[float, Field(ge=0, le=bounds.STATUS_SECONDS_MAX)] | None = Field(
        default=None,
        description="A preemption's lost work: devices × seconds from the last complete checkpoint (or the "
        "attempt's start) to the preemption.",
    )
    held: AttemptHeld | None = None


class SpotStatus(ApiModel):
    """What preemptions did to the job: the work they threw away, when they happened (the latest
    16, for the fallback window), the spot pools it left for preempting it too often and whether
    it fell back to on-demand capacity."""

    lost_device_seconds: Annotated[float, Field(ge=0, le=bounds.STATUS_SECONDS_MAX)] = 0.0
    recent_preemptions: Annotated[
        list[bounds.Time],
        BeforeValidator(bounds.keep_last(bounds.STATUS_PREEMPTION_TIMES)),
        Field(max_length=bounds.STATUS_PREEMPTION_TIMES),
    ] = Field(default_factory=list)
    left_pools: Annotated[
        list[bounds.ObjectName],
        Field(max_length=bounds.STATUS_LEFT_POOLS),
    ] = Field(
        default_factory=list,
        description="Spot pools the job left because they preempted it too often (the fallback window): the "
        "planner weighs its other pools, steadier spot and on-demand, without them.",
    )
    left_time: bounds.Time | None = Field(
        default=None, description="When the job last left a spot pool: the fallback window counts from then."
    )
    on_demand: bool = Field(default=False, description="Fell back to on-demand pools: the planner offers no spot.")
    preemptions_at_fallback: bounds.Count | None = Field(
        default=None,
        description="status.preemptions when the job fell back: spot.maxPreemptions counts the preemptions since.",
    )


class ResumeStatus(ApiModel):
    """How the current attempt starts: from which complete checkpoint, or from scratch. Recorded
    before its workload exists, so a restarted operator creates the same workload."""

    attempt: bounds.Count = 0
    resume_from: str | None = Field(default=None, max_length=bounds.URI_LENGTH)
    source: Literal["s3", "reported", "none"] = "none"


class AcceleratorJobStatus(ApiModel):
    phase: JobPhase | None = None
    conditions: Conditions = Field(default_factory=list)
    plan: PlanStatus | None = None
    attempt: bounds.Count = 0
    workload: bounds.ObjectName | None = Field(default=None, description="The current attempt's batch/v1 Job.")
    admitted_time: bounds.Time | None = None
    retries: bounds.Count = 0
    last_failure: AttemptFailure | None = None
    earlier_failures: Annotated[
        list[AttemptFailure],
        BeforeValidator(bounds.keep_last(EARLIER_FAILURES)),
        Field(max_length=EARLIER_FAILURES),
    ] = Field(
        default_factory=list,
        description="The failures before lastFailure (their messages dropped), so the cost ledger charges every "
        "attempt that ran, even two that ended between two of its ticks.",
    )
    preemptions: bounds.Count = 0
    last_checkpoint: CheckpointStatus | None = None
    resume: ResumeStatus | None = None
    spot: SpotStatus | None = None
    attempt_start_time: bounds.Time | None = Field(default=None, description="When the current attempt ran.")
    cost: CostStatus | None = None
    health: HealthStatus | None = None
    start_time: bounds.Time | None = None
    completion_time: bounds.Time | None = None
    observed_generation: bounds.Generation | None = None
    message: bounds.Message | None = None


class AcceleratorJob(Resource[AcceleratorJobSpec, AcceleratorJobStatus]):
    """An ML team's job. Namespaced; short names ``aj``, ``ajob``."""

    kind: Literal["AcceleratorJob"] = "AcceleratorJob"
