"""The recipe knobs (workload.compile, lossKernel, fusedKernels, optimizerInBackward,
activationOffload, optimizerOffload): what each changes in memory and speed, against the
formula or the published figure it comes from, and the notes that say so."""

from __future__ import annotations

from typing import Any

import pytest

from accel_api import catalog
from accel_operator.planning import memory, selection, throughput
from accel_operator.planning.layout import Layout
from tests.support.builders import LLAMA_8B, accel, job, pool

H100 = accel("h100-80gb")
# Gemma 2 2B (its config.json), the model of Cut Cross-Entropy's headline figure.
GEMMA2_2B: dict[str, Any] = {
    "layers": 26,
    "hidden": 2304,
    "heads": 8,
    "kvHeads": 4,
    "headDim": 256,
    "intermediate": 9216,
    "vocab": 256000,
    "tiedEmbeddings": True,
}


def plan(arch: dict[str, Any], devices: int = 1, **workload: Any) -> tuple[Any, memory.MemoryEstimate, Any]:
    w = job().arch(arch).workload(**workload).profile()
    layout = Layout.of(w, devices, 1)
    return w, memory.estimate(w, H100, layout), throughput.estimate(w, H100, layout)


def parts(m: memory.MemoryEstimate) -> dict[str, float]:
    return dict(m.components)


def moments(m: memory.MemoryEstimate) -> dict[str, float]:
    return dict(m.moments)


CCE: dict[str, Any] = {"precision": "bf16", "microBatch": 1, "seqLen": 8192, "recompute": "full"}


def test_a_standard_loss_holds_the_cut_cross_entropy_papers_24_gb_of_logits() -> None:
    # Wijmans et al. 2024: Gemma 2 2B's loss over 8192 tokens takes 24 GB (three fp32 [8192 ×
    # 256000] tensors: 23.4 GiB) with a standard cross-entropy and 1 MB with CCE.
    _, std, _ = plan(GEMMA2_2B, **CCE)
    assert std.peak_at == "loss backward"
    assert parts(std)["logits"] == pytest.approx(3 * 4.0 * 8192 * 256000, rel=0.01)
    _, cce, _ = plan(GEMMA2_2B, lossKernel="fused", **CCE)
    assert parts(cce).get("logits", 0.0) < 2**20
    # The loss's moment loses all three tensors (25.2 GB); the peak moves to the first layer's
    # backward (every gradient beside its recomputed activations), 19.6 GB below the standard
    # loss's peak.
    saved = moments(std)["loss backward"] - moments(cce)["loss backward"]
    assert saved == pytest.approx(3 * 4.0 * 8192 * 256000, rel=0.01)
    assert cce.peak_at == "end of backward"
    assert cce.peak_allocated_bytes < std.peak_allocated_bytes - 19.5e9


def test_a_chunked_loss_keeps_a_chunk_of_about_tokens_by_hidden_logits() -> None:
    w, m, _ = plan(GEMMA2_2B, lossKernel="chunked", **CCE)
    chunk = (2 + 4) * 8192 * 2304  # Liger: chunk × vocab ≈ tokens × hidden, 16-bit and fp32
    loss = dict(dict(m.moments))
    assert loss["loss backward"] < moments(plan(GEMMA2_2B, **CCE)[1])["loss backward"] - 20e9
    assert any("Liger" in n for n in w.notes)
    # The chunk is what the loss keeps at its backward, wherever the peak lands.
    standard = moments(plan(GEMMA2_2B, **CCE)[1])["loss backward"]
    assert standard - loss["loss backward"] == pytest.approx(3 * 4.0 * 8192 * 256000 - chunk, rel=0.01)


def test_the_optimizer_step_in_backward_never_holds_the_gradient_buffer() -> None:
    base: dict[str, Any] = {
        "precision": "bf16",
        "optimizer": "adamw-8bit",
        "microBatch": 1,
        "seqLen": 4096,
        "recompute": "full",
    }
    _, m0, s0 = plan(LLAMA_8B, **base)
    w, m1, s1 = plan(LLAMA_8B, optimizerInBackward=True, **base)
    # Under full recompute the first layer's backward (every gradient beside its recomputed
    # activations) is the peak, just above the optimizer step.
    assert m0.peak_at == "end of backward"
    # 8.0e9 parameters' bf16 gradients (16 GB) become the LM head's (128256 × 4096 × 2 bytes),
    # at both moments.
    for moment in ("end of backward", "optimizer step"):
        saved = moments(m0)[moment] - moments(m1)[moment]
        assert saved == pytest.approx(2.0 * (8.03e9 - 128256 * 4096), rel=0.02)
    assert s1.step_seconds == s0.step_seconds
    assert any("optimizer step in backward" in n and "tutorial" in n for n in w.notes)


