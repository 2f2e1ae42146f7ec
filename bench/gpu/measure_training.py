"""Measure real peak GPU memory and step time of Hugging Face models, for the planner's calibration.

Standalone: needs only ``torch`` and ``transformers`` (``nvidia-ml-py`` optional, for the NVML
figure), no network (random weights built from a config directly on the GPU). It reproduces the
methodology of the shared calibration set (../shared/calibration/README.md beside the repository) exactly:

- training: ``loss = model(input_ids=ids, labels=ids).loss; loss.backward(); opt.step();
  opt.zero_grad(set_to_none=True)`` on ``micro_batch`` random sequences of ``seq`` tokens, four
  steps; ``amp_bf16`` = fp32 parameters with ``torch.autocast(bfloat16)`` around the forward,
  ``bf16`` = parameters cast to bfloat16, ``fp32`` = no autocast; AdamW is
  ``torch.optim.AdamW(fused=True)``, SGD has momentum 0.9; gradient checkpointing is
  ``gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})``;
- ``peak_alloc`` = ``torch.cuda.max_memory_allocated()`` over the four steps, after
  ``reset_peak_memory_stats()`` once the model and optimizer exist (so it includes the weights);
  ``static_after_init`` = ``memory_allocated()`` at that moment; ``peak_reserved`` =
  ``max_memory_reserved()``; ``alloc_retries`` = the allocator's ``num_alloc_retries`` over the
  steps; ``nvml_used_after`` = device memory used (NVML, else
  ``cudaMemGetInfo``) right after the steps; ``step_s`` = median wall time of steps 2–4;
  ``tokens_per_s`` = micro_batch × seq / step_s; ``oom: true`` when a step raised
  ``torch.cuda.OutOfMemoryError``;
- inference: bf16 weights, ``generate(max_new_tokens=min_new_tokens=new_tokens,
  do_sample=False, use_cache=True)`` (HF's dynamic cache); ``prefill_s`` is the time of the same
  call with one new token.

Each configuration runs in isolation: everything it allocated is deleted, ``gc.collect()`` and
``torch.cuda.empty_cache()`` run before the next one, and an out-of-memory error is caught and
recorded. Rows are appended, one JSON object per line, to ``--out`` as each configuration ends.

    python bench/gpu/measure_training.py --out tests/data/calibration/h100-extra.jsonl
    python bench/gpu/measure_training.py --list
    python bench/gpu/measure_training.py --only llama-125m-sgd,gpt2-124m-b32 --out /tmp/x.jsonl

The default list runs in about 2–3 minutes on one H100 80GB.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repository root: bench.gpu.common, when run as a script

from bench.gpu import common  # noqa: E402

STEPS = 4
# --profile: kernel-name fragments → category, first match wins (for the throughput model's terms).
_KERNEL_KINDS = (
    ("flash", "attention"),
    ("fmha", "attention"),
    ("attention", "attention"),
    ("gemm", "matmul"),
    ("nvjet", "matmul"),
    ("xmma", "matmul"),
    ("cutlass", "matmul"),
    ("splitk", "matmul"),
    ("softmax", "softmax/loss"),
    ("nll_loss", "softmax/loss"),
    ("adam", "optimizer"),
    ("multi_tensor", "optimizer"),
    ("reduce", "reduction"),
    ("norm", "reduction"),
    ("elementwise", "elementwise"),
    ("vectorized", "elementwise"),
    ("unrolled", "elementwise"),
    ("dropout", "elementwise"),
    ("cat", "copy/cat"),
    ("copy", "copy/cat"),
    ("embedding", "embedding"),
    ("index", "embedding"),
)


@dataclass(frozen=True)
class Config(common.ModelShape):
    mode: str = "train"  # train | infer
    precision: str = "amp_bf16"  # amp_bf16 | bf16 | fp32
    optimizer: str = "adamw"  # adamw | sgd
    seq: int = 1024
    micro_batch: int = 8
    grad_ckpt: bool = False
    attn: str = "sdpa"  # sdpa | eager
    recompute: str = "none"  # none | selective (Llama: the core attention checkpointed)
    batch: int = 0  # inference
    prompt_len: int = 0
    new_tokens: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _llama(  # noqa: PLR0917 - the configuration table below reads best with positional shapes
    name: str, hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int = 32000, **kw: Any
) -> Config:
    return Config(
        name=name, kind="llama", hidden=hidden, layers=layers, heads=heads, kv_heads=kv, inter=inter, vocab=vocab, **kw
    )


def _gpt2(name: str, hidden: int, layers: int, heads: int, **kw: Any) -> Config:
    return Config(
        name=name,
        kind="gpt2",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        inter=4 * hidden,
        vocab=50257,
        **kw,
    )


# What the shared calibration set does not cover: other optimizers, pure bf16 and fp32, gradient
# checkpointing at 1.1B, batch-size and vocabulary extremes, eager attention, a 3B model that
# fits in bf16, an out-of-memory case and a decode-heavy generate.
CONFIGS: tuple[Config, ...] = (
    _llama("llama-125m-sgd", 768, 12, 12, 12, 2048, optimizer="sgd", seq=1024, micro_batch=8),
    _llama("llama-125m-fp32", 768, 12, 12, 12, 2048, precision="fp32", seq=1024, micro_batch=4),
    _llama("llama-125m-eager", 768, 12, 12, 12, 2048, attn="eager", seq=1024, micro_batch=8),
    # Selective recompute (Megatron's core attention): the eager scores are rebuilt in backward.
    _llama(
        "llama-125m-eager-selective",
        768,
        12,
        12,
        12,
        2048,
        attn="eager",
        seq=1024,
        micro_batch=8,
        recompute="selective",
    ),
    _llama("llama-350m-eager-s2048", 1024, 24, 16, 16, 2816, attn="eager", seq=2048, micro_batch=4),
    _llama(
        "llama-350m-eager-s2048-selective",
        1024,
        24,
        16,
        16,
        2816,
        attn="eager",
        seq=2048,
        micro_batch=4,
        recompute="selective",
    ),
    _llama("llama-70m-vocab128k", 512, 6, 8, 8, 1536, vocab=128256, seq=1024, micro_batch=8),
    _llama("llama-350m-bf16", 1024, 24, 16, 16, 2816, precision="bf16", seq=2048, micro_batch=8),
    _llama("llama-350m-b16x1024", 1024, 24, 16, 16, 2816, seq=1024, micro_batch=16),
    _llama("llama-1.1b-ckpt", 2048, 22, 32, 4, 5632, seq=2048, micro_batch=8, grad_ckpt=True),
    _llama("llama-1.1b-sgd", 2048, 22, 32, 4, 5632, optimizer="sgd", seq=2048, micro_batch=4),
    _llama("llama-3b-bf16", 3200, 26, 32, 32, 8640, precision="bf16", seq=2048, micro_batch=4),
    _gpt2("gpt2-124m-b32", 768, 12, 12, seq=1024, micro_batch=32),
    _gpt2("gpt2-355m-bf16", 1024, 24, 16, precision="bf16", seq=1024, micro_batch=8),
    _llama("llama-1.1b-oom", 2048, 22, 32, 4, 5632, seq=2048, micro_batch=16, note="expected to run out of memory"),
    # GPT-3 2.7B's shape (Brown et al. 2020, Table 2.1: 32 layers, d_model 2560, 32 heads, 2048
    # context) in eager attention on one card: the memory and speed of eager single-GPU training at
    # the size of published eager runs (HF GPT-2 code, its default dropout 0.1), against SDPA.
    _gpt2("gpt3-2.7b-eager-b1", 2560, 32, 32, attn="eager", seq=2048, micro_batch=1),
    _gpt2("gpt3-2.7b-eager-b2", 2560, 32, 32, attn="eager", seq=2048, micro_batch=2),
    _gpt2("gpt3-2.7b-eager-b4", 2560, 32, 32, attn="eager", seq=2048, micro_batch=4),
    _gpt2("gpt3-2.7b-sdpa-b2", 2560, 32, 32, seq=2048, micro_batch=2),
    _gpt2("gpt3-2.7b-eager-b2-ckpt", 2560, 32, 32, attn="eager", seq=2048, micro_batch=2, grad_ckpt=True),
    # Near a full card: the planner admits these on the peak allocated plus the context (80.2 and
    # 81.8 GB allocated planned), not on the roomy footprint (85.3, 87.1 GB); and a shorter one.
    _gpt2("gpt3-2.7b-eager-b1-s1920", 2560, 32, 32, attn="eager", seq=1920, micro_batch=1),
    _gpt2("gpt3-2.7b-eager-b2-s1280", 2560, 32, 32, attn="eager", seq=1280, micro_batch=2),
    _gpt2("gpt3-2.7b-eager-b1-s1536", 2560, 32, 32, attn="eager", seq=1536, micro_batch=1),
    _gpt2("gpt3-2.7b-eager-b4-s512", 2560, 32, 32, attn="eager", seq=512, micro_batch=4),
    _llama(
        "llama-3b-generate",
        3200,
        26,
        32,
        32,
        8640,
        mode="infer",
        precision="bf16",
        batch=8,
        prompt_len=512,
        new_tokens=256,
    ),
)


def _build(c: Config, torch: Any, transformers: Any) -> Any:
    cfg = common.hf_config_of(
        transformers,
        c,
        kind=c.kind,
        positions=max(2048 if c.kind == "llama" else 1024, c.seq, c.prompt_len + c.new_tokens),
        use_cache=c.mode == "infer",
    )
    model = common.from_config(torch, transformers, cfg, c.attn).to("cuda")
    if c.precision == "bf16" or c.mode == "infer":
        model = model.to(torch.bfloat16)
    return model


def _used_bytes(torch: Any) -> tuple[int, str]:
    """Device memory used as NVML reports it (cudaMemGetInfo when nvidia-ml-py is missing)."""
    try:
        pynvml = importlib.import_module("pynvml")  # nvidia-ml-py, optional
        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used), "nvml"
    except Exception:  # noqa: BLE001 - any NVML problem falls back to the CUDA runtime's figure
        free, total = torch.cuda.mem_get_info()
        return int(total - free), "cudaMemGetInfo"


def _common(c: Config, model: Any) -> dict[str, Any]:
    n_params = sum(p.numel() for p in model.parameters())
    row: dict[str, Any] = {
        "mode": c.mode,
        "arch": common.arch_label(c.kind, n_params),
        "kind": c.kind,
        **common.shape_fields(c),
        "n_params": n_params,
        "precision": c.precision,
        "config": c.name,
    }
    if c.attn != "sdpa":
        row["attn"] = c.attn
    return row


def _profile_step(step: Any, torch: Any, wall_s: float) -> dict[str, Any]:
    """One more step under torch.profiler: GPU time per kernel category, and the idle share."""
    profiler = importlib.import_module("torch.profiler")
    with profiler.profile(activities=[profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kinds: dict[str, list[float]] = {}
    total_us = 0.0
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = float(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0))
        name = e.key.lower()
        kind = next((k for frag, k in _KERNEL_KINDS if frag in name), "other")
        acc = kinds.setdefault(kind, [0.0, 0.0])
        acc[0] += t
        acc[1] += e.count
        total_us += t
    return {
        "kernel_s": total_us / 1e6,
        "gpu_busy": total_us / 1e6 / wall_s if wall_s else None,
        "kernels": {k: {"s": round(v[0] / 1e6, 5), "count": int(v[1])} for k, v in sorted(kinds.items())},
    }


def _selective(c: Config, torch: Any) -> Any:
    """Checkpoint Llama's core attention (QK^T, softmax, PV) as Megatron's selective recompute
    does: returns a function that undoes the patch."""
    llama: Any = importlib.import_module("transformers.models.llama.modeling_llama")
    original = llama.eager_attention_forward
    checkpoint = importlib.import_module("torch.utils.checkpoint").checkpoint

    def core_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kw: Any) -> Any:
        return checkpoint(original, module, query, key, value, attention_mask, use_reentrant=False, **kw)

    llama.eager_attention_forward = core_attention

    def undo() -> None:
        llama.eager_attention_forward = original

    return undo


def _train(c: Config, torch: Any, transformers: Any, profile: bool = False) -> dict[str, Any]:
    undo = _selective(c, torch) if c.recompute == "selective" else None
    try:
        return _train_model(c, torch, transformers, profile)
    finally:
        if undo is not None:
            undo()


def _train_model(c: Config, torch: Any, transformers: Any, profile: bool = False) -> dict[str, Any]:
    torch.manual_seed(0)
    model = _build(c, torch, transformers)
    common.for_training(model, grad_ckpt=c.grad_ckpt)
    opt = common.optimizer(torch, c.optimizer, model.parameters())
    row = _common(c, model)
    row |= {"optimizer": c.optimizer, "seq": c.seq, "micro_batch": c.micro_batch, "grad_ckpt": c.grad_ckpt}
    if c.recompute != "none":
        row["recompute"] = c.recompute
    ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    row["static_after_init"] = int(torch.cuda.memory_allocated())

    def step() -> None:
        common.train_step(torch, model, ids, opt, autocast=c.precision == "amp_bf16")

    try:
        times, _ = common.timed_steps(torch, step, STEPS)
    except torch.cuda.OutOfMemoryError:
        row |= {"peak_alloc": int(torch.cuda.max_memory_allocated()), "oom": True}
        return row
    used, source = _used_bytes(torch)
    step_s = statistics.median(times[1:])
    row |= {
        "peak_alloc": int(torch.cuda.max_memory_allocated()),
        "peak_reserved": int(torch.cuda.max_memory_reserved()),
        **common.alloc_retries(torch),
        "nvml_used_after": used,
        "used_source": source,
        "step_s": step_s,
        "tokens_per_s": c.micro_batch * c.seq / step_s,
        "oom": False,
    }
    if profile:  # after the measured figures, so the profiler cannot disturb them
        row["profile"] = _profile_step(step, torch, step_s)
    return row


def _infer(c: Config, torch: Any, transformers: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    model = _build(c, torch, transformers)
    model.eval()
    row = _common(c, model)
    row |= {"batch": c.batch, "prompt_len": c.prompt_len, "new_tokens": c.new_tokens}
    ids = torch.randint(0, c.vocab, (c.batch, c.prompt_len), device="cuda")
    mask = torch.ones_like(ids)

    def generate(prompt: Any, attention: Any, new: int) -> Any:
        return model.generate(
            input_ids=prompt,
            attention_mask=attention,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )

    with torch.no_grad():
        generate(ids[:1, :16], mask[:1, :16], 2)  # load kernels and cuBLAS with negligible memory
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        row["static_after_init"] = int(torch.cuda.memory_allocated())
        try:
            t0 = time.perf_counter()
            out = generate(ids, mask, c.new_tokens)
            torch.cuda.synchronize()
            generate_s = time.perf_counter() - t0
        except torch.cuda.OutOfMemoryError:
            row |= {"peak_alloc": int(torch.cuda.max_memory_allocated()), "oom": True}
            return row
        used, source = _used_bytes(torch)
        row |= {
            "peak_alloc": int(torch.cuda.max_memory_allocated()),
            "peak_reserved": int(torch.cuda.max_memory_reserved()),
            "nvml_used_after": used,
            "used_source": source,
            "generate_s": generate_s,
            "generated": int(out.shape[1] - c.prompt_len),
        }
        del out
        prefill = []
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            generate(ids, mask, 1)
            torch.cuda.synchronize()
            prefill.append(time.perf_counter() - t0)
        row |= {"prefill_s": min(prefill), "oom": False}
    return row


# Device names as CUDA reports them → the planner catalog's ids (plan_accuracy.py reads "accelerator").
def _free(torch: Any) -> None:
    common.release(torch)
    torch.cuda.reset_peak_memory_stats()


def run_one(c: Config, torch: Any, transformers: Any, profile: bool = False) -> dict[str, Any]:
    """One configuration; everything it allocated is unreachable when this returns."""
    try:
        return _train(c, torch, transformers, profile) if c.mode == "train" else _infer(c, torch, transformers)
    except torch.cuda.OutOfMemoryError:  # while building the model or the optimizer
        fields = {k: v for k, v in asdict(c).items() if k not in ("extra", "name", "note")}
        return {**fields, "arch": c.name, "config": c.name, "oom": True, "error": "out of memory before the first step"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSONL file to append the rows to")
    parser.add_argument("--only", help="comma-separated configuration names (see --list)")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument(
        "--profile", action="store_true", help="training: add a profiled step's GPU time per kernel category"
    )
    args = parser.parse_args(argv)
    configs = list(CONFIGS)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = wanted - {c.name for c in configs}
        if unknown:
            parser.error(f"unknown configuration(s): {', '.join(sorted(unknown))}; see --list")
        configs = [c for c in configs if c.name in wanted]
    if args.list:
        for c in configs:
            print(c.name, json.dumps({k: v for k, v in asdict(c).items() if v not in ("", 0, {}, False)}))
        return 0
    if args.out is None:
        parser.error("--out is required")

    # Imported here so that --list works without them; untyped (no stubs needed for mypy).
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    transformers.logging.set_verbosity_error()
    env = common.environment(torch, transformers)
    print(f"{env['gpu']} ({env['sms']} SMs), torch {env['torch']}, transformers {env['transformers']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    failures = 0
    for c in configs:
        t0 = time.perf_counter()
        try:
            row = run_one(c, torch, transformers, args.profile)
        except Exception as exc:  # noqa: BLE001 - record and go on to the next configuration
            failures += 1
            row = {"config": c.name, "error": f"{type(exc).__name__}: {exc}"}
        _free(torch)
        row |= env
        common.append_row(args.out, row)
        peak = row.get("peak_alloc")
        shown = f"peak {peak / 1e9:.2f} GB" if isinstance(peak, int) else row.get("error", "")
        speed = f", {row['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in row else ""
        print(
            f"{c.name:24} {'OOM ' if row.get('oom') else ''}{shown}{speed}  ({time.perf_counter() - t0:.1f}s)",
            flush=True,
        )
        if "profile" in row:
            prof = row["profile"]
            parts = ", ".join(f"{k} {v['s'] * 1e3:.1f}ms/{v['count']}" for k, v in prof["kernels"].items())
            step_ms = row["step_s"] * 1e3
            print(f"    kernels {prof['kernel_s'] * 1e3:.1f} ms of {step_ms:.1f} ms step: {parts}", flush=True)
    print(f"{len(configs)} configurations in {time.perf_counter() - started:.0f}s; rows appended to {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
