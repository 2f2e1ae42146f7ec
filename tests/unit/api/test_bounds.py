"""Bounds on every field: refused by the models with a field path, and by the CRD schema alike;
status values are clipped instead of refused; the reserved environment has one definition."""

import math
from typing import Any

import pytest

from accel_api import InvalidResource, bounds, crdgen, errors, parse_resource, registry, vocabulary
from accel_api.job import AcceleratorJobSpec, Alternative, PlanStatus
from accel_api.nodereport import Device
from tests.support import structural


def job(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "team": "research",
        "image": "trainer:1",
        "model": {"architecture": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 1000}},
        "workload": {"tokens": 1000},
    }
    spec.update(spec_overrides)
    return {"apiVersion": "accel.dev/v1alpha1", "kind": "AcceleratorJob", "metadata": {"name": "j"}, "spec": spec}


def pool(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8}
    spec.update(spec_overrides)
    return {"apiVersion": "accel.dev/v1alpha1", "kind": "AcceleratorPool", "metadata": {"name": "p"}, "spec": spec}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidResource) as info:
        parse_resource(doc)
    return info.value.problems


def schema_problems(doc: dict[str, Any]) -> list[str]:
    return structural.validate(doc, crdgen.openapi_schema(registry.BY_KIND[doc["kind"]]))


ARCH = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 1000}

# (document, the start of the expected problem line); the CRD schema refuses each one too.
REFUSED = [
    (job(deadline="0s"), "spec.deadline: must be more than 0s and at most 365d (got '0s')"),
    (job(deadline="1" * 200_000 + "s"), "spec.deadline: must have at most 32 characters (got '1111"),
    (job(checkpoint={"uri": "s3://b/p", "intervalMinutes": 0}), "spec.checkpoint.intervalMinutes: must be >= 1"),
    (job(checkpoint={"uri": "s3://b/p", "intervalMinutes": 10081}), "spec.checkpoint.intervalMinutes: must be <="),
    (job(checkpoint={"uri": "pvc://claim/../../etc"}), "spec.checkpoint.uri: must stay inside its bucket or claim"),
    (job(checkpoint={"uri": "pvc://claim/a//b"}), "spec.checkpoint.uri: must stay inside"),
    (job(checkpoint={"uri": "s3://bkt/x/%2e%2e/y"}), "spec.checkpoint.uri: must stay inside"),
    (job(checkpoint={"uri": "s3://bkt/./x"}), "spec.checkpoint.uri: must stay inside"),
    (job(checkpoint={"uri": "s3://bkt/x/"}), "spec.checkpoint.uri: must stay inside"),
    (job(checkpoint={"uri": "s3://bkt/" + "k" * 2000}), "spec.checkpoint.uri: must have at most 1024 characters"),
    (job(maxCost=math.inf), "spec.maxCost: must be a finite number"),
    (job(maxCost=math.nan), "spec.maxCost: must be a finite number"),
    (job(maxCost=1e308), "spec.maxCost: must be <= 1000000000.0"),
    (job(env=[{"name": "LD_PRELOAD", "value": "/x.so"}]), "spec.env[0].name: 'LD_PRELOAD' is reserved"),
    (job(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), "spec.env[0].name: 'NVIDIA_VISIBLE_DEVICES' is"),
    (job(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]), "spec.env[0].name: 'CUDA_VISIBLE_DEVICES' is"),
    (job(env=[{"name": "ACCEL_RESUME_FROM", "value": "s3://x"}]), "spec.env[0].name: 'ACCEL_RESUME_FROM' is"),
    (job(env=[{"name": "X", "value": "v"}] * 65), "spec.env: must have at most 64 items"),
    (job(command=["x" * 513]), "spec.command[0]: must have at most 512 characters"),
    (job(args=["a"] * 129), "spec.args: must have at most 128 items"),
    (job(image="i" * 600), "spec.image: must have at most 512 characters"),
    (job(model={"architecture": {**ARCH, "layers": 1001}}), "spec.model.architecture.layers: must be <= 1000"),
    (job(model={"architecture": {**ARCH, "vocab": 2**22 + 1}}), "spec.model.architecture.vocab: must be <= 4194304"),
    (job(model={"parameters": 10**300}), "spec.model.parameters: must be <= 100000000000000 (got <integer of about"),
    (job(workload={"tokens": 10**16}), "spec.workload.tokens: must be <= 1000000000000000"),
    (job(workload={"tokens": 10, "seqLen": 2**22 + 1}), "spec.workload.seqLen: must be <= 4194304"),
    (job(placement={"minDevices": 65537}), "spec.placement.minDevices: must be <= 65536"),
    (job(spot={"maxPreemptions": 1001}), "spec.spot.maxPreemptions: must be <= 1000"),
    (pool(tpuTopology="0x4"), "spec.tpuTopology: must be a TPU topology such as 2x4"),
    (pool(tpuTopology="2x0x4"), "spec.tpuTopology: must be a TPU topology"),
    (pool(price={"onDemandPerDeviceHour": 1e308}), "spec.price.onDemandPerDeviceHour: must be <= 1000.0"),
    (pool(price={"spotPerDeviceHour": -1}), "spec.price.spotPerDeviceHour: must be >= 0"),
    (pool(preemptionRatePerHour=math.inf), "spec.preemptionRatePerHour: must be a finite number"),
    (pool(maxNodes=10**6), "spec.maxNodes: must be <= 65536"),
    (pool(nodeSelector={f"k{i}": "v" for i in range(33)}), "spec.nodeSelector: must have at most 32 items"),
    (pool(restartSeconds=1e9), "spec.restartSeconds: must be <= 86400.0"),
]


