"""Memory terms of the compiled or fused training stacks: Megatron-LM/NeMo and MaxText.

The Hugging Face and FSDP models (``blocks.block`` and ``blocks.fused``) count what eager PyTorch
saves op by op. Megatron-LM (with Transformer Engine) and MaxText (JAX/XLA) run fused kernels on
16-bit activations and shard or recompute them by their own rules; this module gives those rules
per token and per parameter, with their sources, and ``memory`` adds them up at each moment of a
step. Notation: h hidden, q = heads × headDim, kv = kvHeads × headDim, i the MLP width (× the
active experts), a the bytes of the compute dtype (2), t the tensor-parallel degree.

Megatron-LM (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4; Megatron-LM's ``docs/source/distrib_optimizer.md``):

- A layer saves sbh(34 + 5as/h) bytes for a sequences of s tokens and b sequences with dropout and
  an unfused softmax: 11sbh + 5as²b for attention, 19sbh for the MLP, 4sbh for the two
  LayerNorms. With tensor parallelism alone the norms, dropouts and the inputs of the first
  products stay whole: sbh(10 + 24/t + 5as/(ht)). Sequence parallelism shards those along the
  sequence, so everything is divided by t: sbh/t · (34 + 5as/h). Megatron's (and NeMo's)
  configurations turn sequence parallelism on with tensor parallelism, the planner's default
  (``workload.sequenceParallel`` unset); ``sequenceParallel: false`` keeps them whole.
- Selective recompute (``--recompute-granularity selective``, modules ``core_attn``) recomputes
  the softmax, its dropout and the product with V: the 5as² term goes, sbh·34/t stays. With
  Transformer Engine's fused (flash) attention, the s² term never existed; the planner counts
  the fused block (``blocks.fused``: two norm inputs, the inputs of the QKV and first MLP
  products, q, k, v, the attention output, the MLP activation's input and output) without
  dropout masks (current Llama-style configurations train with dropout 0) and, under selective
  recompute, without the attention's fp32 logsumexp.
- Full recompute (``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1``) keeps each layer's input, 2sbh/t with sequence parallelism, and
  rebuilds one layer at a time in backward.
- FP8 (Transformer Engine): the products keep FP8 (1-byte) copies of their inputs for the
  weight gradients instead of 16-bit ones; the fused attention keeps its 16-bit tensors.
- Model states for bf16 with fp32 main gradients and Adam: 2 (bf16 weights) + 4 (fp32 gradient
  buffer) + 12 (fp32 master weights and two moments) = 18 bytes per parameter; the distributed
  optimizer shards the 12 over the data-parallel (× context-parallel) ranks: 6 + 12/d (the
  table in ``distrib_optimizer.md``). The gradient buckets are views into the gradient buffer
  (no second copy, unlike PyTorch DDP). FP8 adds Transformer Engine's cached FP8 weight and its
  transpose (2 bytes per product parameter).
- The cross-entropy is Megatron's vocabulary-parallel one: the 16-bit logits [tokens × V/t] and
  the fp32 softmax it saves (6 bytes per logit in forward, the fp32 gradient and its 16-bit
  cast in backward).

MaxText (``MaxText/configs/base.yml`` and ``layers/decoders.py``; JAX's
``jax.checkpoint_policies``):

- Activations are sharded over the tensor-parallel chips along the hidden, MLP and head
  dimensions (``logical_axis_rules``), so every term is divided by t.
- Weights are fp32 (``weight_dtype: float32``), activations bf16 (``dtype: bfloat16``); Adam's
  moments fp32 and the gradients fp32: 16 bytes per parameter, sharded over the ``fsdp`` mesh
  axis (``sharding: fsdp|zero3`` here; MaxText's default mesh puts every device on it), with the
  current and next scanned layer's weights all-gathered in bf16.
- ``remat_policy``: ``full`` keeps only the scanned layer's input (``recompute: full``);
  ``minimal`` (``checkpoint_dots_with_no_batch_dims``: every weight product's output) is
  ``recompute: selective``: the layer input, q, k, v, the attention projection's output, the
  MLP's input products and its output; ``none`` saves what autodiff needs (the fused block).
- XLA has no caching allocator: the program's buffers are assigned at compile time, so nothing is
  stranded between steps (the planner's peak is ``memory_stats()['peak_bytes_in_use']``; on GPU
  XLA preallocates 75 % of the device by default, which NVML shows whatever the job).
- When the policy's saved values do not fit, XLA's rematerialization pass recomputes some of them
  until the program fits the device (``memory.xla_remat_fraction``); the job fits while full remat
  would, at the cost of that recomputation in backward (``throughput``).
- Throughput: one compiled program per step (no host dispatch); elementwise chains fused
  (``TPU_FUSION``); the tensor-parallel collectives asynchronous and overlapped with the layer's
  matrix products (the ``--xla_tpu_enable_async_collective_fusion`` /
  ``--xla_tpu_overlap_compute_collective_tc`` flags of MaxText's TPU configurations); the TPU
  matrix units at the catalog's efficiency (0.90 for v5e and v5p, bounded below by MaxText's v5e
  table: ``tests/data/published/README.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_api.enums import Framework, MlpKind, Recompute, Sharding
from accel_operator.planning import blocks
from accel_operator.planning.cache import PlanCache, memoised
from accel_operator.planning.profile import JobProfile

# Megatron's vocabulary-parallel cross-entropy, in units of one fp32 [tokens × V/t] tensor: the
# 16-bit logits and the fp32 softmax it saves (forward), the fp32 gradient and its 16-bit cast
# (backward). MaxText's cross_entropy_with_logits upcasts its bf16 logits the same way.
STACK_LOGITS_UNITS = 1.5
# Transformer Engine's FP8 weight cache: an FP8 copy of each product's weight and its transpose.
FP8_WEIGHT_CACHE_BYTES = 2.0


@dataclass(frozen=True, slots=True)
class Activations:
    """Bytes per token one device keeps for backward (after tensor and sequence parallelism)."""

    layer: float  # one layer, as the step's recompute policy keeps it
    full_layer: float  # one layer with nothing recomputed (the layer rebuilt in backward)
    head: float  # the final norm's and the output layer's inputs
    backward_transient: float  # gradient buffers alive inside one layer's backward


@memoised(64)
def activations(w: JobProfile, tp: int, *, cache: PlanCache | None = None) -> Activations:
    s, num = w.shape, w.numerics
    a, h = num.compute, s.hidden
    i = s.intermediate * s.active_experts
    fb = blocks.fused(s, num, cache=cache)
    lse = 4.0 * s.heads
    eager = not w.fused
    if w.framework is Framework.MEGATRON:
        shared, split = fb.saved_shared, fb.saved_split
        if w.fp8:
            # FP8 copies (1 byte) of the QKV and first MLP products' inputs replace the 16-bit
            # norm outputs; the attention projection's and second MLP product's inputs too.
            mlp_in = i  # second MLP product's input: the activation's output
            shared -= 2 * (a - 1) * h
            split += s.q_dim - (a - 1) * mlp_in
        if eager:
            # Korthikanti's 5as² per sequence: softmax output (2), dropout mask (1) and output (2).
            split += 5.0 * s.heads * w.seq_len - lse
        if w.recompute is Recompute.SELECTIVE:
            split -= 5.0 * s.heads * w.seq_len if eager else lse
        # Sequence parallelism divides everything by t; without it the norms', dropouts' and the
        # products' inputs (``shared``), the layer input and the head's inputs stay whole.
        sp = tp if w.sequence_parallel else 1
        full = shared / sp + split / tp
        keep = a * h / sp if w.recompute is Recompute.FULL else full
        head = 2.0 * a * h / sp
        transient = (3 if s.mlp is MlpKind.SWIGLU else 2) * a * i / tp
        return Activations(layer=keep, full_layer=full, head=head, backward_transient=transient)
    # MaxText: its logical axis rules (base.yml: activation_embed, activation_mlp and
    # activation_heads on the ``tensor`` mesh axis) shard every activation over the
    # tensor-parallel chips, the residual stream too, as sequence parallelism does.
    full = (fb.saved_shared + a * h + fb.saved_split + (5.0 * s.heads * w.seq_len if eager else 0.0)) / tp
    if w.recompute is Recompute.FULL:
        keep = a * h / tp
    elif w.recompute is Recompute.SELECTIVE:
        mlp_in = (2 if s.mlp is MlpKind.SWIGLU else 1) * i
        keep = a * (h + s.q_dim + 2 * s.kv_dim + h + mlp_in + h) / tp
    else:
        keep = full
    head = 2.0 * a * h / tp
    transient = (3 if s.mlp is MlpKind.SWIGLU else 2) * a * i / tp
    return Activations(layer=keep, full_layer=full, head=head, backward_transient=transient)


@dataclass(frozen=True, slots=True)
class States:
    """Bytes per parameter of one device's model states, before and after sharding."""

    weights: float
    weights_sharded: float  # ... divided by the sharding degree
    grads: float
    grads_sharded: float
    optimizer: float  # per parameter, always sharded where the stack shards the optimizer
    optimizer_sharded: bool


