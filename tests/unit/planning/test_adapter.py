"""LoRA and QLoRA (``workload.adapter``): trainable parameters, the frozen base in its format, the
adapters' states, the activations of a frozen base and the step time without weight gradients."""

from __future__ import annotations

from typing import Any

import pytest

from accel_api import catalog
from accel_operator.planning import adapter, blocks, memory, profile, selection, throughput
from tests.support.builders import LLAMA_8B, ONE, accel, job

H100 = accel("h100-80gb")


def _profile(ad: dict[str, Any] | None, **workload: Any) -> profile.JobProfile:
    fields: dict[str, Any] = {"microBatch": 2, "seqLen": 2048, "gradientCheckpointing": True} | workload
    if ad is not None:
        fields["adapter"] = ad
    return job().arch(LLAMA_8B).workload(**fields).profile()


def test_trainable_parameters_are_rank_times_in_plus_out() -> None:
    w = _profile({"method": "lora", "rank": 16, "targetModules": "attention"})
    s = w.shape
    assert w.adapter is not None
    per_layer = 16 * ((s.hidden + s.q_dim) + 2 * (s.hidden + s.kv_dim) + (s.q_dim + s.hidden))
    assert adapter.trainable_params(s, w.adapter) == s.layers * per_layer
    all_linear = _profile({"method": "lora", "rank": 16})
    assert all_linear.adapter is not None
    mlp = 16 * 3 * (s.hidden + s.intermediate)
    assert adapter.trainable_params(s, all_linear.adapter) == s.layers * (per_layer + mlp)


def test_base_bytes_per_weight_follow_the_format() -> None:
    def per_weight(ad: dict[str, Any]) -> float:
        w = _profile(ad)
        assert w.adapter is not None
        return w.adapter.base_bytes_per_weight

    assert per_weight({"method": "lora"}) == 2.0
    assert per_weight({"method": "qlora", "baseWeights": "int8"}) == 1.0
    assert per_weight({"method": "qlora"}) == pytest.approx(0.5 + 0.127 / 8)  # double quantisation (default)
    assert per_weight({"method": "qlora", "doubleQuant": False}) == pytest.approx(0.5 + 4 / 64)


def test_frozen_base_has_no_gradients_or_optimizer_state() -> None:
    w = _profile({"method": "qlora"})
    assert w.adapter is not None
    n = adapter.trainable_params(w.shape, w.adapter)
    linear = w.shape.layers * w.shape.layer_matmul_params
    base = linear * (0.5 + 0.127 / 8) + 2.0 * (w.shape.params - linear)
    # At the optimizer step: the base, the fp32 adapters, their fp32 gradients and Adam's two
    # fp32 moments; nothing for the base's gradients or states.
    step = dict(memory._adapter_peak(w, 1, 1).moments)["optimizer step"]
    assert step == pytest.approx(base + 4.0 * n + 4.0 * n + 8.0 * n)


def test_quantised_base_and_adapters_need_far_less_than_a_full_fine_tune() -> None:
    full = memory.estimate(_profile(None), H100, ONE)
    lora = memory.estimate(_profile({"method": "lora"}), H100, ONE)
    qlora = memory.estimate(_profile({"method": "qlora"}), H100, ONE)
    assert not full.fits  # 8B in amp-bf16 with AdamW: 16 bytes per parameter
    assert lora.fits and qlora.fits
    assert qlora.peak_allocated_bytes < lora.peak_allocated_bytes - 10e9  # 16 GB of bf16 → about 4 GB


def test_frozen_base_keeps_fewer_activations_and_each_adapter_its_input() -> None:
    no_ckpt = {"gradientCheckpointing": False}
    attention = dict(
        memory.estimate(_profile({"method": "lora", "targetModules": "attention"}, **no_ckpt), H100, ONE).components
    )
    every = dict(memory.estimate(_profile({"method": "lora"}, **no_ckpt), H100, ONE).components)
    w = _profile({"method": "lora"}, **no_ckpt)
    s = w.shape
    mlp_inputs = 3.0 * (2 * s.hidden + s.intermediate) + 3 * 2.0 * 16  # dropout output + mask, B's input
    assert every["activations"] - attention["activations"] == pytest.approx(mlp_inputs * w.device_tokens * s.layers)


def test_int8_keeps_every_layer_s_inputs_under_checkpointing() -> None:
    nf4 = memory.estimate(_profile({"method": "qlora", "doubleQuant": False}), H100, ONE)
    int8 = memory.estimate(_profile({"method": "qlora", "baseWeights": "int8"}), H100, ONE)
    w = _profile({"method": "qlora", "baseWeights": "int8"})
    kept = adapter.int8_inputs_per_token(w.shape) * w.device_tokens * w.shape.layers
    weights = w.shape.layers * w.shape.layer_matmul_params * (1.0 - 0.5 - 4 / 64)
    assert int8.peak_allocated_bytes - nf4.peak_allocated_bytes == pytest.approx(kept + weights, rel=0.01)


def test_no_weight_gradient_products_for_the_base() -> None:
    full = throughput.estimate(_profile(None, precision="bf16"), H100, ONE)
    lora = throughput.estimate(_profile({"method": "qlora"}), H100, ONE)
    w = _profile({"method": "qlora"})
    assert w.adapter is not None
    s = w.shape
    saved = 2.0 * s.layers * s.active_layer_matmul_params  # the base's weight-gradient FLOPs per token
    added = 6.0 * adapter.trainable_params(s, w.adapter)
    assert lora.flops_per_token == pytest.approx(full.flops_per_token - saved + added)
    # Backward without weight gradients: the products' backward is one product (the input
    # gradient, as long as the forward), not two.
    gemms = blocks.block(s, w.numerics, w.attention, 0.0).gemms
    fwd, bwd = throughput._layer_gemms(gemms, 4096.0, 1, 2, H100)
    fwd_frozen, bwd_frozen = throughput._layer_gemms(gemms, 4096.0, 1, 2, H100, frozen=True)
    assert fwd_frozen == fwd
    assert bwd_frozen == pytest.approx(fwd, rel=0.1)
    assert bwd == pytest.approx(2 * fwd, rel=0.1)


def test_plan_notes_say_what_the_adapter_changes() -> None:
    w = _profile({"method": "qlora", "rank": 64, "targetModules": "mlp"})
    note = next(n for n in w.notes if n.startswith("qlora"))
    assert "rank 64 on mlp (nf4 double-quantised base)" in note
    assert "trainable parameters" in note and "no gradients" in note and "2/3" in note
    assert w.numerics == profile.Numerics(param=2, compute=2, residual=2, autocast=False)
    assert not [n for n in _profile(None).notes if "trainable" in n]


def test_qlora_is_refused_on_a_tpu_with_a_sentence() -> None:
    spec = job().arch(LLAMA_8B).workload(adapter={"method": "qlora"}).spec()
    plan = selection.evaluate(spec, "tpu-v5p", 1, catalog.default())
    assert not plan.schedulable
    problem = "a qlora nf4 base runs on bitsandbytes' CUDA kernels; tpu-v5p is a TPU (use method lora)"
    assert any(problem in p for c in plan.candidates for p in c.source.problems)
    lora = job().arch(LLAMA_8B).workload(adapter={"method": "lora"}).spec()
    lora_plan = selection.evaluate(lora, "tpu-v5p", 1, catalog.default())
    assert not [p for c in lora_plan.candidates for p in c.source.problems if "qlora" in p]