@pytest.mark.parametrize(("doc", "expected"), REFUSED, ids=[e.split(":")[0] for _, e in REFUSED])
def test_out_of_bounds_values_are_refused_by_model_and_crd(doc: dict[str, Any], expected: str) -> None:
    found = problems(doc)
    assert any(p.startswith(expected) for p in found), found
    assert all(len(p) < 400 for p in found), found
    if not any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(doc)):
        # NaN/inf cannot even be sent to the API server (JSON has no such numbers).
        assert schema_problems(doc), f"the CRD schema accepts what the model refuses: {expected}"


def test_a_deadline_over_a_year_is_refused_by_the_model() -> None:
    # The CRD refuses a zero deadline by pattern; the upper bound needs arithmetic (model only).
    assert any(
        p.startswith("spec.deadline: must be more than 0s and at most 365d") for p in problems(job(deadline="366d"))
    )
    assert any(p.startswith("spec.deadline: must be more than 0s") for p in problems(job(deadline="8760h1s")))


def _leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [x for v in node.values() for x in _leaves(v)]
    if isinstance(node, list):
        return [x for v in node for x in _leaves(v)]
    return [node]


@pytest.mark.parametrize(
    "doc",
    [
        job(deadline="365d", maxCost=1e9, checkpoint={"uri": "pvc://claim/a/b.c/..d", "intervalMinutes": 10080}),
        job(env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "WANDB_PROJECT", "value": "x"}]),
        job(env=[{"name": "accel_lowercase_is_not_the_contract", "value": "x"}]),
        job(model={"parameters": bounds.PARAMETERS}, workload={"tokens": bounds.TOKENS}),
        pool(
            provider="gcp",
            accelerator="tpu-v5p",
            tpuTopology="16x16x16",
            price={"onDemandPerDeviceHour": 0, "spotPerDeviceHour": 1000},
        ),
    ],
)
def test_values_at_the_bounds_are_accepted_by_model_and_crd(doc: dict[str, Any]) -> None:
    parse_resource(doc)
    assert schema_problems(doc) == []


