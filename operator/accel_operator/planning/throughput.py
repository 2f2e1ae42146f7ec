"""Throughput model: step time, tokens per second and total duration of one placement.

The device's time for a training step on one data-parallel rank is the sum of

- the matrix products (forward, two backward products each, and the forward again for layers
  recomputed under gradient checkpointing): a roofline of FLOPs at the accelerator's large-product
  rate (less for shallow reductions, whose tile pipeline never fills, and far less for operands
  whose rows are not 16-byte aligned, such as GPT-2's 50257-entry vocabulary) and operand bytes
  at the memory bandwidth;
- the fused attention kernels over the causal half of the scores, at an efficiency that grows
  with the sequence (per-query-block costs amortise over the keys);
- the memory-bound ops (norms, casts, rotary, activations, residual adds, dropout: the bytes
  they move at the bandwidth such kernels achieve; backward moves about twice the forward's
  bytes), the loss over the fp32 [tokens × vocab] logits and the optimizer's pass over its states;
- a small fixed cost per kernel on the device;
- the exposed part of communication: data-parallel gradient all-reduce (reduce-scatter +
  all-gather for ZeRO, and parameter all-gathers for ZeRO-3/FSDP) overlaps the backward pass;
  tensor-parallel all-reduces of activations are on the critical path. Hierarchical: within a
  node at the node's link bandwidth, between nodes at the per-device share of the network.
  PyTorch DDP also copies the gradients into its buckets and back, device time it does not hide.

Eager PyTorch also spends host time dispatching every kernel (Python, autograd, launch). The
host runs ahead of the device during long kernels and falls behind during runs of short ones,
so the step takes between the larger and the sum of the two; profiles of H100 training steps
(bench/gpu/measure_training.py --profile) follow their root-sum-square within a few percent,
from 69 % device-busy (a 125M model) to 99 % (3B). Small models are slow for this reason.

Inference (Hugging Face ``generate``): the prefill is a forward pass; each decode step reads every
weight and the KV cache once, so it is bandwidth-bound, and for small batches host-bound.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
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
    Sharding,
    WorkloadMode,
)
from accel_operator.planning import adapter, blocks, memory
from accel_operator.planning.blocks import Gemm
from accel_operator.planning.cache import PlanCache, memoised
from accel_operator.planning.layout import Layout
from accel_operator.planning.profile import JobProfile

# FlashAttention's backward recomputes the scores: five score-sized products against the
# forward's two.
ATTENTION_BACKWARD = 2.5
# Attention reaches its asymptotic efficiency only for long sequences: per query block it loads
# Q, rescales and writes O and computes the causal diagonal block in full, worth about this many
# keys (profiled on H100: 0.29 of peak at 1024 tokens, 0.36 at 2048).
ATTENTION_FIXED_KEYS = 512
# FlashAttention kernels exist for these head dimensions; others are padded up to the next.
ATTENTION_HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
# Gradient checkpointing's host cost beyond re-dispatching the recomputed forward's kernels (which
# the kernel count already holds), in host ops per checkpointed layer and micro-batch: per layer
# call, torch.utils.checkpoint (non-reentrant, as HF's gradient_checkpointing_enable, torchtitan and
# LLM Foundry use it) saves and restores the RNG and autocast state, packs every tensor the layer
# saves (about 31 per GPT-2 layer, 40 per Llama layer) into a holder in the forward, runs the
# layer's Python modules again in backward under a second pack hook and unpacks each saved tensor.
# Measured on one H100 host (bench/gpu/measure_ckpt_host.py: tests/data/calibration/ckpt-host/,
# and knobs/; 8 pairs with and without checkpointing at equal batch): the host's time to issue a
# step grows by 1.8-5.6 ms per layer, of which the recomputed kernels' own dispatch is 0.54 (GPT-2,
# 27 kernels; 32-34 counted) to 0.96 ms (Llama, 48; 47-49 counted). The rest is 42-233 host ops
# per layer (median 138), with no difference between GPT-2 and Llama blocks beyond the spread
# (GPT-2 100-148, Llama 42-233), so one figure serves both. Over the 63 checkpointed rows of the
# calibration sets (H100 and H200 hosts, repeats aside) the error's mean is 0 at 120; the 4-H200
# host's small checkpointed rows, which ran faster there in some calls (GPT-2 355M DDP 107 ms in two
# calls, 151 in the third), bound it at 97 by their 25 % floor; 95 is used (mean error +2.4 %).
# Megatron's own reentrant checkpoint function and compiled steps are not measured: no term.
CHECKPOINT_HOST_OPS_PER_LAYER = 95
# Backward launches more kernels than forward (two products per forward product, gradient
# accumulation, reductions for norm weights): profiles count 3.3–3.5× the forward's kernels
# for forward + backward.
BACKWARD_KERNELS = 2.4
# XLA fuses chains of elementwise ops on TPU, so intermediates stay on chip.
TPU_FUSION = 0.5
# LoRA branches (PEFT 0.21), bytes moved per token: (forward, backward) per input feature of an
# adapted linear, and per output feature. On a bf16 base PEFT casts the branch's input to the
# adapters' fp32 and dropout runs in fp32 (cast, dropout with its mask, autocast's cast back, A's
# read); bitsandbytes' layers under autocast skip that cast. The output side: B's output, the
# scaling and the add into the base output. Counted from the ops (23 and 32 on a bf16 base, where
# the 33 rows measured on one H100 by bench/gpu/measure_lora.py ask for 20 and 27: some of the
# casts' reads hit the L2 cache).
LORA_INPUT_BYTES_BF16 = (20.0, 27.0)
LORA_INPUT_BYTES_QUANTISED = (7.0, 15.0)
LORA_OUTPUT_BYTES = (12.0, 8.0)
LORA_KERNELS_BF16 = 7  # per adapted linear, forward: input cast, dropout, cast back, two products, scale, add
LORA_KERNELS_QUANTISED = 5  # no input casts
# A quantised base's layer is dequantised to bf16 for each product (forward, input gradient):
# read its packed weights, write bf16.
DEQUANT_BYTES_NF4 = 2.5
DEQUANT_BYTES_INT8 = 3.0
# bitsandbytes' LLM.int8 products (row-wise int8 quantisation of the input, outlier columns in
# fp16, int32 accumulation, dequantisation) against a bf16 product of the same shape: measured
# 2.9× on one H100 (3B, all-linear, 8192 tokens per step; bitsandbytes 0.50.2).
INT8_PRODUCT_SLOWDOWN = 2.9
# bitsandbytes' NF4 layers at micro-batch 1 (one sequence per step): a fixed cost per layer and
# micro-batch, of a cause not identified, measured on one H100 at 1 × 2048 tokens against 2 × 2048
# (8B: 0.43 s against 0.45 s for twice the tokens; 1B, 3B and 8B rows of
# tests/data/calibration/lora/h100-lora-small.jsonl). Not seen with a bf16 base.
NF4_SINGLE_SEQUENCE_LAYER_SECONDS = 0.005
# Pipeline fill and tile epilogue of a matrix product, in units of reduction depth (profiled
# H100 products with depth 768–11008 are within 11 % of this model).
GEMM_TILE_OVERHEAD_K = 128
# Depth at which the catalog's matrix efficiency (mfu) was measured (an 8192³ product).
GEMM_REFERENCE_K = 8192
# Matrix products need 16-byte-aligned rows for the tensor-core fast path.
GEMM_ALIGNMENT_BYTES = 16
# Fixed latency of one collective (launch, synchronisation), seconds.
COLLECTIVE_LATENCY = 20e-6
# PyTorch DDP (frameworks hf and fsdp without sharding) all-reduces the gradients in buckets of
# bucket_cap_mb = 25 MB as backward fills them (the last, first-filled one 1 MB: pytorch/pytorch
# issue 48880). NCCL's ring reaches about 370 of NVLink 4's 450 GB/s line rate on large messages
# (protocol overhead, NVIDIA/nccl-tests issue 212; 256 MB is "too small to reach peak bandwidth"),
# and a 25 MB bucket far less (pytorch/pytorch issue 118421: 25 MB is too small a default). The
# fraction of the node's link bandwidth these buckets reach, the FSDP2 per-layer collectives'
# FSDP_COLLECTIVE_EFFICIENCY: on the 2- and 4-H200 DDP rows at micro batch 1 (3.4B and 6.7B, where
# the fp32 all-reduce outlasts the short backward) tokens/s +17, +25, +43, +24 % -> +11, +9, +19,
# -6 % (0.4: +4, -0, +9, -17 %; 0.6: +16, +17, +27, +3 %); rows with a long backward hide it.
DDP_BUCKET_EFFICIENCY = 0.5
# DDP (gradient_as_bucket_view=False, its default and the calibration sets') copies each gradient
# into its bucket as backward produces it, dividing by the world size on the way
# (torch/csrc/distributed/c10d/reducer.cpp, Reducer::mark_variable_ready_dense: at::mul_out into the
# bucket view), and after the all-reduce copies every bucket back into the gradients
# (copy_bucket_to_grad): each moves the gradient's bytes in and out, device time the step pays once
# per all-reduce. Measured on 2 H200 (bench/gpu/measure_ddp_cost.py, tests/data/calibration/
# ddp-cost/: DDP with a communication hook that hands the bucket back, against each rank alone):
# the summed kernel time grows by 13.7 ms (Llama 3.4B), 4.4 ms (1.1B) and 0.8 ms (134M): these bytes
# at 4.0 TB/s, 0.83 of the card's HBM peak (large copies stream faster than the mixed elementwise
# kernels the catalog's bandwidthEfficiency describes).
DDP_BUCKET_COPY_BYTES = 4  # × the gradient's bytes per parameter: read, write; read, write
DDP_BUCKET_COPY_EFFICIENCY = 0.83  # of the HBM peak
# Fraction of the backward pass that data-parallel communication can hide under.
OVERLAP = 0.9
# Share of data-parallel communication that stays exposed even when the backward pass is long
# enough to hide it (the last gradient bucket is reduced after the backward pass ends).
UNHIDDEN_TAIL = 0.05
# FSDP2 (fitted to the 2- and 4-H200 rows): host ops per layer and all-gather pass, the fraction
# of the link bandwidth its per-layer collectives reach, and how much of them compute hides. The
# collective efficiency was refitted with LLM Foundry's MPT-13B rows on 8–64 H100 (no
# checkpointing, communication-bound; tests/data/published/): 0.5 leaves the H200 rows' median
# tokens/s error at 9.3 % (0.25 before: 9.2 %) and brings those rows from −40 % to within 20 %.
FSDP_HOST_OPS_PER_LAYER = 38
# FSDP2's per-layer host work is not all tied to the all-gathers: a layer's pre/post-forward and
# pre/post-backward hooks, its reduce-scatter's issue and its stream waits run whether or not the
# layer reshards after forward (``reshard_after_forward=False`` drops the backward's all-gather,
# not the hooks). Measured on one 2-H200 host (bench/gpu/measure_fsdp_host.py,
# tests/data/calibration/fsdp-host/: GPT-2 124M/355M and Llama 134M at micro batch 1, 4 and 8,
# each beside the same model unwrapped and under DDP on that host), in that host's own ops (the
# unwrapped step's host time over its launches): FSDP2 adds a median of 119 ops a layer and
# micro-batch with grad-op sharding (73–158) and 160 with full sharding (114–233); DDP adds none
# (−29 to 11). Grad-op costs 0.59–0.98 of full sharding at the same model and batch (median 0.68),
# not the half that a cost per all-gather alone gives. Split as that median says, hooks per layer
# (this) plus FSDP_HOST_OPS_PER_LAYER per all-gather pass, with full sharding's total kept at the
# 120 the several-GPU rows put it at (this host's per-op time is not theirs): grad-op 60 -> 82.
# Host work like the launches: it overlaps the device only as dispatch does (``_overlap``).
FSDP_HOOK_OPS_PER_LAYER = 44
FSDP_COLLECTIVE_EFFICIENCY = 0.5
FSDP_OVERLAP = 0.8
# Collectives that compute hides still slow it: NCCL's intra-node all-gathers and reduce-scatters
# are kernels, one block per channel (16-32 of an H100's 132 SMs), streaming through the same HBM.
# Compute slows by this fraction of the collectives' hidden time (on NVLink only; a NIC's share is
# moved by its own engine). Chosen from the SM share and checked on the measured FSDP2 rows: the
# 2- and 4-GPU tokens/s median error 9.4 % -> 7.2 % (0.3: 7.2 %, 0.4: 7.5 %), the 2-H100 rows
# +3-26 % -> -1-20 %; LLM Foundry's published rows 10.7 % -> 11.1 % median, worst 30.2 -> 27.4 %.
FSDP_CONTENTION = 0.2
# FSDP's per-layer all-gathers and reduce-scatters are rendezvous of every rank: a collective
# starts when the last rank has issued it. Where the host paces the step (dispatch longer than the
# device's work: small models, micro batch 1), each layer then takes its slowest rank's host time;
# with independent per-rank variation of this relative spread, the expected maximum over n ranks is
# the mean times 1 + spread × E[max of n standard normals] (Blom: 0.59 at 2 ranks, 1.05 at 4, 1.43 at 8).
# Seen in every repeat on one 4-H200 host (tests/data/calibration/multi-gpu/repeats/): host-bound
# FSDP2 rows slow from 2 to 4 ranks at the same work per rank (134M: 70-76 -> 79-89 ms; 374M:
# 166-187 -> 188-237 ms; 1.1B at micro batch 1: 128-159 -> 174 ms), where device-bound rows do not
# (1.1B at 4 x 2048: 178-185 -> 179-181 ms). 0.2 fitted on the 64 several-GPU rows: tokens/s median
# 5.7 -> 4.8 %, worst 40.9 -> 26.4 % (0.1: 5.3, 29.9 %; 0.3: 5.3, 26.4 %); published rows (128-512
# GPUs, device-bound) median 11.1 -> 11.4 %.
FSDP_RANK_SPREAD = 0.2
# The dense FP8 tensor-core peak is twice the bf16 peak where the card has FP8 tensor cores
# (catalog ``fp8TensorCores``: Ada, Hopper, Blackwell; NVIDIA H100 SXM datasheet: 1979 vs 989
# TFLOP/s, L4: 242.5 vs 121). Transformer Engine runs the layers' products in FP8 (forward E4M3,
# gradients E5M2) and keeps the LM head in bf16; each product's input is cast (read 16-bit,
# write 1 byte). Elsewhere there is no 1-byte product: an fp8 job is refused by the planner
# (selection), and this model plans its products at the 16-bit peak.
FP8_PEAK_RATIO = 2.0
# Fused stacks (attention: flash under framework fsdp): FlashAttention's kernels reach this
# fraction of the catalog's attention efficiency. Fitted to LLM Foundry's long-sequence rows
# (tests/data/published/llm-foundry-mpt-throughput.jsonl, 8k–64k tokens), whose MFU falls from
# about 45 % at 2k to 27–29 % at 64k: the attention of those runs reaches about half of the
# PyTorch FlashAttention-2 figures the catalog was profiled with (0.5: median 12.2 %, worst
# 27.4 %; 0.6: 9.8 %, 48.8 % before the collective refit).
FUSED_ATTENTION_EFFICIENCY = 0.55
# Megatron (Transformer Engine, Apex) fuses the chains of memory-bound ops a layer runs
# (LayerNorm, bias + GeLU/SwiGLU, bias + dropout + residual add, rotary): each chain reads its
# inputs and writes its outputs once, the same saving as XLA's fusion on TPU (TPU_FUSION).
MEGATRON_FUSION = TPU_FUSION
# torch.compile and fused eager kernels (workload.compile, fusedKernels) outside a fused stack:
# each layer's elementwise chains read and write once, as Megatron's fusions (MEGATRON_FUSION);
# Inductor also launches about this fraction of the eager kernels (a fused chain is one kernel).
# Not measured here: on a Llama 8B reference job the two give +12 % tokens/s (bench/plan_published.py
# --knobs), inside the published +10-23 % MFU of torch.compile on FSDP Llama 7B-70B (IBM and PyTorch,
# "Maximizing training throughput using PyTorch FSDP and Torch.compile", 2024).
COMPILED_KERNELS = 0.5
# Host <-> device copies (activation and optimizer offload): PCIe Gen4 x16 moves 32 GB/s per
# direction, about 25 GB/s in practice; Gen5 cards are planned at the same (host-side limits).
PCIE_BYTES_PER_SECOND = 25e9
# ZeRO-Offload's CPU Adam (Ren et al. 2021, section 5.1: AVX SIMD, loop unrolling, OpenMP threads)
# is bound by host memory bandwidth: it reads the fp32 master, both moments and the gradient and
# writes the master, the moments and the 16-bit weights (30 bytes per parameter) at about this
# per GPU (a two-socket host's ~300 GB/s shared by 8 GPUs, half of it reached; not measured here).
CPU_ADAM_BYTES_PER_PARAM = 30.0
HOST_BYTES_PER_SECOND_PER_DEVICE = 20e9
# Host ops per decode step outside the layers (sampling, logits processors, stopping criteria,
# the cache's concatenations).
GENERATE_OPS_PER_STEP = 40


class ThroughputEstimate(NamedTuple):
    """A NamedTuple (immutable) rather than a frozen dataclass: plan() makes one per layout and
    tuples are several times cheaper to build."""

    step_seconds: float  # training: one optimizer step; inference: one generate() call
    tokens_per_second: float  # whole placement (all replicas)
    duration_seconds: float  # for the job's tokens
    steps: int  # optimizer steps (training) or generate() calls per replica (inference)
    global_batch: int  # sequences per optimizer step (training) or per call on all replicas
    flops_per_token: float  # model FLOPs per token, including recomputation
    mfu: float  # achieved fraction of the dense peak
    breakdown: tuple[tuple[str, float], ...]  # seconds per component of one step
    prefill_seconds: float | None = None
    decode_step_seconds: float | None = None

    def component(self, name: str) -> float:
        return dict(self.breakdown).get(name, 0.0)


_NORMAL = statistics.NormalDist()  # immutable


def _expected_max(n: int) -> float:
    """Expected maximum of ``n`` independent standard normal draws (Blom's approximation)."""
    return _NORMAL.inv_cdf((n - 0.375) / (n + 0.25)) if n > 1 else 0.0


def _overlap(device: float, host: float) -> float:
    """Wall time of work that takes ``device`` seconds on the accelerator and ``host`` to dispatch."""
    return math.sqrt(device * device + host * host)


# A product of reduction depth k reaches k / (k + GEMM_TILE_OVERHEAD_K) of the large-product
# rate; the catalog's mfu was measured at GEMM_REFERENCE_K, so scale that depth to exactly mfu.
_REFERENCE_DEPTH = (GEMM_REFERENCE_K + GEMM_TILE_OVERHEAD_K) / GEMM_REFERENCE_K


def _gemm_seconds(m: float, n: float, k: float, dtype_bytes: int, accel: Accelerator) -> float:
    """Roofline of one matrix product [m × k] @ [k × n], plus the kernel's fixed cost."""
    per_row = GEMM_ALIGNMENT_BYTES // dtype_bytes
    peak = accel.fp32_flops if dtype_bytes >= 4 else accel.bf16_flops
    if dtype_bytes == 1 and accel.fp8_tensor_cores:
        peak *= FP8_PEAK_RATIO
    if n % per_row or k % per_row or m % per_row:
        rate = peak * accel.unaligned_matmul_efficiency
    else:
        rate = peak * accel.mfu * (k / (k + GEMM_TILE_OVERHEAD_K)) * _REFERENCE_DEPTH
    compute = 2.0 * m * n * k / rate
    traffic = (m * k + k * n + m * n) * dtype_bytes / (accel.hbm_bytes_per_second * accel.bandwidth_efficiency)
    return (compute if compute > traffic else traffic) + accel.kernel_seconds


def _attention_efficiency(head_dim: int, context: float, accel: Accelerator) -> float:
    padded = next((d for d in ATTENTION_HEAD_DIMS if d >= head_dim), head_dim)
    return accel.attention_efficiency * context / (context + ATTENTION_FIXED_KEYS) * head_dim / padded


def _bandwidth(accel: Accelerator) -> float:
    return accel.hbm_bytes_per_second * accel.bandwidth_efficiency


def _elementwise_scale(accel: Accelerator) -> float:
    return TPU_FUSION if accel.kind is AcceleratorKind.TPU else 1.0


def _layer_gemms(
    gemms: tuple[Gemm, ...], m: float, tp: int, a: int, accel: Accelerator, *, frozen: bool = False
) -> tuple[float, float]:
    """Seconds of one layer's products: (forward, backward: the input- and weight-gradient products;
    ``frozen`` weights, an adapter's base, get no weight-gradient product)."""
    fwd = bwd = 0.0
    seen: dict[tuple[float, float], tuple[float, float]] = {}  # q/o, k/v, gate/up share shapes
    for g in gemms:
        n = g.n / tp if g.split_n else g.n
        k = g.k if g.split_n else g.k / tp
        found = seen.get((n, k))
        if found is None:
            dgrad_wgrad = _gemm_seconds(m, k, n, a, accel) + (0.0 if frozen else _gemm_seconds(k, n, m, a, accel))
            found = seen[(n, k)] = (_gemm_seconds(m, n, k, a, accel), dgrad_wgrad)
        fwd += found[0]
        bwd += found[1]
    return fwd, bwd


def _allreduce_seconds(
    nbytes: float, ranks: int, layout: Layout, accel: Accelerator, *, intra_efficiency: float = 1.0
) -> float:
    """Hierarchical ring all-reduce of ``nbytes`` per rank over ``ranks`` data-parallel ranks
    (``intra_efficiency``: the fraction of the node's link bandwidth its messages reach)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    nodes = max(1, layout.nodes)
    local = max(1, ranks // nodes)
    t = COLLECTIVE_LATENCY * math.log2(ranks)
    if local > 1:
        t += 2 * (local - 1) / local * nbytes / (accel.intra_node_bytes_per_second * intra_efficiency)
    if nodes > 1:
        # After the intra-node reduce-scatter each device carries 1/local of the data to its NIC.
        t += 2 * (nodes - 1) / nodes * (nbytes / local) / accel.inter_node_bytes_per_second
    return t


def _group(ranks: int, layout: Layout) -> Layout:
    """The devices of one hybrid sharding group of ``ranks``, packed onto the layout's nodes."""
    per_node = layout.devices_per_node
    return Layout(ranks, max(1, -(-ranks // per_node)))


def _hsdp_seconds(
    w: JobProfile, layout: Layout, accel: Accelerator, *, params: float, gathers: int, group: int, dp: int
) -> float:
    """FSDP hybrid sharding (HSDP; FSDP1 ``HYBRID_SHARD``, FSDP2 on a (replicate, shard) mesh):
    the all-gathers and the gradients' reduce-scatter run inside a group of ``group`` ranks (its
    nodes), and the reduced gradient shard is all-reduced across the dp / group replicas."""
    grad_bytes = 4.0 if w.numerics.param == 4 else float(w.numerics.param)
    volume = params * (gathers * w.numerics.compute + grad_bytes)
    t = (group - 1) / group * volume / (accel.intra_node_bytes_per_second * FSDP_COLLECTIVE_EFFICIENCY)
    g = _group(group, layout)
    if g.nodes > 1:
        t += (g.nodes - 1) / g.nodes * volume / g.devices_per_node / accel.inter_node_bytes_per_second
    replicas = dp // group
    link = accel.inter_node_bytes_per_second if layout.nodes > g.nodes else accel.intra_node_bytes_per_second
    return t + 2 * (replicas - 1) / replicas * params * grad_bytes / group / link


def _optimizer_bytes_per_param(w: JobProfile) -> tuple[float, int]:
    """Bytes the optimizer step moves per parameter, and kernels per parameter tensor."""
    p = w.numerics.param
    if w.optimizer is Optimizer.ADAMW:
        return 7.0 * p, 0  # fused: read p, g, m, v; write p, m, v
    if w.optimizer is Optimizer.SGD:
        return 8.0 * p, 0  # foreach: buf *= m; buf += g; p -= lr * buf
    if w.optimizer is Optimizer.ADAFACTOR:
        return 12.0 * 4, 20  # per-tensor loop of fp32 temporaries
    return 3.0 * p + 4.0, 0  # 8-bit Adam: p, g and two 1-byte states


@dataclass(frozen=True, slots=True)
class _DeviceStep:
    """The part of a training step that depends only on the device and the TP degree."""

    forward: float
    backward: float
    other: float
    optimizer_per_shard: float  # optimizer pass with states divided by the ZeRO degree: × 1/shard
    optimizer_fixed: float
    kernels: float  # kernel launches per step
    params: float  # parameters per device before ZeRO sharding
    flops_per_token: float
    tp_comm: float  # tensor-parallel all-reduces of activations, per step
    cp_comm: float  # context parallel: exposed ring-attention K/V exchange, per micro-batch
    p2p_bytes: float  # pipeline parallel: activation bytes a stage sends per micro-batch
    offload: float = 0.0  # activation offload: host copies compute does not hide, per micro-batch
    stall: float = 0.0  # per micro-batch, neither overlapped nor overlapping (NF4 at micro-batch 1)
    checkpoint_host: float = 0.0  # per micro-batch: checkpoint hooks' host time the backward cannot hide


@memoised(128)
def _device_step(w: JobProfile, accel: Accelerator, tp: int, *, cache: PlanCache | None = None) -> _DeviceStep:
    s, num = w.shape, w.numerics
    a = num.compute
    # Context parallel: each device runs 1/cp of every sequence's tokens (queries); its attention
    # still covers the whole sequence's keys (w.seq_len), load-balanced over the causal half.
    m = float(w.device_tokens)
    layers = w.stage_layers  # pipeline parallel: the fullest stage's layers
    blk = blocks.block(s, num, w.attention, w.dropout, cache=cache)
    # A chunked or fused loss (workload.lossKernel) reads the 16-bit logits once, as a fused stack's.
    hd = blocks.head(s, num, w.fused or w.loss_kernel is not LossKernel.STANDARD, cache=cache)
    bw = _bandwidth(accel)
    ew = _elementwise_scale(accel)
    if w.framework is Framework.MAXTEXT:
        ew = TPU_FUSION  # XLA fuses elementwise chains on GPU as on TPU
    elif w.framework is Framework.MEGATRON:
        ew = MEGATRON_FUSION
    elif w.compile or w.fused_kernels:
        ew *= MEGATRON_FUSION
    layer_kernels = blk.fwd_kernels * (COMPILED_KERNELS if w.compile else 1.0)
    eager = w.attention is Attention.EAGER

    fp8 = w.fp8 and accel.fp8_tensor_cores  # without FP8 tensor cores: 16-bit products
    ad = w.adapter
    g_fwd, g_bwd = _layer_gemms(blk.gemms, m, tp, 1 if fp8 else a, accel, frozen=ad is not None)
    if ad is not None and ad.base is BaseWeights.INT8:
        g_fwd, g_bwd = INT8_PRODUCT_SLOWDOWN * g_fwd, INT8_PRODUCT_SLOWDOWN * g_bwd
    if s.cross_layers:
        # Encoder-decoder: the cross-attention's products, spread over the layers (Shape.cross_layers).
        spread = s.layer_matmul_params / (s.layer_matmul_params - s.cross_matmul_params)
        g_fwd, g_bwd = g_fwd * spread, g_bwd * spread
    head_fwd, head_bwd = _layer_gemms((Gemm(s.vocab, s.hidden, True),), m, tp, a, accel)

    # Attention: the fused kernel over the causal half of the scores; eager attention runs QK^T
    # and PV as batched products over all of them (QK^T only head_dim deep).
    if eager:
        rows = m * s.heads / tp
        attn_fwd, attn_bwd = _layer_gemms(
            (Gemm(w.seq_len, s.head_dim, True), Gemm(s.head_dim, w.seq_len, True)), rows, 1, a, accel
        )
        if s.cross_layers:  # a decoder layer's cross-attention scores too
            spread_scores = 1 + s.cross_layers / s.layers
            attn_fwd, attn_bwd = attn_fwd * spread_scores, attn_bwd * spread_scores
    else:
        score_flops = 2 * 2 * m * w.seq_len * (s.heads / tp) * s.head_dim
        efficiency = _attention_efficiency(s.head_dim, w.seq_len, accel)
        if w.fused:
            efficiency *= FUSED_ATTENTION_EFFICIENCY
        attn_fwd = 0.5 * s.attention_work * score_flops / (accel.flops(a) * efficiency)
        attn_bwd = ATTENTION_BACKWARD * attn_fwd

    per_score = w.seq_len / tp
    # Sequence parallelism (workload.sequenceParallel) leaves the step time as it is: its
    # all-gathers and reduce-scatters move what the all-reduces they replace move (Korthikanti et
    # al. 2022, section 4.2.2), and the norms and residual adds are counted on the whole sequence
    # either way (dividing them by t put the held-out Megatron and MaxText rows 4-11 points fast).
    ew_fwd_bytes = (blk.fwd_bytes_shared + blk.fwd_bytes_split / tp + blk.fwd_bytes_per_score * per_score) * m
    ew_bwd_bytes = (blk.bwd_bytes_shared + blk.bwd_bytes_split / tp + blk.bwd_bytes_per_score * per_score) * m
    if fp8:
        # Transformer Engine casts each product's input to FP8 (and in backward the output
        # gradient), reading 16-bit and writing one byte.
        cast = sum(g.k for g in blk.gemms) * (a + 1)
        ew_fwd_bytes += cast * m
        ew_bwd_bytes += sum(g.n for g in blk.gemms) * (a + 1) * m
    if ad is not None:
        # The adapter branches' memory-bound ops (their products are r wide), and a quantised
        # layer's dequantisation per product.
        branches = adapter.adapted(s, ad.targets)
        into = LORA_INPUT_BYTES_QUANTISED if ad.quantised else LORA_INPUT_BYTES_BF16
        d_in = sum(i for i, _ in branches) / tp
        d_out = sum(o for _, o in branches) / tp
        ew_fwd_bytes += (into[0] * d_in + LORA_OUTPUT_BYTES[0] * d_out) * m
        ew_bwd_bytes += (into[1] * d_in + LORA_OUTPUT_BYTES[1] * d_out) * m
        if ad.quantised:
            per_weight = DEQUANT_BYTES_NF4 if ad.base is BaseWeights.NF4 else DEQUANT_BYTES_INT8
            dequant = per_weight * s.layer_matmul_params / tp
            ew_fwd_bytes += dequant
            ew_bwd_bytes += dequant
        layer_kernels += len(branches) * (LORA_KERNELS_QUANTISED if ad.quantised else LORA_KERNELS_BF16)
    ew_fwd = ew * ew_fwd_bytes / bw + layer_kernels * accel.kernel_seconds
    ew_bwd = ew * ew_bwd_bytes / bw + BACKWARD_KERNELS * layer_kernels * accel.kernel_seconds

    layer_fwd = g_fwd + attn_fwd + ew_fwd
    layer_bwd = g_bwd + attn_bwd + ew_bwd
    # Full recompute runs each layer's forward again; selective recompute (Megatron's core
    # attention, torchtitan's per-op policy) only the attention kernel.
    recompute = 0.0
    if w.checkpointing:
        recompute = layer_fwd
    elif w.selective:
        # The core attention again: its products, and for eager attention the score ops.
        recompute = attn_fwd + ew * blk.fwd_bytes_per_score * per_score * m / bw

    # Autocast casts every matrix to bf16 per forward; backward casts the bf16 weight gradients
    # to fp32 (the first accumulation into a None gradient takes the tensor without a copy).
    matmul_params = s.matmul_params / tp
    casts = 2 * (4 + a) * matmul_params if num.autocast else 0.0
    embedding = 2 * 4.0 * s.embedding_params / tp + 8.0 * m * s.hidden
    loss_bytes = hd.loss_bytes_per_logit * m * s.vocab / tp
    other = ew * (casts + embedding + loss_bytes) / bw + (hd.loss_kernels + 10) * accel.kernel_seconds
    # Added to the step after host and device overlap: it shows whichever of them bounds the step.
    stall = NF4_SINGLE_SEQUENCE_LAYER_SECONDS * layers if ad is not None and ad.base is BaseWeights.NF4 else 0.0
    stall *= w.micro_batch == 1

    params_dev = (s.params - (s.layers - layers) * s.layer_params) / tp
    per_param, kernels_per_tensor = _optimizer_bytes_per_param(w)
    tensors = layers * (len(blk.gemms) + 2) + 3
    if ad is not None:
        # Only the fp32 adapters are stepped: A and B of each adapted linear.
        params_dev = adapter.trainable_params(s, ad) / tp
        per_param = 7.0 * 4 if w.optimizer is Optimizer.ADAMW else 8.0 * 4
        tensors = layers * 2 * len(adapter.adapted(s, ad.targets))
    optimizer_kernels = kernels_per_tensor * tensors + 10
    optimizer_fixed = optimizer_kernels * accel.kernel_seconds
    if w.precision is Precision.AMP_FP16:
        optimizer_fixed += 3 * 4.0 * params_dev / bw  # GradScaler: unscale and check the gradients

    passes = 1 + BACKWARD_KERNELS + (1 if w.checkpointing else 0)
    kernels = layers * layer_kernels * passes + 3 * hd.loss_kernels + optimizer_kernels
    checkpoint_host = 0.0
    if w.checkpointing and not w.compile and w.framework in (Framework.HF, Framework.FSDP, Framework.DEEPSPEED):
        # torch.utils.checkpoint's per-layer hooks (CHECKPOINT_HOST_OPS_PER_LAYER) run on the host in
        # each layer's backward. They are hidden where the layer's backward and recompute keep the
        # device busier than the host's dispatch of them, and exposed beyond that slack: a layer
        # takes the longer of its device time and its host time (small models, short sequences).
        dispatch = (1 + BACKWARD_KERNELS) * layer_kernels * accel.host_seconds_per_op
        slack = max(0.0, layer_bwd + recompute - dispatch)
        hooks = CHECKPOINT_HOST_OPS_PER_LAYER * accel.host_seconds_per_op
        checkpoint_host = layers * max(0.0, hooks - slack)
    attn_width = s.q_dim
    flops_per_token = 6.0 * s.active_matmul_params + 6.0 * s.layers * w.seq_len * attn_width * (
        1 if eager else 0.5 * s.attention_work
    )
    if ad is not None:
        # A frozen base: forward and input gradient only (4 FLOPs per weight, not 6), plus the
        # adapters' forward, input and weight gradients.
        flops_per_token -= 2.0 * s.layers * s.active_layer_matmul_params
        flops_per_token += 6.0 * adapter.trainable_params(s, ad) / s.experts
    if w.checkpointing:
        flops_per_token += 2.0 * s.layers * s.active_layer_matmul_params + 2.0 * s.layers * w.seq_len * attn_width * 0.5
    elif w.selective:
        flops_per_token += 2.0 * s.layers * w.seq_len * attn_width * 0.5  # the attention's forward again
    # Tensor parallel: two activation all-reduces per layer forward, two backward, within a node
    # (with sequence parallelism an all-gather and a reduce-scatter each: the same volume).
    tp_comm = 0.0
    if tp > 1:
        one = COLLECTIVE_LATENCY + 2 * (tp - 1) / tp * m * s.hidden * a / accel.intra_node_bytes_per_second
        tp_comm = layers * 4 * one * (1.5 if w.checkpointing else 1.0)
        if w.framework is Framework.MAXTEXT:
            # XLA runs the tensor-parallel collectives asynchronously and overlaps them with the
            # layer's independent matrix products (MaxText's v5e/v5p configurations turn on
            # --xla_tpu_enable_async_collective_fusion, --xla_tpu_overlap_compute_collective_tc and
            # --xla_enable_async_all_gather): as data-parallel communication under the backward
            # pass, OVERLAP of the products hides them, UNHIDDEN_TAIL of them stays exposed.
            products = layers * (g_fwd + g_bwd + (g_fwd if w.checkpointing else 0.0))
            tp_comm = max(0.0, tp_comm - OVERLAP * products) + UNHIDDEN_TAIL * tp_comm
    # Context parallel (ring attention, Liu et al. 2023; Megatron's CP): cp − 1 exchanges of the
    # local K and V blocks per layer forward, and of K, V and their gradients backward, each
    # hidden under that step's attention compute where it is shorter. The ring runs inside a
    # node while tp × cp devices fit in one (the catalog's node size), else over the network.
    cp = w.context_parallel
    cp_comm = 0.0
    if cp > 1:
        link = (
            accel.intra_node_bytes_per_second
            if tp * cp <= accel.devices_per_node
            else accel.inter_node_bytes_per_second
        )
        block_kv = 2.0 * s.kv_dim / tp * m * a
        fwd_comm = (cp - 1) * (COLLECTIVE_LATENCY + block_kv / link)
        bwd_comm = (cp - 1) * (COLLECTIVE_LATENCY + 2 * block_kv / link)
        cp_comm = layers * (max(0.0, fwd_comm - attn_fwd) + max(0.0, bwd_comm - attn_bwd))
    # Pipeline parallel: a stage sends its output activations forward and receives their
    # gradient backward ([tokens × hidden] in the compute dtype; Megatron's scatter-gather
    # optimisation sends 1/tp of it per tensor-parallel rank).
    p2p_bytes = m * s.hidden * a / tp if w.pipeline_parallel > 1 else 0.0
    forward = layers * layer_fwd + head_fwd
    backward = layers * layer_bwd + head_bwd + layers * recompute
    if w.loss_kernel is LossKernel.FUSED:
        backward += head_fwd  # Cut Cross-Entropy recomputes the logits' product in backward
    offload = 0.0
    if w.activation_offload:
        # Each saved activation goes to the host in forward and comes back in backward, on a side
        # stream: what the pass's compute does not hide is exposed.
        if w.checkpointing:
            saved = blk.checkpoint_input / (tp if w.sequence_parallel else 1)
        else:
            saved = memory.layer_saved(w, tp, cache=cache)
        copy = layers * saved * m / PCIE_BYTES_PER_SECOND
        offload = max(0.0, copy - forward) + max(0.0, copy - backward)
    return _DeviceStep(
        forward=forward,
        backward=backward,
        offload=offload,
        other=other,
        optimizer_per_shard=per_param * params_dev / bw,
        optimizer_fixed=optimizer_fixed,
        kernels=kernels,
        params=params_dev,
        flops_per_token=flops_per_token,
        tp_comm=tp_comm,
        cp_comm=cp_comm,
        p2p_bytes=p2p_bytes,
        stall=stall,
        checkpoint_host=checkpoint_host,
    )


def _training(w: JobProfile, accel: Accelerator, layout: Layout, *, cache: PlanCache | None) -> ThroughputEstimate:
    tp, dp = layout.tensor_parallel, layout.data_parallel
    dev = _device_step(w, accel, tp, cache=cache)
    remat = memory.xla_remat_fraction(w, accel, layout, cache=cache)
    if remat > 0:
        # MaxText whose remat policy does not fit: XLA recomputes that fraction of what the policy
        # saves beyond full remat (memory.xla_remat_fraction), in the backward pass.
        full = _device_step(memory.full_remat(w), accel, tp, cache=cache)
        dev = dataclasses.replace(
            dev,
            backward=dev.backward + remat * (full.backward - dev.backward),
            flops_per_token=dev.flops_per_token + remat * (full.flops_per_token - dev.flops_per_token),
        )
    # Context-parallel ranks hold the same weights: gradients are reduced, and optimizer states
    # sharded, over data × context parallel ranks.
    dp_cp = dp * w.context_parallel
    shard = w.shard_degree(dp)  # dp × cp, or the hybrid sharding group (HSDP)
    optimizer = dev.optimizer_per_shard / (shard if w.sharding is not Sharding.NONE else 1) + dev.optimizer_fixed
    forward, backward = dev.forward, dev.backward

    # Data parallel: gradients (in the parameters' dtype) all-reduced, or reduce-scattered and
    # the updated shards all-gathered (ZeRO-1/2: the same volume); ZeRO-3/FSDP also all-gather
    # the compute-dtype weights for forward and backward.
    # An adapter's job reduces only the adapters' fp32 gradients (dev.params are the adapters).
    grad_bytes = 4.0 if w.adapter is not None else w.numerics.param
    ddp = w.sharding is Sharding.NONE and w.framework in (Framework.HF, Framework.FSDP)
    dp_comm = _allreduce_seconds(
        dev.params * grad_bytes, dp_cp, layout, accel, intra_efficiency=DDP_BUCKET_EFFICIENCY if ddp else 1.0
    )
    # The checkpoint hooks' exposed host time (_device_step) lengthens the backward pass, and
    # the gradients' communication runs under it as under the backward's kernels.
    checkpoint_host = dev.checkpoint_host
    hideable = OVERLAP * (backward + checkpoint_host)
    if dp_cp > 1 and w.sharding in (Sharding.ZERO3, Sharding.FSDP):
        # 2 all-gathers, over every rank or, hybrid sharded, within the group (its nodes only);
        # the gradients' reduce-scatter in the group, all-reduce of the shard across the groups
        # and all-gather move what one all-reduce over every rank moves.
        gather_over = layout if shard == dp_cp else _group(shard, layout)
        dp_comm += _allreduce_seconds(dev.params * w.numerics.compute, shard, gather_over, accel)
        hideable = OVERLAP * (forward + backward + checkpoint_host)
    # The last bucket's reduction cannot overlap anything.
    dp_exposed = max(0.0, dp_comm - hideable) + dp_comm * UNHIDDEN_TAIL
    if ddp and dp_cp > 1:
        # DDP's copies of the gradients into its buckets and back (DDP_BUCKET_COPY_BYTES): device
        # time on the compute stream, once per all-reduce.
        copy_rate = accel.hbm_bytes_per_second * DDP_BUCKET_COPY_EFFICIENCY
        dp_exposed += DDP_BUCKET_COPY_BYTES * grad_bytes * dev.params / copy_rate

    # MaxText runs one compiled XLA program per step: no per-kernel host dispatch.
    host = 0.0 if w.framework is Framework.MAXTEXT else dev.kernels * accel.host_seconds_per_op
    # Gradient accumulation: ``ga`` forward/backward passes per optimizer step. DDP and ZeRO-1
    # reduce gradients once per step (``no_sync``); ZeRO-2/3 and FSDP reduce-scatter (and
    # ZeRO-3/FSDP gather weights) in every microbatch.
    ga = w.gradient_accumulation
    comm_per_micro = w.framework is Framework.FSDP or w.sharding in (Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP)
    if w.framework is Framework.MEGATRON:
        # Megatron's distributed optimizer reduce-scatters the fp32 gradient buffer once per step.
        comm_per_micro = w.sharding in (Sharding.ZERO3, Sharding.FSDP)
    per_step = 0.0
    if w.framework is Framework.FSDP:
        # FSDP2 under a bf16 MixedPrecisionPolicy: no autocast casts, but per layer and pass a
        # cast of the fp32 shard, an all-gather with its copy-out, and in backward the fp32
        # cast and copy-in of the gradients for the reduce-scatter, each a few host ops (hooks,
        # stream waits, collectives); the collectives run at the bandwidth NCCL reaches on
        # per-layer messages and overlap compute only partly (fitted to the 2- and 4-H200 rows).
        params = dev.params
        gathers = 1 if w.sharding in (Sharding.ZERO1, Sharding.ZERO2) else 2
        fsdp_bytes = params * (gathers * 2 * w.numerics.compute + 3 * 4.0)
        dp_comm = 0.0
        nvlink_comm = 0.0  # the part that runs over the node's own links, SM-driven
        group = min(w.hybrid_shard_degree, dp) if w.hybrid_shard_degree else dp
        if 1 < group < dp:
            dp_comm = _hsdp_seconds(w, layout, accel, params=params, gathers=gathers, group=group, dp=dp)
        elif dp > 1:
            volume = params * (gathers * w.numerics.compute + (4.0 if w.numerics.param == 4 else w.numerics.param))
            dp_comm = (dp - 1) / dp * volume / (accel.intra_node_bytes_per_second * FSDP_COLLECTIVE_EFFICIENCY)
            nvlink_comm = dp_comm
            if layout.nodes > 1:
                # All-gathers and reduce-scatters (``volume`` counts each once) move (n-1)/n of
                # it in and out of a node, over the node's NICs, one per device.
                dp_comm += (
                    (layout.nodes - 1)
                    / layout.nodes
                    * volume
                    / layout.devices_per_node
                    / accel.inter_node_bytes_per_second
                )
        # Every layer's collectives wait for the slowest rank's host (FSDP_RANK_SPREAD).
        checkpoint_host *= 1 + FSDP_RANK_SPREAD * _expected_max(dp)
        compute = forward + backward
        hidden_under = compute + checkpoint_host
        dp_exposed = max(0.0, dp_comm - FSDP_OVERLAP * hidden_under) + dp_comm * UNHIDDEN_TAIL
        # What compute hides is not free: NVLink collectives are kernels on the same SMs and HBM.
        dp_exposed += FSDP_CONTENTION * min(nvlink_comm, FSDP_OVERLAP * compute)
        per_step = fsdp_bytes / _bandwidth(accel) * (ga - 1)  # casts and copies per microbatch
        optimizer += fsdp_bytes / _bandwidth(accel)
        hook_ops = FSDP_HOOK_OPS_PER_LAYER + FSDP_HOST_OPS_PER_LAYER * gathers
        host += hook_ops * w.shape.layers * accel.host_seconds_per_op
        # Every layer's collectives wait for the slowest rank's host (FSDP_RANK_SPREAD).
        host *= 1 + FSDP_RANK_SPREAD * _expected_max(dp)
    # Pipeline parallel (1F1B, Narayanan et al. 2021): the fullest stage runs its share of each
    # of the ga micro-batches, and the pipeline fills and drains for p − 1 more slots: the step
    # is (ga + p − 1) slots of one micro-batch's stage time, the bubble (p − 1)/(ga + p − 1) of
    # it idle. Each slot also receives an activation and a gradient from the neighbouring stages.
    pp = w.pipeline_parallel
    slots = ga + pp - 1
    p2p = 0.0
    if pp > 1:
        link = accel.inter_node_bytes_per_second if layout.nodes > 1 else accel.intra_node_bytes_per_second
        p2p = slots * 2 * (COLLECTIVE_LATENCY + dev.p2p_bytes / link)
    micro = forward + backward + dev.other + dev.tp_comm + dev.cp_comm + dev.offload
    bubble = (pp - 1) * micro
    offload = ga * dev.offload
    if w.optimizer_offload:
        # ZeRO-Offload: the step runs on the CPU over this device's shard, after its 16-bit
        # gradients came down and before its 16-bit weights go up (Ren et al. 2021, section 4).
        shard_params = dev.params / shard
        optimizer = shard_params * (
            CPU_ADAM_BYTES_PER_PARAM / HOST_BYTES_PER_SECOND_PER_DEVICE + 2 * w.numerics.compute / PCIE_BYTES_PER_SECOND
        )
    if slots > 1:
        forward, backward, other = ga * forward, ga * backward, ga * dev.other
        tp_comm, cp_comm = ga * dev.tp_comm, ga * dev.cp_comm
        dp_exposed *= ga if comm_per_micro else 1
        optimizer += per_step
        host *= ga
    else:
        other, tp_comm, cp_comm = dev.other, dev.tp_comm, dev.cp_comm
    device = forward + backward + other + optimizer + dp_exposed + tp_comm + cp_comm + bubble + p2p + offload
    # The checkpoint hooks' exposed host time adds to the step (per micro-batch, as the stall).
    step = _overlap(device, host) + (dev.stall + checkpoint_host) * ga
    global_tokens = w.step_tokens * dp * ga
    steps = _steps(w, layout)
    tokens_per_second = global_tokens / step
    breakdown = (
        ("forward", forward),
        ("backward", backward),
        ("loss, casts, embedding", other),
        ("optimizer", optimizer),
        ("data-parallel communication (exposed)", dp_exposed),
        ("tensor-parallel communication", tp_comm),
        ("context-parallel communication (exposed)", cp_comm),
        ("pipeline bubble", bubble),
        ("pipeline send/receive", p2p),
        ("activation offload copies (exposed)", offload),
        ("host dispatch (not hidden)", step - device),
    )
    return ThroughputEstimate(
        step_seconds=step,
        tokens_per_second=tokens_per_second,
        duration_seconds=steps * step,
        steps=steps,
        global_batch=w.micro_batch * dp * ga,
        flops_per_token=dev.flops_per_token,
        mfu=dev.flops_per_token * tokens_per_second / (accel.flops(w.numerics.compute) * layout.devices),
        breakdown=breakdown,
    )


def _forward_seconds(
    w: JobProfile, accel: Accelerator, tp: int, tokens: float, context: float, *, cache: PlanCache | None
) -> float:
    """Device time of one forward pass over ``tokens`` new tokens, each attending to ``context``."""
    s, num = w.shape, w.numerics
    a = num.compute
    blk = blocks.block(s, num, w.attention, 0.0, cache=cache)
    g_fwd, _ = _layer_gemms(blk.gemms, tokens, tp, a, accel)
    eager = w.attention is Attention.EAGER
    causal = 1.0 if eager or tokens <= w.batch else 0.5
    score_flops = 2 * 2 * tokens * context * (s.heads / tp) * s.head_dim * causal
    eff = accel.mfu if eager else _attention_efficiency(s.head_dim, context, accel)
    attn = score_flops / (accel.flops(a) * eff)
    # Reading the KV cache (decode) bounds attention from below.
    kv_read = w.batch * context * s.kv_dim / tp * 2 * a
    attn = max(attn, kv_read / _bandwidth(accel)) + accel.kernel_seconds
    ew_bytes = (blk.fwd_bytes_shared + blk.fwd_bytes_split / tp + blk.fwd_bytes_per_score * context / tp) * tokens
    ew = _elementwise_scale(accel) * ew_bytes / _bandwidth(accel) + blk.fwd_kernels * accel.kernel_seconds
    return s.layers * (g_fwd + attn + ew)


def _inference(w: JobProfile, accel: Accelerator, layout: Layout, *, cache: PlanCache | None) -> ThroughputEstimate:
    s, num = w.shape, w.numerics
    tp, replicas = layout.tensor_parallel, layout.data_parallel
    a = num.compute
    blk = blocks.block(s, num, w.attention, 0.0, cache=cache)
    head_last, _ = _layer_gemms((Gemm(s.vocab, s.hidden, True),), float(w.batch), tp, a, accel)
    kernels = s.layers * blk.fwd_kernels
    tp_step = s.layers * 2 * COLLECTIVE_LATENCY if tp > 1 else 0.0

    prefill_device = (
        _forward_seconds(w, accel, tp, float(w.batch * w.prompt_len), float(w.prompt_len), cache=cache) + head_last
    )
    if tp > 1:
        act = w.batch * w.prompt_len * s.hidden * a
        prefill_device += s.layers * 2 * (2 * (tp - 1) / tp * act / accel.intra_node_bytes_per_second)
    prefill = _overlap(prefill_device + tp_step, kernels * accel.host_seconds_per_op)
    mid = w.prompt_len + w.new_tokens / 2  # the average context while decoding
    decode_device = _forward_seconds(w, accel, tp, float(w.batch), mid, cache=cache) + head_last + tp_step
    decode_host = (kernels + GENERATE_OPS_PER_STEP) * accel.host_seconds_per_op
    decode = _overlap(decode_device, decode_host)
    call = prefill + w.new_tokens * decode
    per_call = w.batch * w.new_tokens
    calls_per_replica = _steps(w, layout)
    tokens_per_second = per_call * replicas / call
    flops_per_token = 2.0 * s.active_matmul_params
    # The model FLOPs the call really does: every prompt and generated token goes through the
    # layers, but the vocabulary head runs once for the prompt (its last position) and once per
    # decode step, as the time above counts it. Charging the head for every prompt token put the
    # MFU of a small model with a large vocabulary and a long prompt above 1.
    done = 2.0 * s.layers * s.active_layer_matmul_params * w.batch * (w.prompt_len + w.new_tokens)
    done += 2.0 * s.vocab * s.hidden * w.batch * (1 + w.new_tokens)
    mfu = done * replicas / call / (accel.flops(a) * layout.devices)
    breakdown = (("prefill", prefill), ("decode", w.new_tokens * decode))
    return ThroughputEstimate(
        step_seconds=call,
        tokens_per_second=tokens_per_second,
        duration_seconds=calls_per_replica * call,
        steps=calls_per_replica,
        global_batch=w.batch * replicas,
        flops_per_token=flops_per_token,
        mfu=mfu,
        breakdown=breakdown,
        prefill_seconds=prefill,
        decode_step_seconds=decode,
    )


def _steps(w: JobProfile, layout: Layout) -> int:
    return steps_for(w, layout.data_parallel)


def steps_for(w: JobProfile, data_parallel: int) -> int:
    """Optimizer steps (training) or generate() calls per replica (inference) for the job's tokens
    over ``data_parallel`` replicas: the only part of an estimate that depends on ``tokens``."""
    if w.mode is WorkloadMode.TRAINING:
        return max(1, -(-w.tokens // (w.micro_batch * w.seq_len * data_parallel * w.gradient_accumulation)))
    calls = max(1, math.ceil(w.tokens / (w.batch * w.new_tokens)))
    return max(1, math.ceil(calls / data_parallel))


_new = tuple.__new__


def for_tokens(step: ThroughputEstimate, job: JobProfile, data_parallel: int) -> ThroughputEstimate:
    """``step`` (an estimate of ``job`` with any token count) for ``job``'s own tokens: the
    planner caches step-level estimates across jobs that differ only in how long they train."""
    return for_steps(step, steps_for(job, data_parallel))


def for_steps(step: ThroughputEstimate, n: int) -> ThroughputEstimate:
    """``step`` for ``n`` optimizer steps (training) or generate() calls per replica (inference),
    as :func:`steps_for` counts them."""
    # Positional through tuple.__new__: the fields after ``steps`` are kept (a hot path; _replace
    # is several times slower, the NamedTuple's own __new__ twice as slow).
    return _new(ThroughputEstimate, (step[0], step[1], n * step[0], n, *step[4:]))


def estimate(
    job: JobProfile, accelerator: Accelerator, layout: Layout, *, cache: PlanCache | None = None
) -> ThroughputEstimate:
    """Step time, tokens/s and duration of ``job`` on ``layout``; ``cache`` keeps what other
    layouts and jobs of the same shape share (None: computed afresh)."""
    if job.training:
        return _training(job, accelerator, layout, cache=cache)
    return _inference(job, accelerator, layout, cache=cache)