def test_activation_offload_keeps_about_two_layers_on_the_device_and_pays_for_pcie() -> None:
    base = {"framework": "fsdp", "sharding": "fsdp", "microBatch": 2, "seqLen": 4096}
    _, m0, s0 = plan(LLAMA_8B, 8, **base)
    _, m1, s1 = plan(LLAMA_8B, 8, activationOffload=True, **base)
    a0, a1 = parts(m0)["activations"], parts(m1)["activations"]
    assert a1 < a0 * 3 / 32  # 32 layers' activations, about two (and the head's) kept
    assert m1.peak_allocated_bytes < m0.peak_allocated_bytes - 30e9
    # Copying ~30 GB of activations out and back at 25 GB/s dwarfs a 1.5-s step.
    assert s1.component("activation offload copies (exposed)") > 1.0
    assert s1.tokens_per_second < s0.tokens_per_second / 2


def test_zero_offload_moves_the_optimizer_states_and_fp32_master_to_the_host() -> None:
    base = {"framework": "deepspeed", "sharding": "zero2", "microBatch": 4, "seqLen": 4096, "recompute": "full"}
    _, m0, _ = plan(LLAMA_8B, 8, **base)
    w, m1, s1 = plan(LLAMA_8B, 8, optimizerOffload="cpu", **base)
    assert parts(m0)["optimizer states"] > 1e9
    assert "optimizer states" not in parts(m1)
    assert parts(m1)["weights"] == pytest.approx(parts(m0)["weights"])  # DeepSpeed: 16-bit weights on the GPU
    assert m1.peak_allocated_bytes < m0.peak_allocated_bytes
    # CPU Adam over a 1e9-parameter shard at 30 bytes per parameter and 20 GB/s: 1.5 s.
    assert s1.component("optimizer") == pytest.approx(8.03e9 / 8 * (30 / 20e9 + 4 / 25e9), rel=0.02)
    assert any("ZeRO-Offload" in n and "Ren et al. 2021" in n for n in w.notes)


def test_zero_offload_of_an_fsdp_job_drops_the_fp32_master_shard() -> None:
    base = {"framework": "fsdp", "sharding": "fsdp", "microBatch": 1, "seqLen": 4096, "recompute": "full"}
    _, m0, _ = plan(LLAMA_8B, 8, **base)
    _, m1, _ = plan(LLAMA_8B, 8, optimizerOffload="cpu", **base)
    assert parts(m1)["weights"] == pytest.approx(parts(m0)["weights"] / 2)  # the bf16 half of an fp32 shard


@pytest.mark.parametrize("knob", ["compile", "fusedKernels"])
def test_compile_and_fused_kernels_save_what_a_fused_stack_saves_and_speed_up(knob: str) -> None:
    base = {"framework": "fsdp", "sharding": "fsdp", "microBatch": 2, "seqLen": 4096}
    _, m0, s0 = plan(LLAMA_8B, 8, **base)
    w, m1, s1 = plan(LLAMA_8B, 8, **{knob: True}, **base)
    _, flash, _ = plan(LLAMA_8B, 8, **(base | {"attention": "flash"}))
    # The same layers; only the LM head's saved input differs (the fused stack's fused loss).
    assert parts(m1)["activations"] == pytest.approx(parts(flash)["activations"], rel=0.01)
    assert parts(m1)["activations"] < 0.85 * parts(m0)["activations"]
    gain = s1.mfu / s0.mfu - 1
    # Published: +10-23 % MFU from torch.compile on FSDP Llama 7B-70B (IBM and PyTorch, 2024).
    assert 0.10 <= gain <= 0.23, gain
    assert any("fused stack" in n for n in w.notes)


