"""Where FSDP2's allocator reserve lives: the caching allocator's bytes per CUDA stream.

PyTorch's caching allocator keeps a pool of cached blocks per stream: a block freed by work on one
stream is reused only by allocations on that stream (``CUDACachingAllocator.cpp``, the free-block
search keyed on the stream). FSDP2 allocates on three streams besides the default one
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``): the all-gather's flat output on the
copy-in stream, the reduce-scatter's output on the reduce-scatter stream (the sharded gradients
are views of it), the rest (unsharded parameters, activations, the reduce-scatter's input, the
optimizer) on the default stream. This script runs the configurations of
``measure_distributed.py`` (the same model, wrapping and step) and records, per rank, for the last
of ``--steps`` steps under the allocator's history (``torch.cuda.memory._record_memory_history``):

- ``streams``: per stream (named ``default``, ``all_gather_copy_in``, ``all_gather``,
  ``reduce_scatter``, ``all_reduce`` or ``other``): ``reserved`` (its segments' bytes at the end of
  the step), ``peak_alloc`` (its allocated bytes' peak over the step), ``at_peak`` (its allocated
  bytes when the whole device's allocated bytes peaked) and ``active_end`` (allocated at the end);
- ``peak_alloc`` / ``peak_reserved`` (``max_memory_allocated`` / ``max_memory_reserved`` over all
  steps), ``nvml_used_after``, ``alloc_retries``, ``init_reserved`` (the reserve before the first
  step: the model is built whole on the device and then sharded, as ``measure_distributed.py``
  does, and its freed blocks stay cached unless ``--empty-after-wrap`` gives them back).

    torchrun --nproc-per-node 2 bench/gpu/measure_fsdp_pools.py --out pools.jsonl [--only NAME,...]
    python bench/gpu/measure_fsdp_pools.py --list

Needs ``torch`` and ``transformers`` on the GPU machine only.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu import common  # noqa: E402
from bench.gpu import measure_distributed as md  # noqa: E402

STEPS = 5  # the reserve settles after the second step (the optimizer states appear in the first)
CONFIGS: tuple[md.Config, ...] = (
    md._c("llama-1.1b", "fsdp_full", 4, 2048),
    md._c("llama-1.1b", "fsdp_grad_op", 4, 2048),
    md._c("llama-1.1b", "fsdp_full", 8, 2048, ckpt=True),
    md._c("llama-3b", "fsdp_full", 2, 2048),
    md._c("llama-3b", "fsdp_grad_op", 4, 2048, ckpt=True),
    md._c("llama-3b", "fsdp_full", 4, 2048, ckpt=True, precision="bf16"),
    md._c("llama-3b", "fsdp_full", 4, 2048, ckpt=True),
    md._c("llama-7b", "fsdp_full", 2, 2048, ckpt=True),
    md._c("llama-7b", "fsdp_grad_op", 1, 2048, ckpt=True),
    md._c("llama-7b", "fsdp_full", 1, 2048),
)


def _stream_names(torch: Any, model: Any) -> dict[int, str]:
    names = {0: "default", int(torch.cuda.current_stream().cuda_stream): "default"}
    try:
        ctx = model._get_fsdp_state()._comm_ctx
    except AttributeError:
        return names
    for attr in ("all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream", "all_reduce_stream"):
        s = getattr(ctx, attr, None)
        if s is not None:
            names[int(s.cuda_stream)] = attr.removesuffix("_stream")
    return names


def _by_stream(names: dict[int, str], start: list[dict[str, Any]], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stream: reserved at the end, allocated at the start, its peak over ``trace`` and at the
    device's peak; from the snapshot taken before the step (``start``) and the step's trace."""

    def name(stream: int) -> str:
        return names.get(int(stream), "other")

    alloc: dict[str, int] = {}
    for seg in start:
        n = name(seg["stream"])
        alloc[n] = alloc.get(n, 0) + sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    peak = dict(alloc)
    total = sum(alloc.values())
    best, at_peak = total, dict(alloc)
    for e in trace:
        act = e["action"]
        if act not in ("alloc", "free_completed"):
            continue
        n = name(e["stream"])
        d = e["size"] if act == "alloc" else -e["size"]
        alloc[n] = alloc.get(n, 0) + d
        total += d
        peak[n] = max(peak.get(n, 0), alloc[n])
        if total > best:
            best, at_peak = total, dict(alloc)
    return {"alloc": alloc, "peak": peak, "at_peak": at_peak, "trace_peak": best}


