"""The planner against LLM Foundry's published MPT training throughput (tests/data/published/).

Turns every row of ``llm-foundry-mpt-throughput.jsonl`` (the five result tables of LLM Foundry's
``scripts/train/benchmarking/README.md``) into the AcceleratorJob that describes the same run and
plans it with framework ``fsdp`` on the row's accelerator and GPU count (8 per node): MPT is a
GPT-style decoder (GELU MLP of expansion 4, LayerNorm, biases, tied embeddings, vocabulary 50368,
learned positions of the sequence length: the tables' NumParams grow with it), trained with
Composer's FSDP (FULL_SHARD, or SHARD_GRAD_OP as ``sharding: zero2``), flash attention
(``attention: flash``), activation checkpointing as the row says, and amp_bf16, amp_fp8 or pure
bf16. Prints one line per row (published tokens/s per GPU and MFU, predicted tokens/s per GPU, its
error, whether the planner says it fits) and the median and worst absolute errors.

The A100 tables were run with a 1600 Gbit/s node-to-node network (RoCE, 200 GB/s per node of 8,
25 GB/s per GPU), not the catalog's p4d figure: the bench plans those rows on a catalog entry with
that network bandwidth, as a user's ``--catalog`` override would.

Run: ``PYTHONPATH=operator python bench/plan_published.py`` (``--knobs``: the recipe knobs' section,
bench/plan_knobs.py)
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
DATA = ROOT / "tests" / "data" / "published" / "llm-foundry-mpt-throughput.jsonl"
GPUS_PER_NODE = 8
VOCAB = 50368  # MPT's vocabulary (the GPT-NeoX tokenizer padded to a multiple of 64)
# d_model, n_layers, n_heads of LLM Foundry's scripts/train/yamls/pretrain/mpt-*.yaml.
MPT: dict[str, tuple[int, int, int]] = {
    "mpt-125m": (768, 12, 12),
    "mpt-350m": (1024, 24, 16),
    "mpt-760m": (1536, 24, 12),
    "mpt-1b": (2048, 24, 16),
    "mpt-3b": (2560, 32, 20),
    "mpt-7b": (4096, 32, 32),
    "mpt-13b": (5120, 40, 40),
    "mpt-30b": (7168, 48, 64),
    "mpt-70b": (8192, 80, 64),
}
ACCELERATOR = {"h100_80gb": "h100-80gb", "a100_80gb": "a100-80gb", "a100_40gb": "a100-40gb"}
PRECISION = {"amp_bf16": "amp-bf16", "amp_fp8": "fp8", "bf16": "bf16"}
SHARDING = {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "zero2"}
# The A100 tables' "1600 Gbps node-node interconnect (RoCE)", per GPU of 8.
A100_ROCE_BYTES_PER_SECOND = 1600e9 / 8 / GPUS_PER_NODE


def read_rows(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def spec_for(row: dict[str, Any]) -> AcceleratorJobSpec:
    hidden, layers, heads = MPT[row["model"]]
    arch = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "intermediate": 4 * hidden,
        "vocab": VOCAB,
        "mlp": "gelu",
        "norm": "layernorm",
        "tiedEmbeddings": True,
        "maxPositions": row["seq"],
    }
    workload = {
        "mode": "training",
        "framework": "fsdp",
        "precision": PRECISION[row["precision"]],
        "optimizer": "adamw",
        "sharding": SHARDING[row["sharding"]],
        "attention": "flash",
        "microBatch": row["micro_batch"],
        "seqLen": row["seq"],
        "gradientAccumulation": row["grad_accum"],
        "recompute": "full" if row["activation_checkpointing"] else "none",
        "tokens": 10**9,
    }
    return AcceleratorJobSpec.model_validate(
        {"team": "bench", "image": "bench", "model": {"architecture": arch}, "workload": workload}
    )


def accelerator_for(row: dict[str, Any], cat: catalog.Catalog) -> Accelerator:
    accel = cat.get(ACCELERATOR[row["gpu"]])
    assert accel is not None, row["gpu"]
    if row["gpu"].startswith("a100"):
        accel = dataclasses.replace(accel, inter_node_bytes_per_second=A100_ROCE_BYTES_PER_SECOND)
    return accel


@dataclass(frozen=True)
class Comparison:
    row: dict[str, Any]
    job: profile.JobProfile
    mem: memory.MemoryEstimate
    speed: throughput.ThroughputEstimate

    @property
    def predicted_per_gpu(self) -> float:
        return float(self.speed.tokens_per_second / self.row["gpus"])

    def error(self) -> float:
        return self.predicted_per_gpu / float(self.row["tokens_per_s_per_gpu"]) - 1

    @property
    def label(self) -> str:
        r = self.row
        parts = [r["model"], r["gpu"], f"{r['gpus']}gpu", r["precision"], f"b{r['micro_batch']}×{r['seq']}"]
        if r["grad_accum"] > 1:
            parts.append(f"ga{r['grad_accum']}")
        if r["sharding"] != "FULL_SHARD":
            parts.append("grad-op")
        if r["activation_checkpointing"]:
            parts.append("ckpt")
        return " ".join(parts)


def compare(rows: Sequence[dict[str, Any]], cat: catalog.Catalog | None = None) -> list[Comparison]:
    cat = cat or catalog.default()
    out = []
    for row in rows:
        accel = accelerator_for(row, cat)
        job = profile.from_spec(spec_for(row))
        layout = Layout(devices=row["gpus"], nodes=max(1, row["gpus"] // GPUS_PER_NODE))
        out.append(Comparison(row, job, memory.estimate(job, accel, layout), throughput.estimate(job, accel, layout)))
    return out


def summary(results: Sequence[Comparison]) -> tuple[float, float]:
    errors = [abs(c.error()) for c in results]
    return statistics.median(errors), max(errors)


def main(argv: Sequence[str]) -> int:
    if "--knobs" in argv:
        # No published run turns the recipe knobs: their planned effect on reference jobs, with
        # the published figures that exist (bench/plan_knobs.py).
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from bench import plan_knobs

        print("\n".join(plan_knobs.report()))
        return 0
    results = compare(read_rows(Path(argv[0]) if argv else DATA))
    print(f"{'configuration':48} {'published':>9} {'MFU':>6} {'predicted':>9} {'error':>7}  fits  peak GB")
    for c in results:
        r = c.row
        print(
            f"{c.label:48} {r['tokens_per_s_per_gpu']:9d} {r['mfu_pct']:5.1f}% {c.predicted_per_gpu:9.0f} "
            f"{c.error() * 100:+6.1f}%  {'yes' if c.mem.fits else 'NO ':4}  {c.mem.footprint_bytes / 1e9:6.1f}"
        )
    print()
    for name in sorted({r.row["source"].split("'")[1] for r in results}):
        subset = [c for c in results if name in c.row["source"]]
        med, worst = summary(subset)
        print(f"{name:60} {len(subset):3d} rows  median {med * 100:5.1f}%  worst {worst * 100:5.1f}%")
    med, worst = summary(results)
    unfit = [c.label for c in results if not c.mem.fits]
    print(f"{'all':60} {len(results):3d} rows  median {med * 100:5.1f}%  worst {worst * 100:5.1f}%")
    print(f"predicted not to fit (each ran): {len(unfit)}" + (f": {', '.join(unfit)}" if unfit else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
