"""Host dispatch of a small model's eager step: does it cost the same with the device idle and busy?

The planner charges each launch a fixed host time and overlaps it with the device's time. The
calibration rows disagree with one figure: on one host Llama 134M at one sequence of 1024 takes
56.6 ms (host-bound) and at eight sequences 43.9 ms, for the same ~1,950 launches. This script
measures, on one GPU (HF Llama/GPT-2, bf16 autocast, SDPA), for each configuration:

- ``sync``: the calibration sets' step (synchronised before and after): ``step_s`` (median wall),
  ``host_fwd_s`` / ``host_bwd_s`` / ``host_opt_s`` (host time until each phase returned);
- ``busy``: the same step issued behind a long ``torch.cuda._sleep`` already queued on the stream,
  so that every launch finds the device busy: ``busy_fwd_s`` / ``busy_bwd_s`` / ``busy_opt_s``;
- ``stream_step_s``: ten steps back to back with one synchronisation at the end (a training loop
  that never reads the loss: the host issues step k+1 while the device runs step k), per step;
- ``launch_idle_us`` / ``launch_busy_us``: host microseconds per launch of a one-element in-place
  add, 500 in a row, with the device idle and behind a queued sleep;
- the optimizer's host time with ``fused=True`` and ``foreach=True`` AdamW (``opt_fused_s``,
  ``opt_foreach_s``), and ``zero_grad`` apart (``zero_grad_s``), each the median of 10;
  ``param_tensors``: the parameter tensors each loops over.

``--sync-points`` instead runs one step of each model under ``torch.cuda.set_sync_debug_mode(1)``
and prints the Python stack of every synchronising CUDA call (what makes ``busy_fwd_s`` wait).

    python bench/gpu/measure_host_overlap.py --out FILE.jsonl [--only llama-125m] [--sync-points]

Needs ``torch`` and ``transformers`` on the GPU machine only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu import common  # noqa: E402

CONFIGS = (
    ("llama-125m", 1, 1024),
    ("llama-125m", 8, 1024),
    ("gpt2-124m", 1, 1024),
    ("gpt2-124m", 16, 1024),
    ("llama-350m", 1, 1024),
    ("llama-350m", 8, 2048),
)
SLEEP_CYCLES = 2_000_000_000  # about 1 s at the H100/H200's 1.98 GHz: outlasts any phase's dispatch


def _phases(torch: Any, model: Any, ids: Any, opt: Any, *, busy: bool) -> dict[str, float]:
    torch.cuda.synchronize()
    if busy:
        torch.cuda._sleep(SLEEP_CYCLES)
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
    return {"fwd": t1 - t0, "bwd": t2 - t1, "opt": t3 - t2, "wall": t4 - t0}


def _launches(torch: Any, *, busy: bool, n: int = 500) -> float:
    a = torch.zeros(1, device="cuda")
    out = []
    for _ in range(5):
        torch.cuda.synchronize()
        if busy:
            torch.cuda._sleep(SLEEP_CYCLES // 4)
        t = time.perf_counter()
        for _ in range(n):
            a.add_(1)
        out.append((time.perf_counter() - t) / n)
        torch.cuda.synchronize()
    return statistics.median(out) * 1e6


def _opt_host(torch: Any, model: Any, ids: Any, opt: Any) -> tuple[float, float]:
    """Median host seconds of opt.step() and of zero_grad(set_to_none=True), gradients present."""
    steps, zeros = [], []
    for _ in range(10):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.cuda.synchronize()
        t = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        steps.append(t1 - t)
        zeros.append(t2 - t1)
    return statistics.median(steps), statistics.median(zeros)


def run(torch: Any, transformers: Any, model_name: str, micro_batch: int, seq: int) -> dict[str, Any]:
    kind, hidden, layers, heads, kv, inter, vocab = common.SHAPES[model_name]
    shape = common.ModelShape(model_name, kind, hidden, layers, heads, kv, inter, vocab)
    cfg = common.hf_config_of(transformers, shape, kind=kind, positions=max(1024, seq))
    torch.manual_seed(0)
    model = common.from_config(torch, transformers, cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, vocab, (micro_batch, seq), device="cuda")
    row: dict[str, Any] = {"config": f"{model_name}-b{micro_batch}x{seq}", "mode": "train", "kind": kind}
    row |= common.shape_fields(shape) | {"micro_batch": micro_batch, "seq": seq, "precision": "amp_bf16"}
    row["n_params"] = sum(p.numel() for p in model.parameters())
    row["param_tensors"] = sum(1 for _ in model.parameters())
    row["arch"] = common.arch_label(kind, row["n_params"])
    row["optimizer"] = "adamw"
    for _ in range(3):
        _phases(torch, model, ids, opt, busy=False)
    for label, busy in (("sync", False), ("busy", True)):
        runs = [_phases(torch, model, ids, opt, busy=busy) for _ in range(8)]
        prefix = "host" if label == "sync" else "busy"
        for phase in ("fwd", "bwd", "opt"):
            row[f"{prefix}_{phase}_s"] = statistics.median(r[phase] for r in runs)
        if label == "sync":
            row["step_s"] = statistics.median(r["wall"] for r in runs)
            row["step_times"] = [round(r["wall"], 6) for r in runs]
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    row["stream_step_s"] = (time.perf_counter() - t) / 10
    row["tokens_per_s"] = micro_batch * seq / row["step_s"]
    row["opt_fused_s"], row["zero_grad_s"] = _opt_host(torch, model, ids, opt)
    foreach = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    _opt_host(torch, model, ids, foreach)
    row["opt_foreach_s"], _ = _opt_host(torch, model, ids, foreach)
    row["launch_idle_us"] = _launches(torch, busy=False)
    row["launch_busy_us"] = _launches(torch, busy=True)
    row |= common.host_fields(torch) | {"torch": torch.__version__, "transformers": transformers.__version__}
    return row


def sync_points(torch: Any, transformers: Any, model_name: str) -> None:
    """Print the stack of each synchronising CUDA call in one training step of ``model_name``."""
    kind, hidden, layers, heads, kv, inter, vocab = common.SHAPES[model_name]
    shape = common.ModelShape(model_name, kind, hidden, layers, heads, kv, inter, vocab)
    model = common.from_config(torch, transformers, common.hf_config_of(transformers, shape, kind=kind, positions=1024))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, vocab, (1, 1024), device="cuda")
    for _ in range(2):
        _phases(torch, model, ids, opt, busy=False)

    def show(message: Any, *_: Any, **__: Any) -> None:
        print("SYNC:", str(message)[:120])
        traceback.print_stack(limit=8)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        print(f"=== {model_name}: forward", flush=True)
        torch.cuda.set_sync_debug_mode(1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        print(f"=== {model_name}: backward", flush=True)
        loss.backward()
        print(f"=== {model_name}: optimizer", flush=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None)
    ap.add_argument("--sync-points", action="store_true")
    args = ap.parse_args(argv)
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    transformers.logging.set_verbosity_error()
    if args.sync_points:
        for name in ("llama-125m", "gpt2-124m"):
            sync_points(torch, transformers, name)
        return 0
    for name, mb, seq in CONFIGS:
        if args.only and args.only not in name:
            continue
        try:
            row = run(torch, transformers, name, mb, seq)
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is its row
            row = {"config": f"{name}-b{mb}x{seq}", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        common.append_row(args.out, row)
        keys = ("config", "step_s", "stream_step_s", "host_fwd_s", "busy_fwd_s", "host_bwd_s", "busy_bwd_s")
        print(json.dumps({k: row.get(k) for k in (*keys, "launch_idle_us", "launch_busy_us", "error")}), flush=True)
        common.release(torch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
