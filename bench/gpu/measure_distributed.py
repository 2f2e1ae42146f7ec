"""Measure real per-device peak GPU memory and speed of DDP and FSDP2 training, for the planner's calibration.

Companion of ``measure_training.py`` (same random-init Hugging Face models, same training step,
same fields), for several GPUs of one host with NCCL, one process per GPU:

- ``sharding: ddp``: ``DistributedDataParallel(model, bucket_cap_mb=25)`` (the default bucket
  size; ``gradient_as_bucket_view=False``, the default, so the buckets are a second copy of the
  gradients) with ``torch.autocast(bfloat16)`` around the forward for ``amp_bf16``;
- ``sharding: fsdp_full`` / ``fsdp_grad_op``: FSDP2 ``fully_shard`` on every decoder layer and then
  on the root, ``reshard_after_forward=True`` (ZeRO-3-like) or ``False`` (ZeRO-2-like); for
  ``amp_bf16`` a ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` replaces
  autocast (fp32 master shards, bf16 compute, fp32 gradient reduce-scatter);
- ``sharding: none``: one process, no wrapper (the single-GPU baseline on the same card);
- step: ``loss = model(input_ids=ids, labels=ids).loss; loss.backward(); opt.step();
  opt.zero_grad(set_to_none=True)``, ``micro_batch`` random sequences of ``seq`` tokens per
  rank, ``--steps`` steps (12; the first sets ran 4); AdamW is ``torch.optim.AdamW(fused=True)``,
  SGD has momentum 0.9; gradient checkpointing is HF's ``gradient_checkpointing_enable(use_reentrant=False)``;
- ``static_after_init`` = ``memory_allocated()`` on rank 0 after wrapping, before the first
  step (the optimizer states do not exist yet); ``peak_alloc`` / ``peak_reserved`` = the maximum
  over the ranks of ``max_memory_allocated()`` / ``max_memory_reserved()`` over the steps;
  ``nvml_used_after`` = the maximum over the ranks of NVML's used memory right after the steps;
  ``step_s`` = the maximum over the ranks of the median wall time of the steps after the first
  ``--warmup`` (2: steps 3–12; the first sets: steps 2–4), and per rank (``*_by_rank``): that
  median, the median time to issue a step (``host_s``: until ``step()`` returned, before the
  closing synchronisation; near ``step_s`` where the host paces the step), the main thread's and
  the process's CPU time, every step's time and the peak; each row names the host, its CPU and
  driver, and every rank's card with its PCI address;
  ``tokens_per_s`` = micro_batch × seq × devices / step_s (the whole job) and
  ``tokens_per_s_per_device`` = micro_batch × seq / step_s.

Each configuration runs in isolation inside one ``torchrun`` launch per device count: everything
it allocated is deleted and the cache emptied before the next. An out-of-memory error is caught
on each rank and recorded as ``oom: true``. If a rank dies or hangs (an out-of-memory error on
one rank only can leave the others waiting in a collective; the process-group timeout ends
them), the launcher writes the row from the per-rank status files and relaunches with the
configurations that are left.

    python bench/gpu/measure_distributed.py --list
    python bench/gpu/measure_distributed.py --devices 2 --out /tmp/x.jsonl            # runs torchrun
    python bench/gpu/measure_distributed.py --devices 1 --only llama-1.1b-b4 --out /tmp/x.jsonl

Needs ``torch`` and ``transformers`` on the GPU machine only; ``--list`` needs neither.
``tests/data/calibration/h200-ddp-fsdp.jsonl`` was made with ``--devices 2``, ``--devices 4`` and
``--devices 1`` in turn on one 4 × H200 host (about 2.5 minutes for all three).
``--set mp`` measures the mixed-precision FSDP2 sweep instead (MP_PAIR on two GPUs, MP_QUAD on four
or eight: 1.1B–13B); ``tests/data/calibration/multi-gpu/h100x2-fsdp2-mp.jsonl`` is its ``--devices 2``
run on 2 × H100 80GB (under a minute), ``h100x4-fsdp2-mp.jsonl`` its ``--devices 4`` run on 4 × H100
80GB (about 80 s). ``--set host --devices 1`` runs every model of the several-GPU set on one GPU at
its per-device batches (the same-host baseline: ``multi-gpu/h100x4-ddp-fsdp-2026-11-28.jsonl`` is
that and ``--devices 4`` in one call on 4 × H100 80GB, about 80 s and 150 s); ``--set knobs
--devices 1`` two recipe knobs (chunked cross-entropy, activation CPU offload) beside the same jobs
without them, and checkpointing at equal batch (``knobs/h100-knobs-2026-11-28.jsonl``: one H100,
about 2.5 minutes). ``alloc_retries`` = the maximum over the ranks of the caching allocator's
``num_alloc_retries`` over the steps (frees and retries after a failed cudaMalloc).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repository root: bench.gpu.common, when run as a script

from bench.gpu import common  # noqa: E402

STEPS = 12  # timed steps per configuration (the first sets were measured with 4: --steps 4 --warmup 1)
WARMUP = 2  # steps left out of the median: step_s is the median of steps WARMUP+1..STEPS
DDP_BUCKET_CAP_MB = 25  # DistributedDataParallel's default
PG_TIMEOUT_S = 60  # a rank stuck in a collective (another rank died) gives up after this
SHARDINGS = ("none", "ddp", "fsdp_full", "fsdp_grad_op")


@dataclass(frozen=True)
class Config(common.ModelShape):
    sharding: str = "fsdp_full"  # ddp | fsdp_full | fsdp_grad_op | none (single GPU)
    precision: str = "amp_bf16"  # amp_bf16 | bf16
    optimizer: str = "adamw"  # adamw | sgd
    seq: int = 2048
    micro_batch: int = 4
    grad_ckpt: bool = False
    loss_kernel: str = "standard"  # standard | chunked (Llama, one GPU): see ChunkedLinearCrossEntropy
    activation_offload: bool = False  # one GPU: the forward under torch.autograd.graph.save_on_cpu


_SHAPES = common.SHAPES  # name: kind, hidden, layers, heads, kv_heads, inter, vocab


def _c(model: str, sharding: str, micro_batch: int, seq: int, *, ckpt: bool = False, **kw: Any) -> Config:
    kind, hidden, layers, heads, kv, inter, vocab = _SHAPES[model]
    tags = [model, sharding, f"b{micro_batch}x{seq}"]
    if ckpt:
        tags.append("ckpt")
    tags += [str(v) for k, v in sorted(kw.items()) if k in ("precision", "optimizer")]
    if kw.get("loss_kernel", "standard") != "standard":
        tags.append(f"{kw['loss_kernel']}-loss")
    if kw.get("activation_offload"):
        tags.append("offload")
    return Config(
        name="-".join(tags),
        kind=kind,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv,
        inter=inter,
        vocab=vocab,
        sharding=sharding,
        micro_batch=micro_batch,
        seq=seq,
        grad_ckpt=ckpt,
        **kw,
    )


# Several GPUs: DDP against FSDP full and grad-op sharding, with and without checkpointing, 124M–7B,
# micro batch 1–16, sequences 1024–4096, one pure-bf16 row and one SGD row. Ordered small to large;
# the configurations that may run out of memory come last in the list (an out-of-memory error on one
# rank only can end the launch; the launcher then goes on with the rest).
MULTI: tuple[Config, ...] = (
    _c("llama-125m", "ddp", 8, 1024),
    _c("llama-125m", "fsdp_full", 8, 1024),
    _c("llama-125m", "fsdp_grad_op", 8, 1024),
    _c("gpt2-124m", "ddp", 16, 1024),
    _c("gpt2-124m", "fsdp_full", 16, 1024),
    _c("gpt2-355m", "fsdp_grad_op", 8, 1024),
    _c("gpt2-355m", "ddp", 4, 1024, ckpt=True),
    _c("llama-350m", "ddp", 8, 2048),
    _c("llama-350m", "fsdp_full", 8, 2048),
    _c("llama-350m", "fsdp_grad_op", 4, 2048, ckpt=True),
    _c("llama-1.1b", "ddp", 4, 2048),
    _c("llama-1.1b", "fsdp_full", 4, 2048),
    _c("llama-1.1b", "ddp", 2, 4096, ckpt=True),
    _c("llama-1.1b", "fsdp_full", 8, 2048, ckpt=True),
    _c("llama-1.1b", "fsdp_grad_op", 4, 2048),
    _c("llama-1.1b", "ddp", 4, 2048, optimizer="sgd"),
    _c("llama-3b", "fsdp_full", 2, 2048),
    _c("llama-3b", "fsdp_grad_op", 4, 2048, ckpt=True),
    _c("llama-3b", "fsdp_full", 4, 2048, ckpt=True, precision="bf16"),
    _c("llama-7b", "fsdp_full", 2, 2048, ckpt=True),
    _c("llama-7b", "fsdp_grad_op", 1, 2048, ckpt=True),
    _c("llama-1.1b", "fsdp_full", 1, 2048),  # little compute per collective
    _c("llama-1.1b", "fsdp_grad_op", 2, 4096, ckpt=True),
    _c("llama-3b", "fsdp_full", 8, 2048, ckpt=True),
    _c("llama-3b", "ddp", 1, 1024, ckpt=True),  # fp32 weights + grads + buckets + Adam ≈ 69 GB: may not fit
    _c("llama-7b", "fsdp_full", 1, 2048),  # no checkpointing: may not fit on two 80 GB cards
    _c("llama-7b", "ddp", 1, 1024, ckpt=True),  # ≈ 135 GB of model states per device: does not fit
)

# One GPU, same card, no wrapper: the baselines the several-GPU rows are compared with.
SINGLE: tuple[Config, ...] = (
    _c("llama-125m", "none", 8, 1024),
    _c("llama-350m", "none", 8, 2048),
    _c("llama-1.1b", "none", 4, 2048),
    _c("gpt2-124m", "none", 16, 1024),
)

# ``--set host --devices 1``: a 1-GPU run of every model of MULTI at the per-device batches its
# several-GPU rows use, on the same host in the same call (the host's own dispatch speed and the
# card's, measured where the several-GPU rows ran). 7B cannot hold fp32 AdamW states on one 80 GB
# card: it runs in bf16 with SGD and checkpointing, the nearest that fits.
SINGLE_HOST: tuple[Config, ...] = (
    *SINGLE,
    _c("gpt2-355m", "none", 8, 1024),
    _c("gpt2-355m", "none", 4, 1024, ckpt=True),
    _c("llama-350m", "none", 4, 2048, ckpt=True),
    _c("llama-1.1b", "none", 1, 2048),
    _c("llama-1.1b", "none", 2, 4096, ckpt=True),
    _c("llama-3b", "none", 1, 1024, ckpt=True),
    _c("llama-3b", "none", 4, 2048, ckpt=True),
    _c("llama-3b", "none", 2, 2048),  # about 70 GB planned: may not fit
    _c("llama-7b", "none", 1, 2048, ckpt=True, precision="bf16", optimizer="sgd"),
)

# FSDP2 with bf16 mixed precision (fp32 master shards), full shard against grad-op, 1.1B–13B: the
# calibration of the sharded-memory and FSDP-throughput rows (``--set mp``). Four GPUs (and eight)
# run MP_QUAD; two run MP_PAIR (13B and the largest 7B batch cannot fit two 80 GB cards).
MP_PAIR: tuple[Config, ...] = (
    _c("llama-1.1b", "fsdp_full", 4, 2048),
    _c("llama-1.1b", "fsdp_grad_op", 4, 2048),
    _c("llama-3b", "fsdp_full", 2, 2048),
    _c("llama-3b", "fsdp_grad_op", 4, 2048, ckpt=True),
    _c("llama-7b", "fsdp_full", 2, 2048, ckpt=True),
    _c("llama-7b", "fsdp_grad_op", 1, 2048, ckpt=True),
)
MP_QUAD: tuple[Config, ...] = (
    *MP_PAIR,
    _c("llama-1.1b", "fsdp_full", 8, 2048, ckpt=True),
    _c("llama-3b", "fsdp_full", 4, 2048, ckpt=True),
    _c("llama-7b", "fsdp_full", 4, 2048, ckpt=True),
    _c("llama-13b", "fsdp_full", 1, 2048, ckpt=True),
    _c("llama-13b", "fsdp_full", 2, 4096, ckpt=True),
)

# ``--set knobs --devices 1``: two recipe knobs on one GPU, each beside the same job without it
# (chunked cross-entropy, activation CPU offload; 1.1B and 3.4B), and checkpointing's host cost at
# equal batch (host-bound 355M–374M with and without it).
KNOBS: tuple[Config, ...] = (
    _c("llama-1.1b", "none", 4, 2048),
    _c("llama-1.1b", "none", 4, 2048, loss_kernel="chunked"),
    _c("llama-1.1b", "none", 4, 2048, activation_offload=True),
    _c("llama-3b", "none", 2, 2048),
    _c("llama-3b", "none", 2, 2048, loss_kernel="chunked"),
    _c("llama-3b", "none", 2, 2048, activation_offload=True),
    _c("gpt2-355m", "none", 4, 1024),
    _c("gpt2-355m", "none", 4, 1024, ckpt=True),
    _c("llama-350m", "none", 4, 2048),
    _c("llama-350m", "none", 4, 2048, ckpt=True),
)

CONFIGS: tuple[Config, ...] = (
    *MULTI,
    *SINGLE_HOST,
    *(c for c in KNOBS if c.name not in {s.name for s in SINGLE_HOST}),
    *(c for c in MP_QUAD if c.name not in {m.name for m in MULTI}),
)

# The first run on four GPUs (4 × H200) measured this subset of MULTI; later runs measure all of MULTI.
QUAD_FIRST_RUN = (
    "llama-125m-fsdp_full-b8x1024",
    "gpt2-124m-ddp-b16x1024",
    "llama-350m-fsdp_full-b8x2048",
    "llama-1.1b-ddp-b4x2048",
    "llama-1.1b-fsdp_full-b4x2048",
    "llama-1.1b-fsdp_grad_op-b4x2048",
    "llama-3b-fsdp_full-b2x2048",
    "llama-3b-fsdp_grad_op-b4x2048-ckpt",
    "llama-7b-fsdp_full-b2x2048-ckpt",
    "llama-7b-fsdp_grad_op-b1x2048-ckpt",
    "llama-3b-ddp-b1x1024-ckpt",
)

# ----------------------------------------------------------------------------------------- worker


def chunked_linear_cross_entropy(torch: Any) -> Any:
    """Liger Kernel's fused linear cross-entropy in plain PyTorch (Hsu et al. 2024): the LM head's
    product, the softmax and both gradients a chunk of tokens at a time inside the forward, so the
    [tokens × vocab] logits exist one chunk at a time (chunk × vocab ≈ tokens × hidden); the
    backward only scales the gradients kept (of the hidden states, and the head's weight in fp32)."""

    class ChunkedLinearCrossEntropy(torch.autograd.Function):  # type: ignore[misc]  # torch is passed in untyped
        @staticmethod
        def forward(ctx: Any, hidden: Any, weight: Any, labels: Any) -> Any:
            n, width = hidden.shape
            chunks = max(1, -(-weight.shape[0] // width))
            size = -(-n // chunks)
            wb = weight.to(torch.bfloat16)
            grad_h = torch.empty_like(hidden)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for i in range(0, n, size):
                h = hidden[i : i + size].to(torch.bfloat16)
                y = labels[i : i + size]
                logits = (h @ wb.t()).float()
                lse = torch.logsumexp(logits, dim=-1)
                total += (lse - logits.gather(1, y[:, None]).squeeze(1)).sum()
                probs = torch.exp(logits - lse[:, None])
                probs[torch.arange(len(y), device=y.device), y] -= 1.0
                g = (probs / n).to(torch.bfloat16)
                grad_h[i : i + size] = (g @ wb).to(hidden.dtype)
                grad_w += (g.t() @ h).float()
            ctx.save_for_backward(grad_h, grad_w)
            ctx.weight_dtype = weight.dtype
            return total / n

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            grad_h, grad_w = ctx.saved_tensors
            return grad_h * grad, (grad_w * grad).to(ctx.weight_dtype), None

    return ChunkedLinearCrossEntropy


def _knob_step(c: Config, torch: Any, model: Any, ids: Any, opt: Any) -> Any:
    """One training step with the recipe knobs of ``c`` (one GPU, Llama, bf16 autocast)."""
    ce = chunked_linear_cross_entropy(torch) if c.loss_kernel == "chunked" else None
    offload = torch.autograd.graph.save_on_cpu(pin_memory=True) if c.activation_offload else None
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=c.precision == "amp_bf16"):
        if offload is not None:
            offload.__enter__()
        try:
            if ce is None:
                loss = model(input_ids=ids, labels=ids).loss
            else:
                hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
                labels = ids[:, 1:].reshape(-1)
                loss = ce.apply(hidden.reshape(-1, hidden.shape[-1]), model.lm_head.weight, labels)
        finally:
            if offload is not None:
                offload.__exit__(None, None, None)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def _build(c: Config, torch: Any, transformers: Any) -> Any:
    cfg = common.hf_config_of(
        transformers, c, kind=c.kind, positions=max(2048 if c.kind == "llama" else 1024, c.seq), use_cache=False
    )
    model = common.from_config(torch, transformers, cfg).to("cuda")
    if c.precision == "bf16":
        model = model.to(torch.bfloat16)
    return model


def _decoder_layers(model: Any) -> list[Any]:
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "layers"):
        return list(inner.layers)  # Llama
    return list(model.transformer.h)  # GPT-2


def _fsdp_api() -> tuple[Any, Any]:
    try:
        fsdp = importlib.import_module("torch.distributed.fsdp")
        return fsdp.fully_shard, fsdp.MixedPrecisionPolicy  # noqa: TRY300
    except (ImportError, AttributeError):  # torch < 2.6
        fsdp = importlib.import_module("torch.distributed._composable.fsdp")
        return fsdp.fully_shard, fsdp.MixedPrecisionPolicy


def _wrap(c: Config, model: Any, torch: Any, local_rank: int) -> tuple[Any, dict[str, Any]]:
    """The wrapped model and the row fields that say how it was wrapped."""
    if c.sharding == "none":
        return model, {"reduce_fp32": None}
    if c.sharding == "ddp":
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank], bucket_cap_mb=DDP_BUCKET_CAP_MB, gradient_as_bucket_view=False
        )
        return ddp, {
            "reduce_fp32": c.precision == "amp_bf16",  # fp32 parameters → fp32 gradients are all-reduced
            "bucket_cap_mb": DDP_BUCKET_CAP_MB,
            "gradient_as_bucket_view": False,
        }
    fully_shard, policy_cls = _fsdp_api()
    reshard = c.sharding == "fsdp_full"
    kw: dict[str, Any] = {"reshard_after_forward": reshard}
    if c.precision == "amp_bf16":
        kw["mp_policy"] = policy_cls(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in _decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model, {"reduce_fp32": c.precision == "amp_bf16", "reshard_after_forward": reshard}


def _status(status_dir: Path, rank: int, payload: dict[str, Any]) -> None:
    (status_dir / f"rank{rank}.json").write_text(json.dumps(payload), encoding="utf-8")


def _measure(  # noqa: PLR0917
    c: Config,
    torch: Any,
    transformers: Any,
    rank: int,
    local_rank: int,
    status_dir: Path,
    steps: tuple[int, int] = (STEPS, WARMUP),
) -> dict[str, Any]:
    """This rank's figures for one configuration (``steps``: how many steps, how many of them left
    out of the medians); never raises OutOfMemoryError."""
    local: dict[str, Any] = {"oom": False}
    torch.manual_seed(0)
    phase = "build"
    try:
        model = _build(c, torch, transformers)
        local["n_params"] = sum(p.numel() for p in model.parameters())
        common.for_training(model, grad_ckpt=c.grad_ckpt)
        phase = "wrap"
        model, how = _wrap(c, model, torch, local_rank)
        local |= how
        opt = common.optimizer(torch, c.optimizer, model.parameters())
        gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
        ids = torch.randint(0, c.vocab, (c.micro_batch, c.seq), device="cuda", generator=gen)
        local["static_after_init"] = common.static_after_init(torch)
        autocast = c.precision == "amp_bf16" and c.sharding in ("ddp", "none")
        phase = "steps"
        knobs = c.loss_kernel != "standard" or c.activation_offload
        timing, loss = common.timed_steps_host(
            torch,
            (lambda: _knob_step(c, torch, model, ids, opt))
            if knobs
            else (lambda: common.train_step(torch, model, ids, opt, autocast=autocast)),
            steps[0],
            before=lambda i: _status(status_dir, rank, {"config": c.name, "phase": f"step{i}"}),
        )
        skip = steps[1]
        local |= {
            **common.peaks(torch),
            "nvml_used_after": common.nvml_used(torch),
            "step_s": statistics.median(timing.wall[skip:]),
            "host_s": statistics.median(timing.host[skip:]),
            "cpu_s": statistics.median(timing.cpu[skip:]),
            "process_cpu_s": statistics.median(timing.process[skip:]),
            "step_times": [round(t, 6) for t in timing.wall],
            "loss": float(loss.detach().float().item()),
        }
    except torch.cuda.OutOfMemoryError:
        local |= {
            "oom": True,
            "oom_phase": phase,
            "peak_alloc": int(torch.cuda.max_memory_allocated()),
        }
        _status(status_dir, rank, {"config": c.name, "phase": phase, "oom": True})
    except Exception as exc:  # noqa: BLE001 - recorded; the same error on every rank keeps them in step
        local["error"] = f"{phase}: {type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
    finally:
        model = opt = ids = loss = None
        common.release(torch)
    return local


def _row(c: Config, ranks: list[dict[str, Any]], devices: int, env: dict[str, Any]) -> dict[str, Any]:
    r0 = ranks[0]
    n_params = next((r["n_params"] for r in ranks if "n_params" in r), None)
    row: dict[str, Any] = {
        "mode": "train",
        "arch": common.arch_label(c.kind, n_params) if n_params else c.name.split("-")[0] + "-" + c.name.split("-")[1],
        "kind": c.kind,
        **common.shape_fields(c),
        "precision": c.precision,
        "optimizer": c.optimizer,
        "sharding": c.sharding,
        "devices": devices,
        "seq": c.seq,
        "micro_batch": c.micro_batch,
        "grad_ckpt": c.grad_ckpt,
        **({"loss_kernel": c.loss_kernel} if c.loss_kernel != "standard" else {}),
        **({"activation_offload": True} if c.activation_offload else {}),
        "n_params": n_params,
        "static_after_init": r0.get("static_after_init"),
    }
    peaks = [r["peak_alloc"] for r in ranks if "peak_alloc" in r]
    errors = [r["error"] for r in ranks if "error" in r]
    if errors and not any(r["oom"] for r in ranks):
        row["error"] = errors[0]
    elif any(r["oom"] for r in ranks):
        row |= {
            "peak_alloc": max(peaks) if peaks else None,
            "oom": True,
            "oom_ranks": [i for i, r in enumerate(ranks) if r["oom"]],
            "oom_phase": next(r.get("oom_phase") for r in ranks if r["oom"]),
        }
    else:
        step_s = max(r["step_s"] for r in ranks)
        used = [r["nvml_used_after"] for r in ranks if r.get("nvml_used_after") is not None]
        row |= {
            "peak_alloc": max(peaks),
            "peak_reserved": max(r["peak_reserved"] for r in ranks),
            "peak_alloc_min_rank": min(peaks),
            "alloc_retries": max(r.get("alloc_retries", 0) for r in ranks),
            "step_s": step_s,
            "tokens_per_s": c.micro_batch * c.seq * devices / step_s,
            "tokens_per_s_per_device": c.micro_batch * c.seq / step_s,
            "oom": False,
        }
        if "host_s" in r0:  # per rank: the median step, the host's time to issue it, its CPU time
            row |= {
                "peak_alloc_by_rank": peaks,
                "step_s_by_rank": [r["step_s"] for r in ranks],
                "host_s_by_rank": [r["host_s"] for r in ranks],
                "cpu_s_by_rank": [r["cpu_s"] for r in ranks],
                "process_cpu_s_by_rank": [r["process_cpu_s"] for r in ranks],
                "step_times_by_rank": [r["step_times"] for r in ranks],
            }
        if used:
            row["nvml_used_after"] = max(used)
        row["loss"] = r0.get("loss")
    for key in ("reduce_fp32", "bucket_cap_mb", "gradient_as_bucket_view", "reshard_after_forward"):
        if key in r0 and r0[key] is not None:
            row[key] = r0[key]
    row["config"] = c.name
    return row | env


def worker(names: list[str], out: Path, status_dir: Path, steps: tuple[int, int] = (STEPS, WARMUP)) -> int:
    """One rank under torchrun: every configuration in ``names`` in turn; rank 0 appends the rows."""
    r = common.init_rank(PG_TIMEOUT_S)
    torch, transformers, dist, rank, world, local_rank = r.torch, r.transformers, r.dist, r.rank, r.world, r.local_rank
    env = common.environment(torch, transformers, distributed=world > 1)
    names_seen: list[Any] = [None] * world
    dist.all_gather_object(names_seen, env["gpu"])
    if len(set(names_seen)) > 1:
        env["gpus"] = names_seen  # every rank's card, where they differ
    host = common.host_fields(torch)
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, host)
    env |= {k: host[k] for k in ("hostname", "cpu_model", "cpu_count", "driver") if k in host}
    env["gpu_bus_by_rank"] = [h["gpu_bus"] for h in hosts]
    env["timed_steps"] = [steps[1] + 1, steps[0]]  # the medians are over these steps (1-based)
    if rank == 0:
        print(f"{world} × {env['gpu']}, torch {env['torch']}, transformers {env['transformers']}, nccl {env['nccl']}")
    by_name = {c.name: c for c in CONFIGS}
    for name in names:
        c = by_name[name]
        if world == 1:
            c = replace(c, sharding="none")
        _status(status_dir, rank, {"config": name, "phase": "start"})
        t0 = time.perf_counter()
        local = _measure(c, torch, transformers, rank, local_rank, status_dir, steps)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, local)
        _status(status_dir, rank, {"config": name, "phase": "done", "oom": local["oom"]})
        if rank == 0:
            row = _row(c, gathered, world, env)
            common.append_row(out, row)
            shown = "OOM" if row.get("oom") else row.get("error") or f"peak {row['peak_alloc'] / 1e9:.2f} GB"
            speed = f", {row['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in row else ""
            print(f"{world}x {name:44} {shown}{speed}  ({time.perf_counter() - t0:.1f}s)", flush=True)
        torch.cuda.reset_peak_memory_stats()
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------------------- launcher


