"""One violation per cross-field rule (``cel_rules``), each with the document that fixes it:
the models refuse them (tests/unit/api/test_cel_rules.py) and so does the real API server
(tests/cluster/test_cel.py), with the same message."""

import copy
from dataclasses import dataclass
from typing import Any

import yaml

from tests.support.hostile import EXAMPLES


def _first(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = next(d for d in yaml.safe_load_all(EXAMPLES[name]) if d)
    return doc


_TRAINING = _first("01-finetune-single-gpu.yaml")
_INFERENCE = _first("03-inference-batch.yaml")
_POOL = _first("10-pool-h100-spot.yaml")


@dataclass(frozen=True)
class Case:
    id: str
    doc: dict[str, Any]
    fixed: dict[str, Any]
    message: str  # the rule's message, as both the models and the API server say it


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``base`` with ``value`` at the dotted ``path`` (None removes the field)."""
    doc = copy.deepcopy(base)
    node = doc
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return doc


def _case(id: str, base: dict[str, Any], bad: dict[str, Any], good: dict[str, Any], message: str) -> Case:
    doc, fixed = base, base
    for path, value in bad.items():
        doc = _with(doc, path, value)
    fixed = doc
    for path, value in good.items():
        fixed = _with(fixed, path, value)
    return Case(id, doc, fixed, message)


_ARCH = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 10}

CASES = [
    _case(
        "max-devices-at-least-min",
        _TRAINING,
        {"spec.placement": {"minDevices": 8, "maxDevices": 4}},
        {"spec.placement.maxDevices": 8},
        "maxDevices must be >= minDevices",
    ),
    _case(
        "max-nodes-at-most-max-devices",
        _TRAINING,
        {"spec.placement": {"maxDevices": 2, "maxNodes": 4}},
        {"spec.placement.maxNodes": 2},
        "maxNodes must be <= maxDevices",
    ),
    _case(
        "min-devices-fit-max-nodes",
        _TRAINING,
        {"spec.placement": {"minDevices": 65, "maxNodes": 1}},
        {"spec.placement.maxNodes": 2},
        "minDevices must fit on maxNodes nodes of at most 64 devices",
    ),
    _case(
        "spot-require-needs-checkpoint",
        _TRAINING,
        {"spec.spot": {"policy": "require"}},
        {"spec.checkpoint": {"uri": "s3://bucket/run"}},
        "spot.policy require needs spec.checkpoint",
    ),
    _case(
        "training-needs-tokens",
        _TRAINING,
        {"spec.workload.tokens": None},
        {"spec.workload.tokens": 1000},
        "training needs workload.tokens",
    ),
    _case(
        "gradient-checkpointing-means-full-recompute",
        _TRAINING,
        {"spec.workload.gradientCheckpointing": True, "spec.workload.recompute": "selective"},
        {"spec.workload.recompute": "full"},
        "gradientCheckpointing: true means recompute: full",
    ),
    _case(
        "context-parallel-divides-seq-len",
        _TRAINING,
        {"spec.workload.contextParallel": 3, "spec.workload.seqLen": 1000},
        {"spec.workload.seqLen": 999},
        "contextParallel must divide seqLen",
    ),
    _case(
        "hybrid-shard-needs-sharding",
        _TRAINING,
        {"spec.workload.hybridShardDegree": 8},
        {"spec.workload.sharding": "fsdp"},
        "hybridShardDegree needs sharding",
    ),
    _case(
        "adapter-is-fine-tuning",
        _TRAINING,
        {"spec.workload.adapter": {"method": "lora"}, "spec.workload.framework": "megatron"},
        {"spec.workload.framework": "hf"},
        "adapter is for training with framework hf, fsdp or deepspeed",
    ),
    _case(
        "lora-has-a-bf16-base",
        _TRAINING,
        {"spec.workload.adapter": {"method": "lora", "baseWeights": "nf4"}},
        {"spec.workload.adapter": {"method": "qlora", "baseWeights": "nf4"}},
        "method lora trains beside a bf16 base",
    ),
    _case(
        "qlora-has-a-quantised-base",
        _TRAINING,
        {"spec.workload.adapter": {"method": "qlora", "baseWeights": "bf16"}},
        {"spec.workload.adapter": {"method": "qlora", "baseWeights": "int8"}},
        "method qlora quantises the base",
    ),
    _case(
        "double-quant-is-nf4",
        _TRAINING,
        {"spec.workload.adapter": {"method": "qlora", "baseWeights": "int8", "doubleQuant": True}},
        {"spec.workload.adapter": {"method": "qlora", "doubleQuant": True}},
        "doubleQuant applies to an nf4 base only",
    ),
    _case(
        "maxtext-shards-activations",
        _TRAINING,
        {"spec.workload.framework": "maxtext", "spec.workload.sequenceParallel": False},
        {"spec.workload.sequenceParallel": True},
        "sequenceParallel false does not apply",
    ),
    _case(
        "optimizer-in-backward-without-accumulation",
        _TRAINING,
        {"spec.workload.optimizerInBackward": True, "spec.workload.gradientAccumulation": 4},
        {"spec.workload.gradientAccumulation": 1},
        "gradientAccumulation must be 1",
    ),
    _case(
        "optimizer-in-backward-frameworks",
        _TRAINING,
        {"spec.workload.optimizerInBackward": True, "spec.workload.framework": "deepspeed"},
        {"spec.workload.framework": "fsdp"},
        "optimizerInBackward is a PyTorch hook",
    ),
    _case(
        "optimizer-offload-needs-sharding",
        _TRAINING,
        {"spec.workload.optimizerOffload": "cpu"},
        {"spec.workload.sharding": "zero2"},
        "optimizerOffload cpu (ZeRO-Offload) needs sharding",
    ),
    _case(
        "inference-trains-nothing",
        _INFERENCE,
        {"spec.workload.gradientAccumulation": 4},
        {"spec.workload.gradientAccumulation": 1},
        "inference trains nothing",
    ),
    _case(
        "model-size-given",
        _TRAINING,
        {"spec.model": {"name": "x"}},
        {"spec.model.parameters": 1000},
        "give model.architecture (preferred) or model.parameters",
    ),
    _case(
        "hidden-divides-into-heads",
        _TRAINING,
        {"spec.model": {"architecture": {**_ARCH, "hidden": 66}}},
        {"spec.model.architecture.headDim": 16},
        "hidden must be a multiple of heads, or give headDim",
    ),
    _case(
        "heads-divide-into-kv-heads",
        _TRAINING,
        {"spec.model": {"architecture": {**_ARCH, "kvHeads": 3}}},
        {"spec.model.architecture.kvHeads": 2},
        "heads must be a multiple of kvHeads",
    ),
    _case(
        "active-experts-at-most-experts",
        _TRAINING,
        {"spec.model": {"architecture": {**_ARCH, "experts": 4, "activeExperts": 5}}},
        {"spec.model.architecture.activeExperts": 2},
        "activeExperts must be at most experts",
    ),
    _case(
        "tensor-parallel-divides-heads",
        _TRAINING,
        {"spec.workload.tensorParallel": 8},
        {"spec.workload.tensorParallel": 2},
        "workload.tensorParallel must divide model.architecture.heads and kvHeads",
    ),
    _case(
        "pipeline-parallel-at-most-layers",
        _TRAINING,
        {"spec.model": {"architecture": _ARCH}, "spec.workload.pipelineParallel": 3},
        {"spec.workload.pipelineParallel": 2},
        "workload.pipelineParallel must be at most model.architecture.layers",
    ),
    _case(
        "deadline-at-most-365d",
        _TRAINING,
        {"spec.deadline": "364d24h1s"},
        {"spec.deadline": "364d24h"},
        "at most 365d",
    ),
    _case(
        "pool-node-selector-label-keys",
        _POOL,
        {"spec.nodeSelector": {"bad key!": "v"}},
        {"spec.nodeSelector": {"accel.dev/pool": "v"}},
        "must be a Kubernetes label key",
    ),
    _case(
        "tpu-topology-only-for-tpus",
        _POOL,
        {"spec.tpuTopology": "2x4"},
        {"spec.tpuTopology": None},
        "tpuTopology is only for TPU accelerators",
    ),
]
