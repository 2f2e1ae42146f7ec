"""Model validation: defaults, cross-field rules and the wording of errors (field path + fix)."""

from typing import Any

import pytest

from accel_api import AcceleratorJob, InvalidResource, parse_resource
from accel_api.durations import parse_seconds
from accel_api.enums import MlpKind
from accel_api.job import AcceleratorJobStatus


def job(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "team": "research",
        "image": "trainer:1",
        "model": {"architecture": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 1000}},
        "workload": {"tokens": 1000},
    }
    spec.update(spec_overrides)
    return {"apiVersion": "accel.dev/v1alpha1", "kind": "AcceleratorJob", "metadata": {"name": "j"}, "spec": spec}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidResource) as info:
        parse_resource(doc)
    return info.value.problems


def test_defaults() -> None:
    res = parse_resource(job())
    assert isinstance(res, AcceleratorJob)
    w = res.spec.workload
    assert (w.mode, w.precision, w.optimizer, w.sharding, w.micro_batch) == ("training", "amp-bf16", "adamw", "none", 1)
    arch = res.spec.model.architecture
    assert arch is not None
    assert arch.mlp is MlpKind.SWIGLU
    assert arch.kv_heads_or_default == 4
    assert arch.intermediate_or_default == 256  # 8/3 × 64 rounded up to 256
    assert arch.norm_or_default == "rmsnorm"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"workload": {"tokens": 10, "microBatch": 0}}, "spec.workload.microBatch: must be >= 1 (got 0)"),
        ({"workload": {"tokens": 10, "precision": "fp4"}}, "spec.workload.precision: must be one of"),
        (
            {"workload": {"tokens": 10, "microbatch": 2}},
            "spec.workload.microbatch: unknown field; did you mean 'microBatch'?",
        ),
        ({"workload": {"mode": "training"}}, "spec.workload: training needs workload.tokens"),
        ({"model": {}}, "spec.model: give model.architecture (preferred) or model.parameters"),
        (
            {"model": {"architecture": {"layers": 2, "hidden": 65, "heads": 4, "vocab": 10}}},
            "must be a multiple of heads",
        ),
        ({"team": "Research"}, "spec.team: must be a lowercase DNS label"),
        ({"deadline": "3 days"}, "spec.deadline: must be a duration such as 90m"),
        ({"checkpoint": {"uri": "gs://b/x"}}, "spec.checkpoint.uri: must be s3://bucket/prefix or pvc://claim/path"),
        (
            {"placement": {"minDevices": 8, "maxDevices": 4}},
            "spec.placement: maxDevices must be >= minDevices (got maxDevices 4, minDevices 8)",
        ),
        ({"maxCost": -5}, "spec.maxCost: must be > 0"),
        ({"workload": {"tokens": "many"}}, "spec.workload.tokens: must be a whole number (got 'many')"),
        ({"workload": {"tokens": 10, "framework": "jax"}}, "spec.workload.framework: must be one of"),
        ({"workload": {"tokens": 10, "recompute": "some"}}, "spec.workload.recompute: must be one of"),
        (
            {"workload": {"tokens": 10, "gradientCheckpointing": True, "recompute": "selective"}},
            "spec.workload: gradientCheckpointing: true means recompute: full (got recompute: selective)",
        ),
        ({"workload": {"tokens": 10, "gradientAccumulation": 0}}, "spec.workload.gradientAccumulation: must be >= 1"),
        ({"workload": {"tokens": 10, "pipelineParallel": 0}}, "spec.workload.pipelineParallel: must be >= 1"),
        (
            {"workload": {"tokens": 10, "contextParallel": 3, "seqLen": 1000}},
            "spec.workload: contextParallel must divide seqLen (got contextParallel 3, seqLen 1000)",
        ),
        (
            {"workload": {"tokens": 10, "hybridShardDegree": 8}},
            "spec.workload: hybridShardDegree needs sharding zero1, zero2, zero3 or fsdp",
        ),
        ({"workload": {"tokens": 10, "sharding": "fsdp", "hybridShardDegree": 0}}, "hybridShardDegree: must be >= 1"),
        (
            {"workload": {"tokens": 10, "precision": "fp8", "adapter": {"method": "qlora"}}},
            "spec.workload: adapter is for training with framework hf, fsdp or deepspeed and precision amp-bf16 "
            "or bf16 (got mode training, framework hf, precision fp8)",
        ),
        ({"workload": {"tokens": 10, "adapter": {"method": "lora", "rank": 0}}}, "adapter.rank: must be >= 1"),
        ({"workload": {"tokens": 10, "adapter": {"method": "lora", "rank": 4096}}}, "adapter.rank: must be <= 1024"),
        ({"workload": {"tokens": 10, "adapter": {"method": "dora"}}}, "adapter.method: must be one of"),
        (
            {"workload": {"tokens": 10, "adapter": {"method": "lora", "targetModules": "lm_head"}}},
            "adapter.targetModules: must be one of",
        ),
        (
            {"workload": {"tokens": 10, "framework": "maxtext", "sequenceParallel": False}},
            "spec.workload: maxtext shards every activation over its tensor axis",
        ),
        (
            {"workload": {"tokens": 10, "tensorParallel": 8}},
            "spec: workload.tensorParallel must divide model.architecture.heads and kvHeads "
            "(got tensorParallel 8, heads 4, kvHeads 4)",
        ),
        (
            {"workload": {"tokens": 10, "pipelineParallel": 3}},
            "spec: workload.pipelineParallel must be at most model.architecture.layers "
            "(got pipelineParallel 3, layers 2)",
        ),
        (
            {
                "model": {
                    "architecture": {
                        "layers": 2,
                        "hidden": 64,
                        "heads": 4,
                        "vocab": 10,
                        "experts": 8,
                        "activeExperts": 9,
                    }
                }
            },
            "activeExperts must be at most experts (1 when unset) (got activeExperts 9, experts 8)",
        ),
        (
            {"model": {"architecture": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 10, "headDim": 0}}},
            "spec.model.architecture.headDim: must be >= 1 (got 0)",
        ),
    ],
)
def test_errors_name_the_field_and_the_rule(overrides: dict[str, Any], expected: str) -> None:
    found = problems(job(**overrides))
    assert any(expected in p for p in found), found


