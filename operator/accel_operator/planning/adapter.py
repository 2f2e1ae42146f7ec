"""LoRA and QLoRA: what training adapters beside a frozen base changes in memory and time.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") freezes the base and
trains, beside each adapted linear layer ``W`` (d_out × d_in), ``B·A`` with ``A`` r × d_in and ``B``
d_out × r: r·(d_in + d_out) trainable parameters per adapted linear. QLoRA (Dettmers et al. 2023,
"QLoRA: Efficient Finetuning of Quantized LLMs") stores the frozen linears in 4-bit NormalFloat
(0.5 byte per weight) with an fp32 absmax per 64 weights (0.5 bit per weight), or, double
quantised, 8-bit absmax with an fp32 scale per 256 of them: 8/64 + 32/(64·256) = 0.127 bit per
weight (section 3 of the paper). bitsandbytes' LLM.int8 (Dettmers et al. 2022) stores one byte
per weight and an fp32 scale per output row.

What the measured recipe (PEFT 0.21 on a bf16 or bitsandbytes base, bench/gpu/measure_lora.py,
one H100) does, and the planner counts:

- the base: its linear layers in their format, embeddings, norms and the LM head in bf16; no
  gradients and no optimizer state;
- the adapters: fp32 (PEFT's ``autocast_adapter_dtype``), fp32 gradients and the optimizer's fp32
  states (Adam: 8 bytes), 16 bytes per trainable parameter with AdamW;
- activations: a frozen linear keeps no input for a weight gradient, and a frozen RMSNorm weight
  no normalised input; each adapter branch keeps its dropout's bf16 output and one-byte mask
  (3 bytes per input feature per token) and the r-wide input of ``B``;
- LLM.int8 keeps each frozen linear's fp16 input on its autograd context (not through
  ``save_for_backward``), so gradient checkpointing does not release it: 2 bytes per input
  feature per token of every layer;
- a quantised layer is dequantised to bf16 one at a time for its products (forward and the
  input gradient): one matrix's bf16 copy is a transient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from accel_api.enums import AdapterMethod, AdapterTargets, BaseWeights, MlpKind
from accel_api.job import Adapter


class Shape(Protocol):
    """What these terms read of ``profile.Shape`` (profile imports this module, not the reverse)."""

    @property
    def layers(self) -> int: ...
    @property
    def hidden(self) -> int: ...
    @property
    def q_dim(self) -> int: ...
    @property
    def kv_dim(self) -> int: ...
    @property
    def intermediate(self) -> int: ...
    @property
    def positions(self) -> int: ...
    @property
    def mlp(self) -> MlpKind: ...
    @property
    def rmsnorm(self) -> bool: ...
    @property
    def experts(self) -> int: ...
    @property
    def active_experts(self) -> int: ...


# Bytes per weight of a quantised base's linear layers, scales included.
NF4_BYTES = 0.5
NF4_ABSMAX_BYTES = 4.0 / 64  # one fp32 absmax per 64-weight block
NF4_DOUBLE_QUANT_BYTES = 0.127 / 8  # Dettmers et al. 2023, section 3: 0.127 bit per weight
INT8_BYTES = 1.0
# Per token and input feature of an adapted linear: the dropout's bf16 output (A's input) and its
# one-byte mask (PEFT's lora_dropout; the papers' recipes use 0.05-0.1).
BRANCH_BYTES_PER_INPUT = 3.0
# LLM.int8's fp16 input copy on each frozen linear's autograd context (bytes per input feature).
INT8_INPUT_BYTES = 2.0


@dataclass(frozen=True, slots=True)
class AdapterProfile:
    """``workload.adapter`` with its defaults resolved."""

    method: AdapterMethod
    rank: int
    targets: AdapterTargets
    base: BaseWeights
    double_quant: bool

    @classmethod
    def of(cls, a: Adapter) -> AdapterProfile:
        return cls(a.method, a.rank, a.target_modules, a.base_weights_or_default, a.double_quant_or_default)

    @property
    def quantised(self) -> bool:
        return self.base is not BaseWeights.BF16

    @property
    def base_bytes_per_weight(self) -> float:
        """Bytes per weight of the base's linear layers (scales included)."""
        if self.base is BaseWeights.NF4:
            return NF4_BYTES + (NF4_DOUBLE_QUANT_BYTES if self.double_quant else NF4_ABSMAX_BYTES)
        if self.base is BaseWeights.INT8:
            return INT8_BYTES
        return 2.0

    @property
    def label(self) -> str:
        base = self.base.value + (" double-quantised" if self.base is BaseWeights.NF4 and self.double_quant else "")
        return f"{self.method.value} rank {self.rank} on {self.targets.value} ({base} base)"


def linears(shape: Shape) -> tuple[tuple[int, int], ...]:
    """(d_in, d_out) of one layer's linear layers as one token passes through them (an MoE's
    active experts counted), in the order attention then MLP."""
    h, q, kv = shape.hidden, shape.q_dim, shape.kv_dim
    i = shape.intermediate
    attn = ((h, q), (h, kv), (h, kv), (q, h)) if shape.positions == 0 else ((h, q + 2 * kv), (q, h))
    mlp = ((h, i), (h, i), (i, h)) if shape.mlp is MlpKind.SWIGLU else ((h, i), (i, h))
    return attn + mlp * shape.active_experts


def adapted(shape: Shape, targets: AdapterTargets) -> tuple[tuple[int, int], ...]:
    """(d_in, d_out) of the linear layers of one layer that get an adapter, per token."""
    every = linears(shape)
    n_attn = 4 if shape.positions == 0 else 2
    if targets is AdapterTargets.ATTENTION:
        return every[:n_attn]
    if targets is AdapterTargets.MLP:
        return every[n_attn:]
    return every


def trainable_params(shape: Shape, a: AdapterProfile) -> int:
    """r·(d_in + d_out) per adapted linear, every layer (every expert of an MoE)."""
    per_token = adapted(shape, a.targets)
    experts = shape.experts / shape.active_experts
    n_attn = 4 if shape.positions == 0 else 2
    total = 0.0
    for k, (d_in, d_out) in enumerate(per_token):
        is_mlp = a.targets is AdapterTargets.MLP or (a.targets is AdapterTargets.ALL_LINEAR and k >= n_attn)
        total += a.rank * (d_in + d_out) * (experts if is_mlp else 1.0)
    return int(total * shape.layers)


def branch_saved_per_token(shape: Shape, a: AdapterProfile) -> float:
    """Bytes per token per layer the adapter branches keep for backward."""
    return sum(BRANCH_BYTES_PER_INPUT * d_in + 2.0 * a.rank for d_in, _ in adapted(shape, a.targets))


def frozen_savings_per_token(shape: Shape, compute: int, residual: int) -> float:
    """Bytes per token per layer a full fine-tune keeps only for weight gradients: the attention's
    and the MLP's shared input, the MLP's down projection input and, for RMSNorm, each norm's
    normalised input (its weight's gradient)."""
    h, i = shape.hidden, shape.intermediate * shape.active_experts
    norms = 2 * residual * h if shape.rmsnorm else 0.0
    return 2.0 * compute * h + compute * i + norms


def int8_inputs_per_token(shape: Shape) -> float:
    """LLM.int8: every frozen linear's fp16 input, per token per layer (kept under checkpointing)."""
    return sum(INT8_INPUT_BYTES * d_in for d_in, _ in linears(shape))