def test_reserved_env_has_one_definition_that_a_policy_extends() -> None:
    assert vocabulary.is_reserved_env("ACCEL_CHECKPOINT_URI")
    assert vocabulary.is_reserved_env(vocabulary.ENV_DEVICES)
    assert vocabulary.is_reserved_env("LD_AUDIT")
    assert not vocabulary.is_reserved_env("NCCL_DEBUG")
    assert vocabulary.is_reserved_env("NCCL_DEBUG", extra=("NCCL_*",))
    assert vocabulary.is_reserved_env("HTTP_PROXY", extra=("HTTP_PROXY",))
    assert not vocabulary.is_reserved_env("HTTP_PROXY_X", extra=("HTTP_PROXY",))
    # Every contract variable the operator hands to the job is reserved.
    contract = [v for k, v in vars(vocabulary).items() if k.startswith("ENV_")]
    assert contract
    assert all(vocabulary.is_reserved_env(v) for v in contract)
    # torch.distributed's rendezvous names are set by the operator but a tenant may replace them.
    assert not any(vocabulary.is_reserved_env(v) for v in vocabulary.RENDEZVOUS_ENV)


def test_policy_reserved_env_is_bounded_and_checked() -> None:
    doc: dict[str, Any] = {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorPolicy",
        "metadata": {"name": "p"},
        "spec": {"reservedEnv": ["NCCL_*", "HTTP_PROXY"]},
    }
    parse_resource(doc)
    doc["spec"]["reservedEnv"] = ["1BAD"]
    assert any(p.startswith("spec.reservedEnv[0]: must be an environment variable name") for p in problems(doc))
    doc["spec"]["reservedEnv"] = [f"X{i}" for i in range(65)]
    assert any(p.startswith("spec.reservedEnv: must have at most 64 items") for p in problems(doc))


def test_status_is_clipped_not_refused() -> None:
    alt = {"pool": "p", "accelerator": "a", "devices": 1, "reason": "r" * 5000, "costUsd": math.inf}
    status = PlanStatus.model_validate({"reason": "x" * 100_000, "alternatives": [alt] * 100})
    assert status.reason is not None
    assert len(status.reason) == bounds.MESSAGE_LENGTH
    assert status.reason.endswith("…")
    assert len(status.alternatives) == bounds.STATUS_ALTERNATIVES
    assert status.alternatives[0].cost_usd is None  # not finite: unknown
    assert (
        Alternative(pool="p", accelerator="a", devices=1, reason="r", duration_seconds=1e300).duration_seconds is None
    )
    device = Device(index=0, xid_errors=list(range(500)), problems=["p"] * 100)
    assert device.xid_errors == list(range(436, 500))  # the latest
    assert len(device.problems) == bounds.STATUS_PROBLEMS


def test_clip_bounds_any_value() -> None:
    assert errors.clip("short") == "'short'"
    long = errors.clip("a" * 200_000)
    assert long.endswith("… (200000 chars)")
    assert len(long) < 110
    assert errors.clip(10**5000) == "<integer of about 5001 digits>"
    nested: list[Any] = []
    for _ in range(10_000):
        nested = [nested]
    assert len(errors.clip(nested)) < 110
    assert len(errors.clip({str(i): "v" * 100 for i in range(10_000)})) < 110
    assert errors.cap([str(i) for i in range(25)])[-1] == "... and 5 more"
    assert len(errors.cap([str(i) for i in range(25)])) == errors.MAX_PROBLEMS + 1
    # Capping twice (per document, then per command) keeps the total right.
    twice = errors.cap([*errors.cap([str(i) for i in range(25)]), "document 2: ... and 7 more", "x"])
    assert twice[-1] == "... and 13 more"


def test_spec_worst_case_fits_kopf_annotation() -> None:
    """The largest valid spec stays well under the 256 KiB kopf keeps in one annotation."""
    big = AcceleratorJobSpec.model_validate(
        job(
            image="i" * bounds.IMAGE_LENGTH,
            command=["c" * bounds.ARG_LENGTH] * bounds.COMMAND_ITEMS,
            args=["a" * bounds.ARG_LENGTH] * bounds.ARGS_ITEMS,
            env=[{"name": "N" * bounds.ENV_NAME_LENGTH, "value": "v" * bounds.ENV_VALUE_LENGTH}] * bounds.ENV_ITEMS,
            checkpoint={"uri": "s3://b/" + "k" * (bounds.URI_LENGTH - 7)},
        )["spec"]
    )
    import json

    assert len(json.dumps(big.to_wire())) < 200 * 1024
