"""Measure LoRA and QLoRA fine-tuning on one GPU: peak memory, NVML footprint and tokens/s, for the
planner's adapter model (``workload.adapter``).

Standalone: needs ``torch``, ``transformers``, ``peft`` and, for quantised bases, ``bitsandbytes``
(``nvidia-ml-py`` optional); no network: LLaMA-shaped models with random weights are built from a
``LlamaConfig`` directly on the GPU. The recipe is the one the LoRA and QLoRA papers and PEFT's
examples use, with the same step as ``measure_training.py``:

- the base model is cast to bfloat16 and frozen; ``base`` ``int8`` / ``nf4`` / ``nf4-nodq`` then
  replaces every linear layer of the decoder blocks (not the embeddings or the LM head, which
  bitsandbytes' loaders also keep) with bitsandbytes' ``Linear8bitLt`` (LLM.int8, threshold 6) or
  ``Linear4bit`` (NF4, bf16 compute, double quantisation unless ``nodq``), as
  ``from_pretrained(quantization_config=...)`` does at load time;
- ``peft.get_peft_model`` with ``LoraConfig(r, lora_alpha=2r, lora_dropout=0.05)`` on the chosen
  targets: ``attention`` = q/k/v/o projections, ``mlp`` = gate/up/down, ``all-linear`` = both. PEFT
  keeps the adapter matrices in fp32 (its ``autocast_adapter_dtype``); the forward runs under bf16
  autocast (the Trainer's ``bf16=True``); AdamW is ``torch.optim.AdamW(fused=True)`` over the
  adapter parameters only;
- gradient checkpointing is HF's ``use_reentrant=False``, as in ``measure_training.py``;
- ``static_after_init`` = ``memory_allocated()`` once the adapted model and optimizer exist;
  ``peak_alloc`` = ``max_memory_allocated()`` over four steps after that; ``nvml_used_after`` =
  NVML's used memory right after them; ``step_s`` = median of steps 2–4; ``tokens_per_s`` =
  micro_batch × seq / step_s; ``trainable`` = the adapter's parameter count; ``n_params`` = the
  base model's, counted before quantisation.

Rows are appended, one JSON object per line, to ``--out`` (the calibration set is
``tests/data/calibration/lora/h100-lora.jsonl``)::

    python bench/gpu/measure_lora.py --out tests/data/calibration/lora/h100-lora.jsonl
    python bench/gpu/measure_lora.py --set heldout --out tests/data/calibration/lora/h100-lora-heldout.jsonl
    python bench/gpu/measure_lora.py --list
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repository root: bench.gpu.common, when run as a script

from bench.gpu import common  # noqa: E402

STEPS = 4
TARGETS = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
    "all-linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}
# name → hidden, layers, heads, kv_heads, inter, vocab (LLaMA-style shapes: TinyLlama 1.1B,
# OpenLLaMA 3B, Llama 3 8B).
SHAPES = {
    "1b": (2048, 22, 32, 4, 5632, 32000),
    "3b": (3200, 26, 32, 32, 8640, 32000),
    "8b": (4096, 32, 32, 8, 14336, 128256),
}


@dataclass(frozen=True)
class Config:
    name: str
    shape: str
    base: str  # bf16 | int8 | nf4 | nf4-nodq
    targets: str  # attention | mlp | all-linear
    seq: int
    micro_batch: int
    grad_ckpt: bool
    rank: int = 16

    @property
    def hidden(self) -> int:
        return SHAPES[self.shape][0]

    @property
    def layers(self) -> int:
        return SHAPES[self.shape][1]

    @property
    def heads(self) -> int:
        return SHAPES[self.shape][2]

    @property
    def kv_heads(self) -> int:
        return SHAPES[self.shape][3]

    @property
    def inter(self) -> int:
        return SHAPES[self.shape][4]

    @property
    def vocab(self) -> int:
        return SHAPES[self.shape][5]


def _c(shape: str, base: str, targets: str, seq: int, mb: int, ckpt: bool, rank: int = 16) -> Config:  # noqa: PLR0917 - a table row
    name = f"{shape}-{base}-{targets}-s{seq}-b{mb}{'-ckpt' if ckpt else ''}{f'-r{rank}' if rank != 16 else ''}"
    return Config(name, shape, base, targets, seq, mb, ckpt, rank)


CONFIGS = [
    _c("1b", "bf16", "all-linear", 2048, 8, False),
    _c("1b", "bf16", "all-linear", 2048, 8, True),
    _c("1b", "bf16", "attention", 2048, 8, False),
    _c("1b", "bf16", "all-linear", 1024, 4, False),
    _c("1b", "nf4", "all-linear", 2048, 8, False),
    _c("1b", "nf4", "all-linear", 2048, 8, True),
    _c("1b", "nf4", "attention", 1024, 16, True),
    _c("3b", "bf16", "all-linear", 2048, 4, False),
    _c("3b", "bf16", "all-linear", 2048, 8, True),
    _c("3b", "bf16", "attention", 2048, 4, True),
    _c("3b", "nf4", "all-linear", 2048, 4, False),
    _c("3b", "nf4", "all-linear", 2048, 8, True),
    _c("3b", "nf4", "attention", 1024, 8, True),
    _c("3b", "nf4-nodq", "all-linear", 2048, 4, True),
    _c("3b", "int8", "all-linear", 2048, 4, True),
    _c("8b", "nf4", "all-linear", 2048, 4, True),
    _c("8b", "bf16", "all-linear", 2048, 2, True),
    _c("8b", "nf4", "attention", 4096, 2, True),
]
# Held out: other ranks, the MLP targets, longer sequences, int8 without checkpointing; measured
# after the planner's adapter terms were set from CONFIGS, to check them (``--set heldout``).
HELDOUT = [
    _c("1b", "bf16", "mlp", 2048, 8, False, 64),
    _c("1b", "nf4", "all-linear", 4096, 4, True, 64),
    _c("1b", "int8", "all-linear", 2048, 8, False),
    _c("3b", "bf16", "mlp", 1024, 8, False, 8),
    _c("3b", "nf4", "all-linear", 4096, 2, False),
    _c("3b", "nf4", "mlp", 2048, 4, True, 128),
    _c("8b", "nf4", "all-linear", 2048, 1, False),
    _c("8b", "nf4", "mlp", 2048, 8, True, 32),
    _c("8b", "bf16", "attention", 4096, 2, True, 64),
    _c("8b", "int8", "attention", 2048, 2, True),
]
# Small steps without checkpointing (``--set small``): the held-out 8B QLoRA row at one sequence
# of 2048 tokens ran 37 % slower than planned; again, beside its neighbours.
SMALL = [
    _c("8b", "nf4", "all-linear", 2048, 1, False),
    _c("8b", "nf4", "all-linear", 2048, 2, False),
    _c("8b", "bf16", "all-linear", 2048, 1, False),
    _c("3b", "nf4", "all-linear", 2048, 1, False),
    _c("1b", "nf4", "all-linear", 2048, 1, False),
]


def _quantize(model: Any, torch: Any, base: str) -> None:
    """Replace the decoder blocks' linear layers by bitsandbytes' quantised ones, in place."""
    bnb = importlib.import_module("bitsandbytes")
    for block in model.model.layers:
        for parent in list(block.modules()):
            for cname, child in list(parent.named_children()):
                if type(child) is not torch.nn.Linear:
                    continue
                w = child.weight.data
                if base == "int8":
                    q = bnb.nn.Linear8bitLt(
                        child.in_features,
                        child.out_features,
                        bias=False,
                        has_fp16_weights=False,
                        threshold=6.0,
                        device="meta",
                    )
                    q.weight = bnb.nn.Int8Params(w.cpu(), requires_grad=False, has_fp16_weights=False).to("cuda")
                else:
                    dq = base == "nf4"
                    q = bnb.nn.Linear4bit(
                        child.in_features,
                        child.out_features,
                        bias=False,
                        compute_dtype=torch.bfloat16,
                        compress_statistics=dq,
                        quant_type="nf4",
                        device="meta",
                    )
                    q.weight = bnb.nn.Params4bit(w, requires_grad=False, compress_statistics=dq, quant_type="nf4").to(
                        "cuda"
                    )
                setattr(parent, cname, q)
                del child, w
        torch.cuda.empty_cache()
    for flag in ("is_loaded_in_8bit", "is_loaded_in_4bit"):
        # A read-only property on some versions: PEFT then looks at the layers themselves.
        with contextlib.suppress(Exception):
            setattr(model, flag, base == "int8" if flag.endswith("8bit") else base != "int8")


def _train(c: Config, torch: Any, transformers: Any, peft: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    cfg = common.hf_config_of(transformers, c, kind="llama", positions=max(2048, c.seq))
    model = common.from_config(torch, transformers, cfg).to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.requires_grad_(False)
    if c.base != "bf16":
        _quantize(model, torch, c.base)
    common.for_training(model, grad_ckpt=c.grad_ckpt)
    lora = peft.LoraConfig(
        r=c.rank, lora_alpha=2 * c.rank, lora_dropout=0.05, target_modules=TARGETS[c.targets], task_type="CAUSAL_LM"
    )
    model = peft.get_peft_model(model, lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = common.optimizer(torch, "adamw", trainable)
    row: dict[str, Any] = {
        "mode": "lora",
        "config": c.name,
        "arch": common.arch_label("llama", n_params),
        "kind": "llama",
        **common.shape_fields(c),
        "n_params": n_params,
        "method": "lora" if c.base == "bf16" else "qlora",
        "base": c.base,
        "targets": c.targets,
        "rank": c.rank,
        "trainable": sum(p.numel() for p in trainable),
        "adapter_dtype": str(trainable[0].dtype).removeprefix("torch."),
        "precision": "amp_bf16",
        "optimizer": "adamw",
        "seq": c.seq,
        "micro_batch": c.micro_batch,
        "grad_ckpt": c.grad_ckpt,
    }
    ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda")
    common.release(torch)
    row["static_after_init"] = common.static_after_init(torch)

    def step() -> None:
        common.train_step(torch, model, ids, opt, autocast=True)

    try:
        times, _ = common.timed_steps(torch, step, STEPS)
    except torch.cuda.OutOfMemoryError:
        row |= {"peak_alloc": int(torch.cuda.max_memory_allocated()), "oom": True}
        return row
    step_s = statistics.median(times[1:])
    row |= common.peaks(torch)
    row |= {
        "nvml_used_after": common.nvml_used(torch),
        "step_s": step_s,
        "tokens_per_s": c.micro_batch * c.seq / step_s,
        "oom": False,
    }
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSONL file to append the rows to")
    parser.add_argument("--only", help="comma-separated configuration names (see --list)")
    parser.add_argument("--skip", default="", help="comma-separated shapes to leave out (1b, 3b, 8b)")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument("--set", choices=("main", "heldout", "small"), default="main", help="which table to run")
    args = parser.parse_args(argv)
    table = {"main": CONFIGS, "heldout": HELDOUT, "small": SMALL}[args.set]
    configs, unknown = common.chosen(table, args.only)
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}; see --list")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    configs = [c for c in configs if c.shape not in skip]
    if args.list:
        common.print_configs(configs)
        return 0
    if args.out is None:
        parser.error("--out is required")

    # Imported here so that --list works without them; untyped (no stubs needed for mypy).
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    peft = importlib.import_module("peft")
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    transformers.logging.set_verbosity_error()
    env = common.environment(torch, transformers)
    env["peft"] = peft.__version__
    try:
        env["bitsandbytes"] = importlib.import_module("bitsandbytes").__version__
    except Exception as exc:  # noqa: BLE001 - the bf16 rows need no bitsandbytes
        print(f"bitsandbytes unavailable: {exc}", flush=True)
    print(f"{env['gpu']}, torch {env['torch']}, transformers {env['transformers']}, peft {env['peft']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    failures = 0
    for c in configs:
        t0 = time.perf_counter()
        try:
            row = _train(c, torch, transformers, peft)
        except Exception as exc:  # noqa: BLE001 - record and go on to the next configuration
            failures += 1
            row = {"config": c.name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        common.release(torch)
        torch.cuda.reset_peak_memory_stats()
        row |= env
        common.append_row(args.out, row)
        peak = row.get("peak_alloc")
        shown = f"peak {peak / 1e9:.2f} GB" if isinstance(peak, int) else row.get("error", "")
        speed = f", {row['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in row else ""
        static = f", static {row['static_after_init'] / 1e9:.2f} GB" if "static_after_init" in row else ""
        print(f"{c.name:36} {'OOM ' if row.get('oom') else ''}{shown}{static}{speed} ({time.perf_counter() - t0:.1f}s)")
        sys.stdout.flush()
    print(f"{len(configs)} configurations in {time.perf_counter() - started:.0f}s; rows appended to {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