def test_missing_spec_and_wrong_kind() -> None:
    doc = job()
    del doc["spec"]
    assert problems(doc) == ["spec: required field is missing"]
    assert "is not an accel.dev kind" in problems({**job(), "kind": "Job"})[0]
    assert "apiVersion: must be accel.dev/v1alpha1" in problems({**job(), "apiVersion": "v1"})[0]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(job(team="X", workload={"tokens": 0, "seqLen": -1}))
    assert len(found) == 3, found


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("36h", 129600), ("2d12h", 216000), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


def test_wire_round_trip_keeps_camel_case() -> None:
    res = parse_resource(job(checkpoint={"uri": "s3://b/p", "intervalMinutes": 15}))
    wire = res.to_wire()
    assert wire["spec"]["checkpoint"] == {"uri": "s3://b/p", "intervalMinutes": 15.0}
    assert parse_resource(wire) == res


def test_models_with_the_same_fields_set_share_one_set_of_their_names() -> None:
    # pydantic keeps a set of the names set per model instance (216-728 bytes); the engine holds
    # a spec, a status and a ledger of models per job, so ApiModel shares one set per combination.
    a = AcceleratorJobStatus.model_validate({"phase": "Pending", "attempt": 0})
    b = AcceleratorJobStatus.model_validate({"phase": "Running", "attempt": 2})
    assert a.model_fields_set == b.model_fields_set == {"phase", "attempt"}
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    # A copy with an update sets one more name, and changes neither the original's set nor the shared one.
    c = a.model_copy(update={"retries": 1})
    d = b.model_copy(update={"retries": 3})
    assert c.model_fields_set == {"phase", "attempt", "retries"}
    assert c.__pydantic_fields_set__ is d.__pydantic_fields_set__
    assert a.model_fields_set == {"phase", "attempt"}
    assert c.model_dump(exclude_unset=True) == {"phase": a.phase, "attempt": 0, "retries": 1}
    assert a.model_dump(exclude_unset=True) == {"phase": a.phase, "attempt": 0}