def _measure(  # noqa: PLR0917
    c: md.Config, torch: Any, transformers: Any, rank: int, local_rank: int, steps: int, empty: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {"oom": False}
    torch.manual_seed(0)
    model = opt = ids = None
    try:
        model = md._build(c, torch, transformers)
        out["n_params"] = sum(p.numel() for p in model.parameters())
        common.for_training(model, grad_ckpt=c.grad_ckpt)
        model, _how = md._wrap(c, model, torch, local_rank)
        opt = common.optimizer(torch, c.optimizer, model.parameters())
        gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
        ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda", generator=gen)
        if empty:  # the unsharded model's freed blocks given back before the first step
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        out["init_reserved"] = int(torch.cuda.memory_reserved())
        torch.cuda.reset_peak_memory_stats()
        for _ in range(steps - 1):
            common.train_step(torch, model, ids, opt, autocast=False)
        torch.cuda.synchronize()
        names = _stream_names(torch, model)
        start = torch.cuda.memory_snapshot()
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None, stacks="python")
        common.train_step(torch, model, ids, opt, autocast=False)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        trace = snap["device_traces"][local_rank] if len(snap["device_traces"]) > local_rank else []
        pools = _by_stream(names, start, trace)
        streams: dict[str, dict[str, int]] = {}
        for seg in snap["segments"]:
            n = names.get(int(seg["stream"]), "other")
            s = streams.setdefault(n, {"reserved": 0, "segments": 0, "active_end": 0})
            s["reserved"] += seg["total_size"]
            s["segments"] += 1
            s["active_end"] += seg["allocated_size"]
        for n, s in streams.items():
            s["peak_alloc"] = pools["peak"].get(n, 0)
            s["at_peak"] = pools["at_peak"].get(n, 0)
        out |= {
            **common.peaks(torch),
            **common.alloc_retries(torch),
            "nvml_used_after": common.nvml_used(torch),
            "streams": streams,
            "trace_entries": len(trace),
            "trace_peak": pools["trace_peak"],
        }
    except torch.cuda.OutOfMemoryError:
        out |= {"oom": True}
    except Exception as exc:  # noqa: BLE001 - recorded in the row
        out["error"] = f"{type(exc).__name__}: {exc}"[:400]
    finally:
        with contextlib.suppress(Exception):  # history may not have been on
            torch.cuda.memory._record_memory_history(enabled=None)
        model = opt = ids = None
        common.release(torch)
    return out


def worker(names: list[str], out: Path, steps: int, *, empty: bool) -> int:
    r = common.init_rank(md.PG_TIMEOUT_S)
    torch, transformers, dist, rank, world = r.torch, r.transformers, r.dist, r.rank, r.world
    env = common.environment(torch, transformers, distributed=world > 1)
    by_name = {c.name: c for c in CONFIGS}
    for name in names:
        c = by_name[name]
        local = _measure(c, torch, transformers, rank, r.local_rank, steps, empty)
        ranks: list[Any] = [None] * world
        dist.all_gather_object(ranks, local)
        if rank == 0:
            row = {
                "mode": "train",
                "kind": c.kind,
                **common.shape_fields(c),
                "precision": c.precision,
                "optimizer": c.optimizer,
                "sharding": c.sharding,
                "devices": world,
                "seq": c.seq,
                "micro_batch": c.micro_batch,
                "grad_ckpt": c.grad_ckpt,
                "n_params": ranks[0].get("n_params"),
                "steps": steps,
                "empty_cache_after_wrap": empty,
                "config": c.name,
                "by_rank": ranks,
            } | env
            ok = [x for x in ranks if "peak_alloc" in x and not x["oom"]]
            if ok:
                row |= {k: max(x[k] for x in ok) for k in ("peak_alloc", "peak_reserved", "nvml_used_after")}
                row["arch"] = common.arch_label(c.kind, row["n_params"])
            common.append_row(out, row)
            s = ranks[0].get("streams", {})
            shown = " ".join(f"{k}={v['reserved'] / 1e9:.2f}/{v['peak_alloc'] / 1e9:.2f}" for k, v in s.items())
            print(f"{world}x {name:40} {ranks[0].get('error', '')} {shown}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("pools.jsonl"))
    ap.add_argument("--only", default=None)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--empty-after-wrap", action="store_true", help="empty the allocator's cache before the steps")
    args = ap.parse_args(argv)
    if args.list:
        common.print_configs(CONFIGS)
        return 0
    common.no_nvlink_multicast()
    names = args.only.split(",") if args.only else [c.name for c in CONFIGS]
    return worker(names, args.out, args.steps, empty=args.empty_after_wrap)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
