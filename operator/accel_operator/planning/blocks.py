"""What one transformer block does, op by op, as the memory and throughput models need it.

The figures follow the Hugging Face implementations the calibration measured (LlamaForCausalLM,
GPT2LMHeadModel) running in eager PyTorch:

- what autograd *saves* for backward, per token, in the dtype it is saved in (under autocast the
  residual stream stays fp32, every ``nn.Linear`` saves its own bf16 cast of its input, RMSNorm
  saves its fp32 input and normalised output, rotary embeddings save nothing that needs grad,
  SDPA/FlashAttention saves q, k, v and its output but no s×s scores, eager attention saves the
  fp32 softmax and its bf16 cast, GPT-2's ``gelu_new`` is a chain of elementwise ops whose fp32
  intermediates are saved, dropout saves a one-byte mask);
- the bytes each memory-bound (non-matmul) op reads and writes in the forward pass, and how
  many kernels it launches;
- the matrix products (GEMMs) per token.

"Shared" quantities are replicated on every tensor-parallel rank (norms, residual stream,
inputs of column-parallel projections); "split" ones are divided by the tensor-parallel degree.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_api.enums import Attention, MlpKind
from accel_operator.planning.cache import PlanCache, memoised
from accel_operator.planning.profile import Numerics, Shape


@dataclass(frozen=True, slots=True)
class Gemm:
    """A matrix product ``[tokens × k] @ [k × n]``; ``split_n``: column-parallel under TP."""

    n: int
    k: int
    split_n: bool


@dataclass(frozen=True, slots=True)
class Block:
    # Training: bytes per token autograd keeps for backward, per layer.
    saved_shared: float
    saved_split: float
    saved_per_score: float  # eager attention: per token per (head × key)
    checkpoint_input: float  # a checkpointed layer keeps only its input
    # Memory-bound ops: bytes read + written per token, forward and backward; kernel launches.
    fwd_bytes_shared: float
    fwd_bytes_split: float
    fwd_bytes_per_score: float
    bwd_bytes_shared: float
    bwd_bytes_split: float
    bwd_bytes_per_score: float
    fwd_kernels: int
    gemms: tuple[Gemm, ...]
    # Without autograd (inference): bytes per token alive at the peak inside the block.
    infer_held_shared: float
    infer_held_split: float
    infer_per_score: float
    # Training backward: bytes per token of gradient buffers alive inside one layer's backward.
    backward_transient_split: float
    backward_transient_per_score: float  # eager attention: softmax backward's fp32 buffers


@memoised(64)
def block(
    shape: Shape, num: Numerics, attention: Attention, dropout: float, *, cache: PlanCache | None = None
) -> Block:
    # A token routed to k experts passes through k MLPs: as one MLP k times as wide.
    h, q, kv, i = shape.hidden, shape.q_dim, shape.kv_dim, shape.intermediate * shape.active_experts
    r, a, n = num.residual, num.compute, num.norm_out
    eager = attention is Attention.EAGER
    swiglu = shape.mlp is MlpKind.SWIGLU
    rotary = shape.positions == 0
    drop = dropout > 0
    qkv_consumers = 3 if rotary else 1  # Llama: separate q/k/v Linears; GPT-2: one fused c_attn
    mlp_consumers = 2 if swiglu else 1

    # --- saved for backward -------------------------------------------------------------
    norm_saved = (4 + r) * h if shape.rmsnorm else r * h  # RMSNorm: fp32 input + normalised

    def proj_inputs(consumers: int) -> float:
        # Autocast casts a Linear's input per call (only leaf weights are cached).
        return (consumers if num.autocast else 1) * a * h

    attn_saved: float = a * (h + 2 * kv) + a * h  # q, k, v and the output (also the o_proj input)
    if shape.head_dim % 8:
        # SDPA pads the head dimension to a multiple of 8: the padded q, k, v and output are
        # saved, and o_proj saves its own contiguous copy of the sliced output.
        pad = (shape.head_dim + 8 - shape.head_dim % 8) / shape.head_dim
        attn_saved = attn_saved * pad + a * h
    if eager:
        attn_saved = a * 3 * h + 2 * a * h  # k, v repeated per head; out + contiguous copy
    if swiglu:
        mlp_saved = 4 * a * i  # silu input, silu output, up, product (down_proj input)
    elif num.autocast:
        mlp_saved = (12 + 2 * a) * i  # gelu_new: fp32 x, tanh, 1+tanh; bf16 0.5x and the cast
    else:
        mlp_saved = 5 * a * i
    saved_shared = 2 * norm_saved + proj_inputs(qkv_consumers) + proj_inputs(mlp_consumers)
    if drop:
        saved_shared += 2 * h  # two dropout masks (after attention, after MLP), one byte each
    saved_split = attn_saved + mlp_saved
    softmax_bytes = 4 if (rotary or num.autocast or a == 4) else a  # Llama upcasts the softmax
    # With dropout the PV product saves the dropout output (and its mask), else the cast softmax.
    per_score = softmax_bytes + 1 + a if drop else softmax_bytes + (a if softmax_bytes != a else 0)
    saved_per_score = (per_score if eager else 0.0) * shape.heads

    # --- traffic of memory-bound ops: bytes read + written per token -----------------------
    # Backward moves about twice the forward's bytes (an op's backward reads its output gradient
    # and saved inputs and writes one or two input gradients), except for chains of ops with a
    # constant operand (gelu_new, the eager score ops) whose backward is one pass each.
    kernels = 0
    if shape.rmsnorm:
        norm_bytes = 28.0 * h if r == 4 else (36.0 if r == 2 else 28.0) * h
        norm_kernels = 6 if r == 4 else 8
    else:
        norm_bytes, norm_kernels = float(r + n) * h, 1
    shared = 2 * norm_bytes
    kernels += 2 * norm_kernels
    if num.autocast:
        shared += (qkv_consumers + mlp_consumers) * (n + a) * h
        kernels += qkv_consumers + mlp_consumers
    shared += 2 * (2 * r + a) * h  # two residual adds
    kernels += 2
    if drop:
        shared += 2 * (2 * a + 1) * h
        kernels += 2
    split = 0.0
    if rotary:
        m = max(a, r)  # q * cos promotes to the residual dtype (fp32 under autocast)
        split += (h + kv) * (5 * a + 5 * m)
        kernels += 10
        if m != a:
            split += (h + kv) * (m + a)  # cast back for attention
            kernels += 2
    kernels += 1  # the attention kernel (its reads and writes are part of its time)
    if not eager and shape.head_dim % 8:
        # SDPA pads q, k, v to a multiple of 8 and the sliced output needs a contiguous copy.
        split += 2 * a * (h + 2 * kv) + 2 * a * h
        kernels += 4
    split_bwd = 2 * split
    per_score_bytes = 0.0
    if eager:
        per_score_bytes = (4 * a + 24) * shape.heads  # scale, mask, softmax, cast
        split += 2 * a * h  # transpose + contiguous
        split_bwd += 4 * a * h
        kernels += 6
    if swiglu:
        split += 5 * a * i
        split_bwd += 10 * a * i
        kernels += 2
    elif num.autocast:
        split += (64 + 6 * a) * i
        split_bwd += 1.25 * (64 + 6 * a) * i
        kernels += 10
    else:
        split += 18 * a * i
        split_bwd += 1.25 * 18 * a * i
        kernels += 8

    gemms: tuple[Gemm, ...]
    if rotary:
        gemms = (Gemm(q, h, True), Gemm(kv, h, True), Gemm(kv, h, True), Gemm(h, q, False))
    else:
        gemms = (Gemm(q + 2 * kv, h, True), Gemm(h, q, False))
    if swiglu:
        gemms += (Gemm(i, h, True), Gemm(i, h, True), Gemm(h, i, False))
    else:
        gemms += (Gemm(i, h, True), Gemm(h, i, False))
    kernels += len(gemms)
    if num.autocast:
        kernels += len(gemms)  # weight casts (cached per forward)

    # --- inference: alive at the peak inside the block (the MLP) -----------------------------
    # The caller's embedding output, the layer input, the residual and the normalised input.
    held_shared = 3 * r * h + n * h
    # SwiGLU: silu output, up, product; gelu_new: its input and a few (fp32 under autocast) temporaries.
    held_split = 3 * a * i if swiglu else a * i + 3 * (4 if num.autocast else a) * i
    infer_per_score = (8 + a) * shape.heads if eager else 0.0

    bwd_transient = 3 * a * i if swiglu else 3 * (4 if num.autocast else a) * i

    # Eager softmax backward: the bf16 gradient of the probabilities, its fp32 cast and the
    # fp32 gradient of the scores, for one layer.
    bwd_per_score = (a + 8) * shape.heads if eager else 0.0

    return Block(
        saved_shared=saved_shared,
        saved_split=saved_split,
        saved_per_score=saved_per_score,
        checkpoint_input=r * h,
        fwd_bytes_shared=shared,
        fwd_bytes_split=split,
        fwd_bytes_per_score=per_score_bytes,
        bwd_bytes_shared=2 * shared,
        bwd_bytes_split=split_bwd,
        bwd_bytes_per_score=per_score_bytes,
        fwd_kernels=kernels,
        gemms=gemms,
        infer_held_shared=held_shared,
        infer_held_split=held_split,
        infer_per_score=infer_per_score,
        backward_transient_split=bwd_transient,
        backward_transient_per_score=bwd_per_score,
    )


@dataclass(frozen=True, slots=True)
class Fused:
    """What a layer of a fused-kernel stack (LLM Foundry's MPT under FSDP) saves, per token. Its
    memory-bound ops (LayerNorm, GELU, residual adds) are still one eager kernel each, as in
    ``Block``: MPT's modules are plain PyTorch ones, so the traffic model is shared."""

    saved_shared: float  # bytes autograd keeps, replicated under TP
    saved_split: float  # ... divided by TP


@memoised(64)
def fused(shape: Shape, num: Numerics, *, cache: PlanCache | None = None) -> Fused:
    """What a layer of a fused stack saves, per token.

    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
    section 4.1, count 34·h + 5·a·s bytes per token and layer for 16-bit activations with
    dropout; here without dropout (no masks, no dropout outputs) and with FlashAttention
    (Dao 2022/2023: the kernel keeps its output O and the fp32 logsumexp per head and row, no
    s×s scores): each norm saves its 16-bit input and its output (the next product's input),
    the attention saves q, k, v and O (O is also the output projection's input), and the MLP
    saves its activation's input and output (SwiGLU: gate, up and their product). Everything is
    in the compute dtype: the mixed-precision policy casts the weights, not the activations,
    so there is no fp32 residual stream and no per-op cast copy.
    """
    h, kv, a = shape.hidden, shape.kv_dim, num.compute
    i = shape.intermediate * shape.active_experts
    swiglu = shape.mlp is MlpKind.SWIGLU
    shared = 2 * (a * h + a * h)  # two norms: input and output
    split = a * (shape.q_dim + 2 * kv) + a * shape.q_dim + 4.0 * shape.heads  # q, k, v, O, logsumexp
    split += (3 if swiglu else 2) * a * i
    return Fused(saved_shared=shared, saved_split=split)


@dataclass(frozen=True, slots=True)
class Head:
    """The final norm, the LM head and the loss, per token."""

    saved: float  # final norm + LM-head input, kept for backward
    logits_fwd_units: float  # copies of the fp32 logits alive at the loss in the forward pass
    logits_bwd_units: float  # ... in the loss's backward (nll grad, saved log-softmax, its grad)
    loss_bytes_per_logit: float  # bytes moved per logit element, forward + backward
    loss_kernels: int


@memoised(64)
def head(shape: Shape, num: Numerics, fused: bool = False, *, cache: PlanCache | None = None) -> Head:
    h, r, a = shape.hidden, num.residual, num.compute
    norm_saved = (4 + r) * h if shape.rmsnorm else r * h
    if fused:
        # A fused cross-entropy (LLM Foundry's ``fused_crossentropy``, flash-attn's
        # ``CrossEntropyLoss`` kernel) reads the 16-bit logits and writes their gradient in their
        # dtype: no fp32 copies. Alive: the logits, then the logits and their gradient.
        return Head(
            saved=2 * a * h,
            logits_fwd_units=a / 4,
            logits_bwd_units=2 * a / 4,
            loss_bytes_per_logit=3.0 * a,  # forward reads the logits; backward reads, writes
            loss_kernels=4,
        )
    # HF's loss upcasts the logits to fp32 (a copy unless they are fp32 already) and
    # cross_entropy saves its log-softmax output; backward adds the nll gradient and the
    # log-softmax gradient, all fp32 [tokens × vocab].
    cast_copy = 0.0 if a == 4 else a / 4
    return Head(
        saved=norm_saved + a * h,
        logits_fwd_units=cast_copy + 2.0,
        logits_bwd_units=3.0,
        loss_bytes_per_logit=(a + 4) + 12 + 4 + 12 + (4 + a) if a != 4 else 4 + 12 + 4 + 12 + 8,
        loss_kernels=12,
    )