def states(w: JobProfile, optimizer_bytes_per_param: float) -> States:
    """Model-state bytes per parameter; ``optimizer_bytes_per_param``: fp32 moments (Adam: 8)."""
    num = w.numerics
    sharded = w.sharding is not Sharding.NONE
    full = w.sharding in (Sharding.ZERO3, Sharding.FSDP)
    if w.framework is Framework.MAXTEXT:
        # fp32 weights, gradients and moments (a bf16 job keeps bf16 weights and gradients).
        p = float(num.param)
        return States(
            weights=0.0 if full else p,
            weights_sharded=p if full else 0.0,
            grads=0.0 if full else p,
            grads_sharded=p if full else 0.0,
            optimizer=optimizer_bytes_per_param * p / 4,
            optimizer_sharded=sharded,
        )
    # Megatron: 16-bit weights, an fp32 gradient buffer, fp32 master weights + moments. ZeRO-1
    # is the distributed optimizer (the gradient buffer whole, reduce-scattered in place:
    # docs/source/distrib_optimizer.md, 6 + 12/d bytes per parameter); ZeRO-2 shards the
    # gradients too (Megatron-FSDP's ``--data-parallel-sharding-strategy optim_grads``; Llama 3's
    # FSDP "shards the optimizer states and gradients" but keeps the weights after forward,
    # Llama Team 2024, "The Llama 3 Herd of Models", section 3.3.2).
    master = 4.0 if num.param == 4 else 0.0
    grad = 4.0 if num.param == 4 else float(num.param)
    weight = float(num.compute) if num.param == 4 else float(num.param)
    grads_split = full or w.sharding is Sharding.ZERO2
    return States(
        weights=0.0 if full else weight,
        weights_sharded=weight if full else 0.0,
        grads=0.0 if grads_split else grad,
        grads_sharded=grad if grads_split else 0.0,
        optimizer=master + optimizer_bytes_per_param * (num.param / 4 if num.param != 4 else 1.0),
        optimizer_sharded=sharded,
    )
