"""A corpus of accel.dev documents, valid and hostile, for the differential test of ``accelctl
validate`` against the real API server's dry run (``tests/cluster/test_validate_differential.py``).

Every document is one YAML text as a user would write it, of one of the four kinds the CRDs
ship (AcceleratorJob, AcceleratorPool, AcceleratorPolicy, AcceleratorNodeReport). The corpus is
made of, for a fixed ``seed``:

- **bases**: the examples and fuller documents (every optional field set, built from
  ``tests/support/builders.py``'s shapes), each valid;
- **schema mutations**: for every field of the CRD's spec schema (from ``crdgen``, so every
  bound the API server knows), in the fullest base of its kind: values at and just past each
  bound, wrong types (``true`` for a number, ``"8"`` for 8, ``1.5`` for an integer, a list for
  an object), ``null``, over-long strings and lists, bad enum values, values breaking each
  pattern (DNS-1123 names, label keys and values, durations, checkpoint URIs, environment
  names), unknown fields, deleted fields;
- **rules**: the cross-field rules (``cel_cases``), the model rules the issue names
  (``pipelineParallel`` > layers, ``tensorParallel`` not dividing heads, deadlines about 365d,
  ``reservedEnv`` items such as ``MY SECRET``, ``*``, ``$HOME``, reserved env names), metadata
  (names, labels, annotations), the object's own fields (spec or metadata missing, null, text);
- **text**: YAML only text can say: a key given twice, at each level, plain scalars the API
  server's YAML reader types differently from YAML 1.1 (``0o17``, ``1:30``, ``y``, ``1e400``),
  tabs, comments, directives, block scalars, tags, escapes, line ends, JSON;
- **combinations**: two or three schema mutations at once on a random base (``random.Random(seed)``).

Left out, because the two sides cannot agree by design (each says why where it is skipped):

- ``status``: the API server drops it on create (the status subresource), validate checks it;
- ``metadata.namespace``, ``apiVersion`` and ``kind``: the request picks them (``kubectl -n``);
- YAML merge keys (``<<``) and tags beyond the core ones (``!!binary``, ``!!set``, a bad
  ``!!timestamp``): validate refuses them on purpose (a merged field hides where its value comes
  from), the API server's reader accepts some;
- updates of an immutable field (``spec.team``: ``self == oldSelf``): validate sees one document,
  not the stored one, so the test checks these pairs against the API server alone;
- policy-dependent checks (``accelctl validate --policy``, the webhook's budgets and grants):
  they need other objects.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from accel_api import bounds, crdgen, patterns, registry
from accel_api import vocabulary as v
from tests.support import builders
from tests.support.cel_cases import CASES
from tests.support.hostile import example_docs

SEED = 25


@dataclass(frozen=True)
class Doc:
    id: str  # where it came from and what was changed, e.g. job-full/spec.workload.tokens=true
    kind: str  # the registry kind it is sent as
    text: str  # one YAML document


@dataclass(frozen=True)
class Update:
    """An (old, new) pair: ``new`` sent as an update of the stored ``old``."""

    id: str
    kind: str
    old: dict[str, Any]
    new: dict[str, Any]
    immutable_changed: bool  # whether an immutable field changed (the API server must refuse)


# --- bases ---------------------------------------------------------------------------------------


def _obj(kind: registry.Kind, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": v.API_VERSION, "kind": kind.kind, "metadata": {"name": name, **meta}, "spec": spec}


FULL_JOB = _obj(
    registry.JOB,
    "full-job",
    {
        "team": "research",
        "image": "ghcr.io/example/trainer:1.4",
        "command": ["python", "-m", "trainer.pretrain"],
        "args": ["--dataset", "s3://datasets/x"],
        "env": [{"name": "WANDB_PROJECT", "value": "llama-8b"}, {"name": "NCCL_DEBUG", "value": "INFO"}],
        "model": {
            "name": "llama-3-8b-moe",
            "architecture": {
                **builders.LLAMA_8B,
                "mlp": "swiglu",
                "tiedEmbeddings": False,
                "norm": "rmsnorm",
                "maxPositions": 8192,
                "headDim": 128,
                "experts": 8,
                "activeExperts": 2,
            },
            "parameters": 8_000_000_000,
        },
        "workload": {
            "mode": "training",
            "framework": "megatron",
            "precision": "amp-bf16",
            "optimizer": "adamw",
            "microBatch": 2,
            "seqLen": 8192,
            "gradientCheckpointing": False,
            "recompute": "selective",
            "sharding": "zero1",
            "tensorParallel": 2,
            "pipelineParallel": 2,
            "contextParallel": 2,
            "gradientAccumulation": 4,
            "attention": "flash",
            "tokens": 20_000_000_000,
            "batch": 1,
            "promptLen": 512,
            "newTokens": 128,
        },
        "placement": {
            "acceleratorKinds": ["gpu"],
            "acceleratorTypes": ["h100-80gb"],
            "pools": ["h100-spot"],
            "minDevices": 8,
            "maxDevices": 64,
            "maxNodes": 8,
        },
        "objective": "cost",
        "deadline": "7d",
        "maxCost": 250000.0,
        "spot": {"policy": "prefer", "maxPreemptions": 20},
        "checkpoint": {"uri": "s3://ml-checkpoints/research/llama-8b", "intervalMinutes": 20.0},
        "priority": 10,
        "maxRetries": 2,
    },
    labels={"app.kubernetes.io/name": "trainer", "accel.dev/experiment": "e-1"},
    annotations={"example.com/owner": "research"},
)

FULL_POOL = _obj(
    registry.POOL,
    "full-pool",
    {
        "provider": "aws",
        "accelerator": "h100-80gb",
        "devicesPerNode": 8,
        "capacityType": "spot",
        "nodeSelector": {"karpenter.sh/capacity-type": "spot", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
        "maxNodes": 8,
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instanceType": "p5.48xlarge",
        "price": {"source": "static", "onDemandPerDeviceHour": 6.5, "spotPerDeviceHour": 2.5},
        "interNodeBytesPerSecond": 5.0e10,
        "preemptionRatePerHour": 0.05,
        "restartSeconds": 420.0,
        "scaling": "autoscaled",
        "scaleUpTimeoutSeconds": 600.0,
    },
)

TPU_POOL = _obj(
    registry.POOL,
    "tpu-pool",
    {"provider": "gcp", "accelerator": "tpu-v5e", "devicesPerNode": 4, "tpuTopology": "2x4", "maxNodes": 2},
)

FULL_POLICY = _obj(
    registry.POLICY,
    "full-policy",
    {
        "spot": {"requireCheckpoint": True, "maxCheckpointIntervalMinutes": 60.0, "allowedCheckpointSchemes": ["s3"]},
        "budgets": [
            {
                "team": "research",
                "period": "monthly",
                "limitUsd": 50000.0,
                "includeLostWork": True,
                "onExhausted": "refuse",
            }
        ],
        "poolAccess": [{"teams": ["research"], "pools": ["h100-spot", "h100-on-demand"]}],
        "consolidation": {"allowed": True, "maxMovesPerHour": 2, "minRemainingMinutes": 15.0},
        "maxDevicesPerJob": 64,
        "idle": {"stopAfterMinutes": 120, "action": "stop", "stopWithoutCheckpoint": False, "teams": ["research"]},
        "reservedEnv": ["MY_SECRET", "VENDOR_*"],
    },
)

NODE_REPORT = _obj(registry.NODE_REPORT, "node-a", {"nodeName": "node-a"})

INFERENCE_JOB = _obj(
    registry.JOB,
    "gpt2-generate",
    builders.job().arch(builders.GPT2_355M).inference(batch=8, prompt=512, new=64, tokens=1_000_000).doc,
)
PARAMETERS_JOB = _obj(registry.JOB, "params-only", builders.job().parameters(7_000_000_000).doc)

# The fullest document of each kind: the schema mutations change one field of it.
FULL: dict[str, dict[str, Any]] = {
    registry.JOB.kind: FULL_JOB,
    registry.POOL.kind: FULL_POOL,
    registry.POLICY.kind: FULL_POLICY,
    registry.NODE_REPORT.kind: NODE_REPORT,
}


def _unnamespaced(doc: dict[str, Any]) -> dict[str, Any]:
    # metadata.namespace is left out: the request names the namespace (kubectl -n), and a body
    # naming another one is refused for that alone.
    doc = copy.deepcopy(doc)
    doc.get("metadata", {}).pop("namespace", None)
    return doc


def bases() -> list[tuple[str, dict[str, Any]]]:
    """Every valid starting document: the examples, then the fuller ones."""
    out = [(f"example-{i}-{d['metadata']['name']}", _unnamespaced(d)) for i, d in enumerate(example_docs())]
    out += [
        ("job-full", FULL_JOB),
        ("job-inference", INFERENCE_JOB),
        ("job-parameters", PARAMETERS_JOB),
        ("pool-full", FULL_POOL),
        ("pool-tpu", TPU_POOL),
        ("policy-full", FULL_POLICY),
        ("policy-empty", _obj(registry.POLICY, "empty-policy", {})),
        ("nodereport", NODE_REPORT),
    ]
    return out


# --- values that break (or sit at) each kind of bound -------------------------------------------

# Per pattern: values that break it, and values that obey it at its edges.
BAD_BY_PATTERN: dict[str, list[str]] = {
    patterns.DNS_LABEL: ["Research", "-a", "a-", "a_b", "a.b", "a b", "é", "a" * 64, "*"],
    patterns.DNS_SUBDOMAIN: ["H100", "-a", "a..b", "a_b", ".a", "a.", "a/b", "a" * 254],
    patterns.LABEL_VALUE: ["-a", "a-", "a b", "a/b", "_a", "a" * 64, "é"],
    patterns.LABEL_KEY: ["bad key!", "/a", "a/", "A.com/x", "-a", "a" * 64, "x" * 250 + ".com/a", "a/b/c"],
    patterns.TEAM_OR_ANY: ["**", "a*", "Team", "*a", " *"],
    patterns.POOL_OR_ANY: ["**", "a*", "H100", "a..b", "*.a"],
    patterns.DURATION: ["7", "7 d", "7D", "1w", "-1h", "1e3s", "d", "1.h", ".5h", "1h ", "P1D", "１h"],
    patterns.CHECKPOINT_URI: [
        "s3://B/x",
        "http://b/x",
        "s3:/b/x",
        "pvc://Claim/x",
        "s3://b/x\\y",
        "s3://b/x\ty",
        "s3://" + "a" * 64 + "/x",
        "S3://b/x",
        "s3://b/x y\u0000",
    ],
    patterns.ENV_NAME: ["1X", "MY SECRET", "A=B", "$HOME", "X" * 129, "É", "a\nb"],
    patterns.RESERVED_ENV_NAME: ["MY SECRET", "*", "$HOME", "A*B", "**", "1X", "X" * 129, "A **"],
    patterns.TPU_TOPOLOGY: ["0x4", "2x", "2x4x4x4", "10000x1", "2X4", "2*4", "4", "02x4", "x"],
}
GOOD_BY_PATTERN: dict[str, list[str]] = {
    patterns.DNS_LABEL: ["a", "a" * 63, "0-9"],
    patterns.DNS_SUBDOMAIN: ["a", "a" * 253, "a.b-c.d"],
    patterns.LABEL_VALUE: ["", "A.b_c-1", "a" * 63],
    patterns.LABEL_KEY: ["a", "example.com/" + "a" * 63, "A_b.c-D"],
    patterns.TEAM_OR_ANY: ["*", "a" * 63],
    patterns.POOL_OR_ANY: ["*", "a.b", "a" * 253],
    patterns.DURATION: ["90m", "1h30m", "0.5d", "1.5h", "45s", "1d1d"],
    patterns.CHECKPOINT_URI: ["s3://b", "pvc://c", "s3://b/x/y", "pvc://c/a b", "s3://" + "a" * 63 + "/x"],
    patterns.ENV_NAME: ["_X", "a.b-c", "X" * 128, "NCCL_DEBUG", "ACCELX", "LD"],
    patterns.RESERVED_ENV_NAME: ["MY_*", "SECRET", "X" * 128, "A.b-c*"],
    patterns.TPU_TOPOLOGY: ["2x4", "9999x9999", "1x1x1"],
}


def _next_up(x: float) -> float:
    return math.nextafter(x, math.inf)


def _integer_values(node: dict[str, Any]) -> list[Any]:
    lo, hi = node.get("minimum"), node.get("maximum")
    out: list[Any] = [True, "8", 1.5, 2.0, 10**20, -(2**63), None, "NaN", [], {}]
    for bound in (lo, hi):
        if bound is not None:
            out += [int(bound), int(bound) - 1, int(bound) + 1, float(int(bound))]
    return out


def _number_values(node: dict[str, Any]) -> list[Any]:
    lo, hi = node.get("minimum"), node.get("maximum")
    out: list[Any] = [True, "1.5", None, 1e308, -1.0, "NaN", math.nan, math.inf, 5e-324]
    if lo is not None:
        out += [lo, math.nextafter(float(lo), -math.inf), _next_up(float(lo)), int(lo) - 1]
    if hi is not None:
        out += [hi, _next_up(float(hi)), hi * (1 + 1e-9), math.floor(hi) + 1]
    return out


def _string_values(node: dict[str, Any]) -> list[Any]:
    out: list[Any] = [5, True, None, 1.5, ["a"], {"a": "b"}]
    if "enum" in node:
        enum = [str(e) for e in node["enum"]]
        return out + enum + ["Bogus", enum[0].upper(), enum[0] + " ", ""]
    pattern = node.get("pattern")
    most = node.get("maxLength")
    if pattern is not None:
        out += BAD_BY_PATTERN.get(pattern, []) + GOOD_BY_PATTERN.get(pattern, [])
    elif most is not None:
        out += ["", "x" * most, "x" * (most + 1), "\U0001f600" * most, "\U0001f600" * (most + 1), "a\u0000b"]
    if node.get("minLength"):
        out.append("")
    return out


def _array_values(node: dict[str, Any], present: Any) -> list[Any]:
    most = node.get("maxItems")
    item = present[0] if isinstance(present, list) and present else _sample(node["items"])
    out: list[Any] = [[], "x", {"a": 1}, [None], [5], [item, item]]
    if most is not None:
        out += [[item] * most, [item] * (most + 1)]
    return out


def _object_values(node: dict[str, Any], present: Any) -> list[Any]:
    out: list[Any] = ["x", 5, [], {}]
    if isinstance(present, dict):
        out.append({**present, "bogusField": 1})
        out += [{k: val for k, val in present.items() if k != req} for req in node.get("required", [])]
    if isinstance(node.get("additionalProperties"), dict):
        # A map (a node selector): bad keys and values, too many entries.
        values = node["additionalProperties"]
        good_value = (GOOD_BY_PATTERN.get(values.get("pattern", ""), ["v"]) or ["v"])[-1]
        keys = BAD_BY_PATTERN[patterns.LABEL_KEY] + GOOD_BY_PATTERN[patterns.LABEL_KEY]
        out += [{k: good_value} for k in keys]
        out += [{"a": bad} for bad in BAD_BY_PATTERN.get(values.get("pattern", ""), [])] + [{"a": 5}, {"a": None}]
        most = node.get("maxProperties")
        if most is not None:
            out += [{f"k{i}": good_value for i in range(n)} for n in (most, most + 1)]
    return out


def _sample(node: dict[str, Any]) -> Any:
    """A valid-looking value for a schema node (for a list with no item to copy)."""
    kind = node.get("type")
    if "enum" in node:
        return node["enum"][0]
    if kind == "string":
        return (GOOD_BY_PATTERN.get(node.get("pattern", ""), ["a"]) or ["a"])[0]
    if kind == "integer":
        return int(node.get("minimum", 1))
    if kind == "number":
        return float(node.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "object":
        return {k: _sample(node["properties"][k]) for k in node.get("required", [])}
    return []


def values_for(node: dict[str, Any], present: Any) -> list[Any]:
    kind = node.get("type")
    if kind == "integer":
        return _integer_values(node)
    if kind == "number":
        return _number_values(node)
    if kind == "string":
        return _string_values(node)
    if kind == "boolean":
        return ["true", 1, 0, "yes", None, [True], not present if isinstance(present, bool) else False]
    if kind == "array":
        return _array_values(node, present)
    if kind == "object":
        return _object_values(node, present)
    return []


# --- walking the schema and the document together -----------------------------------------------

Path = tuple[str | int, ...]


def fields(node: dict[str, Any], path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every field of a schema node (list items as index 0), parents first."""
    for name, child in node.get("properties", {}).items():
        yield (*path, name), child
        yield from fields(child, (*path, name))
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        yield (*path, 0), node["items"]
        yield from fields(node["items"], (*path, 0))


