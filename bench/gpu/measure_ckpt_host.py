"""Host time of gradient checkpointing: per-phase dispatch time and kernel counts, with and without it.

For small models the host (Python, autograd, the launches) paces a training step, so what
checkpointing costs there is host time, not recompute FLOPs. This script measures, on one GPU, for
GPT-2 and Llama shapes of 124M-3.4B at host-bound and at the calibration sets' batches, with and
without HF's ``gradient_checkpointing_enable(use_reentrant=False)`` (bf16 autocast, fused AdamW,
SDPA attention, the step of ``bench.gpu.common.train_step``):

- ``step_s``: median wall time of the timed steps (synchronised before and after);
- ``host_fwd_s`` / ``host_bwd_s`` / ``host_opt_s``: median host time until the forward returned,
  until ``loss.backward()`` returned (the autograd thread has issued every backward kernel, and
  under checkpointing every recomputed forward), until ``opt.step()`` and ``zero_grad`` returned;
- ``kernels_fwd`` / ``kernels_bwd`` / ``kernels_opt``: device work items issued in each phase in one
  profiled step (CUDA kernel, memcpy and memset launches, counted from the profiler's runtime
  events in each phase's window), and ``device_busy_s``: the sum of the kernels' device durations;
- ``saved_tensors``: tensors autograd saves in one forward without checkpointing (what the
  checkpoint's pack and unpack hooks handle, each a Python call, under checkpointing).

    python bench/gpu/measure_ckpt_host.py --out FILE.jsonl [--only gpt2-355m]

Each configuration runs in its own process (``--one NAME``), so nothing one leaves on the card
reaches the next. Needs ``torch`` and ``transformers`` on the GPU machine only; ``--list`` needs
neither. ``tests/data/calibration/ckpt-host/`` holds its rows; the host term it measures is
``CHECKPOINT_HOST_OPS_PER_LAYER`` in ``accel_operator.planning.throughput``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu import common  # noqa: E402

STEPS = 10
WARMUP = 3


@dataclass(frozen=True)
class Config(common.ModelShape):
    micro_batch: int
    seq: int
    grad_ckpt: bool


def _c(model: str, micro_batch: int, seq: int, ckpt: bool) -> Config:
    kind, hidden, layers, heads, kv, inter, vocab = common.SHAPES[model]
    name = f"{model}-b{micro_batch}x{seq}" + ("-ckpt" if ckpt else "")
    return Config(name, kind, hidden, layers, heads, kv, inter, vocab, micro_batch, seq, ckpt)


CONFIGS: tuple[Config, ...] = tuple(
    _c(m, b, s, ck)
    for m, b, s in (
        ("gpt2-355m", 1, 1024),
        ("gpt2-355m", 4, 1024),
        ("llama-350m", 1, 1024),
        ("llama-350m", 4, 2048),
        ("gpt2-124m", 1, 1024),
        ("llama-125m", 1, 1024),
        ("llama-125m", 8, 1024),
        ("llama-3b", 1, 1024),
    )
    for ck in (False, True)
)

_LAUNCH = ("LaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cuLaunchKernel")


def _phases(torch: Any, model: Any, ids: Any, opt: Any) -> dict[str, float]:
    """One step: host time of each phase, the step's wall time."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    return {"fwd": t1 - t0, "bwd": t2 - t1, "opt": t3 - t2, "host": t3 - t0, "wall": t4 - t0}


