"""The recipe knobs' effect on reference jobs, and the published figures they are checked against.

No run in the repository's calibration or published sets turns ``workload.compile``,
``lossKernel``, ``fusedKernels``, ``optimizerInBackward``, ``activationOffload`` or
``optimizerOffload``, so each is shown as a section: a reference job planned without the knob
and with it (per-device peak, footprint, tokens/s and their change), and, where a source
publishes one, the published figure beside the planned one:

- Cut Cross-Entropy (Wijmans et al. 2024, abstract): Gemma 2 2B's loss over 8192 tokens takes
  24 GB with a standard cross-entropy (three fp32 [8192 × 256000] tensors: 23.4 GiB) and 1 MB
  with CCE; the planned "logits" component is shown for both.
- torch.compile on FSDP Llama training: +10 to +23 % MFU by model size (IBM and PyTorch,
  "Maximizing training throughput using PyTorch FSDP and Torch.compile", 2024).
- Encoder-decoder models (``model.architecture.encoderLayers``): T5's parameter counts.

``bench/plan_accuracy.py --knobs`` and ``bench/plan_published.py --knobs`` print this section.

Run: ``PYTHONPATH=operator python bench/plan_knobs.py``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_operator.planning import memory, profile, throughput
from accel_operator.planning.layout import Layout

LLAMA_8B = {
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kvHeads": 8,
    "intermediate": 14336,
    "vocab": 128256,
}
# Gemma 2 2B (its config.json): GeGLU is planned as a gated MLP (swiglu's shape).
GEMMA2_2B = {
    "layers": 26,
    "hidden": 2304,
    "heads": 8,
    "kvHeads": 4,
    "headDim": 256,
    "intermediate": 9216,
    "vocab": 256000,
    "tiedEmbeddings": True,
}


# T5 checkpoints (config.json) and their Hugging Face parameter counts.
T5: tuple[tuple[str, dict[str, Any], int], ...] = (
    (
        "t5-base",
        {
            "layers": 12,
            "encoderLayers": 12,
            "hidden": 768,
            "heads": 12,
            "intermediate": 3072,
            "vocab": 32128,
            "mlp": "gelu",
            "norm": "rmsnorm",
            "tiedEmbeddings": True,
        },
        222_903_552,
    ),
    (
        "t5-v1_1-xl",
        {
            "layers": 24,
            "encoderLayers": 24,
            "hidden": 2048,
            "heads": 32,
            "intermediate": 5120,
            "vocab": 32128,
            "mlp": "swiglu",
            "norm": "rmsnorm",
        },
        2_849_757_184,
    ),
)


@dataclass(frozen=True)
class Reference:
    name: str
    arch: dict[str, Any]
    workload: dict[str, Any]
    accelerator: str
    devices: int


REFERENCES = (
    Reference(
        "llama-3-8b, 1×H100, hf, bf16, AdamW 8-bit, b1×4096, ckpt",
        LLAMA_8B,
        {"framework": "hf", "precision": "bf16", "optimizer": "adamw-8bit", "seqLen": 4096, "recompute": "full"},
        "h100-80gb",
        1,
    ),
    Reference(
        "llama-3-8b, 8×H100, fsdp, amp-bf16, sdpa, b2×4096",
        LLAMA_8B,
        {"framework": "fsdp", "sharding": "fsdp", "microBatch": 2, "seqLen": 4096},
        "h100-80gb",
        8,
    ),
    Reference(
        "llama-3-8b, 8×H100, zero2, amp-bf16, b4×4096, ckpt",
        LLAMA_8B,
        {"framework": "deepspeed", "sharding": "zero2", "microBatch": 4, "seqLen": 4096, "recompute": "full"},
        "h100-80gb",
        8,
    ),
    Reference(
        "gemma-2-2b, 1×H100, hf, bf16, b1×8192 (CCE's setting)",
        GEMMA2_2B,
        {"framework": "hf", "precision": "bf16", "seqLen": 8192, "recompute": "full"},
        "h100-80gb",
        1,
    ),
)

KNOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("compile", {"compile": True}),
    ("fusedKernels", {"fusedKernels": True}),
    ("lossKernel chunked", {"lossKernel": "chunked"}),
    ("lossKernel fused", {"lossKernel": "fused"}),
    ("optimizerInBackward", {"optimizerInBackward": True}),
    ("activationOffload", {"activationOffload": True}),
    ("optimizerOffload cpu", {"optimizerOffload": "cpu"}),
)


@dataclass(frozen=True)
class Planned:
    mem: memory.MemoryEstimate
    speed: throughput.ThroughputEstimate

    def component(self, name: str) -> float:
        return dict(self.mem.components).get(name, 0.0)


def plan(ref: Reference, extra: dict[str, Any]) -> Planned | None:
    """The reference job with ``extra`` workload fields; None where the CRD refuses them."""
    workload = {"mode": "training", "tokens": 10**9, **ref.workload, **extra}
    try:
        spec = AcceleratorJobSpec.model_validate(
            {"team": "bench", "image": "bench", "model": {"architecture": ref.arch}, "workload": workload}
        )
    except ValueError:
        return None
    job = profile.from_spec(spec)
    accel = catalog.default().get(ref.accelerator)
    assert accel is not None
    layout = Layout.of(job, ref.devices, 1)
    return Planned(memory.estimate(job, accel, layout), throughput.estimate(job, accel, layout))


def rows() -> list[tuple[str, str, Planned | None, Planned]]:
    """(reference, knob, planned with the knob or None where refused, planned without)."""
    out: list[tuple[str, str, Planned | None, Planned]] = []
    for ref in REFERENCES:
        base = plan(ref, {})
        assert base is not None, ref.name
        out.extend((ref.name, knob, plan(ref, extra), base) for knob, extra in KNOBS)
    return out


def report() -> list[str]:
    gb = 1e9
    lines = [
        "Recipe knobs on reference jobs (no measured or published run turns them: planned effect)",
        f"{'knob':22} {'peak GB':>8} {'Δ':>7} {'footprint':>9} {'tok/s':>8} {'Δ':>7}  peak at",
    ]
    current = ""
    for name, knob, p, base in rows():
        if name != current:
            current = name
            lines.append(f"{name}")
            lines.append(
                f"  {'(without)':20} {base.mem.peak_allocated_bytes / gb:8.1f} {'':>7} "
                f"{base.mem.footprint_bytes / gb:9.1f} {base.speed.tokens_per_second:8.0f} {'':>7}  {base.mem.peak_at}"
            )
        if p is None:
            lines.append(f"  {knob:20} refused by the CRD for this job")
            continue
        dm = p.mem.peak_allocated_bytes / base.mem.peak_allocated_bytes - 1
        ds = p.speed.tokens_per_second / base.speed.tokens_per_second - 1
        lines.append(
            f"  {knob:20} {p.mem.peak_allocated_bytes / gb:8.1f} {dm * 100:+6.1f}% {p.mem.footprint_bytes / gb:9.1f} "
            f"{p.speed.tokens_per_second:8.0f} {ds * 100:+6.1f}%  {p.mem.peak_at}"
        )
    gemma = REFERENCES[-1]
    std = plan(gemma, {})
    cce = plan(gemma, {"lossKernel": "fused"})
    assert std is not None and cce is not None
    lines += [
        "",
        "Published figures beside the planned ones",
        f"  Cut Cross-Entropy, Gemma 2 2B, 8192 tokens: loss memory published 24 GB (23.4 GiB) standard, 1 MB CCE; "
        f"planned logits {std.component('logits') / 2**30:.1f} GiB standard, "
        f"{cce.component('logits') / 2**20:.1f} MiB fused",
    ]
    fsdp = REFERENCES[1]
    eager, compiled = plan(fsdp, {}), plan(fsdp, {"compile": True})
    assert eager is not None and compiled is not None
    gain = compiled.speed.mfu / eager.speed.mfu - 1
    lines.append(
        f"  torch.compile, FSDP Llama 7B-70B: published +10-23 % MFU; planned {gain * 100:+.1f}% MFU on {fsdp.name}"
    )
    for name, arch, published in T5:
        spec = AcceleratorJobSpec.model_validate(
            {"team": "bench", "image": "bench", "model": {"architecture": arch}, "workload": {"tokens": 10**9}}
        )
        planned = profile.from_spec(spec).shape.params
        lines.append(
            f"  encoder-decoder {name}: published {published:,} parameters; planned {planned:,} "
            f"({planned / published - 1:+.4%}: the relative position bias and the encoder's final norm)"
        )
    return lines


def main(argv: Sequence[str]) -> int:
    del argv
    print("\n".join(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