def get(doc: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(doc, list) or part >= len(doc):
                return None
        elif not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


_DELETE = object()


def put(doc: dict[str, Any], path: Path, value: Any) -> dict[str, Any] | None:
    """A copy of ``doc`` with ``value`` at ``path`` (``_DELETE``: removed); None when a parent
    is missing (the mutation would test the parent, which has its own mutations)."""
    out = copy.deepcopy(doc)
    parent: Any = out
    for part in path[:-1]:
        parent = get(parent, (part,))
        if parent is None:
            return None
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(parent, list) or last >= len(parent):
            return None
    elif not isinstance(parent, dict):
        return None
    if value is _DELETE:
        if isinstance(last, int) or last not in parent:
            return None
        del parent[last]
    else:
        parent[last] = copy.deepcopy(value)
    return out


def _label(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}…({len(text)} chars)"


def _dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def schema_mutations(kind: registry.Kind, base_id: str, base: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """One change per (field, value): every field of the spec schema, ``status`` left out (the
    API server drops it on create)."""
    spec = crdgen.openapi_schema(kind)["properties"]["spec"]
    seen: set[str] = set()
    for rel, node in fields(spec):
        path: Path = ("spec", *rel)
        present = get(base, path)
        candidates = [*values_for(node, present), _DELETE]
        for value in candidates:
            doc = put(base, path, value)
            if doc is None:
                continue
            what = "deleted" if value is _DELETE else _label(value)
            key = f"{_dotted(path)}={what}"
            if key in seen:
                continue
            seen.add(key)
            yield f"{base_id}/{key}", doc


# --- hand-written rules --------------------------------------------------------------------------


def _with(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = doc
    for dotted, value in changes.items():
        path: Path = tuple(int(p) if p.isdigit() else p for p in dotted.split("."))
        changed = put(out, path, value)
        if changed is None:  # create the missing parents
            changed = copy.deepcopy(out)
            node: Any = changed
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
        out = changed
    return out


def rule_documents() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(id, kind, document) for the rules across fields and the model rules the issue names."""
    for case in CASES:
        yield f"cel/{case.id}", case.doc["kind"], _named(case.doc, "cel-case")
        yield f"cel/{case.id}/fixed", case.fixed["kind"], _named(case.fixed, "cel-case")
    job, arch = FULL_JOB, "spec.model.architecture"
    jobs: dict[str, dict[str, Any]] = {
        "pipeline-parallel-past-layers": {f"{arch}.layers": 4, "spec.workload.pipelineParallel": 5},
        "pipeline-parallel-at-layers": {f"{arch}.layers": 4, "spec.workload.pipelineParallel": 4},
        "tensor-parallel-not-dividing-heads": {"spec.workload.tensorParallel": 3},
        "tensor-parallel-not-dividing-kv-heads": {f"{arch}.kvHeads": 2, "spec.workload.tensorParallel": 4},
        "tensor-parallel-dividing-both": {f"{arch}.kvHeads": 4, "spec.workload.tensorParallel": 4},
        "tensor-parallel-without-architecture": {"spec.model.architecture": _DELETE, "spec.workload.tensorParallel": 3},
        "kv-heads-default-heads": {f"{arch}.kvHeads": _DELETE, "spec.workload.tensorParallel": 32},
        "tokens-true": {"spec.workload.tokens": True},
        "tokens-string": {"spec.workload.tokens": "1000"},
        "tokens-float-whole": {"spec.workload.tokens": 1e10},
        "tokens-float-fraction": {"spec.workload.tokens": 1.5e3 + 0.5},
        "tokens-at-bound": {"spec.workload.tokens": bounds.TOKENS},
        "tokens-past-bound": {"spec.workload.tokens": bounds.TOKENS + 1},
        "inference-with-accumulation": {"spec.workload.mode": "inference", "spec.workload.recompute": "none"},
        "context-parallel-not-dividing": {"spec.workload.contextParallel": 3},
        "context-parallel-default-seq-len": {"spec.workload.seqLen": _DELETE, "spec.workload.contextParallel": 2048},
        "checkpointing-selective": {"spec.workload.gradientCheckpointing": True},
        "experts-unset-active-2": {f"{arch}.experts": _DELETE},
        "hidden-not-multiple-head-dim-given": {f"{arch}.hidden": 4097},
        "hidden-not-multiple": {f"{arch}.hidden": 4097, f"{arch}.headDim": _DELETE},
        "min-devices-past-max-nodes": {"spec.placement.minDevices": 513, "spec.placement.maxDevices": 600},
        "min-devices-at-max-nodes": {"spec.placement.minDevices": 512, "spec.placement.maxDevices": 600},
        "spot-require-without-checkpoint": {"spec.spot.policy": "require", "spec.checkpoint": _DELETE},
        "priority-null": {"spec.priority": None},
        "max-retries-null": {"spec.maxRetries": None},
        "max-cost-null": {"spec.maxCost": None},
        "spot-null": {"spec.spot": None},
        "checkpoint-null": {"spec.checkpoint": None},
        "workload-mode-null": {"spec.workload.mode": None},
    }
    for deadline in (
        "365d",
        "364d24h",
        "8760h",
        "525600m",
        "31536000s",
        "364d23h59m60s",
        "365d1s",
        "364d24h0.001s",
        "8760.0001h",
        "31536001s",
        "366d",
        "1000d",
        "9" * 31 + "s",
        "0s",
        "0.0h",
        "00m0s",
        "0d0h0m0.0s",
        "0.001s",
        "1.5d",
        "182.5d182.5d",
        "182.5d182.5d1s",
    ):
        jobs[f"deadline-{deadline[:20]}"] = {"spec.deadline": deadline}
    reserved = ["LD_PRELOAD", "LD_X", "ACCEL_ATTEMPT", "ACCEL_", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_X"]
    reserved += ["CUDA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "TPU_WORKER_ID", "NVIDIA_REQUIRE_CUDA", "LD"]
    reserved += ["ACCELERATE", "CUDA_VISIBLE_DEVICES_X", "NCCL_IB_HCA", "ld_preload", "TPU_OTHER"]
    for name in reserved:
        jobs[f"env-{name}"] = {"spec.env.0.name": name}
    for uri in (
        "s3://b/..",
        "s3://b/../x",
        "s3://b/./x",
        "s3://b/a//b",
        "s3://b/%2e%2e/x",
        "s3://b/%2E%2e",
        "s3://b/.%2e/x",
        "s3://b/x/",
        "s3://b/",
        "pvc://c/..",
        "pvc://c/x/.",
        "pvc://c/...",
        "pvc://c/..x",
        "s3://b//",
        "s3://b/x" + "y" * (bounds.URI_LENGTH - 8),
        "s3://b/x" + "y" * (bounds.URI_LENGTH - 7),
    ):
        jobs[f"checkpoint-{uri[:24]}"] = {"spec.checkpoint.uri": uri}
    for id_, changes in jobs.items():
        yield f"rule/job/{id_}", registry.JOB.kind, _with(job, changes)
    policies: dict[str, dict[str, Any]] = {
        f"reserved-env-{name}": {"spec.reservedEnv": [name]}
        for name in ["MY SECRET", "*", "$HOME", "MY_*", "A*", "", "X" * 128, "X" * 129, "MY-SECRET", "1A", "A.B"]
    }
    policies["reserved-env-65"] = {"spec.reservedEnv": [f"X{i}" for i in range(bounds.RESERVED_ENV_ITEMS + 1)]}
    policies["reserved-env-64"] = {"spec.reservedEnv": [f"X{i}" for i in range(bounds.RESERVED_ENV_ITEMS)]}
    policies["budget-team-star"] = {"spec.budgets.0.team": "*"}
    policies["access-team-star"] = {"spec.poolAccess.0.teams": ["*"]}
    policies["access-pool-star"] = {"spec.poolAccess.0.pools": ["*"]}
    policies["access-empty-teams"] = {"spec.poolAccess.0.teams": []}
    policies["idle-teams-star"] = {"spec.idle.teams": ["*"]}
    policies["schemes-bad"] = {"spec.spot.allowedCheckpointSchemes": ["gs"]}
    policies["schemes-three"] = {"spec.spot.allowedCheckpointSchemes": ["s3", "pvc", "s3"]}
    for id_, changes in policies.items():
        yield f"rule/policy/{id_}", registry.POLICY.kind, _with(FULL_POLICY, changes)
    pools: dict[str, dict[str, Any]] = {
        "tpu-topology-on-gpu": {"spec.tpuTopology": "2x4"},
        "selector-33": {"spec.nodeSelector": {f"k{i}": "v" for i in range(33)}},
        "toleration-exists-with-value": {"spec.tolerations.0.operator": "Exists"},
    }
    for id_, changes in pools.items():
        yield f"rule/pool/{id_}", registry.POOL.kind, _with(FULL_POOL, changes)
    yield from metadata_documents()
    yield from top_level_documents()


def top_level_documents() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """The object's own fields: spec and metadata missing, null or of the wrong type, an unknown one."""
    changes: list[tuple[str, Path, Any]] = [
        ("spec-deleted", ("spec",), _DELETE),
        ("spec-null", ("spec",), None),
        ("spec-empty", ("spec",), {}),
        ("spec-text", ("spec",), "x"),
        ("spec-list", ("spec",), []),
        ("metadata-deleted", ("metadata",), _DELETE),
        ("metadata-null", ("metadata",), None),
        ("metadata-text", ("metadata",), "x"),
        ("unknown-field", ("specs",), {}),
    ]
    for kind_name, base in FULL.items():
        for id_, path, value in changes:
            doc = put(base, path, value)
            if doc is None:  # a field the base lacks: added
                doc = {**copy.deepcopy(base), str(path[0]): value}
            yield f"top/{kind_name}/{id_}", kind_name, doc


def _named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["metadata"] = {"name": name}
    return out


def metadata_documents() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Names, labels, annotations and unknown metadata fields, on a job and a pool."""
    names = [*BAD_BY_PATTERN[patterns.DNS_SUBDOMAIN], *GOOD_BY_PATTERN[patterns.DNS_SUBDOMAIN], None, 5, ""]
    labels: list[Any] = [{k: "v"} for k in BAD_BY_PATTERN[patterns.LABEL_KEY] + GOOD_BY_PATTERN[patterns.LABEL_KEY]]
    labels += [{"a": val} for val in BAD_BY_PATTERN[patterns.LABEL_VALUE] + GOOD_BY_PATTERN[patterns.LABEL_VALUE]]
    labels += [{"a": 5}, {"a": True}, {"a": None}, "x", ["a"]]
    annotations: list[Any] = [{"bad key!": "v"}, {"Example.com/a": "v"}, {"a": "x" * 300_000}, {"a": "x" * 1000}]
    annotations += [{"a": 5}, {"a": ""}, {"a": None}, {"x" * 64: "v"}, {"example.com/" + "a" * 63: "é\n"}]
    for base_id, base in (("job", FULL_JOB), ("pool", FULL_POOL)):
        kind = base["kind"]
        for name in names:
            doc = _with(base, {"metadata.name": name}) if name is not None else put(base, ("metadata", "name"), _DELETE)
            assert doc is not None
            yield f"meta/{base_id}/name={_label(name)}", kind, doc
        for value in labels:
            yield f"meta/{base_id}/labels={_label(value)}", kind, _with(base, {"metadata.labels": value})
        for value in annotations:
            yield f"meta/{base_id}/annotations={_label(value)}", kind, _with(base, {"metadata.annotations": value})
        yield f"meta/{base_id}/unknown", kind, _with(base, {"metadata.bogus": "x"})
        yield f"meta/{base_id}/generate-name", kind, _with(base, {"metadata.generateName": "gen-", "metadata.name": ""})
        yield f"meta/{base_id}/finalizers", kind, _with(base, {"metadata.finalizers": ["example.com/keep"]})
        yield f"meta/{base_id}/finalizers-bad", kind, _with(base, {"metadata.finalizers": ["bad finalizer!"]})


# --- text-level mutations ------------------------------------------------------------------------

# Plain scalars whose type the API server's YAML reader (go-yaml, YAML 1.1 with its own rules)
# and PyYAML (YAML 1.1) may read differently, put where free text is allowed.
PLAIN_SCALARS = [
    "0o17",
    "0O17",
    "1:30",
    "1:30:00",
    "y",
    "n",
    "Y",
    "N",
    "yes",
    "No",
    "on",
    "OFF",
    "1e400",
    "-1e400",
    "1e5",
    "1E5",
    "_1",
    "1__0",
    "08",
    "09.5",
    "0x1F",
    "0b101",
    "0b12",
    "-0b11",
    "1_000",
    "1_0.5",
    "2024-01-01",
    "2024-01-01T10:00:00Z",
    "2024-1-1",
    ".5",
    "5.",
    "+1",
    "-0",
    "~",
    "Null",
    "NULL",
    ".inf",
    ".NaN",
    "99999999999999999999",
    "18446744073709551615",
    "18446744073709551616",
    "9" * 400,
    "1" + "0" * 308,
    "0x" + "F" * 17,
    "1.0e+308",
    "1e-400",
]
# Fields of the full bases the plain scalars go to: free text, then typed fields (an integer, a
# number, a boolean, a DNS label) where the reader's type decides acceptance.
PLAIN_FIELDS = [
    (FULL_JOB, ("spec", "model", "name")),
    (FULL_JOB, ("spec", "env", 0, "value")),
    (FULL_JOB, ("spec", "args", 1)),
    (FULL_POOL, ("spec", "region")),
    (FULL_POOL, ("spec", "instanceType")),
    (FULL_JOB, ("spec", "workload", "tokens")),
    (FULL_JOB, ("spec", "priority")),
    (FULL_JOB, ("spec", "maxCost")),
    (FULL_JOB, ("spec", "workload", "gradientCheckpointing")),
    (FULL_JOB, ("spec", "team")),
    (FULL_POOL, ("spec", "devicesPerNode")),
]
MARKER = "plain-scalar-marker"


def _plain(base: dict[str, Any], path: Path, scalar: str) -> str:
    doc = put(base, path, MARKER)
    assert doc is not None
    return render(doc).replace(MARKER, scalar)


def _duplicate_key_texts(doc_id: str, doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The document with one ``key: value`` line given twice (same value, then another one)."""
    lines = render(doc).splitlines()
    for i, line in enumerate(lines):
        stripped = line.lstrip(" -")
        if ": " not in stripped or stripped.endswith(":"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if line.lstrip(" ").startswith("- "):
            indent += 2
        key, _, value = stripped.partition(": ")
        for other in (value, "x"):
            dup = [*lines[: i + 1], " " * indent + f"{key}: {other}", *lines[i + 1 :]]
            yield (
                f"{doc_id}/duplicate-key:line{i + 1}:{key}={'same' if other == value else 'other'}",
                "\n".join(dup) + "\n",
            )


def render(doc: Any) -> str:
    """Block-style YAML, fields in the given order (as a user writes them)."""
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100_000, default_flow_style=False)


def text_documents() -> Iterator[tuple[str, str, str]]:
    """(id, kind, YAML text) for what only text can say."""
    for base, path in PLAIN_FIELDS:
        for scalar in PLAIN_SCALARS:
            yield (
                f"plain/{base['metadata']['name']}/{_dotted(path)}={_label(scalar)}",
                base["kind"],
                _plain(base, path, scalar),
            )
    for doc_id, doc in (("dup/job-full", FULL_JOB), ("dup/pool-full", FULL_POOL), ("dup/policy", FULL_POLICY)):
        for dup_id, text in _duplicate_key_texts(doc_id, doc):
            yield dup_id, doc["kind"], text
    # Keys that differ as text but not once typed (both booleans true, both the integer 1).
    labels = render(FULL_JOB).replace("  labels:\n", "  labels:\n    y: a\n    yes: b\n")
    yield "dup/job-full/labels-y-yes", registry.JOB.kind, labels
    labels = render(FULL_JOB).replace("  labels:\n", "  labels:\n    y: a\n    n: b\n")
    yield "dup/job-full/labels-y-n", registry.JOB.kind, labels
    selector = render(FULL_POOL).replace("  nodeSelector:\n", "  nodeSelector:\n    1: a\n    01: b\n")
    yield "dup/pool-full/selector-1-01", registry.POOL.kind, selector
    selector = render(FULL_POOL).replace("  nodeSelector:\n", "  nodeSelector:\n    1: a\n    '1': b\n")
    yield "dup/pool-full/selector-1-quoted-1", registry.POOL.kind, selector
    selector = render(FULL_POOL).replace("  nodeSelector:\n", "  nodeSelector:\n    0x10: a\n    16: b\n")
    yield "dup/pool-full/selector-0x10-16", registry.POOL.kind, selector
    for id_, text in syntax_documents():
        yield f"syntax/{id_}", registry.JOB.kind, text
    # Flow style: a duplicate inside a flow mapping.
    flow = render(FULL_JOB).replace("  spot:\n    policy: prefer\n", "  spot: {policy: prefer, policy: never}\n")
    yield "dup/job-full/flow", registry.JOB.kind, flow


def syntax_documents() -> Iterator[tuple[str, str]]:
    """(id, YAML text) of one job written the ways YAML allows (and some it does not): tabs,
    comments, directives, document markers, block scalars, tags, escapes, line ends, JSON."""
    job = render(FULL_JOB)
    name = "    name: llama-3-8b-moe"
    spot = "  spot:\n    policy: prefer\n    maxPreemptions: 20\n"
    edits: dict[str, tuple[str, str]] = {
        "tab-after-colon": ("  objective: cost", "  objective:\tcost"),
        "tab-trailing": ("  objective: cost", "  objective: cost\t"),
        "tab-before-comment": ("  objective: cost", "  objective: cost\t# c"),
        "tab-before-colon": ("  objective: cost", "  objective\t: cost"),
        "tab-indent": ("  objective: cost", "\tobjective: cost"),
        "tab-after-spaces-indent": ("  objective: cost", "  \tobjective: cost"),
        "tab-blank-line": ("  objective: cost", "\t\n  objective: cost"),
        "tab-inside-enum": ("  objective: cost", "  objective: co\tst"),
        "tab-inside-free-text": (name, "    name: llama\t3"),
        "tab-in-flow": (spot, "  spot: {policy:\tprefer,\tmaxPreemptions: 20}\n"),
        "tab-after-dash": ("  - python\n", "  -\tpython\n"),
        "tab-after-nested-key": ("  spot:\n    policy: prefer", "  spot:\t\n    policy:\tprefer"),
        "comment": ("  objective: cost", "  objective: cost # why"),
        "hash-inside-plain": ("  image: ghcr.io/example/trainer:1.4", "  image: ghcr.io/example/trainer#1.4"),
        "anchor-and-alias": ("  team: research", "  team: &t research\n  image: *t"),
        "lone-surrogate": (name, '    name: "\\ud800"'),
        "next-line-escape": (name, '    name: "a\\Nb"'),
        "nbsp-escape": (name, '    name: "a\\_b"'),
        "nonchar-escape": (name, '    name: "a\\ufffeb"'),
        "nul-escape": (name, '    name: "a\\0b"'),
        "literal-block": (name, "    name: |\n      abc"),
        "folded-block": (name, "    name: >-\n      abc\n      def"),
        "complex-key": ("  objective: cost", "  ? objective\n  : cost"),
        "flow-trailing-comma": (spot, "  spot: {policy: prefer, maxPreemptions: 20,}\n"),
        "empty-value": ("  deadline: 7d", "  deadline:"),
        "str-tag": ("  deadline: 7d", "  deadline: !!str 7d"),
        "str-tag-on-number": ("  priority: 10", "  priority: !!str 10"),
        "int-tag": ("  priority: 10", "  priority: !!int 10"),
        "float-tag-on-integer": ("  priority: 10", "  priority: !!float 10"),
        "null-tag": ("  priority: 10", "  priority: !!null ''"),
        "key-escape": ("  priority: 10", '  "pr\\u0069ority": 10'),
        "key-nul": ("  priority: 10", '  "priority\\0": 10'),
        "long-key": ("  priority: 10", "  " + "k" * 2000 + ": 10"),
        "infinity-word": ("  maxCost: 250000.0", "  maxCost: Infinity"),
        "hex-float": ("  maxCost: 250000.0", "  maxCost: 0x1p3"),
        "float-trailing-dot": ("  maxCost: 250000.0", "  maxCost: 250000."),
        "tokens-2p53-plus-1": ("    tokens: 20000000000", "    tokens: 9007199254740993.0"),
        "tokens-half-below-bound": ("    tokens: 20000000000", "    tokens: 999999999999999.5"),
    }
    for id_, (old, new) in edits.items():
        assert old in job, old
        yield id_, job.replace(old, new, 1)
    yield "yaml-1.1-directive", "%YAML 1.1\n---\n" + job
    yield "yaml-1.2-directive", "%YAML 1.2\n---\n" + job
    yield "document-end", job + "...\n"
    yield "document-start", "---\n" + job
    yield "byte-order-mark", "\ufeff" + job
    yield "crlf", job.replace("\n", "\r\n")
    yield "cr", job.replace("\n", "\r")
    yield "json", json.dumps(FULL_JOB)
    yield "json-key-twice", json.dumps(FULL_JOB)[:-1] + ', "kind": "AcceleratorJob"}'


# --- the corpus -----------------------------------------------------------------------------------


def corpus(seed: int = SEED, combinations: int = 200) -> list[Doc]:
    """Every document, in a fixed order for ``seed``."""
    rng = random.Random(seed)
    out: list[Doc] = []
    for base_id, base in bases():
        out.append(Doc(f"base/{base_id}", base["kind"], render(base)))
    singles: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for kind in registry.KINDS:
        found = list(schema_mutations(kind, f"{kind.singular}", FULL[kind.kind]))
        singles[kind.kind] = found
        out += [Doc(doc_id, kind.kind, render(doc)) for doc_id, doc in found]
    out += [Doc(doc_id, kind, render(doc)) for doc_id, kind, doc in rule_documents()]
    out += [Doc(doc_id, kind, text) for doc_id, kind, text in text_documents()]
    # Combinations: two or three single changes (of any field) applied to a random base of the kind.
    all_bases = bases()
    for i in range(combinations):
        kind_name = rng.choice([registry.JOB.kind, registry.JOB.kind, registry.POOL.kind, registry.POLICY.kind])
        base_id, doc = rng.choice([(b, d) for b, d in all_bases if d["kind"] == kind_name])
        picked = []
        for _ in range(rng.randint(2, 3)):
            change_id, changed = rng.choice(singles[kind_name])
            path, value = _diff(FULL[kind_name], changed)
            if path is None:
                continue
            applied = put(doc, path, value)
            if applied is not None:
                doc = applied
                picked.append(change_id.split("/", 1)[1])
        out.append(Doc(f"combo-{i}/{base_id}/{'+'.join(picked)}", kind_name, render(doc)))
    return out


def _diff(base: Any, changed: Any, path: Path = ()) -> tuple[Path | None, Any]:
    """The one path where ``changed`` differs from ``base`` and its new value (``_DELETE``)."""
    if isinstance(base, dict) and isinstance(changed, dict):
        for k in [*base, *(k for k in changed if k not in base)]:
            if k not in changed:
                return (*path, k), _DELETE
            if k not in base or base[k] != changed[k]:
                return _diff(base[k], changed[k], (*path, k)) if k in base else ((*path, k), changed[k])
        return None, None
    if isinstance(base, list) and isinstance(changed, list) and len(base) == len(changed):
        for i, (a, b) in enumerate(zip(base, changed, strict=True)):
            if a != b:
                return _diff(a, b, (*path, i))
        return None, None
    return path, changed


def updates() -> list[Update]:
    """(old, new) pairs for the immutable fields: validate cannot judge them (one document)."""
    out = []
    for team in ("serving", "research"):
        new = _with(FULL_JOB, {"spec.team": team})
        out.append(Update(f"update/job/team={team}", registry.JOB.kind, FULL_JOB, new, team != "research"))
    out.append(
        Update("update/job/priority", registry.JOB.kind, FULL_JOB, _with(FULL_JOB, {"spec.priority": 99}), False)
    )
    return out