def _profile(torch: Any, model: Any, ids: Any, opt: Any) -> dict[str, Any]:
    """Work items issued per phase in one step, and the device's busy time."""
    prof_mod = torch.profiler
    marks: dict[str, tuple[float, float]] = {}
    with prof_mod.profile(activities=[prof_mod.ProfilerActivity.CPU, prof_mod.ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        with prof_mod.record_function("phase_fwd"), torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        with prof_mod.record_function("phase_bwd"):
            loss.backward()
        with prof_mod.record_function("phase_opt"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    events = prof.events()
    for e in events:
        if e.name.startswith("phase_") and e.device_type == prof_mod.DeviceType.CPU:
            marks[e.name] = (e.time_range.start, e.time_range.end)
    counts = {"fwd": 0, "bwd": 0, "opt": 0}
    busy = 0.0
    n_kernels = 0
    for e in events:
        if e.device_type == prof_mod.DeviceType.CUDA:
            busy += e.time_range.elapsed_us()
            n_kernels += 1
            continue
        if not any(k in e.name for k in _LAUNCH):
            continue
        start = e.time_range.start
        for phase in counts:
            lo, hi = marks.get(f"phase_{phase}", (0.0, -1.0))
            if lo <= start <= hi:
                counts[phase] += 1
                break
    return {
        "kernels_fwd": counts["fwd"],
        "kernels_bwd": counts["bwd"],
        "kernels_opt": counts["opt"],
        "device_items": n_kernels,
        "device_busy_s": busy / 1e6,  # summed kernel durations of the profiled step (profiler-inflated)
    }


def _saved_tensors(torch: Any, model: Any, ids: Any) -> int:
    n = 0

    def pack(t: Any) -> Any:
        nonlocal n
        n += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    del loss
    return n


def measure(c: Config, torch: Any, transformers: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    cfg = common.hf_config_of(transformers, c, kind=c.kind, positions=max(2048 if c.kind == "llama" else 1024, c.seq))
    model = common.from_config(torch, transformers, cfg)
    common.for_training(model, grad_ckpt=False)
    ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda")
    saved = _saved_tensors(torch, model, ids)  # without checkpointing: what the hooks would handle
    common.for_training(model, grad_ckpt=c.grad_ckpt)
    opt = common.optimizer(torch, "adamw", model.parameters())
    runs = [_phases(torch, model, ids, opt) for _ in range(STEPS)][WARMUP:]
    prof = _profile(torch, model, ids, opt)
    n_params = sum(p.numel() for p in model.parameters())
    row = {
        "mode": "train",
        "config": c.name,
        "arch": common.arch_label(c.kind, n_params),
        "n_params": n_params,
        **common.shape_fields(c),
        "kind": c.kind,
        "precision": "amp_bf16",
        "optimizer": "adamw",
        "sharding": "none",
        "devices": 1,
        "seq": c.seq,
        "micro_batch": c.micro_batch,
        "grad_ckpt": c.grad_ckpt,
        "step_s": statistics.median(r["wall"] for r in runs),
        "host_s": statistics.median(r["host"] for r in runs),
        "host_fwd_s": statistics.median(r["fwd"] for r in runs),
        "host_bwd_s": statistics.median(r["bwd"] for r in runs),
        "host_opt_s": statistics.median(r["opt"] for r in runs),
        "step_times": [round(r["wall"], 6) for r in runs],
        "saved_tensors": saved,
        **prof,
    }
    row["tokens_per_s"] = c.micro_batch * c.seq / row["step_s"]
    del model, opt, ids
    common.release(torch)
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", default=None, help="substring of the configurations' names")
    ap.add_argument("--one", default=None, help="run this configuration in this process (the launcher's child)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    chosen = [c for c in CONFIGS if not args.only or args.only in c.name]
    if args.list:
        common.print_configs(chosen)
        return 0
    if args.out is None:
        ap.error("--out is required")
    if args.one is None:
        for c in chosen:  # one process per configuration
            subprocess.run([sys.executable, __file__, "--one", c.name, "--out", str(args.out)], check=False)
        return 0
    torch = importlib.import_module("torch")  # only on the GPU machine; untyped, as in the other scripts
    transformers = importlib.import_module("transformers")

    c = next(c for c in CONFIGS if c.name == args.one)
    env = common.environment(torch, transformers) | common.host_fields(torch)  # names the card's catalog id
    try:
        row = measure(c, torch, transformers) | env
    except torch.cuda.OutOfMemoryError:
        row = {"config": c.name, "oom": True} | env
    common.append_row(args.out, row)
    keys = ("config", "step_s", "host_fwd_s", "host_bwd_s", "kernels_fwd", "kernels_bwd", "saved_tensors")
    print(json.dumps({k: row.get(k) for k in keys}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
