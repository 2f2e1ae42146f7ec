"""A normalised, frozen view of an AcceleratorJob's model and workload.

The memory, throughput and cost models read this instead of the CRD spec: the architecture with
every default resolved and the parameter counts derived from it, the numeric recipe as byte
widths, and the training or inference shape. When the job gives only ``model.parameters``, a
Llama-shaped architecture of that size is inferred (and said so in ``notes``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from accel_api.enums import (
    Attention,
    Framework,
    LossKernel,
    MlpKind,
    Optimizer,
    OptimizerOffload,
    Precision,
    Recompute,
    Sharding,
    WorkloadMode,
)
from accel_api.job import AcceleratorJobSpec, Architecture, Workload
from accel_operator.planning.adapter import AdapterProfile, trainable_params

# HF GPT-2's defaults (resid/embd/attn pdrop): GPT-2-family models train with dropout 0.1, which
# saves a one-byte mask per element; Llama-family models have none.
GPT2_DROPOUT = 0.1


@dataclass(frozen=True, slots=True)
class Shape:
    """A decoder-only transformer. ``positions`` > 0 means learned position embeddings."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    mlp: MlpKind
    tied: bool
    rmsnorm: bool
    positions: int
    biases: bool
    head_size: int = 0  # 0: hidden / heads
    experts: int = 1  # mixture of experts: MLPs per layer
    active_experts: int = 1  # MLPs each token passes through
    # Encoder-decoder (T5): of ``layers``, this many are decoder layers with a cross-attention block
    # (0: decoder-only). The model is planned as ``layers`` layers of the average layer: the
    # cross-attention's products, saved activations and score work spread over all of them.
    cross_layers: int = 0

    def __hash__(self) -> int:
        # Consistent with equality and cheaper than hashing every field (the models cache on it).
        return hash((self.layers, self.hidden, self.intermediate, self.vocab))

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def attention_matmul_params(self) -> int:
        return self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden

    @property
    def one_mlp_params(self) -> int:
        return (3 if self.mlp is MlpKind.SWIGLU else 2) * self.hidden * self.intermediate

    @property
    def mlp_matmul_params(self) -> int:
        """Every expert's MLP (what is stored) plus the router."""
        router = self.hidden * self.experts if self.experts > 1 else 0
        return self.experts * self.one_mlp_params + router

    @property
    def active_layer_matmul_params(self) -> int:
        """Parameters of one layer's products that one token passes through (FLOPs)."""
        return self.layer_matmul_params - (self.experts - self.active_experts) * self.one_mlp_params

    @property
    def active_matmul_params(self) -> int:
        return self.layers * self.active_layer_matmul_params + self.vocab * self.hidden

    @property
    def cross_matmul_params(self) -> int:
        """One layer's share of the decoder's cross-attention products (q, k, v, o per decoder layer)."""
        return -(-self.cross_layers * self.attention_matmul_params // self.layers) if self.cross_layers else 0

    @property
    def layer_matmul_params(self) -> int:
        return self.attention_matmul_params + self.mlp_matmul_params + self.cross_matmul_params

    @property
    def attention_work(self) -> float:
        """Score work per layer relative to a causal self-attention: an encoder layer attends to the
        whole sequence (2), a decoder layer causally (1) and across to the whole input (2)."""
        if not self.cross_layers:
            return 1.0
        encoder = self.layers - self.cross_layers
        return (2.0 * encoder + 3.0 * self.cross_layers) / self.layers

    @property
    def norm_params(self) -> int:
        """One norm's parameters (LayerNorm has a bias)."""
        return self.hidden if self.rmsnorm else 2 * self.hidden

    @property
    def layer_bias_params(self) -> int:
        if not self.biases:
            return 0
        mlp = (2 if self.mlp is MlpKind.SWIGLU else 1) * self.intermediate + self.hidden
        return self.hidden + 2 * self.kv_dim + self.hidden + mlp

    @property
    def cross_norm_params(self) -> int:
        """One layer's share of the decoder's cross-attention norms."""
        return -(-self.cross_layers * self.norm_params // self.layers) if self.cross_layers else 0

    @property
    def layer_params(self) -> int:
        return self.layer_matmul_params + self.layer_bias_params + 2 * self.norm_params + self.cross_norm_params

    @property
    def embedding_params(self) -> int:
        return (self.vocab + self.positions) * self.hidden

    @property
    def head_params(self) -> int:
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params + self.head_params + self.norm_params

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matrix product per token (the LM head even when tied)."""
        return self.layers * self.layer_matmul_params + self.vocab * self.hidden

    def matrices(self) -> tuple[tuple[int, int, int], ...]:
        """(rows, columns, how many) of the weight matrices, for factored optimizer states.

        Closed-form over layers and experts: a handful of entries whatever the depth, so a
        hostile ``layers`` value costs nothing to plan."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        per_mlp = [(i, h), (h, i)] + ([(i, h)] if self.mlp is MlpKind.SWIGLU else [])
        layer = [(q, h, 1), (kv, h, 2), (h, q, 1)] + [(r, c, self.experts) for r, c in per_mlp]
        if self.experts > 1:
            layer.append((self.experts, h, 1))
        out = [(r, c, n * self.layers) for r, c, n in layer] + [(self.vocab, h, 1)]
        if self.cross_layers:
            out += [(q, h, self.cross_layers), (kv, h, 2 * self.cross_layers), (h, q, self.cross_layers)]
        if self.positions:
            out.append((self.positions, h, 1))
        if not self.tied:
            out.append((self.vocab, h, 1))
        return tuple(out)

    @property
    def largest_matrix(self) -> int:
        return max(self.vocab, self.intermediate, self.hidden + 2 * self.kv_dim) * self.hidden

    @property
    def vector_params(self) -> int:
        return self.layers * (self.layer_bias_params + 2 * self.norm_params + self.cross_norm_params) + self.norm_params


@dataclass(frozen=True, slots=True)
class Numerics:
    """Byte widths of the numeric recipe.

    ``param``: how parameters, gradients and (fused) optimizer states are stored. ``compute``:
    what the matrix products consume. ``residual``: the dtype of the residual stream (the
    embedding output, which follows the parameters). ``autocast``: activations are cast per op.
    """

    param: int
    compute: int
    residual: int
    autocast: bool

    @property
    def norm_out(self) -> int:
        # RMSNorm multiplies by an fp32 weight, LayerNorm is an fp32 op under autocast.
        return 4 if self.autocast else self.residual


def numerics(precision: Precision, framework: Framework = Framework.HF, sharding: Sharding = Sharding.NONE) -> Numerics:
    if precision in (Precision.AMP_BF16, Precision.AMP_FP16):
        if framework is not Framework.HF or sharding is not Sharding.NONE:
            # A mixed-precision policy (FSDP's MixedPrecisionPolicy, DeepSpeed's bf16/fp16
            # engine, Megatron, MaxText) runs the model on 16-bit copies of fp32 master weights:
            # no autocast, 16-bit residual stream and activations. Hugging Face code sharded by
            # ZeRO or FSDP runs the same way: its Trainer hands mixed precision to DeepSpeed's
            # bf16 engine or to FSDP's MixedPrecision (autocast on top casts nothing: the
            # parameters it sees are already 16-bit, and LlamaRMSNorm returns the input dtype).
            return Numerics(param=4, compute=2, residual=2, autocast=False)
        return Numerics(param=4, compute=2, residual=4, autocast=True)
    if precision is Precision.FP8:
        # Transformer Engine: fp32 master weights, bf16 activations between the FP8 products.
        return Numerics(param=4, compute=2, residual=2, autocast=False)
    if precision in (Precision.BF16, Precision.FP16):
        return Numerics(param=2, compute=2, residual=2, autocast=False)
    return Numerics(param=4, compute=4, residual=4, autocast=False)


@dataclass(frozen=True, slots=True)
class JobProfile:
    shape: Shape
    mode: WorkloadMode
    precision: Precision
    numerics: Numerics
    optimizer: Optimizer
    micro_batch: int
    seq_len: int
    checkpointing: bool
    sharding: Sharding
    tensor_parallel: int
    attention: Attention
    tokens: int
    batch: int
    prompt_len: int
    new_tokens: int
    dropout: float
    notes: tuple[str, ...] = ()
    framework: Framework = Framework.HF
    recompute: Recompute = Recompute.NONE
    pipeline_parallel: int = 1
    context_parallel: int = 1
    gradient_accumulation: int = 1
    # Sequence parallelism (Korthikanti et al. 2022) with tensor parallelism: what a layer keeps
    # whole on every tensor-parallel rank without it is split along the sequence.
    sequence_parallel: bool = False
    # Hybrid sharding (HSDP): the sharding group's size; 0 shards over every data-parallel rank.
    hybrid_shard_degree: int = 0
    # The knobs of docs/planner.md "Recipe knobs" (workload.compile, lossKernel, fusedKernels,
    # optimizerInBackward, activationOffload, optimizerOffload).
    compile: bool = False
    loss_kernel: LossKernel = LossKernel.STANDARD
    fused_kernels: bool = False
    optimizer_in_backward: bool = False
    activation_offload: bool = False
    optimizer_offload: bool = False
    # LoRA/QLoRA (workload.adapter): adapters trained beside a frozen base; None: a full fine-tune.
    adapter: AdapterProfile | None = None

    def __hash__(self) -> int:
        # Consistent with equality and cheaper than hashing every field (the models cache on it).
        return hash((self.shape.hidden, self.shape.layers, self.tokens, self.micro_batch, self.seq_len, self.batch))

    @property
    def fused(self) -> bool:
        """A fused-kernel training stack (LLM Foundry's MPT, torchtitan): ``framework: fsdp`` with
        ``attention: flash``. FlashAttention's own kernel saves only its output and the per-row
        logsumexp, norms and activations are single kernels on 16-bit tensors, and the loss is a
        fused cross-entropy over 16-bit logits (see blocks.fused_saved and blocks.head).
        Megatron (Transformer Engine's fused attention) and MaxText (XLA's fused attention) are
        fused stacks whatever ``attention`` says, unless it says ``eager``."""
        if self.framework in (Framework.MEGATRON, Framework.MAXTEXT):
            return self.attention is not Attention.EAGER
        return self.framework is Framework.FSDP and self.attention is Attention.FLASH

    @property
    def fused_layers(self) -> bool:
        """A layer saves what a fused stack's layer saves (blocks.fused) and its elementwise chains
        read and write once: a fused stack, torch.compile (Inductor's fusion and min-cut
        partitioner) or fused eager kernels (flash-attn's fused MLP, dropout-add-norm)."""
        return self.fused or self.compile or self.fused_kernels

    @property
    def knobs(self) -> bool:
        """Whether a recipe knob is on (workload.compile, lossKernel, ...)."""
        return (
            self.compile
            or self.fused_kernels
            or self.loss_kernel is not LossKernel.STANDARD
            or self.optimizer_in_backward
            or self.activation_offload
            or self.optimizer_offload
        )

    @property
    def without_knobs(self) -> JobProfile:
        """This job with every recipe knob off (the plan's note compares the two)."""
        return dataclasses.replace(
            self,
            compile=False,
            fused_kernels=False,
            loss_kernel=LossKernel.STANDARD,
            optimizer_in_backward=False,
            activation_offload=False,
            optimizer_offload=False,
        )

    @property
    def stage_layers(self) -> int:
        """Layers on the fullest pipeline stage: ceil(layers / pipelineParallel). An uneven split
        (Megatron's ``--decoder-first-pipeline-num-layers``, torchtitan's split points) is
        planned as its fullest stage."""
        return -(-self.shape.layers // self.pipeline_parallel)

    @property
    def in_flight(self) -> int:
        """Micro-batches whose activations the first pipeline stage holds under 1F1B (Narayanan
        et al. 2021, section 2.2.1: stage i of p keeps p − i forward passes alive; there are only
        gradientAccumulation micro-batches per flush)."""
        return min(self.pipeline_parallel, self.gradient_accumulation)

    @property
    def bubble(self) -> float:
        """Idle fraction of a 1F1B pipeline step: (p − 1) / (m + p − 1), with m = the micro-batches
        per flush = ``gradientAccumulation`` (Narayanan et al. 2021, section 2.2)."""
        p = self.pipeline_parallel
        return (p - 1) / (self.gradient_accumulation + p - 1)

    def shard_degree(self, data_parallel: int) -> int:
        """Ranks the model states are sharded over on ``data_parallel`` replicas: data × context
        parallel, or the hybrid sharding group within them (states are replicated across groups)."""
        ranks = data_parallel * self.context_parallel
        return min(self.hybrid_shard_degree, ranks) if self.hybrid_shard_degree else ranks

    @property
    def selective(self) -> bool:
        return self.recompute is Recompute.SELECTIVE

    @property
    def device_tokens(self) -> int:
        """Tokens of one micro-batch on one device: context parallelism splits every sequence."""
        return self.micro_batch * self.seq_len // self.context_parallel

    @property
    def fp8(self) -> bool:
        return self.precision is Precision.FP8

    @property
    def step_key(self) -> JobProfile:
        """This job with the token count (and notes) left out: what memory and step-time estimates
        depend on, so jobs that differ only in how long they train share them."""
        if self.tokens == 0 and not self.notes:
            return self
        return dataclasses.replace(self, tokens=0, notes=())

    @property
    def training(self) -> bool:
        return self.mode is WorkloadMode.TRAINING

    @property
    def step_tokens(self) -> int:
        """Tokens one data-parallel rank processes per step (training)."""
        return self.micro_batch * self.seq_len


def shape_from_architecture(arch: Architecture) -> Shape:
    gelu = arch.mlp is MlpKind.GELU
    return Shape(
        layers=arch.layers + (arch.encoder_layers or 0),
        hidden=arch.hidden,
        heads=arch.heads,
        kv_heads=arch.kv_heads_or_default,
        intermediate=arch.intermediate_or_default,
        vocab=arch.vocab,
        mlp=arch.mlp,
        tied=arch.tied_embeddings,
        rmsnorm=arch.norm_or_default == "rmsnorm",
        positions=arch.max_positions or 0,
        # GPT-2-style blocks (GELU MLP, LayerNorm) carry biases on every projection.
        biases=gelu and arch.norm_or_default == "layernorm",
        head_size=arch.head_dim or 0,
        experts=arch.experts_or_default,
        active_experts=arch.active_experts_or_default,
        cross_layers=arch.layers if arch.encoder_layers else 0,
    )


def shape_from_parameters(parameters: int) -> Shape:
    """A Llama-shaped model of about ``parameters``: hidden/layers = 128, head dim 128."""
    vocab = 32000
    best: Shape | None = None
    for hidden in range(256, 32768 + 1, 128):
        layers = max(1, round(hidden / 128))
        shape = Shape(
            layers=layers,
            hidden=hidden,
            heads=max(1, hidden // 128),
            kv_heads=max(1, hidden // 128),
            intermediate=256 * math.ceil(8 * hidden / 3 / 256),
            vocab=vocab,
            mlp=MlpKind.SWIGLU,
            tied=False,
            rmsnorm=True,
            positions=0,
            biases=False,
        )
        if best is None or abs(shape.params - parameters) < abs(best.params - parameters):
            best = shape
        if shape.params > parameters:
            break
    assert best is not None
    return best


def from_spec(spec: AcceleratorJobSpec) -> JobProfile:
    notes: list[str] = []
    arch = spec.model.architecture
    if arch is not None:
        shape = shape_from_architecture(arch)
    else:
        assert spec.model.parameters is not None  # the model validator guarantees one of them
        shape = shape_from_parameters(spec.model.parameters)
        notes.append(
            f"architecture inferred from {spec.model.parameters:,} parameters "
            f"(Llama-shaped: {shape.layers} layers, hidden {shape.hidden}); give model.architecture for exact figures"
        )
    w = spec.workload
    if shape.cross_layers:
        enc = shape.layers - shape.cross_layers
        notes.append(
            f"encoder-decoder: {enc} encoder layers (bidirectional attention) and {shape.cross_layers} decoder "
            f"layers, each with a cross-attention block over the encoder's output (its q, k, v, o products, "
            f"{shape.attention_matmul_params * shape.cross_layers / 1e6:.0f}M parameters in all, and its saved "
            f"q, k, v and output); inputs and targets are both planned at seqLen {w.seq_len} (an upper bound "
            f"where targets are shorter, as T5's 512-token inputs and 114-token span-corruption targets)"
        )
    if w.pipeline_parallel > 1 and shape.layers % w.pipeline_parallel:
        fullest = -(-shape.layers // w.pipeline_parallel)
        notes.append(
            f"pipelineParallel {w.pipeline_parallel} does not divide {shape.layers} layers: planned as its "
            f"fullest stage of {fullest} layers"
        )
    if w.mode is WorkloadMode.TRAINING:
        assert w.tokens is not None
        tokens = w.tokens
    else:
        tokens = w.tokens if w.tokens is not None else w.batch * w.new_tokens
    # Dropout is Hugging Face GPT-2's default; fused stacks (LLM Foundry's MPT configs: attn,
    # resid and emb pdrop 0) train without it.
    fused = (w.framework is Framework.FSDP and w.attention is Attention.FLASH) or (
        w.framework in (Framework.MEGATRON, Framework.MAXTEXT) and w.attention is not Attention.EAGER
    )
    gpt2_style = shape.mlp is MlpKind.GELU and not shape.rmsnorm and not fused
    sequence_parallel = _sequence_parallel(w.sequence_parallel, w.framework, w.tensor_parallel, notes)
    if w.hybrid_shard_degree:
        notes.append(
            f"hybrid sharding: weights, gradients and optimizer states sharded over groups of "
            f"{w.hybrid_shard_degree} data-parallel ranks (their per-device share is 1/{w.hybrid_shard_degree}, "
            f"whatever the devices) and replicated across the groups; the parameter all-gathers stay in a "
            f"group, the gradients are all-reduced across groups"
        )
    _knob_notes(w, shape, fused, notes)
    training = w.mode is WorkloadMode.TRAINING
    adapter = AdapterProfile.of(w.adapter) if w.adapter is not None else None
    num = numerics(w.precision, w.framework, w.sharding)
    if adapter is not None:
        # The frozen base runs in bf16 (its quantised linears dequantised to bf16 for the
        # products): a bf16 residual stream and activations, no fp32 master; the adapters' fp32
        # weights and states are counted apart (planning.adapter).
        num = Numerics(param=2, compute=2, residual=2, autocast=False)
        notes.append(_adapter_note(shape, adapter))
    return JobProfile(
        shape=shape,
        mode=w.mode,
        precision=w.precision,
        numerics=num,
        optimizer=w.optimizer,
        micro_batch=w.micro_batch,
        seq_len=w.seq_len,
        checkpointing=w.recompute_or_default is Recompute.FULL,
        sharding=w.sharding,
        tensor_parallel=w.tensor_parallel,
        attention=w.attention,
        tokens=tokens,
        batch=w.batch,
        prompt_len=w.prompt_len,
        new_tokens=w.new_tokens,
        dropout=GPT2_DROPOUT if gpt2_style and w.mode is WorkloadMode.TRAINING else 0.0,
        notes=tuple(notes),
        framework=w.framework,
        recompute=w.recompute_or_default,
        pipeline_parallel=w.pipeline_parallel,
        context_parallel=w.context_parallel,
        gradient_accumulation=w.gradient_accumulation,
        sequence_parallel=sequence_parallel,
        hybrid_shard_degree=w.hybrid_shard_degree or 0,
        # The recipe knobs are training's (_knob_notes says so for an inference job).
        compile=training and w.compile and not fused,
        loss_kernel=w.loss_kernel if training else LossKernel.STANDARD,
        fused_kernels=training and w.fused_kernels and not fused,
        optimizer_in_backward=training and w.optimizer_in_backward,
        activation_offload=training and w.activation_offload,
        optimizer_offload=training and w.optimizer_offload is OptimizerOffload.CPU,
        adapter=adapter,
    )


def _adapter_note(shape: Shape, a: AdapterProfile) -> str:
    """What the adapter changes, for the plan's notes."""
    n = trainable_params(shape, a)
    base = f"{a.base_bytes_per_weight:.3g} bytes per weight of its linear layers" + (
        ", dequantised to bf16 one layer at a time for the products" if a.quantised else ""
    )
    return (
        f"{a.label}: {n:,} trainable parameters ({n / shape.params:.2%} of {shape.params:,}), fp32 with "
        f"their gradients and optimizer states (16 bytes each with AdamW); the frozen base holds no gradients "
        f"or optimizer state ({base}; embeddings, norms and LM head bf16); backward computes no weight "
        f"gradients for it (about 2/3 of a full fine-tune's FLOPs); each adapter keeps its dropout's input "
        f"(3 bytes per input feature per token)"
    )


def _sequence_parallel(asked: bool | None, framework: Framework, tp: int, notes: list[str]) -> bool:
    """``workload.sequenceParallel`` resolved as the framework does it (unset: on for Megatron
    with tensor parallelism, as Megatron-LM's and NeMo's recipes set ``--sequence-parallel``;
    MaxText always shards activations over its tensor axis; off for the PyTorch stacks), with a
    note that says its effect on memory."""
    if framework is Framework.MAXTEXT:
        return True
    on = asked if asked is not None else framework is Framework.MEGATRON and tp > 1
    if tp == 1:
        if asked:
            notes.append("sequenceParallel has no effect with tensorParallel 1")
        return False
    if on:
        notes.append(
            f"sequence parallelism over the {tp} tensor-parallel ranks: every activation of a layer is "
            f"divided by {tp}, sbh/t·(34 + 5as/h) bytes per layer (Korthikanti et al. 2022)"
        )
    else:
        notes.append(
            f"no sequence parallelism: the norms', dropouts' and products' inputs (10·sbh bytes of a "
            f"layer's 34·sbh) stay whole on each of the {tp} tensor-parallel ranks, sbh·(10 + 24/t + "
            f"5as/(ht)) per layer (Korthikanti et al. 2022); set workload.sequenceParallel: true to split them"
        )
    return on


# Published figures the knobs' notes cite (docs/planner.md, "Recipe knobs").
# torch.compile on FSDP Llama training: +10 to +23 % MFU by model size (IBM and PyTorch, "Maximizing
# training throughput using PyTorch FSDP and Torch.compile", PyTorch blog, 2024).
COMPILE_PUBLISHED = "+10-23 % MFU on FSDP Llama 7B-70B (IBM and PyTorch blog, 2024)"


def _knob_notes(w: Workload, shape: Shape, fused: bool, notes: list[str]) -> None:
    """The recipe knobs' notes: what each changes in memory and speed, by how much, and the source.
    Figures are for one data-parallel replica before sharding; the plan's components have the rest."""
    tokens = w.micro_batch * w.seq_len // w.context_parallel
    gb = 1e9
    if w.mode is not WorkloadMode.TRAINING:
        knobs = [
            name
            for name, on in (
                ("compile", w.compile),
                ("lossKernel", w.loss_kernel is not LossKernel.STANDARD),
                ("fusedKernels", w.fused_kernels),
                ("optimizerInBackward", w.optimizer_in_backward),
                ("activationOffload", w.activation_offload),
                ("optimizerOffload", w.optimizer_offload is not OptimizerOffload.NONE),
            )
            if on
        ]
        if knobs:
            notes.append(f"{', '.join(knobs)}: training knobs, not planned for inference")
        return
    if w.compile or w.fused_kernels:
        what = "torch.compile" if w.compile else "fused eager kernels (flash-attn's fused MLP, dropout-add-norm)"
        if fused:
            notes.append(
                f"{what}: already a fused stack ({w.framework.value}, attention {w.attention.value}): no change"
            )
        else:
            notes.append(
                f"{what}: a layer saves what a fused stack saves (its norms' and activation functions' "
                f"intermediates are recomputed inside the fused kernels), and each layer's elementwise chains "
                f"read and write once ({'published: ' + COMPILE_PUBLISHED if w.compile else 'a bandwidth model'})"
            )
    if w.loss_kernel is not LossKernel.STANDARD:
        standard = 3 * 4.0 * tokens * shape.vocab / w.tensor_parallel / gb
        if w.loss_kernel is LossKernel.CHUNKED:
            notes.append(
                f"chunked cross-entropy: about {standard:.2f} GB of fp32 logits and their gradient "
                f"([{tokens} tokens × {shape.vocab}] × 3) become one chunk of about tokens × hidden logits at a "
                f"time (Liger Kernel, Hsu et al. 2024); speed as the fused loss (no fp32 copies)"
            )
        else:
            notes.append(
                f"fused cross-entropy: about {standard:.2f} GB of fp32 logits and their gradient "
                f"([{tokens} tokens × {shape.vocab}] × 3) are never in memory (Cut Cross-Entropy, Wijmans et al. "
                f"2024: Gemma 2 2B's loss from 24 GB to 1 MB); its backward recomputes the logits: the LM "
                f"head's products once more"
            )
    if w.optimizer_in_backward:
        notes.append(
            "optimizer step in backward: each gradient is applied and freed as it is made, so of the "
            f"gradient buffer (about {shape.params * 4.0 / gb:.1f} GB in fp32 whole) only one layer's is alive "
            "(PyTorch tutorial 'How to save memory by fusing the optimizer step into the backward pass'); "
            "speed unchanged (the same optimizer work, interleaved)"
        )
    if w.activation_offload:
        notes.append(
            "activation offload: saved activations are copied to host memory in forward and back in "
            "backward on a side stream; about two layers' stay on the device; the copies run at "
            "PCIe speed and slow the step where compute does not hide them (torchtune's "
            "OffloadActivations; a bandwidth model, not measured here)"
        )
    if w.optimizer_offload is OptimizerOffload.CPU:
        notes.append(
            f"optimizer offload (ZeRO-Offload, Ren et al. 2021): optimizer states and fp32 master weights "
            f"(about {shape.params * 12.0 / gb:.1f} GB with AdamW, before sharding) in host memory; the step "
            f"runs on the CPU (CPU Adam) and 16-bit gradients go down and weights come up over PCIe "
            f"(a bandwidth model, not measured here)"
        )
