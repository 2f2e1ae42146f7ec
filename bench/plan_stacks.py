"""The planner against published Megatron-LM and MaxText throughput (held out: nothing was fitted to them;
the MaxText v5e rows are held in).

Two sources in tests/data/published/ (see its README):

- ``megatron-narayanan2021-table1.jsonl``: Narayanan et al. 2021, Table 1 — GPT models of 1.7B to
  1T parameters on 32 to 3072 A100 80GB (Selene: 8 GPUs and 8 × 200 Gbit/s InfiniBand per node),
  tensor and pipeline parallel, sequence 2048, vocabulary 51200. Planned as ``framework:
  megatron`` with ``attention: eager`` (the 2021 code materialised the scores under a fused
  softmax), ``recompute: full`` (the paper's runs recompute activations), ``microBatch: 1`` (the
  table does not give it), ``gradientAccumulation`` = batch / data-parallel ranks, no distributed
  optimizer, and the non-interleaved 1F1B schedule (the paper used the interleaved one for the
  large runs, whose bubble is smaller). The published figure is achieved TFLOP/s per GPU by the
  paper's Eq. 3, F = 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration: tokens/s per GPU =
  TFLOP/s / (96·l·h²·(1 + s/6h + V/16lh)).
- ``maxtext-v5p-readme.jsonl``: MaxText's TPU v5p table (32B–1024B on single slices of 64–2048
  chips), the runs' flags from its ``configs/v5p/*.sh``: fully sharded (``ici_fsdp_parallelism:
  -1``) with tensor parallelism 4 or 8, ``remat_policy`` minimal (``recompute: selective``) or
  full, flash attention, fp32 weights with bf16 compute (``amp-bf16``). Planned as ``framework:
  maxtext``. The published figure is TFLOP/s per chip by MaxText's own count (weights' products
  ×3 for forward and backward, attention 4·s·heads·headDim per token and layer ×3, no causal
  halving): tokens/s per chip = TFLOP/s / that count.

- ``maxtext-v5e-readme.jsonl`` (held in): MaxText's TPU v5e table, 16B–64B on one v5e-256 slice,
  full remat, no tensor parallelism; the source of the TPU matrix efficiency (see its README).

Prints one line per row (published tokens/s per device, predicted, error, whether it fits and
the peak per device) and the median and worst absolute errors.

Run: ``PYTHONPATH=operator python bench/plan_stacks.py``
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_api import catalog
from accel_api.catalog import Accelerator
from accel_api.job import AcceleratorJobSpec
from accel_operator.planning import memory, profile, throughput
from accel_operator.planning.layout import Layout

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "published"
MEGATRON = DATA / "megatron-narayanan2021-table1.jsonl"
MAXTEXT = DATA / "maxtext-v5p-readme.jsonl"
# Held in: MaxText's TPU v5e table (the 1 × v5e-256 rows of its full-remat, pure-fsdp configurations),
# the calibration of the TPU matrix-unit efficiency (the catalog's ``mfu`` for v5e and v5p).
MAXTEXT_V5E = DATA / "maxtext-v5e-readme.jsonl"
# Selene: 8 × 200 Gbit/s HDR InfiniBand per node of 8 A100: 25 GB/s per GPU.
SELENE_BYTES_PER_SECOND = 8 * 200e9 / 8 / 8
GPUS_PER_NODE = 8
TPU_CHIPS_PER_HOST = 4  # v5p and v5e training hosts: 4 chips each
# MaxText base.yml: emb 2048, 16 query and 16 KV heads of 128, mlp 7168, 16 layers, vocab 32000.
MAXTEXT_BASE = (2048, 16, 7168, 16)
MAXTEXT_HEAD_DIM = 128
MAXTEXT_VOCAB = 32000
REMAT = {"minimal": "selective", "full": "full", "none": "none"}


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def maxtext_dims(scale: int) -> tuple[int, int, int, int]:
    """(emb, heads, mlp, layers) of ``global_parameter_scale`` (MaxText's get_individual_scales)."""
    log2 = scale.bit_length() - 1
    base, rem = divmod(log2, 3)
    heads_scale = base + int(rem > 0)
    emb_scale = base + int(rem > 1)
    emb, heads, mlp, layers = MAXTEXT_BASE
    return emb * 2**emb_scale, heads * 2**heads_scale, mlp * 2**heads_scale, layers * 2**base


@dataclass(frozen=True)
class Case:
    source: str  # "megatron", "maxtext" (v5p, held out) or "maxtext-v5e" (held in)
    label: str
    row: dict[str, Any]
    spec: AcceleratorJobSpec
    accelerator: Accelerator
    layout: Layout
    published_per_device: float  # tokens/s per device


def _spec(arch: dict[str, Any], workload: dict[str, Any]) -> AcceleratorJobSpec:
    return AcceleratorJobSpec.model_validate(
        {
            "team": "bench",
            "image": "bench",
            "model": {"architecture": arch},
            "workload": {"mode": "training", "tokens": 10**9, "optimizer": "adamw"} | workload,
        }
    )


def megatron_case(row: dict[str, Any], cat: catalog.Catalog) -> Case:
    h, layers, s, vocab = row["hidden"], row["layers"], row["seq"], row["vocab"]
    tp, pp, gpus = row["tensor_parallel"], row["pipeline_parallel"], row["gpus"]
    dp = gpus // (tp * pp)
    arch = {
        "layers": layers,
        "hidden": h,
        "heads": row["heads"],
        "intermediate": 4 * h,
        "vocab": vocab,
        "mlp": "gelu",
        "norm": "layernorm",
        "tiedEmbeddings": True,
        "maxPositions": s,
    }
    workload = {
        "framework": "megatron",
        "precision": "amp-bf16",
        "attention": "eager",
        "recompute": "full",
        "microBatch": 1,
        "seqLen": s,
        "gradientAccumulation": row["batch"] // dp,
        "tensorParallel": tp,
        "pipelineParallel": pp,
        # The 2021 code had no sequence parallelism (Korthikanti et al. added it in 2022).
        "sequenceParallel": False,
    }
    accel = cat.get("a100-80gb")
    assert accel is not None
    accel = dataclasses.replace(accel, inter_node_bytes_per_second=SELENE_BYTES_PER_SECOND)
    flops_per_token = 96.0 * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
    return Case(
        source="megatron",
        label=f"GPT {row['params_billion']}B, {gpus} A100, tp{tp} pp{pp}, batch {row['batch']}",
        row=row,
        spec=_spec(arch, workload),
        accelerator=accel,
        layout=Layout(gpus, max(1, gpus // GPUS_PER_NODE), tp, pp, 1),
        published_per_device=row["tflops_per_gpu"] * 1e12 / flops_per_token,
    )


def maxtext_case(row: dict[str, Any], cat: catalog.Catalog, source: str = "maxtext") -> Case:
    emb, heads, mlp, layers = maxtext_dims(row["global_parameter_scale"])
    s, tp, chips = row["seq"], row["ici_tensor_parallelism"], row["chips"]
    q = heads * MAXTEXT_HEAD_DIM
    arch = {
        "layers": layers,
        "hidden": emb,
        "heads": heads,
        "kvHeads": heads,
        "headDim": MAXTEXT_HEAD_DIM,
        "intermediate": mlp,
        "vocab": MAXTEXT_VOCAB,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "tiedEmbeddings": False,
    }
    workload = {
        "framework": "maxtext",
        "precision": "amp-bf16",
        "attention": "flash",
        "sharding": "fsdp",
        "recompute": REMAT[row["remat_policy"]],
        # MaxText's per_device_batch_size counts every chip, the tensor-parallel ones too: a
        # tensor-parallel group of tp chips runs tp × that many sequences (the planner's microBatch
        # is per data-parallel rank).
        "microBatch": row["per_device_batch_size"] * tp,
        "seqLen": s,
        "tensorParallel": tp,
    }
    accel = cat.get("tpu-" + row["accelerator"].split("-")[0])
    assert accel is not None, row["accelerator"]
    weights = layers * (6 * emb * mlp + 2 * emb * (q + 2 * q) + 2 * q * emb) + 2 * emb * MAXTEXT_VOCAB
    flops_per_token = 3.0 * weights + 3.0 * 4 * s * q * layers
    return Case(
        source=source,
        label=f"MaxText {row['model']}, {row['accelerator']} ({chips} chips), tp{tp}, remat {row['remat_policy']}",
        row=row,
        spec=_spec(arch, workload),
        accelerator=accel,
        layout=Layout(chips, max(1, chips // TPU_CHIPS_PER_HOST), tp, 1, 1),
        published_per_device=row["tflops_per_chip"] * 1e12 / flops_per_token,
    )


def cases(cat: catalog.Catalog | None = None) -> list[Case]:
    cat = cat or catalog.default()
    return (
        [megatron_case(r, cat) for r in read_rows(MEGATRON)]
        + [maxtext_case(r, cat) for r in read_rows(MAXTEXT)]
        + [maxtext_case(r, cat, "maxtext-v5e") for r in read_rows(MAXTEXT_V5E)]
    )


@dataclass(frozen=True)
class Comparison:
    case: Case
    job: profile.JobProfile
    mem: memory.MemoryEstimate
    speed: throughput.ThroughputEstimate

    @property
    def predicted_per_device(self) -> float:
        return self.speed.tokens_per_second / self.case.layout.devices

    def error(self) -> float:
        return self.predicted_per_device / self.case.published_per_device - 1


def compare(selected: Sequence[Case] | None = None) -> list[Comparison]:
    out = []
    for c in selected if selected is not None else cases():
        job = profile.from_spec(c.spec)
        out.append(
            Comparison(
                c, job, memory.estimate(job, c.accelerator, c.layout), throughput.estimate(job, c.accelerator, c.layout)
            )
        )
    return out


def summary(results: Sequence[Comparison]) -> tuple[float, float]:
    errors = [abs(r.error()) for r in results]
    return statistics.median(errors), max(errors)


def main(argv: Sequence[str]) -> int:
    results = compare()
    print(f"{'configuration':62} {'published':>9} {'predicted':>9} {'error':>7}  fits  peak GB  (tokens/s per device)")
    for r in results:
        print(
            f"{r.case.label:62} {r.case.published_per_device:9.0f} {r.predicted_per_device:9.0f} "
            f"{r.error() * 100:+6.1f}%  {'yes' if r.mem.fits else 'NO ':4}  {r.mem.peak_allocated_bytes / 1e9:6.1f}"
        )
    print()
    for source in ("megatron", "maxtext"):
        subset = [r for r in results if r.case.source == source]
        med, worst = summary(subset)
        print(f"{source:10} {len(subset):3d} rows  median {med * 100:5.1f}%  worst {worst * 100:5.1f}%")
    held_out = [r for r in results if r.case.source != "maxtext-v5e"]
    med, worst = summary(held_out)
    print(f"{'held out':10} {len(held_out):3d} rows  median {med * 100:5.1f}%  worst {worst * 100:5.1f}%")
    held_in = [r for r in results if r.case.source == "maxtext-v5e"]
    med, worst = summary(held_in)
    print(f"{'v5e held in':10} {len(held_in):3d} rows  median {med * 100:5.1f}%  worst {worst * 100:5.1f}%")
    unfit = [r.case.label for r in results if not r.mem.fits]
    print(f"predicted not to fit (each ran): {len(unfit)}" + (f": {'; '.join(unfit)}" if unfit else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