def _done(out: Path, devices: int) -> set[str]:
    return {r["config"] for r in common.rows(out) if r.get("devices") == devices}


def launch(  # noqa: PLR0917
    configs: list[Config],
    devices: int,
    out: Path,
    launch_timeout_s: int,
    status_root: Path,
    steps: tuple[int, int] = (STEPS, WARMUP),
) -> int:
    """Run ``configs`` under ``torchrun --nproc_per_node=devices``; relaunch past a configuration that killed it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    status_dir = status_root / f"status-{devices}"
    status_dir.mkdir(parents=True, exist_ok=True)
    script = str(Path(__file__).resolve())

    def attempt(names: list[str]) -> int:
        for f in status_dir.glob("rank*.json"):
            f.unlink()
        return common.torchrun(
            script,
            devices,
            out=out,
            status_dir=status_dir,
            names=names,
            timeout_s=launch_timeout_s,
            extra=("--steps", str(steps[0]), "--warmup", str(steps[1])),
        )

    def died(broken: Config, rc: int) -> None:
        ranks = []
        for f in sorted(status_dir.glob("rank*.json")):
            ranks.append(json.loads(f.read_text(encoding="utf-8")))
        oom = any(r.get("oom") and r.get("config") == broken.name for r in ranks)
        row = {
            **{k: v for k, v in asdict(broken).items() if k != "name"},
            "mode": "train",
            "devices": devices,
            "config": broken.name,
            "oom": oom,
            "error": f"launch ended with {rc}; rank states: {ranks}",
        }
        common.append_row(out, row)
        print(f"{devices}x {broken.name}: launch died ({rc}), recorded {'oom' if oom else 'error'}", flush=True)

    def gave_up(left: list[Config]) -> None:
        print(f"{devices}x: three launches died; giving up on {[c.name for c in left]}", flush=True)

    pending = [c for c in configs if c.name not in _done(out, devices)]
    return common.relaunch(pending, launch=attempt, done=lambda: _done(out, devices), died=died, gave_up=gave_up)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSONL file to append the rows to")
    parser.add_argument("--only", help="comma-separated configuration names (see --list)")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument("--devices", type=int, default=2, help="processes (GPUs) per launch; 1 runs SINGLE")
    parser.add_argument(
        "--set",
        choices=("multi", "mp", "host", "knobs"),
        default="multi",
        help="mp: the mixed-precision FSDP2 sweep; host / knobs (--devices 1): every model of multi on one GPU / "
        "two recipe knobs on one GPU",
    )
    parser.add_argument("--steps", type=int, default=STEPS, help="steps per configuration")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="first steps left out of the medians")
    parser.add_argument("--launch-timeout", type=int, default=540, help="seconds before a launch is killed")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # set by the launcher
    parser.add_argument("--status-dir", type=Path, help="where the ranks leave their progress (default: a temp folder)")
    args = parser.parse_args(argv)
    configs = list(SINGLE if args.devices == 1 else MULTI)
    if args.set == "mp":
        configs = list(MP_PAIR if args.devices <= 2 else MP_QUAD)  # two cards hold less (no 13B)
    if args.set == "host":
        configs = list(SINGLE_HOST)
    if args.set == "knobs":
        configs = list(KNOBS)
    knobbed = [c.name for c in configs if c.loss_kernel != "standard" or c.activation_offload]
    if knobbed and (args.devices != 1 or any(not n.startswith("llama") for n in knobbed)):
        parser.error(f"the recipe knobs ({', '.join(knobbed)}) are measured on one GPU (--devices 1), Llama only")
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup {args.warmup} must leave at least one of the --steps {args.steps} timed")
    if args.only:
        configs, unknown = common.chosen(CONFIGS, args.only)
        if unknown:
            parser.error(f"unknown configuration(s): {', '.join(unknown)}; see --list")
    if args.list:
        common.print_configs(configs if args.only else CONFIGS)
        return 0
    if args.out is None:
        parser.error("--out is required")
    if args.worker:
        status_dir = args.status_dir or args.out.parent
        return worker([c.name for c in configs], args.out, status_dir, (args.steps, args.warmup))
    common.no_nvlink_multicast()
    status_root = args.status_dir or Path(tempfile.gettempdir()) / "measure_distributed"
    return launch(configs, args.devices, args.out, args.launch_timeout, status_root, (args.steps, args.warmup))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
