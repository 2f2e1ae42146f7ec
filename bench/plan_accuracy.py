"""Planner accuracy: predicted vs measured memory and speed for every calibration row.

Reads ../shared/calibration/h100-hf-transformers.jsonl beside the repository (or $ACCEL_CALIBRATION) and every
``*.jsonl`` under tests/data/calibration/ (rows found twice count once), turns each row into the AcceleratorJobSpec that
describes the same run, and compares the planner's figures for one device of the row's GPU
with the measurement: peak allocated bytes, NVML footprint, out-of-memory, training tokens/s
and inference prefill time. Prints a table, then the median and worst absolute errors.

Run: ``PYTHONPATH=operator python bench/plan_accuracy.py [FILE.jsonl ...]``; ``--knobs`` prints the recipe
knobs' section (bench/plan_knobs.py); ``--multi-gpu`` compares the
DDP/FSDP runs on several GPUs instead (tests/data/calibration/multi-gpu/*.jsonl, not its repeats, and the shared
``h200x2-ddp-fsdp.jsonl``), planning each row on its devices with its sharding; ``--pipeline`` the 2-stage
pipeline runs on 2 H100 (tests/data/calibration/pipeline/*.jsonl), with each stage's peak beside the device's;
``--lora`` the LoRA/QLoRA runs on one H100 (tests/data/calibration/lora/*.jsonl, bench/gpu/measure_lora.py), planned
with their ``workload.adapter``; ``--ckpt-host`` the runs with and without gradient checkpointing that measure its
host cost (tests/data/calibration/ckpt-host/, bench/gpu/measure_ckpt_host.py: speed only).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec
from accel_operator.planning import memory, profile, throughput
from accel_operator.planning.layout import Layout

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(
    os.environ.get("ACCEL_CALIBRATION", ROOT.parent / "shared" / "calibration" / "h100-hf-transformers.jsonl")
)
EXTRA = ROOT / "tests" / "data" / "calibration"
# Every calibration row so far was measured on this GPU; a row may name another with "accelerator".
DEFAULT_ACCELERATOR = "h100-80gb"
# Multi-GPU rows: DDP is Hugging Face code under autocast; FSDP2 (fully_shard per layer with a
# bf16 MixedPrecisionPolicy) is the fsdp framework, full sharding or grad-op (ZeRO-2-like).
_SHARDING: dict[str, dict[str, str]] = {
    "none": {},
    "ddp": {},
    "fsdp_full": {"framework": "fsdp", "sharding": "fsdp"},
    "fsdp_grad_op": {"framework": "fsdp", "sharding": "zero2"},
}
# The same sharded rows as a Hugging Face Trainer user describes them (``--fsdp shard_grad_op`` or
# ``full_shard``): framework hf, which the planner runs as FSDP under a bf16 mixed-precision policy.
_SHARDING_HF: dict[str, dict[str, str]] = {
    "fsdp_full": {"framework": "hf", "sharding": "fsdp"},
    "fsdp_grad_op": {"framework": "hf", "sharding": "zero2"},
}
_PRECISION = {"amp_bf16": "amp-bf16", "amp_fp16": "amp-fp16", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


MULTI = EXTRA / "multi-gpu"  # its repeats/ folder is not read: the same configurations again
SHARED_MULTI = SHARED.parent / "h200x2-ddp-fsdp.jsonl"


PIPELINE = EXTRA / "pipeline"
LORA = EXTRA / "lora"


def lora_files() -> list[Path]:
    """The measured LoRA/QLoRA runs (PEFT on a bf16 or bitsandbytes base, one GPU)."""
    return sorted(LORA.glob("*.jsonl"))


def pipeline_files() -> list[Path]:
    """The measured 2-stage pipeline runs (torch.distributed.pipelining on 2 GPUs)."""
    return sorted(PIPELINE.glob("*.jsonl"))


def stage_peaks(c: Comparison) -> tuple[float, ...]:
    """Predicted peak allocated bytes per pipeline stage (first, last), from the estimate's moments
    (which leave out the workspace, added here as the device's peak adds it)."""
    workspace = dict(c.mem.components).get("workspace", 0.0)
    return tuple(max(v for k, v in c.mem.moments if f"({label} stage)" in k) + workspace for label in ("first", "last"))


def calibration_files(extra: Sequence[str] = ()) -> list[Path]:
    files = [Path(p) for p in extra] if extra else [SHARED, *sorted(EXTRA.glob("*.jsonl"))]
    return [f for f in files if f.is_file()]


def multi_gpu_files() -> list[Path]:
    """The measured DDP/FSDP runs on several GPUs (and their single-GPU baselines)."""
    return [f for f in [*sorted(MULTI.glob("*.jsonl")), SHARED_MULTI] if f.is_file()]


CKPT_HOST = EXTRA / "ckpt-host"


def ckpt_host_rows() -> list[dict[str, Any]]:
    """The checkpointing host-cost runs (bench/gpu/measure_ckpt_host.py): speed only, no memory
    figures, so they are read here rather than through ``read_rows``, which needs a peak."""
    return [
        json.loads(line) | {"_source": f"{f.name}:{n}"}
        for f in sorted(CKPT_HOST.glob("*.jsonl"))
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip()
    ]


def read_rows(files: Iterable[Path]) -> list[dict[str, Any]]:
    """Every row of ``files``; a row that appears twice (the shared set and its copy) counts once."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                key = json.dumps(row, sort_keys=True)
                if key in seen:
                    continue
                seen.add(key)
                if "error" in row or "peak_alloc" not in row:
                    print(f"skipped {f.name}:{n}: {row.get('error', 'no peak_alloc')}", file=sys.stderr)
                    continue
                row["_source"] = f"{f.name}:{n}"
                rows.append(row)
    return rows


def _max_positions(row: dict[str, Any]) -> int:
    """GPT-2's learned position table, recovered from the row's parameter count."""
    h, layers, vocab, inter = row["hidden"], row["layers"], row["vocab"], row["inter"]
    per_layer = h * 3 * h + 3 * h + h * h + h + h * inter + inter + inter * h + h + 4 * h
    rest = row["n_params"] - layers * per_layer - vocab * h - 2 * h
    return max(1, int(rest) // int(h))


def adapter_of(row: dict[str, Any]) -> dict[str, Any]:
    """``workload.adapter`` of a LoRA/QLoRA row (bench/gpu/measure_lora.py): its base ``nf4-nodq``
    is nf4 without double quantisation."""
    base = row["base"]
    out: dict[str, Any] = {"method": row["method"], "rank": row["rank"], "targetModules": row["targets"]}
    out["baseWeights"] = "nf4" if base == "nf4-nodq" else base
    if base.startswith("nf4"):
        out["doubleQuant"] = base == "nf4"
    return out


def spec_for(row: dict[str, Any], *, as_hf: bool = False) -> AcceleratorJobSpec:
    """The AcceleratorJobSpec of the run a calibration row measured (``as_hf``: a sharded row as
    framework hf)."""
    llama = row["kind"] == "llama"
    arch: dict[str, Any] = {
        "layers": row["layers"],
        "hidden": row["hidden"],
        "heads": row["heads"],
        "kvHeads": row["kv_heads"],
        "intermediate": row["inter"],
        "vocab": row["vocab"],
        "mlp": "swiglu" if llama else "gelu",
        "tiedEmbeddings": row.get("tied", not llama),
    }
    if not llama:
        arch["maxPositions"] = _max_positions(row)
    wl: dict[str, Any] = {"precision": _PRECISION[row["precision"]], "attention": row.get("attn", "sdpa")}
    wl |= (_SHARDING_HF if as_hf else _SHARDING).get(row.get("sharding", "none"), {})
    if row["mode"] in ("train", "lora"):
        wl |= {
            "mode": "training",
            "optimizer": row.get("optimizer", "adamw"),
            "microBatch": row["micro_batch"],
            "seqLen": row["seq"],
            "gradientCheckpointing": bool(row.get("grad_ckpt", False)),
            "tokens": 10**9,
        }
        if row.get("recompute", "none") != "none":
            wl["recompute"] = row["recompute"]
        if row.get("loss_kernel", "standard") != "standard":
            wl["lossKernel"] = row["loss_kernel"]
        if row.get("activation_offload"):
            wl["activationOffload"] = True
        if row.get("pipeline_parallel", 1) > 1:
            wl |= {"pipelineParallel": row["pipeline_parallel"], "gradientAccumulation": row["grad_accum"]}
        if row["mode"] == "lora":
            wl["adapter"] = adapter_of(row)
    else:
        wl |= {
            "mode": "inference",
            "batch": row["batch"],
            "promptLen": row["prompt_len"],
            "newTokens": row["new_tokens"],
        }
    return AcceleratorJobSpec.model_validate(
        {"team": "bench", "image": "bench", "model": {"architecture": arch}, "workload": wl}
    )


@dataclass(frozen=True)
class Comparison:
    row: dict[str, Any]
    mem: memory.MemoryEstimate
    speed: throughput.ThroughputEstimate

    @property
    def oom(self) -> bool:
        return bool(self.row.get("oom", False))

    def peak_error(self) -> float | None:
        if self.oom or "peak_alloc" not in self.row:
            return None  # an OOM row's peak is where the allocation failed, not the step's peak
        return self.mem.peak_allocated_bytes / float(self.row["peak_alloc"]) - 1

    def footprint_error(self) -> float | None:
        if self.oom or "nvml_used_after" not in self.row:
            return None
        return self.mem.footprint_bytes / float(self.row["nvml_used_after"]) - 1

    def speed_error(self) -> float | None:
        if self.oom or self.row["mode"] not in ("train", "lora") or "tokens_per_s" not in self.row:
            return None
        return self.speed.tokens_per_second / float(self.row["tokens_per_s"]) - 1  # the whole job

    def prefill_error(self) -> float | None:
        if self.oom or self.speed.prefill_seconds is None or "prefill_s" not in self.row:
            return None
        return self.speed.prefill_seconds / float(self.row["prefill_s"]) - 1


def compare(
    rows: Iterable[dict[str, Any]], cat: catalog.Catalog | None = None, *, as_hf: bool = False
) -> list[Comparison]:
    cat = cat or catalog.default()
    out = []
    for row in rows:
        accel = cat.get(row.get("accelerator") or DEFAULT_ACCELERATOR)
        assert accel is not None, row.get("accelerator")
        w = profile.from_spec(spec_for(row, as_hf=as_hf))
        layout = Layout.of(w, int(row.get("devices", 1)), 1)
        out.append(Comparison(row, memory.estimate(w, accel, layout), throughput.estimate(w, accel, layout)))
    return out


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.1f}%"


def _label(row: dict[str, Any]) -> str:
    parts = [row["arch"], row["mode"], row["precision"]]
    if "devices" in row:
        parts.insert(1, f"{row['devices']}×{row.get('sharding', 'none')}")
    if row["mode"] in ("train", "lora"):
        parts += [row.get("optimizer", "adamw"), f"b{row['micro_batch']}×{row['seq']}"]
        if row.get("grad_ckpt"):
            parts.append("ckpt")
        if row.get("recompute", "none") != "none":
            parts.append(row["recompute"])
    else:
        parts.append(f"b{row['batch']} p{row['prompt_len']}+{row['new_tokens']}")
    if row.get("pipeline_parallel", 1) > 1:
        parts.append(f"pp{row['pipeline_parallel']} {row['schedule']} m{row['grad_accum']}")
    if row["mode"] == "lora":
        parts[1:3] = [f"{row['method']} {row['base']} r{row['rank']} {row['targets']}"]
    if row.get("attn", "sdpa") != "sdpa":
        parts.append(row["attn"])
    return " ".join(parts)


def summary(values: Sequence[float | None]) -> tuple[float, float] | None:
    xs = [abs(v) for v in values if v is not None]
    return (statistics.median(xs), max(xs)) if xs else None


def main(argv: Sequence[str]) -> int:
    if "--knobs" in argv:
        # No calibration row turns the recipe knobs: their planned effect on reference jobs, with
        # the published figures that exist (bench/plan_knobs.py).
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from bench import plan_knobs

        print("\n".join(plan_knobs.report()))
        return 0
    multi = "--multi-gpu" in argv
    pipeline = "--pipeline" in argv
    lora = "--lora" in argv
    ckpt_host = "--ckpt-host" in argv
    argv = [a for a in argv if a not in ("--multi-gpu", "--pipeline", "--lora", "--ckpt-host")]
    if ckpt_host and not argv:
        rows = ckpt_host_rows()
    elif pipeline and not argv:
        rows = read_rows(pipeline_files())
    elif lora and not argv:
        rows = read_rows(lora_files())
    else:
        rows = read_rows(multi_gpu_files() if multi and not argv else calibration_files(argv))
    if not rows:
        print("no calibration rows found", file=sys.stderr)
        return 1
    results = compare(rows)
    gb = 1e9
    print(
        f"{'run':52} {'peak meas':>9} {'pred':>7} {'err':>7}  {'nvml meas':>9} {'pred':>7} {'err':>7}  "
        f"{'oom':>9}  {'tok/s meas':>10} {'pred':>9} {'err':>7}  {'peak at'}"
    )
    for c in results:
        r = c.row
        oom = f"{'yes' if c.oom else 'no'}/{'no' if c.mem.fits else 'yes'}"
        peak_meas = f"{r['peak_alloc'] / gb:.2f}" if "peak_alloc" in r else "-"
        nvml_meas = f"{r['nvml_used_after'] / gb:.2f}" if "nvml_used_after" in r else "-"
        if r["mode"] in ("train", "lora"):
            speed_meas = f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "-"
            speed_pred, speed_err = f"{c.speed.tokens_per_second:.0f}", _pct(c.speed_error())
        else:
            speed_meas = f"{r['prefill_s']:.3f}s" if "prefill_s" in r else "-"
            pre = c.speed.prefill_seconds or 0.0
            speed_pred, speed_err = f"{pre:.3f}s", _pct(c.prefill_error())
        print(
            f"{_label(r):52} {peak_meas:>9} {c.mem.peak_allocated_bytes / gb:7.2f} {_pct(c.peak_error()):>7}  "
            f"{nvml_meas:>9} {c.mem.footprint_bytes / gb:7.2f} {_pct(c.footprint_error()):>7}  "
            f"{oom:>9}  {speed_meas:>10} {speed_pred:>9} {speed_err:>7}  {c.mem.peak_at}"
        )
    print("(oom: measured/predicted; memory in GB = 1e9 bytes; inference speed is the prefill time)")
    staged = [c for c in results if "peak_alloc_by_stage" in c.row and "peak_alloc" in c.row]
    if staged:
        print()
        head = f"{'first meas':>10} {'pred':>7} {'err':>7}  {'last meas':>9} {'pred':>7} {'err':>7}"
        print(f"{'pipeline run, per stage':52} {head}")
        for c in staged:
            meas = c.row["peak_alloc_by_stage"]
            pred = stage_peaks(c)
            errs = [_pct(p / m - 1) for p, m in zip(pred, meas, strict=True)]
            print(
                f"{_label(c.row):52} {meas[0] / gb:10.2f} {pred[0] / gb:7.2f} {errs[0]:>7}  "
                f"{meas[1] / gb:9.2f} {pred[1] / gb:7.2f} {errs[1]:>7}"
            )
        print("(the planner plans a pipeline as 1F1B: a GPipe row is shown, not expected to match)")
    print()
    for name, values in (
        ("peak allocated", [c.peak_error() for c in results]),
        ("NVML footprint", [c.footprint_error() for c in results]),
        ("training tokens/s", [c.speed_error() for c in results]),
        ("inference prefill time", [c.prefill_error() for c in results]),
    ):
        s = summary(values)
        if s is not None:
            n = sum(v is not None for v in values)
            print(f"{name:24} median |error| {s[0] * 100:5.1f}%   worst {s[1] * 100:5.1f}%   ({n} rows)")
    if multi:
        sharded = [r for r in rows if r.get("sharding") in _SHARDING_HF]
        as_hf = compare(sharded, as_hf=True)
        s = summary([c.peak_error() for c in as_hf])
        under = min((e for c in as_hf if (e := c.peak_error()) is not None), default=0.0)
        if s is not None:
            print(
                f"{'peak, FSDP rows as hf':24} median |error| {s[0] * 100:5.1f}%   worst {s[1] * 100:5.1f}%   "
                f"({len(as_hf)} rows; most under {under * 100:+.1f}%)"
            )
    if lora:
        under = min((e for c in results if (e := c.peak_error()) is not None), default=0.0)
        print(f"{'LoRA/QLoRA peak':24} most under {under * 100:+.1f}% (floor: never more than 5 % under)")
    ooms = [c for c in results if c.oom]
    caught = sum(not c.mem.fits for c in ooms)
    false_oom = sum(1 for c in results if not c.oom and not c.mem.fits)
    print(f"{'OOM rows':24} {caught}/{len(ooms)} predicted not to fit; {false_oom} rows that ran predicted not to fit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
