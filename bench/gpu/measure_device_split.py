"""Device time of a small model's training step, apart from the host that paces it.

A small model's eager step is paced by the host's dispatch, so its wall time says little about
what the device spends. This script runs the step (HF Llama/GPT-2, bf16 autocast, fused AdamW,
SDPA) on one GPU three ways: eager (``step_s``, median of steps 4-12, synchronised per step);
eager under the profiler, summing each kernel's device time by kind (matrix products, attention,
the loss, the optimizer, everything else: ``kernel_s``); and captured once into a CUDA graph and
replayed (``graph_step_s``: the device's own time for the same kernels with no host in the way;
capturable fused AdamW, static input). Prints one JSON row per configuration.

    python bench/gpu/measure_device_split.py --out FILE.jsonl [--only llama-125m]

Needs ``torch`` and ``transformers`` on the GPU machine only.
``tests/data/calibration/device-split/`` holds its rows.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu import common  # noqa: E402

CONFIGS = (("llama-125m", 8, 1024), ("llama-125m", 1, 1024), ("gpt2-124m", 16, 1024), ("llama-350m", 8, 2048))
KINDS = (
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "sm80_")),
    ("attention", ("flash", "fmha", "attention", "efficient")),
    ("loss", ("log_softmax", "nll_loss", "cross_entropy", "softmax_backward")),
    ("optimizer", ("adam",)),
)


def _kind(name: str) -> str:
    low = name.lower()
    return next((k for k, keys in KINDS if any(s in low for s in keys)), "other")


def _step(torch: Any, model: Any, ids: Any, opt: Any) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)  # graph capture keeps the gradients' memory


def run(torch: Any, transformers: Any, model_name: str, micro_batch: int, seq: int) -> dict[str, Any]:
    kind, hidden, layers, heads, kv, inter, vocab = common.SHAPES[model_name]
    shape = common.ModelShape(model_name, kind, hidden, layers, heads, kv, inter, vocab)
    cfg = common.hf_config_of(transformers, shape, kind=kind, positions=max(1024, seq))
    torch.manual_seed(0)
    model = common.from_config(torch, transformers, cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=True)
    ids = torch.randint(0, vocab, (micro_batch, seq), device="cuda")
    row: dict[str, Any] = {"config": f"{model_name}-b{micro_batch}x{seq}", "mode": "train", "kind": kind}
    row |= common.shape_fields(shape) | {"micro_batch": micro_batch, "seq": seq, "precision": "amp_bf16"}
    row["n_params"] = sum(p.numel() for p in model.parameters())
    row["arch"] = common.arch_label(kind, row["n_params"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as graph capture asks
        for _ in range(3):
            _step(torch, model, ids, opt)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    times = []
    for _ in range(12):
        t = time.perf_counter()
        _step(torch, model, ids, opt)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    row["step_s"] = statistics.median(times[3:])
    prof_mod = torch.profiler
    with prof_mod.profile(activities=[prof_mod.ProfilerActivity.CUDA]) as prof:
        _step(torch, model, ids, opt)
        torch.cuda.synchronize()
    sums: dict[str, float] = {}
    count = 0
    for e in prof.events():
        if e.device_type == prof_mod.DeviceType.CUDA:
            k = _kind(e.name)
            sums[k] = sums.get(k, 0.0) + e.time_range.elapsed_us() / 1e6
            count += 1
    row["kernel_s"] = {k: round(v, 6) for k, v in sorted(sums.items())}
    row["kernel_total_s"] = round(sum(sums.values()), 6)
    row["kernels"] = count
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _step(torch, model, ids, opt)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        replays = []
        for _ in range(10):
            t = time.perf_counter()
            graph.replay()
            torch.cuda.synchronize()
            replays.append(time.perf_counter() - t)
        row["graph_step_s"] = statistics.median(replays)
    except Exception as exc:  # noqa: BLE001 - recorded; the eager figures stand
        row["graph_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    row |= common.host_fields(torch) | {"torch": torch.__version__, "transformers": transformers.__version__}
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None)
    args = ap.parse_args(argv)
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    transformers.logging.set_verbosity_error()
    for name, mb, seq in CONFIGS:
        if args.only and args.only not in name:
            continue
        try:
            row = run(torch, transformers, name, mb, seq)
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is its row
            row = {"config": f"{name}-b{mb}x{seq}", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        common.append_row(args.out, row)
        print(
            json.dumps(
                {
                    k: row.get(k)
                    for k in (
                        "config",
                        "step_s",
                        "graph_step_s",
                        "kernel_total_s",
                        "kernels",
                        "kernel_s",
                        "graph_error",
                        "error",
                    )
                }
            ),
            flush=True,
        )
        common.release(torch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