def test_compile_on_a_fused_stack_changes_nothing_and_says_so() -> None:
    base = {"framework": "fsdp", "sharding": "fsdp", "attention": "flash", "seqLen": 4096}
    _, m0, s0 = plan(LLAMA_8B, 8, **base)
    w1, m1, s1 = plan(LLAMA_8B, 8, compile=True, **base)
    assert (m1.peak_allocated_bytes, s1.step_seconds) == (m0.peak_allocated_bytes, s0.step_seconds)
    assert any("already a fused stack" in n for n in w1.notes)


def test_the_knobs_are_off_by_default() -> None:
    w = job().arch(LLAMA_8B).workload().profile()
    assert not (w.compile or w.fused_kernels or w.optimizer_in_backward or w.activation_offload or w.optimizer_offload)
    assert w.loss_kernel.value == "standard"


# T5 (google-t5/t5-base, google/t5-v1_1-xl config.json): encoder and decoder of 12 / 24 layers,
# no biases, RMS norms; t5-base a ReLU MLP (two matrices) with tied embeddings, v1.1 a gated GELU.
T5_BASE: dict[str, Any] = {
    "layers": 12,
    "encoderLayers": 12,
    "hidden": 768,
    "heads": 12,
    "intermediate": 3072,
    "vocab": 32128,
    "mlp": "gelu",
    "norm": "rmsnorm",
    "tiedEmbeddings": True,
}
T5_V11_XL: dict[str, Any] = {
    "layers": 24,
    "encoderLayers": 24,
    "hidden": 2048,
    "heads": 32,
    "intermediate": 5120,
    "vocab": 32128,
    "mlp": "swiglu",
    "norm": "rmsnorm",
}


@pytest.mark.parametrize(
    ("arch", "published"),
    [
        # Hugging Face's parameter counts of the checkpoints; the planner leaves out the relative
        # position bias (32 buckets × heads) and the encoder's final norm: 1,536 parameters.
        (T5_BASE, 222_903_552),
        (T5_V11_XL, 2_849_757_184),
    ],
)
def test_an_encoder_decoder_counts_its_cross_attention(arch: dict[str, Any], published: int) -> None:
    w = job().arch(arch).workload().profile()
    assert w.shape.params == pytest.approx(published, rel=1e-4)
    assert w.shape.cross_layers == arch["layers"]
    assert any("encoder-decoder" in n and "cross-attention" in n for n in w.notes)


def test_cross_attention_adds_activations_work_and_flops() -> None:
    enc_dec = {**T5_V11_XL}
    # The same 48 layers without cross-attention: a decoder-only stack of the same width.
    decoder_only = {k: v for k, v in T5_V11_XL.items() if k != "encoderLayers"} | {"layers": 48}
    base: dict[str, Any] = {"precision": "bf16", "microBatch": 8, "seqLen": 512}
    _, m0, s0 = plan(decoder_only, **base)
    _, m1, s1 = plan(enc_dec, **base)
    assert parts(m1)["activations"] > parts(m0)["activations"] * 1.1
    assert s1.flops_per_token > s0.flops_per_token
    assert s1.step_seconds > s0.step_seconds


def test_the_knobs_are_not_planned_for_inference_and_the_notes_say_so() -> None:
    plain = job().arch(LLAMA_8B).inference().profile()
    w = job().arch(LLAMA_8B).inference().workload(compile=True, lossKernel="fused", activationOffload=True).profile()
    assert not (w.compile or w.activation_offload) and w.loss_kernel.value == "standard"
    assert w.step_key == plain.step_key  # planned exactly as without them
    assert "compile, lossKernel, activationOffload: training knobs, not planned for inference" in w.notes


def test_the_plan_says_what_the_knobs_changed_on_the_chosen_placement() -> None:
    fields: dict[str, Any] = {"precision": "bf16", "optimizer": "adamw-8bit", "microBatch": 1, "seqLen": 4096}
    pools = [pool("h100", "h100-80gb", max_nodes=1)]
    spec = job().arch(LLAMA_8B).workload(optimizerInBackward=True, recompute="full", **fields).spec()
    p = selection.plan(spec, pools, catalog.default())
    assert p.winner is not None
    [note] = [n for n in p.profile.notes if n.startswith("the recipe knobs on")]
    assert "GB per device" in note and "tokens/s (+0.0%)" in note, note
    plain = selection.plan(job().arch(LLAMA_8B).workload(recompute="full", **fields).spec(), pools, catalog.default())
    assert not any(n.startswith("the recipe knobs") for n in plain.profile.notes)
