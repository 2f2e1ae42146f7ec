"""The normalised job: parameter counts from the architecture, numerics, inferred shapes."""

import pytest

from accel_api.enums import Precision
from accel_operator.planning import profile
from tests.support.builders import GPT2_355M, LLAMA_1B, LLAMA_125M, job


@pytest.mark.parametrize(
    ("arch", "params"),
    [
        (LLAMA_125M, 134_105_856),  # the calibration set's n_params (HF LlamaForCausalLM)
        (LLAMA_1B, 1_100_048_384),
        ({**LLAMA_125M, "hidden": 3200, "heads": 32, "kvHeads": 32, "intermediate": 8640, "layers": 26}, 3_426_473_600),
        ({**GPT2_355M, "maxPositions": 4096}, 357_968_896),  # GPT2LMHeadModel with biases, tied
    ],
)
def test_parameter_counts_match_hugging_face(arch: dict[str, object], params: int) -> None:
    w = profile.from_spec(job().arch(arch).spec())
    assert w.shape.params == params


def test_defaults_resolve() -> None:
    w = profile.from_spec(job().arch({"layers": 2, "hidden": 256, "heads": 4, "vocab": 1000}).spec())
    assert w.shape.kv_heads == 4
    assert w.shape.intermediate == 768  # Llama's 8/3 × hidden rounded up to 256
    assert w.shape.rmsnorm and not w.shape.biases and w.dropout == 0


def test_gpt2_style_models_train_with_dropout_and_biases() -> None:
    w = profile.from_spec(job().arch(GPT2_355M).spec())
    assert w.dropout == pytest.approx(0.1)
    assert w.shape.biases and not w.shape.rmsnorm and w.shape.tied


@pytest.mark.parametrize(
    ("precision", "param", "compute", "autocast"),
    [
        (Precision.AMP_BF16, 4, 2, True),
        (Precision.AMP_FP16, 4, 2, True),
        (Precision.BF16, 2, 2, False),
        (Precision.FP16, 2, 2, False),
        (Precision.FP32, 4, 4, False),
    ],
)
def test_numerics(precision: Precision, param: int, compute: int, autocast: bool) -> None:
    n = profile.numerics(precision)
    assert (n.param, n.compute, n.autocast) == (param, compute, autocast)


@pytest.mark.parametrize("n", [125_000_000, 1_100_000_000, 7_000_000_000, 70_000_000_000])
def test_a_shape_is_inferred_from_a_parameter_count(n: int) -> None:
    w = profile.from_spec(job().parameters(n).spec())
    assert abs(w.shape.params - n) / n < 0.15
    assert w.notes and "inferred" in w.notes[0]


def test_inference_tokens_default_to_one_batch() -> None:
    w = profile.from_spec(job().inference(batch=8, new=64).spec())
    assert w.tokens == 8 * 64
    assert not w.training
