"""Memory model: bytes per device for one placement of a job, and whether it fits.

Training: the peak of ``torch.cuda.max_memory_allocated`` over steady-state steps is the largest
of four moments, each a sum of what is alive then:

- the loss in the forward pass (all saved activations, autocast's cached bf16 weight copies,
  the logits and their fp32 copies);
- the loss's backward (three fp32 [tokens × vocab] tensors: often the peak of small models with
  large vocabularies);
- the first layers' backward (gradients appear while activations are still alive);
- the optimizer step (weights, all gradients and the optimizer states, which the first step
  allocates while the gradients are alive).

Optimizer states exist from the first step on, so they count at every moment. Sharding (ZeRO
1/2/3, FSDP) divides states, gradients and weights by the data-parallel degree; tensor
parallelism divides the layers' matrices and the split activations.

Inference: weights, the KV cache of Hugging Face's dynamic cache (which grows by concatenation)
and the prefill's transient activations, or the decode's per-step buffers.

The device footprint NVML shows is the caching allocator's reserve (the peak plus what the
allocator strands) plus the runtime context, and on a rank of several GPUs NCCL's buffers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from accel_api.catalog import Accelerator
from accel_api.enums import (
    AcceleratorKind,
    Attention,
    BaseWeights,
    Framework,
    LossKernel,
    Optimizer,
    Precision,
    Recompute,
    Sharding,
)
from accel_operator.planning import adapter, blocks, stacks
from accel_operator.planning.cache import PlanCache, memoised
from accel_operator.planning.layout import Layout
from accel_operator.planning.profile import JobProfile, Shape

GB = 1e9
# Headroom kept free on the device: the planner refuses a placement whose requirement (below)
# is above (1 - SAFETY) × memory.
SAFETY = 0.02
# PyTorch's caching allocator rounds blocks up and splits cached segments; of the memory that
# is allocated and freed again every training step it strands about this fraction (measured on
# H100 with PyTorch 2.11: reserved − allocated is 6–9 % of the per-step transient bytes without
# gradient checkpointing; with it 14–38 %, which this constant underestimates).
TRAINING_STRANDED = 0.08
# A rank of several GPUs holds NCCL's communicator buffers (per channel and peer, for each
# protocol) outside PyTorch's caching allocator: NVML's used memory less the allocator's reserved is
# 0.30 GB more on every DDP and FSDP2 rank than on one GPU alone on the same host (H100 hosts: 2.20-2.21
# GB over 43 several-GPU rows against 1.90-1.91 over 13 lone ones; 4 x H200: 2.34 against 2.04 GB;
# NCCL 2.28.9; the same at 2 and 4 ranks; tests/data/calibration/multi-gpu/). cudaMalloc'd by NCCL,
# the allocator cannot give it back: it counts in what the step needs. Measured with one process
# group; Megatron's several groups (tensor, pipeline, data) are not.
NCCL_BYTES = 300_000_000
# bitsandbytes' 8-bit Adam: two 1-byte states plus an fp32 absmax per 2048-element block for
# tensors of at least 4096 elements; smaller tensors keep 32-bit states.
ADAM8_BLOCK = 2048
ADAM8_MIN = 4096
# PyTorch DDP copies gradients into communication buckets (gradient_as_bucket_view=False);
# ZeRO-2 keeps reduce buckets of about this many bytes.
ZERO_BUCKET_BYTES = 2 * 25 * 2**20
# LoRA/QLoRA with gradient checkpointing: the step's transients are the logits and one recomputed
# layer's tensors at a time around a small persistent base, and the allocator strands far more of
# them (reserved − allocated over the transient bytes: 0.24-0.54 on the 15 checkpointed rows of
# tests/data/calibration/lora; 0.04-0.08 without checkpointing, as TRAINING_STRANDED has it).
ADAPTER_CHECKPOINT_STRANDED = 0.45


class MemoryEstimate(NamedTuple):
    """Per-device memory of one placement. A NamedTuple (immutable) rather than a frozen
    dataclass: plan() builds one per layout and tuples are several times cheaper to build."""

    peak_allocated_bytes: int  # comparable to torch.cuda.max_memory_allocated, per device
    reserved_bytes: int  # the caching allocator's reserve at that peak
    footprint_bytes: int  # what NVML shows as used: reserved + runtime context
    device_bytes: int
    fits: bool
    peak_at: str  # the moment of the peak, e.g. "loss backward", "optimizer step", "prefill"
    components: tuple[tuple[str, float], ...]  # what is alive at the peak (bytes)
    moments: tuple[tuple[str, float], ...] = ()  # bytes alive at each moment considered (no workspace)
    # What the device must hold for the step to run: the footprint less what the caching
    # allocator gives back when an allocation fails (see _result); 0: the footprint.
    required: int = 0

    @property
    def usable_bytes(self) -> int:
        return int(self.device_bytes * (1 - SAFETY))

    @property
    def required_bytes(self) -> int:
        """What fitting is judged on: peak allocated + runtime context, plus the allocator's
        reserve where it cannot give it back (inference's second cache generation)."""
        return self.required or self.footprint_bytes

    @property
    def reason(self) -> str:
        """One line: "fits: 41.3 GB of 85.5 GB per device ..." or "needs 93.1 GB per device > ..."."""
        if self.fits:
            return (
                f"fits: {self.footprint_bytes / GB:.1f} GB of {self.device_bytes / GB:.1f} GB per device "
                f"(peak at {self.peak_at})"
            )
        return (
            f"needs {self.required_bytes / GB:.1f} GB per device > {self.usable_bytes / GB:.1f} GB usable "
            f"(peak at {self.peak_at})"
        )


@memoised(64)
def _optimizer_state_bytes(shape: Shape, optimizer: Optimizer, p: int, *, cache: PlanCache | None = None) -> float:
    """Optimizer state bytes for the whole model (before any sharding); ``p``: parameter bytes."""
    n = shape.params
    if optimizer is Optimizer.ADAMW:
        return 2.0 * p * n  # exp_avg, exp_avg_sq in the parameters' dtype (fused AdamW)
    if optimizer is Optimizer.SGD:
        return 1.0 * p * n  # momentum buffer
    if optimizer is Optimizer.ADAFACTOR:
        # Factored second moment (row + column) per matrix, full for vectors; no first moment.
        return float(p * (sum((rows + cols) * n for rows, cols, n in shape.matrices()) + shape.vector_params))
    big = sum(rows * cols * n for rows, cols, n in shape.matrices() if rows * cols >= ADAM8_MIN)
    small = n - big
    return 2.0 * big + 2 * 4.0 * big / ADAM8_BLOCK + 8.0 * small


def _optimizer_temp_bytes(w: JobProfile, tp: int) -> float:
    """Scratch the optimizer step allocates while weights, grads and states are alive."""
    if w.optimizer is Optimizer.ADAFACTOR:
        # HF Adafactor updates one tensor at a time with a few fp32 temporaries of its size.
        largest = w.shape.largest_matrix / tp
        return 3 * 4.0 * largest
    return 0.0  # fused AdamW, foreach SGD (momentum in place) and bitsandbytes: in place


def _deepspeed_states(w: JobProfile, tp: int, dp: int, *, cache: PlanCache | None = None) -> tuple[float, float, float]:
    """DeepSpeed's mixed-precision model states per device: (16-bit weights, gradients, optimizer).

    DeepSpeed's own accounting (``estimate_zero2_model_states_mem_needs`` in
    ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``estimate_zero3_model_states_mem_needs`` in
    ``stage3.py``, after PR #5099): 16-bit parameters 2Ψ (sharded only by ZeRO-3, which keeps
    the largest layer's 16-bit parameters and gradients gathered: 4 × largest layer) and 18Ψ/N of
    sharded state: 16-bit gradients 2, fp32 gradients 4, fp32 master parameters 4 and Adam's two
    moments 8. ZeRO-1 partitions only the optimizer: its 16-bit gradients stay whole (2Ψ), as in
    the ZeRO paper's P_os = 4Ψ + KΨ/N (Rajbhandari et al. 2020, section 5).
    """
    n = _params(w, tp).total
    master = _optimizer_state_bytes(w.shape, w.optimizer, 4, cache=cache) / tp + 4.0 * n  # moments + fp32 master
    if w.sharding is Sharding.ZERO3:
        largest = w.shape.largest_matrix / tp
        return 2.0 * n / dp + 2.0 * largest, 6.0 * n / dp + 2.0 * largest, master / dp
    if w.sharding is Sharding.ZERO1:
        return 2.0 * n, 2.0 * n + 4.0 * n / dp, master / dp
    if w.sharding is Sharding.NONE:
        return 2.0 * n, 2.0 * n, master  # no ZeRO: the paper's (2 + 2 + K)Ψ
    return 2.0 * n, 6.0 * n / dp, master / dp


def sharded_mixed_precision(w: JobProfile) -> bool:
    """ZeRO-1/2 (or FSDP ``SHARD_GRAD_OP``) with fp32 master weights and 16-bit compute: the
    model runs on a 16-bit working copy that stays whole while the fp32 master is sharded."""
    return w.sharding in (Sharding.ZERO1, Sharding.ZERO2) and w.numerics.param == 4 and w.numerics.compute < 4


def _model_states(
    w: JobProfile, tp: int, dp: int, params: float, held: float, *, cache: PlanCache | None
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) per device for ``params`` parameters held, of which
    ``held`` is the share of the model's optimizer states (a pipeline stage's share).

    What stays whole and what is divided by the sharding degree N (docs/planner.md, "Sharded
    memory", has the table with its sources), for mixed precision (fp32 master, 16-bit compute):

    - none (DDP under autocast): the fp32 parameters are the master; weights, gradients and
      states whole (autocast's 16-bit copies are transient, counted at their moments).
    - zero1: the 16-bit working copy and its 16-bit gradients whole; the fp32 master, its fp32
      gradient partition and the states sharded (ZeRO paper P_os = 4Ψ + KΨ/N, K = 12 for the
      master and Adam's moments; DeepSpeed's stage 1/2 keeps the fp32 gradient partition).
    - zero2 (DeepSpeed stage 2, FSDP ``SHARD_GRAD_OP``, FSDP2 ``reshard_after_forward=False``):
      only the 16-bit working copy whole; master, gradients (reduce-scattered into fp32 shards)
      and states sharded: 2Ψ + 16Ψ/N (ZeRO's P_os+g = 2Ψ + (2 + K)Ψ/N).
    - zero3 / fsdp (FULL_SHARD, FSDP2 ``reshard_after_forward=True``): everything sharded, 16Ψ/N;
      the gathered layers are counted at their moments.

    ``framework: deepspeed`` keeps DeepSpeed's own accounting (``_deepspeed_states``). Pure 16-bit
    or fp32 training has no master: weights sharded by zero3/fsdp, gradients by zero2 and up,
    states by every stage.
    """
    num = w.numerics
    share = params / _params(w, tp).total
    if w.framework is Framework.DEEPSPEED and num.param == 4:
        weights, grads, states = _deepspeed_states(w, tp, dp, cache=cache)
        return weights * share, grads * share, states * held
    states = _optimizer_state_bytes(w.shape, w.optimizer, num.param, cache=cache) / tp * held
    states /= dp if w.sharding is not Sharding.NONE else 1
    if sharded_mixed_precision(w):
        weights = params * (num.compute + num.param / dp)
        if w.sharding is Sharding.ZERO1:
            return weights, params * (num.compute + num.param / dp), states
        return weights, params * num.param / dp, states
    shard_w = dp if w.sharding in (Sharding.ZERO3, Sharding.FSDP) else 1
    shard_g = dp if w.sharding in (Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP) else 1
    return params * num.param / shard_w, params * num.param / shard_g, states


def model_state_bytes(w: JobProfile, tp: int, dp: int, *, cache: PlanCache | None = None) -> float:
    """Weights, gradients and optimizer states per device (no activations or buffers)."""
    return sum(_model_states(w, tp, dp, _params(w, tp).total, 1.0, cache=cache))


@dataclass(frozen=True, slots=True)
class _Params:
    total: float  # parameters held per device before ZeRO sharding
    matmul: float  # of which take part in matrix products
    layer: float  # one layer's parameters per device


def _params(w: JobProfile, tp: int) -> _Params:
    s = w.shape
    layer = s.layer_matmul_params / tp + s.layer_bias_params / tp + 2 * s.norm_params + s.cross_norm_params
    # A pipeline stage holds its layers; both ends (embedding, head) are counted on it (at most
    # a stage's worth too many: the stacks' model in _stack_peak splits them).
    total = w.stage_layers * layer + (s.embedding_params + s.head_params) / tp + s.norm_params
    return _Params(total=total, matmul=s.matmul_params / tp, layer=layer)


def layer_saved(w: JobProfile, tp: int, *, cache: PlanCache | None = None) -> float:
    """Bytes a layer saves for backward per token on one device (no recomputation).

    A fused stack, torch.compile or fused eager kernels (``JobProfile.fused_layers``) save what
    ``blocks.fused`` counts: Inductor's min-cut partitioner and flash-attn's fused MLP and
    dropout-add-norm keep a chain's inputs and recompute its intermediates. Outside a fused
    stack the norms' inputs are in the residual dtype (fp32 under autocast), dropout adds its
    one-byte masks, and eager attention still saves its scores."""
    s, num = w.shape, w.numerics
    blk = blocks.block(s, num, w.attention, w.dropout, cache=cache)
    sp = tp if w.sequence_parallel else 1
    per_score = 0.0 if w.selective else blk.saved_per_score * w.seq_len / tp
    if s.cross_layers:
        # Encoder-decoder: each decoder layer's cross-attention saves its norm's input and output
        # (the q product's input), q and its output, the k and v of the encoder's tokens (as many
        # as the decoder's: both at seqLen), the fp32 logsumexp and, unfused, its scores; spread
        # over all layers as the layer count is.
        a = num.compute
        cross_shared = (max(num.residual, a) + a) * s.hidden
        cross_split = a * (2 * s.q_dim + 2 * s.kv_dim) + 4.0 * s.heads
        cross = s.cross_layers / s.layers * (cross_shared / sp + cross_split / tp + per_score)
    else:
        cross = 0.0
    if not w.fused_layers:
        return blk.saved_shared / sp + blk.saved_split / tp + per_score + cross
    fb = blocks.fused(s, num, cache=cache)
    # Selective recompute rebuilds the attention's output statistics (fp32 logsumexp).
    split = (fb.saved_split - (4.0 * s.heads if w.selective else 0.0)) / tp
    if w.fused:
        return fb.saved_shared / sp + split + cross
    shared = fb.saved_shared * max(num.residual, num.compute) / num.compute + (2.0 * s.hidden if w.dropout > 0 else 0.0)
    return shared / sp + split + (per_score if w.attention is Attention.EAGER else 0.0) + cross


def _knobs(
    w: JobProfile,
    moments: list[tuple[str, dict[str, float]]],
    *,
    tp: int,
    master: float,
    layer_grad: float,
    one_layer: float,
    head_saved: float,
) -> list[tuple[str, dict[str, float]]]:
    """The recipe knobs applied to a step's moments (docs/planner.md, "Recipe knobs").

    ``master``: the bytes of the weights that are the fp32 master (ZeRO-Offload moves them to the
    host); ``layer_grad``: the gradient bytes of the largest unit (a layer or the LM head) that
    the optimizer step in backward keeps; ``one_layer``: one layer's saved activations (an
    offloaded step keeps two on the device), ``head_saved``: the final norm's and the LM head's."""
    loss = w.loss_kernel is not LossKernel.STANDARD
    if not (loss or w.optimizer_in_backward or w.activation_offload or w.optimizer_offload):
        return moments
    s, num = w.shape, w.numerics
    chunk = (num.compute + 4.0) * w.device_tokens * s.hidden / tp  # Liger: chunk × vocab ≈ tokens × hidden
    out: list[tuple[str, dict[str, float]]] = []
    for name, before in moments:
        parts = dict(before)
        if "logits" in parts and loss:
            parts["logits"] = 0.0 if w.loss_kernel is LossKernel.FUSED else min(parts["logits"], chunk)
        if w.activation_offload and "activations" in parts:
            parts["activations"] = min(parts["activations"], 2 * one_layer + head_saved)
        if w.optimizer_in_backward and "gradients" in parts:
            parts["gradients"] = min(parts["gradients"], layer_grad)
        if w.optimizer_offload:
            parts["optimizer states"] = 0.0
            parts["weights"] = max(0.0, parts.get("weights", 0.0) - master)
            if "gradients" in parts and num.param == 4:
                # The fp32 gradient partition is on the host; 16-bit gradients stay until copied.
                parts["gradients"] *= num.compute / num.param
        out.append((name, parts))
    return out


def _persistent(moments: list[tuple[str, dict[str, float]]]) -> float:
    """What is alive at every moment (weights, states, buckets): the last moment's (the step's)."""
    parts = moments[-1][1]
    return parts.get("weights", 0.0) + parts.get("optimizer states", 0.0) + parts.get("buckets", 0.0)


@dataclass(frozen=True, slots=True)
class _Peak:
    """The largest of a step's moments, independent of the device it runs on."""

    at: str
    components: tuple[tuple[str, float], ...]
    allocated: int
    stranded: int
    moments: tuple[tuple[str, float], ...]


def _peak(moments: list[tuple[str, dict[str, float]]], stranded: float) -> _Peak:
    at, parts = max(moments, key=lambda m: sum(m[1].values()))
    totals = tuple((name, sum(p.values())) for name, p in moments)
    return _Peak(at, tuple((k, v) for k, v in parts.items() if v > 0), int(sum(parts.values())), int(stranded), totals)


def _result(peak: _Peak, accel: Accelerator, *, reclaimable: bool = True) -> MemoryEstimate:
    """The estimate of ``peak`` on ``accel``. ``reclaimable``: the stranded bytes are free cached
    blocks that the allocator releases when an allocation fails, so they count in the footprint
    NVML shows on a roomy card but not in what the step needs.

    PyTorch's caching allocator, when cudaMalloc fails, frees its cached unused blocks and
    retries before it raises an out-of-memory error (``CUDACachingAllocator.cpp``:
    ``release_cached_blocks`` then the retry; docs "CUDA semantics", memory management). A
    training step's stranded reserve (TRAINING_STRANDED) is such blocks, so near a full card
    the step runs where its roomy footprint would not fit: measured on one H100 80GB
    (tests/data/calibration/h100-eager-gpt3-2.7b.jsonl), the eager GPT-3 2.7B step at 1×2048
    reached 83.08 GB allocated of the 84.21 GB left beside the 1.31 GB context before an
    allocation of its attention scores failed, where the 8 % reserve would have been 3 GB. The
    SAFETY headroom (1.7 GB on an H100) covers the blocks that stay split."""
    # The framework's workspace is alive at every moment; it never moves the peak.
    allocated = peak.allocated + accel.workspace_bytes
    reserved = allocated + peak.stranded
    footprint = reserved + accel.context_bytes
    required = allocated + accel.context_bytes if reclaimable else footprint
    return MemoryEstimate(
        peak_allocated_bytes=allocated,
        reserved_bytes=reserved,
        footprint_bytes=footprint,
        device_bytes=accel.memory_bytes,
        fits=required <= accel.memory_bytes * (1 - SAFETY),
        peak_at=peak.at,
        components=(*peak.components, ("workspace", float(accel.workspace_bytes))),
        moments=peak.moments,
        required=required,
    )


@dataclass(frozen=True, slots=True)
class _Stage:
    """What one pipeline stage holds: parameters, micro-batches in flight, and which ends."""

    label: str
    params: float  # parameters held per device before ZeRO sharding
    matmul: float  # of which take part in matrix products
    in_flight: int  # micro-batches whose activations are alive at once (1F1B)
    head: bool  # the final norm, the output layer and the loss
    embedding: bool


def _stages(w: JobProfile, tp: int) -> tuple[_Stage, ...]:
    """The stages whose peaks can be the device's: without a pipeline the one device holds all;
    with one, the first stage (its layers, the embedding, ``in_flight`` micro-batches under 1F1B)
    and the last (its layers, the norm and the output layer, one micro-batch and the logits; a
    tied output layer is a copy of the embedding there). Middle stages hold less than the first.
    Both are given the fullest stage's ceil(layers / p) layers (conservative for an uneven split)."""
    s = w.shape
    prm = _params(w, tp)
    head_matmul = s.vocab * s.hidden / tp
    if w.pipeline_parallel == 1:
        return (_Stage("", prm.total, prm.matmul, 1, True, True),)
    body = w.stage_layers * prm.layer
    body_matmul = w.stage_layers * s.layer_matmul_params / tp
    return (
        _Stage("first stage", body + s.embedding_params / tp, body_matmul, w.in_flight, False, True),
        _Stage("last stage", body + head_matmul + s.norm_params, body_matmul + head_matmul, 1, True, False),
    )


@memoised(128)
def _training_peak(w: JobProfile, tp: int, dp: int, *, cache: PlanCache | None = None) -> _Peak:
    """What is alive at each moment of a training step (per pipeline stage: the largest is the
    device's peak), and the bytes the allocator strands."""
    moments: list[tuple[str, dict[str, float]]] = []
    stranded = 0.0
    for stage in _stages(w, tp):
        stage_moments = _stage_moments(w, tp, dp, stage, cache=cache)
        persistent = _persistent(stage_moments)
        peak = max(sum(parts.values()) for _, parts in stage_moments)
        stranded = max(stranded, TRAINING_STRANDED * max(0.0, peak - persistent))
        moments += stage_moments
    return _peak(moments, stranded)


def _stage_moments(
    w: JobProfile, tp: int, dp: int, stage: _Stage, *, cache: PlanCache | None
) -> list[tuple[str, dict[str, float]]]:
    """The moments of one stage's step, the recipe knobs applied (the last is the optimizer step)."""
    s, num = w.shape, w.numerics
    prm = _params(w, tp)
    blk = blocks.block(s, num, w.attention, w.dropout, cache=cache)
    hd = blocks.head(s, num, cache=cache)
    tokens = w.device_tokens
    fully_sharded = w.sharding in (Sharding.ZERO3, Sharding.FSDP) and dp > 1
    shard_g = dp if w.sharding in (Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP) else 1

    # The optimizer's states (given for the whole model) scale with the parameters the stage holds.
    held = stage.params / (s.layers * prm.layer + (s.embedding_params + s.head_params) / tp + s.norm_params)
    weights, grads, states = _model_states(w, tp, dp, stage.params, held, cache=cache)
    buckets = 0.0
    ddp_grads = 0.0
    if w.sharding is Sharding.NONE and dp > 1:
        buckets = stage.params * num.param  # DDP's bucket copy of every gradient
    elif w.sharding is Sharding.ZERO2 and dp > 1:
        buckets = min(stage.params * num.param, ZERO_BUCKET_BYTES)
    # Weights as the matrix products see them. Fully sharded: the current and the prefetched
    # layer are gathered in the compute dtype (and the layer's full gradient in backward).
    # Otherwise, under autocast, the cast cache keeps a bf16 copy of every matrix from its first
    # use until autocast exits after the loss, and autograd keeps them for backward.
    gathered = 2 * prm.layer * num.compute if fully_sharded else 0.0
    gathered_bwd = gathered + (prm.layer * num.param if fully_sharded else 0.0)
    copies_all = stage.matmul * num.compute if num.autocast and not fully_sharded else 0.0
    # Without checkpointing autograd keeps each in-flight micro-batch's copies for its backward
    # (autocast's cache is emptied when each stage forward exits, so every forward casts anew).
    copies_fwd = copies_all * (1 if w.checkpointing else stage.in_flight)
    head_matmul = s.vocab * s.hidden / tp if stage.head else 0.0
    layer_matmul = s.layer_matmul_params / tp
    # Under checkpointing, recomputed layers re-cast their weights: backward keeps only the LM
    # head's copy and the current layer's.
    recast = (head_matmul + layer_matmul) * num.compute if copies_all else 0.0
    copies_bwd = recast if w.checkpointing else copies_fwd

    # Selective recompute (Megatron's core attention) rebuilds the s×s scores in backward; without
    # sequence parallelism (sp 1) the norms', dropouts' and the products' inputs, and a
    # checkpointed layer's input, stay whole on each tensor-parallel rank (layer_saved).
    sp = tp if w.sequence_parallel else 1
    one_layer = layer_saved(w, tp, cache=cache) * tokens
    rotary = 2.0 * s.head_dim * num.residual * tokens if s.positions == 0 else 0.0  # cos, sin
    embed_mask = s.hidden * tokens if w.dropout > 0 and stage.embedding else 0.0
    # Pipeline parallel: the stage's layers, for each micro-batch in flight under 1F1B.
    layers_alive = w.stage_layers * stage.in_flight
    if w.checkpointing:
        tape = blk.checkpoint_input / sp * tokens * layers_alive
        tape_bwd_layer = tape + one_layer  # one layer recomputed in backward
    else:
        tape = one_layer * layers_alive
        tape_bwd_layer = tape
    tape += rotary + embed_mask
    tape_bwd_layer += rotary + embed_mask
    final = hd.saved * tokens if stage.head else 0.0
    logit = 4.0 * tokens * s.vocab / tp if stage.head else 0.0  # one fp32 [tokens × vocab] tensor
    if buckets and w.sharding is Sharding.NONE:
        # DDP (measured on 2 and 4 H200, bucket_cap_mb 25, gradient_as_bucket_view False): the
        # buckets are a second copy of every gradient from construction on, and on the rank with
        # the highest peak up to a third copy is still allocated through forward and backward
        # (1.1B at 4×2048: 46.86 GB against 38.06 GB on one GPU, two fp32 gradient copies).
        # Where the step's activations and logits are small against the gradients (6.7B at
        # 1×1024 with checkpointing: 20 bytes per parameter in all) it is not seen; bounded by
        # them here, which fits every measured rank maximum within 1 %.
        ddp_grads = min(stage.params * num.param, tape + final + logit * hd.logits_bwd_units)

    # Gradient accumulation: from the first micro-batch's backward on, every gradient (or its
    # shard) is alive while the next micro-batches run forward and backward.
    accumulated = grads if w.gradient_accumulation > 1 else 0.0
    # torch.distributed.pipelining keeps every micro-batch's stage output (the first stage's
    # residual stream, the last stage's logits in the compute dtype) to return them merged
    # from ``step()``; they live until the next step (measured on 2 H100: 4 → 8 micro-batches
    # adds 2.4 GB on the last stage of a 1.1B model at 4×2048, 0.27 GB on the first).
    outputs = 0.0
    if w.pipeline_parallel > 1:
        width = s.vocab / tp * num.compute if stage.head else s.hidden * num.residual
        outputs = w.gradient_accumulation * tokens * width

    suffix = f" ({stage.label})" if stage.label else ""
    base = {"weights": weights, "optimizer states": states, "stage outputs": outputs}
    moments: list[tuple[str, dict[str, float]]] = [
        (
            ("loss forward" if stage.head else "end of forward") + suffix,
            base
            | {
                "weight copies": copies_fwd + gathered,
                "activations": tape + final,
                "logits": logit * hd.logits_fwd_units,
                "buckets": buckets,
                "gradients": max(ddp_grads, accumulated),
            },
        ),
    ]
    if stage.head:
        moments.append(
            (
                "loss backward" + suffix,
                base
                | {
                    "weight copies": copies_bwd + gathered_bwd,
                    "activations": tape + final,
                    "logits": logit * hd.logits_bwd_units,
                    "buckets": buckets,
                    "gradients": max(ddp_grads, accumulated),
                },
            )
        )
    moments += [
        (
            "layer backward" + suffix,
            base
            | {
                "weight copies": copies_bwd + gathered_bwd,
                "activations": tape_bwd_layer,
                "gradients": max(ddp_grads, accumulated + (head_matmul + prm.layer) * num.param / shard_g),
                "backward scratch": (blk.backward_transient_split + blk.backward_transient_per_score * w.seq_len)
                * tokens
                / tp
                + prm.layer * (num.compute + 4),
                "buckets": buckets,
            },
        ),
    ]
    if stage.embedding and w.checkpointing:
        # The first layer's backward (on the first stage) under checkpointing: every gradient is
        # alive, as at the optimizer step, beside that layer's recomputed activations and its
        # backward scratch; the step's peak where the gradients are large against one layer:
        # measured on one H100, eager GPT-3 2.7B at 2×2048 with checkpointing peaked at 47.06 GB,
        # 4.6 GB above its optimizer step (42.5 GB planned without this moment, 9.7 % under).
        # Without checkpointing the layer-backward moment (every activation alive) is larger
        # wherever activations matter.
        moments.append(
            (
                "end of backward" + suffix,
                base
                | {
                    # Autograd has freed the other layers' saved bf16 weight copies by now.
                    "weight copies": layer_matmul * num.compute * bool(copies_all) + gathered_bwd,
                    "activations": one_layer + rotary + embed_mask,
                    # The layer's weight gradients are among ``grads`` (made a matrix at a time).
                    "gradients": max(ddp_grads, grads),
                    "backward scratch": (blk.backward_transient_split + blk.backward_transient_per_score * w.seq_len)
                    * tokens
                    / tp,
                    "buckets": buckets,
                },
            )
        )
    moments.append(
        (
            "optimizer step" + suffix,
            base
            | {
                "gradients": grads,
                "optimizer scratch": _optimizer_temp_bytes(w, tp),
                "buckets": buckets,
            },
        )
    )
    master = 0.0
    if num.param == 4 and num.compute < 4 and w.framework is not Framework.DEEPSPEED:
        # The fp32 master: ZeRO-1/2 keep a 16-bit working copy whole beside its shard.
        master = (
            stage.params * num.param / dp if sharded_mixed_precision(w) else weights * (1 - num.compute / num.param)
        )
    return _knobs(
        w,
        moments,
        tp=tp,
        master=master,
        layer_grad=max(head_matmul, prm.layer) * num.param / shard_g,
        one_layer=one_layer,
        head_saved=final,
    )


@memoised(128)
def _fsdp_peak(w: JobProfile, tp: int, dp: int, *, cache: PlanCache | None = None) -> _Peak:
    """PyTorch FSDP2 (``fully_shard`` per decoder layer and on the root) with a bf16
    ``MixedPrecisionPolicy`` (reduce in fp32), measured on 1, 2 and 4 H200; also FSDP1 with a
    ``MixedPrecision`` policy (``FULL_SHARD`` as ``sharding: fsdp|zero3``, ``SHARD_GRAD_OP`` as
    ``zero2``: the same states, a flat parameter per layer instead of per-parameter shards) and
    Hugging Face code under the Trainer's FSDP (``framework: hf`` with those shardings).

    Whole and sharded (with fp32 master weights): the fp32 parameters, their fp32 gradients and
    the optimizer states are always sharded, 16Ψ/N with Adam; only the bf16 working copy is
    whole, and only between a layer's forward and its backward under ``SHARD_GRAD_OP``
    (``reshard_after_forward=False``); under ``FULL_SHARD`` two layers are gathered at a time.

    At rest each rank holds its shard of the fp32 parameters and of the optimizer states. A
    layer's bf16 parameters are all-gathered before its forward (the next layer's are
    prefetched) and freed after it, unless ``reshard_after_forward`` is False (grad-op sharding,
    ``sharding: zero2``), when they stay until the layer's backward. The root's parameters (the
    embedding, the LM head, the final norm) stay gathered from forward to backward, and their
    bf16 gradients until the end of backward. A layer's backward makes its bf16 gradients, a
    fp32 copy to reduce-scatter and the fp32 shard it accumulates into.

    The reserve NVML shows (docs/planner.md, "FSDP2's reserve: one pool per stream"): FSDP2
    allocates on two streams beside the default one, and PyTorch's caching allocator keeps the
    cached blocks of each stream apart (``CUDACachingAllocator.cpp``, ``get_free_block``: a best fit
    on another stream is refused). ``foreach_reduce``
    (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``) allocates the reduce-scatter's
    output on the reduce-scatter stream, and the sharded gradients are views of it ("the GPU
    sharded gradient is allocated in the RS stream"); ``foreach_all_gather`` allocates the flat
    all-gather output on the copy-in stream; the unsharded parameters it is copied out to, the
    activations and the reduce-scatter's input are the default stream's. So the reserve is the sum
    of each pool's own peak, not the peak of the sum: the sharded gradients (reduce dtype × Ψ/N)
    never reuse the activations or grad-op's gathered weights that backward frees, nor the next
    forward the gradients' blocks. Measured per stream on 2 and 4 H200
    (``bench/gpu/measure_fsdp_pools.py``, tests/data/calibration/fsdp-pools/): the peak reserved is
    the three pools' reserves to the byte; the reduce-scatter pool is the sharded gradients (plus
    under 2 MB a layer of rounding), the copy-in pool the root's and one layer's gathered bytes
    plus the larger one's cast shard under a mixed-precision policy (0.49 GB for Llama 1.1B on 2
    GPUs, 1.20 GB for 6.7B).
    """
    s, num = w.shape, w.numerics
    prm = _params(w, tp)
    blk = blocks.block(s, num, w.attention, w.dropout, cache=cache)
    hd = blocks.head(s, num, w.fused, cache=cache)
    tokens = w.device_tokens
    gather = float(num.compute)  # gathered in the policy's param_dtype (bf16; fp32 without a policy)
    reduce = 4.0 if num.param == 4 else num.param  # reduce_dtype fp32 under the policy
    layer = prm.layer
    root = prm.total - w.stage_layers * layer
    weights = prm.total * num.param / dp
    states = _optimizer_state_bytes(s, w.optimizer, num.param, cache=cache) / tp / dp
    grads = prm.total * num.param / dp
    keep_gathered = w.sharding in (Sharding.ZERO1, Sharding.ZERO2) and dp > 1
    layers_gathered = w.stage_layers if keep_gathered else min(2, s.layers)
    gathered = (root + layers_gathered * layer) * gather

    sp = tp if w.sequence_parallel else 1
    one_layer = layer_saved(w, tp, cache=cache) * tokens
    rotary = 2.0 * s.head_dim * num.residual * tokens if s.positions == 0 else 0.0
    tape, tape_bwd_layer = _tape(
        w.checkpointing, blk.checkpoint_input / sp * tokens, one_layer, w.stage_layers * w.in_flight
    )
    tape += rotary
    tape_bwd_layer += rotary
    final = hd.saved * tokens
    logit = 4.0 * tokens * s.vocab / tp
    layer_grad = layer * (gather + reduce + reduce / dp)
    scratch = (blk.backward_transient_split + blk.backward_transient_per_score * w.seq_len) * tokens / tp
    root_grad = root * gather
    base = {"weights": weights, "optimizer states": states}
    moments: list[tuple[str, dict[str, float]]] = [
        (
            "loss forward",
            base | {"gathered weights": gathered, "activations": tape + final, "logits": logit * hd.logits_fwd_units},
        ),
        (
            "loss backward",
            base | {"gathered weights": gathered, "activations": tape + final, "logits": logit * hd.logits_bwd_units},
        ),
        (
            "layer backward",  # the last layer's, with every activation still alive
            base
            | {
                "gathered weights": gathered,
                "activations": tape_bwd_layer,
                "gradients": root_grad + layer_grad + (root + layer) * reduce / dp,
                "backward scratch": scratch,
            },
        ),
        (
            "end of backward",  # the first layer's: every gradient shard, few activations
            base
            | {
                "gathered weights": (root + layer) * gather,
                "activations": one_layer + rotary,
                "gradients": grads + root_grad + layer_grad,
                "backward scratch": scratch,
            },
        ),
        ("optimizer step", base | {"gradients": grads, "optimizer scratch": _optimizer_temp_bytes(w, tp) / dp}),
    ]
    moments = _knobs(
        w,
        moments,
        tp=tp,
        master=weights * (1 - num.compute / num.param) if num.param == 4 else 0.0,
        layer_grad=max(s.vocab * s.hidden / tp, layer) * reduce / dp,
        one_layer=one_layer,
        head_saved=final,
    )
    peak = max(sum(parts.values()) for _, parts in moments)
    # One pool per stream (the docstring's last paragraph): the sharded gradients are the
    # reduce-scatter stream's; the default stream's pool peaks at its own moment (the forward's
    # activations or grad-op's gathered weights) and strands its share of that moment's transients.
    if dp == 1:
        return _peak(moments, TRAINING_STRANDED * max(0.0, peak - _persistent(moments)))
    on_rs = {"layer backward": (root + layer) * reduce / dp, "end of backward": grads, "optimizer step": grads}
    default = max(
        sum(parts.values()) - min(on_rs.get(name, 0.0), parts.get("gradients", 0.0)) for name, parts in moments
    )
    stranded = TRAINING_STRANDED * max(0.0, default - _persistent(moments))
    rs_pool = grads if not w.optimizer_offload else (root + layer) * reduce / dp
    # The all-gather's flat output (the root's, then a layer's prefetched beside it) on the
    # copy-in stream; under a mixed-precision policy, the cast shards copied in beside it.
    cast = max(root, layer) * gather / dp if gather != num.param else 0.0
    return _peak(moments, default + stranded + rs_pool + (root + layer) * gather + cast - peak)


@memoised(128)
def _stack_peak(w: JobProfile, tp: int, dp: int, *, cache: PlanCache | None = None) -> _Peak:
    """Megatron-LM and MaxText (their terms and sources in ``stacks``), stage by stage.

    With pipeline parallelism the first stage holds its layers, the embedding and the
    activations of ``in_flight`` micro-batches (1F1B); the last stage its layers, the output
    layer (a copy of the embedding when tied, as Megatron keeps) and one micro-batch with its
    logits. Every stage is a moment set; the largest moment is the device's peak.
    """
    s, num = w.shape, w.numerics
    act = stacks.activations(w, tp, cache=cache)
    moments_fp32 = _optimizer_state_bytes(s, w.optimizer, 4, cache=cache) / s.params
    st = stacks.states(w, moments_fp32)
    shard = w.shard_degree(dp)  # the distributed optimizer / fsdp axis spans dp × cp (or the HSDP group)
    tokens = w.device_tokens
    prm = _params(w, tp)
    layers = w.stage_layers
    body = layers * prm.layer
    emb = s.embedding_params / tp
    if w.pipeline_parallel == 1:
        stages = [("", body + emb + s.head_params / tp + s.norm_params, 1, True)]
    else:
        head_p = (s.vocab * s.hidden if s.tied else s.head_params) / tp + s.norm_params
        stages = [("first stage", body + emb, w.in_flight, False), ("last stage", body + head_p, 1, True)]
    fully_sharded = st.weights_sharded and shard > 1
    # Transformer Engine's FP8 copy and transpose of each product's weight follow the 16-bit
    # weights they are cast from: whole where those are whole; under ZeRO-3/FSDP a shard of
    # them (FP8 parameters gathered as FP8: Megatron's --fp8-param-gather) plus the copies of the
    # two gathered layers (the current one and the prefetched one), so the FP8 figure shrinks
    # with the devices as the bf16 one does. Counting the whole cache on every device put a
    # 70B model on 64 H100s at 174 GB per device against 33 GB in amp-bf16.
    fp8_cache = 0.0
    if w.fp8:
        fp8_cache = layers * s.layer_matmul_params / tp * stacks.FP8_WEIGHT_CACHE_BYTES
        if fully_sharded:
            fp8_cache = fp8_cache / shard + 2 * s.layer_matmul_params / tp * stacks.FP8_WEIGHT_CACHE_BYTES
    gathered = 2 * prm.layer * num.compute if fully_sharded else 0.0
    # Ring attention (context parallel): the K and V blocks in flight from the neighbour,
    # double-buffered.
    ring = 2 * 2 * s.kv_dim / tp * num.compute * tokens if w.context_parallel > 1 else 0.0
    megatron = w.framework is Framework.MEGATRON
    # Megatron with sharded gradients: a layer's whole gradient exists in its backward until
    # reduce-scattered (XLA fuses the reduce-scatter into the backward program).
    layer_grad = prm.layer * st.grads_sharded if megatron and shard > 1 else 0.0
    moments: list[tuple[str, dict[str, float]]] = []
    persistent = 0.0
    for label, n, in_flight, has_head in stages:
        weights = n * (st.weights + st.weights_sharded / shard) + fp8_cache
        grads = n * (st.grads + st.grads_sharded / shard)
        states = n * st.optimizer / (shard if st.optimizer_sharded else 1)
        base = {"weights": weights, "optimizer states": states}
        if megatron:
            base["gradients"] = grads  # the fp32 gradient buffer lives for the whole run
        transient_grads = {} if megatron else {"gradients": grads}
        tape = act.layer * layers * in_flight * tokens
        recomputed = act.full_layer * tokens if w.recompute is not Recompute.NONE else 0.0
        suffix = f" ({label})" if label else ""
        if has_head:
            head = act.head * tokens
            logits = 4.0 * tokens * s.vocab / tp * stacks.STACK_LOGITS_UNITS
            loss = base | {"gathered weights": gathered, "activations": tape + head, "logits": logits, "ring": ring}
            moments.append(("loss backward" + suffix, loss))
        moments.append(
            (
                "layer backward" + suffix,
                base
                | {
                    "gathered weights": gathered,
                    "activations": tape + recomputed,
                    "backward scratch": act.backward_transient * tokens + layer_grad,
                    "ring": ring,
                },
            )
        )
        moments.append(("optimizer step" + suffix, base | transient_grads))
        persistent = max(persistent, weights + states + (grads if megatron else 0.0))
    # Megatron's --optimizer-cpu-offload keeps the fp32 master in its (offloaded) optimizer states.
    moments = _knobs(
        w,
        moments,
        tp=tp,
        master=0.0,
        layer_grad=0.0,
        one_layer=act.layer * tokens,
        head_saved=act.head * tokens,
    )
    if w.optimizer_offload:
        persistent = _persistent(moments) + (0.0 if not megatron else max(p.get("gradients", 0.0) for _, p in moments))
    peak = max(sum(parts.values()) for _, parts in moments)
    # XLA assigns buffers at compile time: nothing is stranded. Megatron runs on PyTorch's
    # caching allocator.
    stranded = TRAINING_STRANDED * max(0.0, peak - persistent) if megatron else 0.0
    return _peak(moments, stranded)


@memoised(128)
def _adapter_peak(w: JobProfile, tp: int, dp: int, *, cache: PlanCache | None = None) -> _Peak:
    """LoRA/QLoRA (``workload.adapter``; the terms and sources in ``planning.adapter``): the
    frozen base in its storage format with no gradients or optimizer state, the fp32 adapters
    with their gradients and states, the activations of a frozen base (no inputs kept for weight
    gradients) plus the adapter branches', and a quantised layer's bf16 copy while it runs.
    ZeRO-3/FSDP shard the base and the adapters' states over ``dp``; ZeRO-1/2 the states."""
    ad = w.adapter
    assert ad is not None
    s, num = w.shape, w.numerics
    blk = blocks.block(s, num, w.attention, w.dropout, cache=cache)
    hd = blocks.head(s, num, cache=cache)
    tokens = w.device_tokens
    layers = w.stage_layers
    linear = layers * s.layer_matmul_params
    rest = s.params - s.layers * s.layer_matmul_params
    shard_base = dp if w.sharding in (Sharding.ZERO3, Sharding.FSDP) else 1
    shard_states = dp if w.sharding is not Sharding.NONE else 1
    base = (linear * ad.base_bytes_per_weight + rest * num.param) / tp / shard_base
    n = adapter.trainable_params(s, ad) / tp
    state_bytes = 4.0 if w.optimizer is Optimizer.SGD else 8.0  # momentum, or Adam's two moments
    weights = base + 4.0 * n  # the adapters in fp32
    copies = 2.0 * n if w.precision is Precision.AMP_BF16 else 0.0  # autocast's bf16 casts of them
    states = state_bytes * n / shard_states
    grads = 4.0 * n / (dp if w.sharding in (Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP) else 1)
    buckets = 4.0 * n if w.sharding is Sharding.NONE and dp > 1 else 0.0  # DDP's bucket copy

    sp = tp if w.sequence_parallel else 1
    per_layer = (
        blk.saved_shared / sp
        + blk.saved_split / tp
        + (0.0 if w.selective else blk.saved_per_score * w.seq_len / tp)
        - adapter.frozen_savings_per_token(s, num.compute, num.residual) / tp
        + adapter.branch_saved_per_token(s, ad) / tp
    )
    one_layer = per_layer * tokens
    rotary = 2.0 * s.head_dim * num.residual * tokens if s.positions == 0 else 0.0
    tape, tape_bwd_layer = _tape(w.checkpointing, blk.checkpoint_input / sp * tokens, one_layer, layers)
    # LLM.int8 keeps every frozen linear's fp16 input outside autograd's saved tensors.
    kept = adapter.int8_inputs_per_token(s) / tp * tokens * layers if ad.base is BaseWeights.INT8 else 0.0
    tape += rotary + kept
    tape_bwd_layer += rotary + kept
    final = hd.saved * tokens
    logit = 4.0 * tokens * s.vocab / tp
    dequantised = s.largest_matrix / tp * num.compute if ad.quantised else 0.0
    persistent = {"weights": weights, "optimizer states": states, "buckets": buckets}
    moments: list[tuple[str, dict[str, float]]] = [
        (
            "loss forward",
            persistent | {"weight copies": copies, "activations": tape + final, "logits": logit * hd.logits_fwd_units},
        ),
        (
            "loss backward",
            persistent | {"weight copies": copies, "activations": tape + final, "logits": logit * hd.logits_bwd_units},
        ),
        (
            "layer backward",
            persistent
            | {
                "weight copies": copies + dequantised,
                "activations": tape_bwd_layer,
                "gradients": grads,
                "backward scratch": (blk.backward_transient_split + blk.backward_transient_per_score * w.seq_len)
                * tokens
                / tp,
            },
        ),
        ("optimizer step", persistent | {"gradients": grads, "optimizer scratch": 0.0}),
    ]
    peak = max(sum(parts.values()) for _, parts in moments)
    fraction = ADAPTER_CHECKPOINT_STRANDED if w.checkpointing else TRAINING_STRANDED
    # LLM.int8's kept inputs are allocated once per layer and freed in order: they strand nothing.
    return _peak(moments, fraction * max(0.0, peak - sum(persistent.values()) - kept))


def full_remat(w: JobProfile) -> JobProfile:
    """``w`` with every layer recomputed in backward (MaxText's ``remat_policy: full``)."""
    return dataclasses.replace(w, recompute=Recompute.FULL, checkpointing=True)


def xla_remat_fraction(w: JobProfile, accel: Accelerator, layout: Layout, *, cache: PlanCache | None = None) -> float:
    """MaxText: the fraction of what its remat policy saves beyond full remat that XLA recomputes
    instead, so that the program fits the device (0 when it fits as it is, or cannot fit anyway).

    XLA assigns every buffer at compile time, and when the program's peak exceeds the device's
    memory its rematerialization pass (``hlo_rematerialization.cc``, run by the TPU compiler
    with the HBM size as the limit) recomputes saved values until the peak is below the limit,
    warning "Can't reduce memory use below ..." only where it cannot; a run that needed it is
    slower (e.g. marin-community/marin#8054: 18.1 s per step with HloRematerialization on at a
    peak 2 % over the limit, 16.4 s once it fit). The policy's saved matrix products are what it
    can give back, down to the layer inputs that full remat keeps."""
    if w.framework is not Framework.MAXTEXT or w.recompute is Recompute.FULL or not w.training:
        return 0.0
    tp, dp = layout.tensor_parallel, layout.data_parallel
    policy = _stack_peak(w, tp, dp, cache=cache).allocated
    floor = _stack_peak(full_remat(w), tp, dp, cache=cache).allocated
    limit = accel.memory_bytes * (1 - SAFETY) - accel.context_bytes - accel.workspace_bytes
    if policy <= limit or floor > limit or policy <= floor:
        return 0.0
    return (policy - limit) / (policy - floor)


def _maxtext(w: JobProfile, accel: Accelerator, layout: Layout, *, cache: PlanCache | None) -> MemoryEstimate:
    est = _result(_stack_peak(w, layout.tensor_parallel, layout.data_parallel, cache=cache), accel)
    f = xla_remat_fraction(w, accel, layout, cache=cache)
    if f <= 0:
        return est
    floor = _stack_peak(full_remat(w), layout.tensor_parallel, layout.data_parallel, cache=cache).allocated
    given_back = f * (est.peak_allocated_bytes - accel.workspace_bytes - floor)
    parts = dict(est.components)
    parts["activations"] = parts.get("activations", 0.0) - given_back
    allocated = int(est.peak_allocated_bytes - given_back)
    return est._replace(
        peak_allocated_bytes=allocated,
        reserved_bytes=allocated,
        footprint_bytes=allocated + accel.context_bytes,
        required=allocated + accel.context_bytes,
        fits=True,
        peak_at=f"{est.peak_at}; XLA recomputes {f:.0%} of what the remat policy saves to fit",
        components=tuple(parts.items()),
    )


def _training(w: JobProfile, accel: Accelerator, layout: Layout, *, cache: PlanCache | None) -> MemoryEstimate:
    if w.framework is Framework.MAXTEXT:
        return _maxtext(w, accel, layout, cache=cache)
    if w.framework is Framework.MEGATRON:
        return _result(_stack_peak(w, layout.tensor_parallel, layout.data_parallel, cache=cache), accel)
    # Context-parallel ranks hold the same weights: sharding spans data × context ranks, or the
    # hybrid sharding group (HSDP), across which the shards are replicated.
    shards = w.shard_degree(layout.data_parallel)
    if w.adapter is not None:
        return _result(_adapter_peak(w, layout.tensor_parallel, shards, cache=cache), accel)
    # Without sharding, the data-parallel degree matters only as "more than one" (DDP buckets).
    dp = shards if w.sharding is not Sharding.NONE else min(2, shards)
    if w.framework is Framework.FSDP or (
        w.framework is Framework.HF and w.sharding in (Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP)
    ):
        # Hugging Face code sharded by ZeRO-2/3 or FSDP: the Trainer's FSDP (SHARD_GRAD_OP for
        # zero2, FULL_SHARD for zero3 and fsdp) under a bf16 mixed-precision policy, the run the
        # FSDP model was measured on (DeepSpeed's engine is framework: deepspeed).
        return _result(_fsdp_peak(w, layout.tensor_parallel, shards, cache=cache), accel)
    return _result(_training_peak(w, layout.tensor_parallel, dp, cache=cache), accel)


def kv_cache_bytes(w: JobProfile, tp: int, tokens_per_sequence: int) -> float:
    """Hugging Face's dynamic cache: K (after rotary) and V of every layer, per device."""
    s, num = w.shape, w.numerics
    k_bytes = max(num.compute, num.residual) if s.positions == 0 else num.compute
    return float(s.layers * (s.kv_dim / tp) * (k_bytes + num.compute) * w.batch * tokens_per_sequence)


def _inference(w: JobProfile, accel: Accelerator, layout: Layout, *, cache: PlanCache | None) -> MemoryEstimate:
    s, num = w.shape, w.numerics
    tp = layout.tensor_parallel
    prm = _params(w, tp)
    blk = blocks.block(s, num, w.attention, 0.0, cache=cache)
    weights = prm.total * num.param
    copies = prm.matmul * num.compute if num.autocast else 0.0
    prompt_tokens = w.batch * w.prompt_len
    kv_prompt = kv_cache_bytes(w, tp, w.prompt_len)
    kv_final = kv_cache_bytes(w, tp, w.prompt_len + w.new_tokens)
    kv_layer = kv_final / s.layers
    # Prefill (generate keeps only the last position's logits): the last layer's MLP.
    held = (blk.infer_held_shared + blk.infer_held_split / tp) * prompt_tokens
    scores = blk.infer_per_score / tp * w.prompt_len * prompt_tokens
    rotary = 2.0 * s.head_dim * num.residual * prompt_tokens if s.positions == 0 else 0.0
    step_logits = w.batch * s.vocab / tp * (num.compute + 4.0)
    prefill_act = held + scores + rotary
    base = {"weights": weights, "weight copies": copies}
    moments: list[tuple[str, dict[str, float]]] = [
        ("prefill", base | {"kv cache": kv_prompt, "activations": prefill_act, "logits": step_logits}),
        # Decoding: torch.cat allocates a layer's grown K and V before freeing the old ones.
        ("decode", base | {"kv cache": kv_final + kv_layer, "logits": 2 * step_logits}),
    ]
    # The grown cache blocks cannot reuse the slightly smaller freed ones, so the allocator
    # holds a second generation of the cache; it is carved from the prefill's freed transients
    # where they are larger.
    stranded = max(kv_final, prefill_act)
    return _result(_peak(moments, stranded), accel, reclaimable=False)


def estimate(
    job: JobProfile, accelerator: Accelerator, layout: Layout, *, cache: PlanCache | None = None
) -> MemoryEstimate:
    """Per-device memory of ``job`` on ``layout``; ``cache`` keeps what other layouts and jobs of
    the same shape share (None: computed afresh)."""
    est = (
        _training(job, accelerator, layout, cache=cache)
        if job.training
        else _inference(job, accelerator, layout, cache=cache)
    )
    if layout.devices > 1 and accelerator.kind is not AcceleratorKind.TPU:
        return _with_nccl(est, accelerator)
    return est


def _with_nccl(est: MemoryEstimate, accel: Accelerator) -> MemoryEstimate:
    """``est`` on a rank of several GPUs: NCCL's memory beside the allocator's (NCCL_BYTES), in
    the footprint and in what the step needs."""
    footprint = est.footprint_bytes + NCCL_BYTES
    required = est.required_bytes + NCCL_BYTES
    return est._replace(footprint_bytes=footprint, required=required, fits=required <= est.usable_bytes)


def _tape(checkpointing: bool, layer_input: float, one_layer: float, layers: float) -> tuple[float, float]:
    """The saved activations over ``layers`` layers, and at the backward of one layer: with full
    checkpointing each layer keeps its input (``layer_input``) and the layer under backward its
    whole tape again (``one_layer``); without, every layer keeps its whole tape."""
    if checkpointing:
        tape = layer_input * layers
        return tape, tape + one_layer
    tape = one_layer * layers
    return tape, tape
