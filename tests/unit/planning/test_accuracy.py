"""The memory and speed models against real H100 runs (tests/data/calibration/*.jsonl).

Floors from the planner's issue: peak allocated memory within 5 % (median) and 10 % (worst),
every run that ran out of memory predicted not to fit (and none that ran predicted not to),
training tokens/s within 20 % (median). The comparison itself lives in bench/plan_accuracy.py,
which prints the table.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from accel_api import catalog
from accel_operator.planning import adapter, blocks, memory, profile, throughput

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "calibration"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_accuracy", ROOT / "bench" / "plan_accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("plan_accuracy", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
RESULTS = BENCH.compare(BENCH.read_rows(sorted(DATA.glob("*.jsonl"))))


def test_there_is_calibration_data() -> None:
    assert len(RESULTS) >= 8
    assert any(c.oom for c in RESULTS)


def test_peak_allocated_memory() -> None:
    errors = [abs(e) for c in RESULTS if (e := c.peak_error()) is not None]
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.10


@pytest.mark.parametrize("result", [c for c in RESULTS if c.oom], ids=lambda c: c.row["_source"])
def test_every_out_of_memory_run_is_predicted_not_to_fit(result: object) -> None:
    assert not result.mem.fits  # type: ignore[attr-defined]


def test_no_run_that_fit_is_predicted_not_to() -> None:
    assert [c.row["_source"] for c in RESULTS if not c.oom and not c.mem.fits] == []


def test_training_tokens_per_second() -> None:
    errors = [abs(e) for c in RESULTS if (e := c.speed_error()) is not None]
    assert len(errors) >= 5
    assert statistics.median(errors) <= 0.20


def test_nvml_footprint_is_in_the_right_range() -> None:
    errors = [abs(e) for c in RESULTS if (e := c.footprint_error()) is not None]
    assert statistics.median(errors) <= 0.10


# --- several GPUs: DDP and FSDP2 on 1, 2 and 4 H200 (tests/data/calibration/multi-gpu/, not its
# repeats, and the shared 2-GPU rows when present). Floors from the planner issue: per-device
# peak memory within 5 % (median) and 10 % (worst), whole-job tokens/s within 15 % (median).
MULTI = BENCH.compare(BENCH.read_rows(BENCH.multi_gpu_files()))


def test_there_are_multi_gpu_rows() -> None:
    assert len(MULTI) >= 64
    assert {c.row.get("sharding") for c in MULTI} >= {"ddp", "fsdp_full", "fsdp_grad_op"}


def test_multi_gpu_peak_allocated_memory() -> None:
    errors = [abs(e) for c in MULTI if (e := c.peak_error()) is not None]
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.10


def test_multi_gpu_peak_memory_is_never_more_than_5_percent_under() -> None:
    assert min(e for c in MULTI if (e := c.peak_error()) is not None) >= -0.05


# The FSDP rows as a Hugging Face Trainer user writes them (framework hf, sharding zero2 for
# SHARD_GRAD_OP, fsdp for FULL_SHARD): the same floors. Before the sharded mixed-precision
# accounting they were planned with whole fp32 weights under autocast: up to +55 % (zero2 on 4).
MULTI_AS_HF = BENCH.compare(
    [c.row for c in MULTI if c.row.get("sharding") in ("fsdp_full", "fsdp_grad_op")], as_hf=True
)


def test_multi_gpu_sharded_rows_planned_as_hf() -> None:
    errors = [e for c in MULTI_AS_HF if (e := c.peak_error()) is not None]
    assert len(errors) >= 30
    assert statistics.median(abs(e) for e in errors) <= 0.05
    assert max(abs(e) for e in errors) <= 0.10
    assert min(errors) >= -0.05


def test_h200_runtime_context_is_the_measured_one() -> None:
    # NVML used − the allocator's reserve on one H200 (the single-GPU rows): the CUDA context and
    # kernel images, 2.04 GB, not the H100's 1.31 GB the catalog had copied.
    h200 = catalog.default().get("h200-141gb")
    assert h200 is not None
    single = [
        c.row
        for c in MULTI
        if c.row.get("devices") == 1 and "nvml_used_after" in c.row and c.row.get("accelerator") == "h200-141gb"
    ]
    assert len(single) >= 4
    measured = statistics.median(r["nvml_used_after"] - r["peak_reserved"] for r in single)
    assert h200.context_bytes == pytest.approx(measured, rel=0.02)


def test_several_gpu_ranks_hold_nccls_memory_as_measured() -> None:
    # NVML used - the allocator's reserve, per host file: every DDP and FSDP2 rank holds the same
    # amount more than a lone GPU of that host (NCCL's communicator), what memory.NCCL_BYTES adds.
    for prefix in ("h200-ddp-fsdp", "h100x4-ddp-fsdp-2026-11-28"):
        rows = [c.row for c in MULTI if c.row["_source"].startswith(prefix) and not c.oom]
        lone = [r["nvml_used_after"] - r["peak_reserved"] for r in rows if r["devices"] == 1]
        ranks = [r["nvml_used_after"] - r["peak_reserved"] for r in rows if r["devices"] > 1]
        assert len(lone) >= 4 and len(ranks) >= 25, prefix
        assert max(ranks) - min(ranks) <= 0.02e9, prefix  # the same on 2 and 4 ranks, DDP and FSDP2
        excess = statistics.median(ranks) - statistics.median(lone)
        assert excess == pytest.approx(memory.NCCL_BYTES, abs=0.02e9), prefix


# FSDP2's reserve, one caching-allocator pool per stream (docs/planner.md, "FSDP2's reserve: one pool
# per stream"; bench/gpu/measure_fsdp_pools.py on 2 and 4 H200, tests/data/calibration/fsdp-pools/).
FSDP_POOLS = BENCH.compare(BENCH.read_rows(sorted((DATA / "fsdp-pools").glob("*.jsonl"))))


def test_fsdp_peak_reserve_is_the_three_stream_pools() -> None:
    # The measurement behind the term: on every rank the peak reserved is the default, all-gather
    # copy-in and reduce-scatter pools' reserves, and the reduce-scatter pool the sharded gradients.
    assert len(FSDP_POOLS) == 40
    for c in FSDP_POOLS:
        for rank in c.row["by_rank"]:
            pools = rank["streams"]
            assert set(pools) == {"default", "all_gather_copy_in", "reduce_scatter"}
            assert sum(p["reserved"] for p in pools.values()) == rank["peak_reserved"]
            reduce = 4 if c.row["precision"] == "amp_bf16" else 2
            grads = reduce * c.row["n_params"] / c.row["devices"]
            assert pools["reduce_scatter"]["peak_alloc"] == pytest.approx(grads, rel=0.005)


def test_fsdp_reserve_as_measured_per_stream() -> None:
    # Planned reserve against max_memory_reserved, on the runs whose initialisation left nothing
    # cached (the unsharded model's freed blocks emptied before the first step). Before the
    # per-stream pools: median 16.7 %, worst 22.5 % under; now 2.8 % and 9.5 % under.
    rows = [c for c in FSDP_POOLS if c.row.get("empty_cache_after_wrap")]  # the first call predates the field
    errors = [c.mem.reserved_bytes / c.row["peak_reserved"] - 1 for c in rows]
    assert len(errors) == 20
    assert statistics.median(abs(e) for e in errors) <= 0.05
    assert min(errors) >= -0.10 and max(errors) <= 0.10


def test_multi_gpu_fsdp_nvml_footprint() -> None:
    # The several-GPU FSDP2 rows' NVML footprint: median 14.2 % before the per-stream pools (3.0 % now),
    # the whole several-GPU set's 6.9 % (3.2 %).
    fsdp = [c for c in MULTI if c.row.get("sharding") in ("fsdp_full", "fsdp_grad_op")]
    errors = [abs(e) for c in fsdp if (e := c.footprint_error()) is not None]
    assert len(errors) >= 70
    assert statistics.median(errors) <= 0.05
    every = [abs(e) for c in MULTI if (e := c.footprint_error()) is not None]
    assert statistics.median(every) <= 0.05


def test_multi_gpu_runs_are_predicted_to_fit() -> None:
    assert [c.row["_source"] for c in MULTI if not c.oom and not c.mem.fits] == []


def test_multi_gpu_tokens_per_second() -> None:
    errors = [abs(e) for c in MULTI if (e := c.speed_error()) is not None]
    assert statistics.median(errors) <= 0.15


# FSDP2 with bf16 mixed precision (fp32 master shards) on 2 H100, 1.1B-7B, full shard and grad-op
# (bench/gpu/measure_distributed.py --set mp --devices 2). Peak memory: measured at -0.1 to +3.4 %.
# Tokens/s: all optimistic before the planner charged overlapped NVLink collectives for their SM
# and HBM share (FSDP_CONTENTION): median 8.1 %, worst +25.7 % (7B grad-op at micro batch 1, the
# allocator's reserve at 73 of 80 GB); now median 5.5 %, worst +20.2 %.
H100_MP = [c for c in MULTI if c.row["_source"].startswith("h100x2-fsdp2-mp")]


def test_h100_mixed_precision_fsdp_rows() -> None:
    assert len(H100_MP) == 6
    assert {c.row["sharding"] for c in H100_MP} == {"fsdp_full", "fsdp_grad_op"}
    assert all(c.row["gpu"].startswith("NVIDIA H100") for c in H100_MP)
    peak = [e for c in H100_MP if (e := c.peak_error()) is not None]
    assert len(peak) == 6
    assert statistics.median(abs(e) for e in peak) <= 0.05
    assert max(abs(e) for e in peak) <= 0.05
    assert min(peak) >= -0.01  # measured: -0.1 %
    speed = [e for c in H100_MP if (e := c.speed_error()) is not None]
    assert len(speed) == 6
    assert statistics.median(abs(e) for e in speed) <= 0.10
    assert max(abs(e) for e in speed) <= 0.25


# The same sweep on 4 H100 80GB HBM3 of one host (bench/gpu/measure_distributed.py --set mp
# --devices 4: the 2-GPU set plus 1.1B with checkpointing, 3B and 7B at micro batch 4, and 13B,
# which fits only on 4 or more). Floors: peak within 10 % and never more than 5 % under, tokens/s
# within 25 %. Measured: peak -0.3 to +4.1 %, tokens/s -1.7 to +6.9 %.
H100X4_MP = [c for c in MULTI if c.row["_source"].startswith("h100x4-fsdp2-mp")]


def test_h100x4_mixed_precision_fsdp_rows() -> None:
    assert len(H100X4_MP) == 11
    assert all(c.row["gpu"].startswith("NVIDIA H100") and c.row["devices"] == 4 for c in H100X4_MP)
    assert {c.row["arch"] for c in H100X4_MP} >= {"llama-1.1b", "llama-13.0b"}
    assert not any(c.oom for c in H100X4_MP)
    peak = [e for c in H100X4_MP if (e := c.peak_error()) is not None]
    assert len(peak) == 11
    assert max(abs(e) for e in peak) <= 0.10
    assert min(peak) >= -0.05
    speed = [e for c in H100X4_MP if (e := c.speed_error()) is not None]
    assert len(speed) == 11
    assert max(abs(e) for e in speed) <= 0.25
    assert all(c.mem.fits for c in H100X4_MP)


# DDP at micro batch 1 with checkpointing (3.4B and 6.7B on 2 and 4 H200, h200-ddp-fsdp.jsonl):
# the fp32 all-reduce in 25 MB buckets outlasts the short backward. Planned at the link's full rate
# they were +17 to +43 % fast; at the rate such buckets reach (DDP_BUCKET_EFFICIENCY) -6 to +19 %.
DDP_MB1 = [
    c
    for c in MULTI
    if c.row.get("sharding") == "ddp" and c.row["micro_batch"] == 1 and c.row["_source"].startswith("h200-ddp")
]


def test_h200_ddp_rows_at_micro_batch_1() -> None:
    assert len(DDP_MB1) == 4
    speed = [e for c in DDP_MB1 if (e := c.speed_error()) is not None]
    assert len(speed) == 4
    assert max(abs(e) for e in speed) <= 0.25


# Every several-GPU row of the H200 set (DDP and FSDP2 on 2 and 4 H200) within the worst
# tokens/s floor: before DDP's bucket rate and FSDP's slowest-rank host term, 1.1B full shard at
# micro batch 1 on 4 GPUs was +40.9 % and 3.4B DDP at micro batch 1 +42.7 %.
H200_SEVERAL = [c for c in MULTI if c.row["_source"].startswith("h200-ddp") and c.row.get("devices", 1) > 1]


def test_h200_several_gpu_rows_tokens_per_second() -> None:
    assert len(H200_SEVERAL) >= 50
    speed = [abs(e) for c in H200_SEVERAL if (e := c.speed_error()) is not None]
    assert len(speed) == len(H200_SEVERAL)
    assert statistics.median(speed) <= 0.10
    assert max(speed) <= 0.25


# What DDP adds to a rank's step, split on 2 H200 (bench/gpu/measure_ddp_cost.py,
# tests/data/calibration/ddp-cost/, two calls): each rank alone, DDP with a communication hook that
# hands the bucket back (the bucket copies, no all-reduce) and DDP itself, with the profiled step's
# summed kernel time. The copies' kernel time (hook run less alone) is what the planner adds for
# them (DDP_BUCKET_COPY_BYTES), within 30 %; before it the planner added none. The all-reduce alone,
# in DDP's 25 MB buckets, reaches 0.49-0.53 of NVLink's 450 GB/s (DDP_BUCKET_EFFICIENCY: 0.5).
DDP_COST = [json.loads(line) for line in (DATA / "ddp-cost" / "h200x2-ddp-cost-2026-11-28.jsonl").open()]


def test_ddp_bucket_copies_as_measured() -> None:
    h200 = catalog.default().get("h200-141gb")
    assert h200 is not None
    by = {(r["call"], r["config"]): r for r in DDP_COST}
    hooked = [r for r in DDP_COST if r["sharding"] == "ddp_nocomm"]
    assert len(hooked) == 3
    for r in hooked:
        alone = by[(r["call"], r["config"].replace("ddp_nocomm", "none"))]
        measured = r["compute_kernel_s"] - alone["compute_kernel_s"]
        row = {k: v for k, v in r.items() if k != "sharding"} | {"sharding": "ddp"}
        w = profile.from_spec(BENCH.spec_for(row))
        two = BENCH.Layout(2, 1)
        # The exposed communication less the all-reduce's own tail (the backward hides the rest).
        allreduce = throughput._allreduce_seconds(
            r["n_params"] * 4.0, 2, two, h200, intra_efficiency=throughput.DDP_BUCKET_EFFICIENCY
        )
        exposed = throughput.estimate(w, h200, two).component("data-parallel communication (exposed)")
        planned = exposed - throughput.UNHIDDEN_TAIL * allreduce
        if r["n_params"] > 1e9:  # the small model's copies (0.8 ms) are within the profiler's noise
            assert planned == pytest.approx(measured, rel=0.3), (r["config"], planned, measured)
    for r in DDP_COST:
        if "allreduce_alone_s" in r:
            rate = r["n_params"] * 4.0 / r["allreduce_alone_s"]  # 2 ranks: a ring moves the buffer once
            assert 0.45 < rate / h200.intra_node_bytes_per_second < 0.6


# The DDP/FSDP2 set on 4 H100 80GB HBM3 re-measured with a 1-GPU run of every model on the same host
# in the same call (bench/gpu/measure_distributed.py --devices 1 --set host, then --devices 4; the
# median of steps 3-12, per-rank step and host times, the host's name in each row;
# h100x4-ddp-fsdp-2026-11-28.jsonl). Memory meets the floors on every row (peak -1.0 to
# +4.0 %; the 3.4B DDP rank that peaked 9.7 % above plan in the first run is at plan on every rank).
# Tokens/s meets the median floor (4.6 % on 4 GPUs, 5.1 % on one) but not the worst: host-bound rows
# (FSDP on 134M-355M, 3.4B DDP at 1 x 1024 with checkpointing) run up to +36.4 % fast (+57.5 % before
# checkpointing's host cost was modelled), and the same configuration's level moves by up to 30 %
# between two launches on the same machine (docs/planner.md, "Not yet").
H100X4_HOST = [c for c in MULTI if c.row["_source"].startswith("h100x4-ddp-fsdp-2026-11-28")]


def test_h100x4_ddp_fsdp_rows_with_their_same_host_baseline() -> None:
    several = [c for c in H100X4_HOST if c.row["devices"] == 4]
    single = [c for c in H100X4_HOST if c.row["devices"] == 1]
    assert (len(several), len(single)) == (27, 13)
    assert {c.row["hostname"] for c in H100X4_HOST} == {H100X4_HOST[0].row["hostname"]}  # one host
    assert {c.row["gpu"] for c in H100X4_HOST} == {"NVIDIA H100 80GB HBM3"}
    assert [c.row["config"] for c in several if c.oom] == ["llama-7b-ddp-b1x1024-ckpt"]
    assert all(not c.mem.fits for c in several if c.oom)
    assert all(c.mem.fits for c in H100X4_HOST if not c.oom)
    peak = [e for c in H100X4_HOST if (e := c.peak_error()) is not None]
    assert len(peak) == 39
    assert statistics.median(abs(e) for e in peak) <= 0.05
    assert max(abs(e) for e in peak) <= 0.10
    assert min(peak) >= -0.05
    # Every rank of a row, not only the fullest: the planner plans the fullest rank.
    ranks = [p / c.mem.peak_allocated_bytes - 1 for c in several if not c.oom for p in c.row["peak_alloc_by_rank"]]
    assert max(ranks) <= 0.05
    for group in (several, single):
        speed = [abs(e) for c in group if (e := c.speed_error()) is not None]
        assert len(speed) == len([c for c in group if not c.oom])
        assert statistics.median(speed) <= 0.10


# Gradient checkpointing's host cost (throughput.CHECKPOINT_HOST_OPS_PER_LAYER): GPT-2 and Llama at
# 124M-374M on one H100, each with and without HF's checkpointing at equal batch, with the host's
# time per phase and the profiler's count of launches (bench/gpu/measure_ckpt_host.py,
# tests/data/calibration/ckpt-host/). Before the term the checkpointed rows were +19 to +120 %
# (median 68 %): the planner added the recompute's FLOPs and its kernels' dispatch only.
CKPT_HOST = BENCH.compare(BENCH.ckpt_host_rows())


def test_the_host_term_counts_the_launches_the_profiler_counts() -> None:
    assert len(CKPT_HOST) == 12
    h100 = catalog.default().get("h100-80gb")
    assert h100 is not None
    for c in CKPT_HOST:
        w = profile.from_spec(BENCH.spec_for(c.row))
        planned = throughput._device_step(w, h100, 1).kernels
        counted = c.row["kernels_fwd"] + c.row["kernels_bwd"] + c.row["kernels_opt"]
        assert abs(planned / counted - 1) <= 0.12, (c.row["config"], planned, counted)
    # Checkpointing re-launches each layer's forward kernels in backward: as many as planned.
    pairs = {(c.row["arch"], c.row["micro_batch"], c.row["grad_ckpt"]): c.row for c in CKPT_HOST}
    for (arch, mb, ckpt), row in pairs.items():
        if ckpt:
            plain = pairs[(arch, mb, False)]
            per_layer = (row["kernels_bwd"] - plain["kernels_bwd"]) / row["layers"]
            w = profile.from_spec(BENCH.spec_for(row))
            fwd = blocks.block(w.shape, w.numerics, w.attention, w.dropout).fwd_kernels
            assert abs(fwd / per_layer - 1) <= 0.25, (arch, mb, fwd, per_layer)


def test_checkpointed_rows_with_their_host_cost() -> None:
    ckpt = [c for c in CKPT_HOST if c.row["grad_ckpt"]]
    speed = [e for c in ckpt if (e := c.speed_error()) is not None]
    assert len(speed) == 6
    assert statistics.median(abs(e) for e in speed) <= 0.15
    assert max(abs(e) for e in speed) <= 0.50  # Llama 374M at one sequence of 1024: +45 %
    # The checkpointed rows of the 4-H100 set, its 1-GPU baseline and the knobs' equal-batch pair,
    # each within 30 % (GPT-2 355M DDP +57.5 %, 374M grad-op +40.7 %, 3.4B DDP at 1 x 1024 +38.5 %
    # before), and the whole 4-H100 set within 40 % (then 134M grad-op, +36.4 %, FSDP2's host
    # hooks on that host: test_h100x4_grad_op_rows_on_small_models_with_fsdp2_hooks).
    h100x4 = [c for c in H100X4_HOST if not c.oom]
    ckpt_rows = [c for c in h100x4 if c.row["grad_ckpt"]] + [c for c in KNOBS if c.row.get("grad_ckpt")]
    assert len(ckpt_rows) == 19
    ckpt_speed = [abs(e) for c in ckpt_rows if (e := c.speed_error()) is not None]
    assert len(ckpt_speed) == 19
    assert max(ckpt_speed) <= 0.30
    all_speed = [abs(e) for c in h100x4 if (e := c.speed_error()) is not None]
    assert max(all_speed) <= 0.40


# FSDP2's per-layer host work (throughput.FSDP_HOOK_OPS_PER_LAYER and FSDP_HOST_OPS_PER_LAYER):
# GPT-2 124M/355M and Llama 134M at micro batch 1, 4 and 8 on one 2-H200 host, each unwrapped,
# under DDP and under FSDP2 with and without resharding after forward, with the host's time per
# phase and the profiler's launch counts (bench/gpu/measure_fsdp_host.py,
# tests/data/calibration/fsdp-host/). Speed only: no memory figures.
FSDP_HOST = [
    json.loads(line)
    for f in sorted((DATA / "fsdp-host").glob("*.jsonl"))
    for line in f.read_text(encoding="utf-8").splitlines()
    if line.strip()
]


def _fsdp_extra_ops_per_layer() -> dict[tuple[str, int, int, str], float]:
    """Host time beyond the row's own launches, per layer, in the host's own ops (the unwrapped
    step's host time over its launches, same model and batch)."""
    launches = {id(r): r["kernels_fwd"] + r["kernels_bwd"] + r["kernels_opt"] for r in FSDP_HOST}
    plain = {(r["kind"], r["layers"], r["micro_batch"]): r for r in FSDP_HOST if r["sharding"] == "none"}
    out = {}
    for r in FSDP_HOST:
        if r["sharding"] == "none":
            continue
        base = plain[(r["kind"], r["layers"], r["micro_batch"])]
        op = base["host_s"] / launches[id(base)]
        out[(r["kind"], r["layers"], r["micro_batch"], r["sharding"])] = (r["host_s"] / op - launches[id(r)]) / r[
            "layers"
        ]
    return out


def test_fsdp2_hooks_cost_grad_op_most_of_what_they_cost_full_sharding() -> None:
    # Measured: FSDP2 adds 73-158 host ops a layer with grad-op sharding and 114-233 with full
    # sharding, DDP about none; grad-op costs 0.59-0.98 of full sharding at the same model and batch.
    # The planner charged host ops per all-gather pass only, so grad-op got half of full sharding.
    assert len(FSDP_HOST) == 32
    assert all("error" not in r for r in FSDP_HOST)
    extra = _fsdp_extra_ops_per_layer()
    assert max(abs(v) for (*_, sharding), v in extra.items() if sharding == "ddp") < 40
    ratios = [
        extra[(kind, layers, mb, "fsdp_grad_op")] / v
        for (kind, layers, mb, sharding), v in extra.items()
        if sharding == "fsdp_full"
    ]
    assert len(ratios) == 8
    planned = (throughput.FSDP_HOOK_OPS_PER_LAYER + throughput.FSDP_HOST_OPS_PER_LAYER) / (
        throughput.FSDP_HOOK_OPS_PER_LAYER + 2 * throughput.FSDP_HOST_OPS_PER_LAYER
    )
    assert min(ratios) <= planned <= max(ratios)
    assert abs(planned - statistics.median(ratios)) <= 0.05
    # The level is the several-GPU sets' (full sharding 120 ops a layer); this host measured a
    # median of 160 (114-233).
    full = [v for (*_, sharding), v in extra.items() if sharding == "fsdp_full"]
    assert statistics.median(full) >= throughput.FSDP_HOOK_OPS_PER_LAYER + 2 * throughput.FSDP_HOST_OPS_PER_LAYER


def test_h100x4_grad_op_rows_on_small_models_with_fsdp2_hooks() -> None:
    # The 4-H100 set's small grad-op rows were the planner's worst there (134M +36.4 %, GPT-2 355M
    # +26.3 %): the hooks' host time was half of full sharding's. Now +25.9 % and +18.3 %, the whole
    # set within 27 %.
    small = [
        c
        for c in H100X4_HOST
        if c.row["sharding"] == "fsdp_grad_op" and c.row["n_params"] < 5e8 and not c.row["grad_ckpt"]
    ]
    assert len(small) == 2
    assert max(abs(e) for c in small if (e := c.speed_error()) is not None) <= 0.27
    speed = [abs(e) for c in H100X4_HOST if not c.oom and (e := c.speed_error()) is not None]
    assert max(speed) <= 0.27


# Two recipe knobs measured on one H100 (bench/gpu/measure_distributed.py --devices 1 --set knobs,
# tests/data/calibration/knobs/), each beside the same job without it: a chunked linear
# cross-entropy (Liger's algorithm in plain PyTorch) and activation CPU offload
# (torch.autograd.graph.save_on_cpu, no checkpointing), Llama 1.1B at 4 x 2048 and 3.4B at 2 x 2048.
# Measured against plan: chunked peak -0.6 and +0.0 %, tokens/s +2.3 and +4.8 %; offload peak +13.2
# and -1.0 %, tokens/s -15.9 and -3.8 %.
KNOBS = BENCH.compare(BENCH.read_rows(sorted((DATA / "knobs").glob("*.jsonl"))))


def test_recipe_knob_rows() -> None:
    knobbed = [c for c in KNOBS if c.row.get("loss_kernel") == "chunked" or c.row.get("activation_offload")]
    assert len(knobbed) == 4
    for c in knobbed:
        peak, speed = c.peak_error(), c.speed_error()
        assert peak is not None and -0.05 <= peak <= 0.15, (c.row["config"], peak)
        assert speed is not None and abs(speed) <= 0.25, (c.row["config"], speed)
    chunked = [c for c in knobbed if c.row.get("loss_kernel") == "chunked"]
    assert all(abs(e) <= 0.05 for c in chunked if (e := c.peak_error()) is not None)
    # Each knob lowers the peak, as planned, except where the peak is elsewhere: 3.4B at 2 x 2048
    # peaks in a layer's backward, after the loss's logits are gone (planned equal, measured -0.4 %).
    base = {(c.row["arch"], c.row["micro_batch"]): c for c in KNOBS if c.row["config"].endswith("x2048")}
    for c in knobbed:
        b = base[(c.row["arch"], c.row["micro_batch"])]
        assert c.row["peak_alloc"] < b.row["peak_alloc"]
        assert c.mem.peak_allocated_bytes <= b.mem.peak_allocated_bytes
        if c.row.get("activation_offload") or c.row["arch"] == "llama-1.1b":
            assert c.mem.peak_allocated_bytes < b.mem.peak_allocated_bytes


# GPT-3 2.7B's shape in HF GPT-2 code on one H100 (tests/data/calibration/h100-eager-gpt3-2.7b.jsonl):
# eager attention at 1, 2 and 4 × 2048 ran out of memory; SDPA at 2 × 2048, eager with
# checkpointing and eager at 1 × 1920, 2 × 1280, 1 × 1536 and 4 × 512 ran. The checkpointed eager
# run peaks at the first layer's backward with every gradient alive (planned 9.7 % under before
# that moment was modelled); 1 × 1920 and 2 × 1280 (78.5 and 80.4 GB allocated) were refused
# while fitting was judged on the roomy footprint (85.3 and 87.1 GB planned against 83.8 usable).
EAGER_27 = [c for c in RESULTS if c.row["_source"].startswith("h100-eager-gpt3-2.7b")]


def test_eager_gpt3_2_7b_rows() -> None:
    assert len(EAGER_27) == 9
    assert sum(c.oom for c in EAGER_27) == 3
    near_full = [c for c in EAGER_27 if c.row["config"] in ("gpt3-2.7b-eager-b1-s1920", "gpt3-2.7b-eager-b2-s1280")]
    assert len(near_full) == 2
    assert all(c.mem.footprint_bytes > c.mem.usable_bytes for c in near_full)  # the roomy figure is over
    assert all(not c.mem.fits for c in EAGER_27 if c.oom)
    ran = [c for c in EAGER_27 if not c.oom]
    assert all(c.mem.fits for c in ran)
    for c in ran:
        err = c.peak_error()
        assert err is not None and -0.05 <= err <= 0.10, (c.row["config"], err)
        speed = c.speed_error()
        assert speed is not None and abs(speed) <= 0.25, (c.row["config"], speed)


# --- selective recompute (Megatron's core attention, checkpointed in HF Llama's eager attention):
# two pairs of runs on one H100 (tests/data/calibration/selective/), against the same floors.
SELECTIVE = BENCH.compare(BENCH.read_rows(sorted((DATA / "selective").glob("*.jsonl"))))


def test_selective_recompute_rows() -> None:
    assert [c.row.get("recompute") for c in SELECTIVE] == ["none", "selective", "none", "selective"]
    errors = [abs(e) for c in SELECTIVE if (e := c.peak_error()) is not None]
    assert max(errors) <= 0.10
    speed = [abs(e) for c in SELECTIVE if (e := c.speed_error()) is not None]
    assert statistics.median(speed) <= 0.20
    # What selective recompute saves, as measured: the s×s activations (41 % and 63 % of the peak).
    for none, selective in zip(SELECTIVE[::2], SELECTIVE[1::2], strict=True):
        measured = selective.row["peak_alloc"] / none.row["peak_alloc"]
        predicted = selective.mem.peak_allocated_bytes / none.mem.peak_allocated_bytes
        assert predicted == pytest.approx(measured, rel=0.10)


# --- pipeline parallel: 2 stages (torch.distributed.pipelining, 1F1B) on 2 H100
# (tests/data/calibration/pipeline/), against the multi-GPU floors; the planner plans a pipeline
# as 1F1B, so the one GPipe row (every micro-batch in flight) is read but not held to them.
PIPELINE = BENCH.compare(BENCH.read_rows(BENCH.pipeline_files()))
ONE_F_ONE_B = [c for c in PIPELINE if c.row["schedule"] == "1f1b"]


def test_pipeline_rows() -> None:
    assert len(ONE_F_ONE_B) >= 8
    assert {c.row["pipeline_parallel"] for c in PIPELINE} == {2}
    assert {c.row["grad_accum"] for c in ONE_F_ONE_B} >= {4, 8}
    assert any(c.row["grad_ckpt"] for c in ONE_F_ONE_B)


def test_pipeline_peak_allocated_memory_per_device() -> None:
    errors = [abs(e) for c in ONE_F_ONE_B if (e := c.peak_error()) is not None]
    assert len(errors) == len(ONE_F_ONE_B)
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.10


def test_pipeline_peak_allocated_memory_per_stage() -> None:
    # Each stage on its own: the first holds the embedding and two micro-batches in flight, the
    # last the head, the logits and every micro-batch's output; either can be the device's peak.
    errors = [
        abs(p / m - 1)
        for c in ONE_F_ONE_B
        for p, m in zip(BENCH.stage_peaks(c), c.row["peak_alloc_by_stage"], strict=True)
    ]
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.10


def test_pipeline_tokens_per_second() -> None:
    errors = [abs(e) for c in PIPELINE if (e := c.speed_error()) is not None]
    assert len(errors) == len(PIPELINE)
    assert statistics.median(errors) <= 0.15


def test_pipeline_runs_are_predicted_to_fit() -> None:
    assert [c.row["config"] for c in PIPELINE if not c.mem.fits] == []


# LoRA/QLoRA on one H100 (bench/gpu/measure_lora.py: PEFT on a bf16 or bitsandbytes base), planned
# with each row's workload.adapter. The floors for these rows: peak memory within 10 % and
# never more than 5 % under, tokens/s within 25 %.
LORA = BENCH.compare(BENCH.read_rows(BENCH.lora_files()))


def test_lora_rows() -> None:
    assert len(LORA) >= 30
    bases = {c.row["base"] for c in LORA}
    assert {"bf16", "nf4", "nf4-nodq", "int8"} <= bases
    assert {c.row["targets"] for c in LORA} == {"attention", "mlp", "all-linear"}
    assert {c.row["grad_ckpt"] for c in LORA} == {True, False}
    assert {c.row["arch"] for c in LORA} >= {"llama-1.1b", "llama-3.4b", "llama-8.0b"}
    assert all(c.row["accelerator"] == "h100-80gb" for c in LORA)


@pytest.mark.parametrize("result", LORA, ids=lambda c: c.row["config"])
def test_lora_peak_memory_within_10_percent_and_never_5_under(result: object) -> None:
    error = result.peak_error()  # type: ignore[attr-defined]
    assert error is not None
    assert -0.05 <= error <= 0.10


@pytest.mark.parametrize("result", LORA, ids=lambda c: c.row["config"])
def test_lora_tokens_per_second_within_25_percent(result: object) -> None:
    error = result.speed_error()  # type: ignore[attr-defined]
    assert error is not None
    assert abs(error) <= 0.25


def test_lora_medians() -> None:
    peak = [abs(e) for c in LORA if (e := c.peak_error()) is not None]
    speed = [abs(e) for c in LORA if (e := c.speed_error()) is not None]
    assert statistics.median(peak) <= 0.05
    assert statistics.median(speed) <= 0.10


def test_lora_nvml_footprint_is_never_more_than_5_percent_under() -> None:
    errors = [e for c in LORA if (e := c.footprint_error()) is not None]
    assert min(errors) >= -0.05
    assert max(errors) <= 0.15


def test_lora_runs_are_predicted_to_fit() -> None:
    assert [c.row["config"] for c in LORA if not c.mem.fits] == []


def test_lora_trainable_parameters_are_peft_s() -> None:
    for c in LORA:
        w = BENCH.profile.from_spec(BENCH.spec_for(c.row))
        assert w.adapter is not None
        assert adapter.trainable_params(w.shape, w.adapter) == c.row["trainable"], c.row["config"]


# Small models' host time (docs/planner.md, "Small models' host time"): one H200,
# bench/gpu/measure_host_overlap.py, tests/data/calibration/host-overlap/. A data test: it holds
# what that section reads from the rows and what it says of the planner's host term (no term was
# changed for them: one host figure cannot fit the calls' spread, bench/plan_host_fit.py).
HOST_OVERLAP = [
    json.loads(line)
    for f in sorted((DATA / "host-overlap").glob("*.jsonl"))
    for line in f.read_text(encoding="utf-8").splitlines()
    if line.strip()
]


def test_host_overlap_rows() -> None:
    assert len(HOST_OVERLAP) == 6
    assert {r["accelerator"] for r in HOST_OVERLAP} == {"h200-141gb"}
    h200 = catalog.default().get("h200-141gb")
    assert h200 is not None
    for r in HOST_OVERLAP:
        # Hugging Face's forward synchronises (transformers' masking_utils): behind a ~1 s queued
        # sleep the forward's host time is the sleep's; the backward's and the optimizer's are not.
        assert r["busy_fwd_s"] > 0.4 > r["busy_bwd_s"] + r["busy_opt_s"], r["config"]
        # A launch costs the host the same with the device idle or busy.
        assert abs(r["launch_busy_us"] / r["launch_idle_us"] - 1) <= 0.15, r["config"]
        # Fused AdamW's host time is per parameter tensor; foreach's is over twice it.
        assert 8e-6 <= r["opt_fused_s"] / r["param_tensors"] <= 16e-6, r["config"]
        assert r["opt_foreach_s"] >= 2 * r["opt_fused_s"], r["config"]
    # The loop cannot run ahead of the device across steps: back to back is no faster.
    assert abs(statistics.median(r["stream_step_s"] / r["step_s"] for r in HOST_OVERLAP) - 1) <= 0.05
    # One sequence, host-paced: this host issued the planner's launch count at 26-30 µs each, over
    # the catalog's 20 µs, which the planner's root-sum-square makes up only where the device is
    # as busy as the host.
    for r in (r for r in HOST_OVERLAP if r["micro_batch"] == 1):
        w = profile.from_spec(BENCH.spec_for(r))
        launches = throughput._device_step(w, h200, 1).kernels
        host = r["host_fwd_s"] + r["host_bwd_s"] + r["host_opt_s"]
        assert 1.25 <= host / launches / h200.host_seconds_per_op <= 1.6, r["config"]
        assert r["step_s"] <= 1.1 * host  # the step is the host's
