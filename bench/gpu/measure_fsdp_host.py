"""Host time of FSDP2's per-layer hooks: per-phase issue time and launch counts, DDP against FSDP2.

For small models the host (Python, autograd, the launches) paces a training step, so what a
data-parallel wrapper costs there is host time. This script measures, on two GPUs of one host,
GPT-2 124M/355M and a Llama 134M at micro batch 1, 4 (and 8 for the 4-GPU set's misses) × 1024
tokens, bf16 mixed precision as ``measure_distributed.py`` runs it (autocast for ``none`` and
DDP; FSDP2's ``MixedPrecisionPolicy(bfloat16, reduce float32)``), fused AdamW:

- ``sharding``: ``none`` (each rank trains alone: the same host load, no wrapper), ``ddp``,
  ``fsdp_full`` (``fully_shard`` per decoder layer and the root, ``reshard_after_forward=True``)
  and ``fsdp_grad_op`` (``False``);
- ``host_fwd_s`` / ``host_bwd_s`` / ``host_opt_s``: median wall time until the forward returned,
  until ``loss.backward()`` returned, until ``opt.step()`` and ``zero_grad`` returned, with
  ``torch.cuda.synchronize`` only at the end of the step (``step_s``); ``thread_*_s``: the issuing
  thread's CPU time in each phase (the backward's kernels are issued by autograd's device thread,
  so the main thread's backward CPU time is small); ``proc_*_s``: the process's CPU time (every
  thread, NCCL's proxy threads included);
- ``kernels_fwd`` / ``kernels_bwd`` / ``kernels_opt``: device work items launched in each phase of
  one profiled step (kernel, memcpy and memset launches), and ``fsdp_events``: FSDP2's own
  ``record_function`` ranges (``FSDP::pre_forward`` …) in that step, name → [count, CPU µs
  including children], profiler-inflated: the hooks' share, not their unprofiled time.

Both ranks' medians are recorded (``*_by_rank``); the row's figures are the slower rank's.

Each configuration runs in its own pair of processes, forked from a launcher that imported torch
and transformers once (without touching CUDA), so an error in one cannot reach the next:

    python bench/gpu/measure_fsdp_host.py --list
    python bench/gpu/measure_fsdp_host.py --out FILE.jsonl [--only gpt2-355m] [--budget-s 420]

Needs ``torch`` and ``transformers`` on the GPU machine only; ``--list`` needs neither.
``tests/data/calibration/fsdp-host/`` holds its rows.
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
SEQ = 1024


@dataclass(frozen=True)
class Config(common.ModelShape):
    sharding: str
    micro_batch: int
    seq: int


def _c(model: str, sharding: str, micro_batch: int) -> Config:
    kind, hidden, layers, heads, kv, inter, vocab = common.SHAPES[model]
    name = f"{model}-{sharding}-b{micro_batch}x{SEQ}"
    return Config(name, kind, hidden, layers, heads, kv, inter, vocab, sharding, micro_batch, SEQ)


# The 4-GPU set's misses first (grad-op on small models), then the rest: a budget cut drops the tail.
CONFIGS: tuple[Config, ...] = tuple(
    _c(m, s, b)
    for m, b in (
        ("llama-125m", 4),
        ("gpt2-355m", 4),
        ("llama-125m", 1),
        ("gpt2-355m", 1),
        ("gpt2-124m", 4),
        ("gpt2-124m", 1),
        ("llama-125m", 8),
        ("gpt2-355m", 8),
    )
    for s in ("fsdp_grad_op", "none", "fsdp_full", "ddp")
)

_LAUNCH = ("LaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cuLaunchKernel")


def _layers(model: Any) -> list[Any]:
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "layers"):
        return list(inner.layers)
    return list(model.transformer.h)


def _wrap(c: Config, model: Any, torch: Any, local_rank: int) -> Any:
    if c.sharding == "none":
        return model
    if c.sharding == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=25)
    fsdp = importlib.import_module("torch.distributed.fsdp")
    kw = {
        "reshard_after_forward": c.sharding == "fsdp_full",
        "mp_policy": fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    }
    for layer in _layers(model):
        fsdp.fully_shard(layer, **kw)
    fsdp.fully_shard(model, **kw)
    return model


def _forward(c: Config, torch: Any, model: Any, ids: Any) -> Any:
    if c.sharding.startswith("fsdp"):  # the policy casts; no autocast
        return model(input_ids=ids, labels=ids).loss
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(input_ids=ids, labels=ids).loss


def _step(c: Config, torch: Any, model: Any, ids: Any, opt: Any) -> dict[str, float]:
    clocks = (time.perf_counter, time.thread_time, time.process_time)
    t = [tuple(f() for f in clocks)]
    loss = _forward(c, torch, model, ids)
    t.append(tuple(f() for f in clocks))
    loss.backward()
    t.append(tuple(f() for f in clocks))
    opt.step()
    opt.zero_grad(set_to_none=True)
    t.append(tuple(f() for f in clocks))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t[0][0]
    out = {"wall": wall}
    for i, clock in enumerate(("host", "thread", "proc")):
        for j, phase in enumerate(("fwd", "bwd", "opt")):
            out[f"{clock}_{phase}"] = t[j + 1][i] - t[j][i]
        out[f"{clock}_all"] = t[3][i] - t[0][i]
    return out


def _profile(c: Config, torch: Any, model: Any, ids: Any, opt: Any) -> dict[str, Any]:
    prof_mod = torch.profiler
    with prof_mod.profile(activities=[prof_mod.ProfilerActivity.CPU, prof_mod.ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        with prof_mod.record_function("phase_fwd"):
            loss = _forward(c, torch, model, ids)
        with prof_mod.record_function("phase_bwd"):
            loss.backward()
        with prof_mod.record_function("phase_opt"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    events = prof.events()
    marks = {
        e.name: (e.time_range.start, e.time_range.end)
        for e in events
        if e.name.startswith("phase_") and e.device_type == prof_mod.DeviceType.CPU
    }
    counts = {"fwd": 0, "bwd": 0, "opt": 0}
    fsdp: dict[str, list[float]] = {}
    busy = 0.0
    for e in events:
        if e.device_type == prof_mod.DeviceType.CUDA:
            busy += e.time_range.elapsed_us()
            continue
        if e.name.startswith(("FSDP::", "DistributedDataParallel")):
            slot = fsdp.setdefault(e.name, [0, 0.0])
            slot[0] += 1
            slot[1] += e.time_range.elapsed_us()
        if not any(k in e.name for k in _LAUNCH):
            continue
        for phase in counts:
            lo, hi = marks.get(f"phase_{phase}", (0.0, -1.0))
            if lo <= e.time_range.start <= hi:
                counts[phase] += 1
                break
    return {
        "kernels_fwd": counts["fwd"],
        "kernels_bwd": counts["bwd"],
        "kernels_opt": counts["opt"],
        "device_busy_s": busy / 1e6,
        "fsdp_events": {k: [int(v[0]), round(v[1], 1)] for k, v in sorted(fsdp.items())},
    }


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
        cfg = common.hf_config_of(transformers, c, kind=c.kind, positions=2048 if c.kind == "llama" else 1024)
        model = common.from_config(torch, transformers, cfg)
        model.train()
        n_params = sum(p.numel() for p in model.parameters())
        model = _wrap(c, model, torch, rank)
        opt = common.optimizer(torch, "adamw", model.parameters())
        ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda")
        dist.barrier()
        runs = []
        for _ in range(STEPS):
            dist.barrier()  # both ranks start each step together
            runs.append(_step(c, torch, model, ids, opt))
        runs = runs[WARMUP:]
        dist.barrier()
        prof = _profile(c, torch, model, ids, opt)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        where = common.host_fields(torch) if rank == 0 else {}
        queue.put(
            (
                rank,
                {
                    "where": where,
                    "n_params": n_params,
                    "med": med,
                    "steps": [round(r["wall"], 6) for r in runs],
                    **prof,
                },
            )
        )
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
    row |= {"sharding": c.sharding, "devices": 2, "micro_batch": c.micro_batch, "seq": c.seq, "precision": "amp_bf16"}
    errors = [g["error"] for g in got.values() if "error" in g]
    if len(got) < 2 or errors:
        row["error"] = errors[0] if errors else "a rank gave no result"
    else:
        ranks = [got[0], got[1]]
        row["n_params"] = ranks[0]["n_params"]
        row["arch"] = common.arch_label(c.kind, ranks[0]["n_params"])
        for key in ranks[0]["med"]:
            name = {"wall": "step_s"}.get(key, f"{key}_s".replace("_all", ""))
            row[name] = max(r["med"][key] for r in ranks)
            row[f"{name}_by_rank"] = [round(r["med"][key], 6) for r in ranks]
        row["step_times_by_rank"] = [r["steps"] for r in ranks]
        for key in ("kernels_fwd", "kernels_bwd", "kernels_opt", "device_busy_s", "fsdp_events"):
            row[key] = ranks[0][key]
        row["tokens_per_s_per_device"] = c.micro_batch * c.seq / row["step_s"]
        row |= ranks[0]["where"]
    common.append_row(out, row | env)
    keys = ("config", "step_s", "host_fwd_s", "host_bwd_s", "host_opt_s", "kernels_fwd", "kernels_bwd", "error")
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
    importlib.import_module("torch.distributed.fsdp")
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
        run_one(c, args.out, 29500 + i, env, timeout_s=90.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
