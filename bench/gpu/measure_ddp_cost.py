"""What DDP costs beyond the step of a rank training alone: its bucket copies, and the all-reduce.

PyTorch's DDP (``bucket_cap_mb=25``, ``gradient_as_bucket_view=False``, as the calibration sets
run it) copies each gradient into its bucket as backward produces it (``Reducer::
mark_variable_ready_dense``: ``mul_out`` by 1 / world size), all-reduces each full bucket on a side
stream, and after backward copies every bucket back into the gradients. This script splits that
cost on two GPUs of one host, per configuration in its own pair of forked processes:

- ``none``: each rank trains alone (the same host load, no wrapper);
- ``ddp``: DDP as above;
- ``ddp_nocomm``: the same DDP with a communication hook that hands the bucket back untouched
  (the copies, the hooks and the buckets' bookkeeping; no all-reduce);
- on the ``ddp`` ranks, ``allreduce_alone_s``: the same gradient bytes all-reduced as DDP's buckets
  (25 MB of fp32, in a row on one stream) while the device does nothing else.

Each row holds the slower rank's medians of steps 5-12 (``step_s``, synchronised only at the end
of each step; ``host_fwd_s`` / ``host_bwd_s`` / ``host_opt_s``: until each phase returned) and, from
one profiled step of rank 0, the summed kernel time of NCCL's kernels (``nccl_kernel_s``) and of
every other kernel (``compute_kernel_s``; profiler-inflated alike in each mode, so their
differences between modes are what the all-reduce's overlap costs the compute).

    python bench/gpu/measure_ddp_cost.py --list
    python bench/gpu/measure_ddp_cost.py --out FILE.jsonl [--only llama-3b] [--budget-s 420]

Needs ``torch`` and ``transformers`` on the GPU machine only; ``--list`` needs neither.
``tests/data/calibration/ddp-cost/`` holds its rows.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu import common  # noqa: E402

STEPS = 12
WARMUP = 4
BUCKET_MB = 25


@dataclass(frozen=True)
class Config(common.ModelShape):
    sharding: str
    micro_batch: int
    seq: int
    grad_ckpt: bool


def _c(model: str, sharding: str, micro_batch: int, seq: int, ckpt: bool) -> Config:
    kind, hidden, layers, heads, kv, inter, vocab = common.SHAPES[model]
    name = f"{model}-{sharding}-b{micro_batch}x{seq}" + ("-ckpt" if ckpt else "")
    return Config(name, kind, hidden, layers, heads, kv, inter, vocab, sharding, micro_batch, seq, ckpt)


# The 4-GPU sets' worst DDP row first (3.4B at 1 x 1024 with checkpointing), then a device-bound
# 1.1B and a host-bound 134M: a budget cut drops the tail.
CONFIGS: tuple[Config, ...] = tuple(
    _c(m, s, b, q, k)
    for m, b, q, k in (
        ("llama-3b", 1, 1024, True),
        ("llama-1.1b", 4, 2048, False),
        ("llama-125m", 8, 1024, False),
    )
    for s in ("ddp", "ddp_nocomm", "none")
)


def _nocomm_hook(state: Any, bucket: Any) -> Any:
    torch = importlib.import_module("torch")  # the rank's own

    fut: Any = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


# DDP checks a hook's annotations against dist.GradBucket; under postponed annotations they are strings.
_nocomm_hook.__annotations__ = {}


def _wrap(c: Config, model: Any, torch: Any, local_rank: int) -> Any:
    if c.sharding == "none":
        return model
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[local_rank], bucket_cap_mb=BUCKET_MB, gradient_as_bucket_view=False
    )
    if c.sharding == "ddp_nocomm":
        ddp.register_comm_hook(None, _nocomm_hook)
    return ddp


def _step(torch: Any, model: Any, ids: Any, opt: Any) -> dict[str, float]:
    t = [time.perf_counter()]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    t.append(time.perf_counter())
    loss.backward()
    t.append(time.perf_counter())
    opt.step()
    opt.zero_grad(set_to_none=True)
    t.append(time.perf_counter())
    torch.cuda.synchronize()
    out = {"wall": time.perf_counter() - t[0]}
    for j, phase in enumerate(("fwd", "bwd", "opt")):
        out[f"host_{phase}"] = t[j + 1] - t[j]
    return out


def _profile(torch: Any, model: Any, ids: Any, opt: Any) -> dict[str, float]:
    prof_mod = torch.profiler
    with prof_mod.profile(activities=[prof_mod.ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        _step(torch, model, ids, opt)
    nccl = other = 0.0
    for e in prof.events():
        if e.device_type != prof_mod.DeviceType.CUDA:
            continue
        if "nccl" in e.name.lower():
            nccl += e.time_range.elapsed_us()
        else:
            other += e.time_range.elapsed_us()
    return {"nccl_kernel_s": nccl / 1e6, "compute_kernel_s": other / 1e6}


def _allreduce_alone(torch: Any, dist: Any, n_params: int) -> float:
    """The gradients' fp32 bytes all-reduced in DDP's bucket size, back to back, nothing else running."""
    per = BUCKET_MB * 2**20 // 4
    buf = torch.ones(per, dtype=torch.float32, device="cuda")
    n = max(1, -(-n_params // per))
    times = []
    for _ in range(3):
        torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    del buf
    return min(times[1:])


def _rank(c: Config, rank: int, world: int, port: int, queue: Any) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    common.no_nvlink_multicast()
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    dist = importlib.import_module("torch.distributed")
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
        torch.manual_seed(0)
        cfg = common.hf_config_of(transformers, c, kind=c.kind, positions=max(2048, c.seq))
        model = common.from_config(torch, transformers, cfg)
        common.for_training(model, grad_ckpt=c.grad_ckpt)
        n_params = sum(p.numel() for p in model.parameters())
        model = _wrap(c, model, torch, rank)
        opt = common.optimizer(torch, "adamw", model.parameters())
        ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda")
        dist.barrier()
        runs = []
        for _ in range(STEPS):
            dist.barrier()  # both ranks start each step together
            runs.append(_step(torch, model, ids, opt))
        runs = runs[WARMUP:]
        dist.barrier()
        prof = _profile(torch, model, ids, opt)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        extra: dict[str, Any] = {}
        if c.sharding == "ddp":
            opt.zero_grad(set_to_none=True)
            extra["allreduce_alone_s"] = _allreduce_alone(torch, dist, n_params)
        where = common.host_fields(torch) if rank == 0 else {}
        steps = [round(r["wall"], 6) for r in runs]
        queue.put((rank, {"where": where, "n_params": n_params, "med": med, "steps": steps, **prof, **extra}))
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - reported in the row, the launcher goes on
        queue.put((rank, {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}))


def run_one(c: Config, out: Path, port: int, env: dict[str, Any], timeout_s: float) -> None:
    ctx = multiprocessing.get_context("fork")  # the launcher never touched CUDA
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(c, r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < 2 and time.monotonic() < deadline:
        try:
            rank, payload = queue.get(timeout=1.0)
            got[rank] = payload
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting until the deadline
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    row: dict[str, Any] = {"config": c.name, "mode": "train", "kind": c.kind, **common.shape_fields(c)}
    row |= {"sharding": c.sharding, "devices": 2, "micro_batch": c.micro_batch, "seq": c.seq}
    row |= {"grad_ckpt": c.grad_ckpt, "precision": "amp_bf16", "optimizer": "adamw", "bucket_cap_mb": BUCKET_MB}
    errors = [g["error"] for g in got.values() if "error" in g]
    if len(got) < 2 or errors:
        row["error"] = errors[0] if errors else "a rank gave no result"
    else:
        ranks = [got[0], got[1]]
        row["n_params"] = ranks[0]["n_params"]
        row["arch"] = common.arch_label(c.kind, ranks[0]["n_params"])
        for key in ranks[0]["med"]:
            name = "step_s" if key == "wall" else f"{key}_s"
            row[name] = max(r["med"][key] for r in ranks)
            row[f"{name}_by_rank"] = [round(r["med"][key], 6) for r in ranks]
        row["step_times_by_rank"] = [r["steps"] for r in ranks]
        for key in ("nccl_kernel_s", "compute_kernel_s"):
            row[key] = ranks[0][key]
        if "allreduce_alone_s" in ranks[0]:
            row["allreduce_alone_s"] = max(r["allreduce_alone_s"] for r in ranks)
        row["tokens_per_s_per_device"] = c.micro_batch * c.seq / row["step_s"]
        row |= ranks[0]["where"]
    common.append_row(out, row | env)
    keys = ("config", "step_s", "host_bwd_s", "nccl_kernel_s", "compute_kernel_s", "allreduce_alone_s", "error")
    print(json.dumps({k: row.get(k) for k in keys}), flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", default=None, help="substring of the configurations' names")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no configuration after this many seconds")
    args = ap.parse_args(argv)
    chosen = [c for c in CONFIGS if not args.only or args.only in c.name]
    if args.list:
        common.print_configs(chosen)
        return 0
    if args.out is None:
        ap.error("--out is required")
    start = time.monotonic()
    torch = importlib.import_module("torch")  # imported once here; the forked ranks inherit it
    transformers = importlib.import_module("transformers")
    transformers.logging.set_verbosity_error()
    for cls in ("GPT2LMHeadModel", "LlamaForCausalLM"):
        getattr(transformers, cls)  # resolve the lazy imports before forking
    env = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "host": os.environ.get("MEASURE_HOST", ""),
    }
    for i, c in enumerate(chosen):
        if time.monotonic() - start > args.budget_s:
            print(f"budget spent: {len(chosen) - i} configurations not run", flush=True)
            break
        run_one(c, args.out, 29500 + i, env, timeout_s=120.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
