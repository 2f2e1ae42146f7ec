"""Measure real per-stage peak GPU memory and speed of 2-stage pipeline-parallel training, for the planner.

Companion of ``measure_distributed.py`` (same random-init Hugging Face Llama models, same
precision and optimizer), for pipeline parallelism with ``torch.distributed.pipelining``: one
process per GPU, one pipeline stage per process, no data parallelism.

- The model is split by hand at ``ceil(layers / 2)``: stage 0 holds the token embedding and the
  first half of the decoder layers, stage 1 the rest, the final norm and the LM head. Each stage
  builds its own rotary table (as the HF model does once per forward). Stage 0 sends the residual
  stream (fp32 under autocast: the embedding's output is fp32 and every residual add keeps it).
- Stage 1's loss is ``transformers``' ``ForCausalLMLoss`` (the logits upcast to fp32, labels shifted),
  the one ``LlamaForCausalLM`` uses; the labels are the input ids, as in the other scripts.
- ``amp_bf16``: fp32 weights, ``torch.autocast(bfloat16)`` inside each stage's forward (backward runs
  in the dtypes autocast chose), fp32 gradients accumulated over the micro-batches;
  ``torch.optim.AdamW(fused=True)`` per stage; checkpointing is HF's
  ``gradient_checkpointing_enable(use_reentrant=False)`` on the decoder layers.
- ``Schedule1F1B`` (or ``ScheduleGPipe``) with ``n_microbatches = grad_accum``; a step is one
  ``schedule.step`` over ``micro_batch × grad_accum`` sequences, ``opt.step()`` and
  ``opt.zero_grad(set_to_none=True)``, four steps; the ranks meet at a barrier before each.
- ``peak_alloc`` = the largest ``max_memory_allocated()`` of the two stages (``peak_alloc_by_stage``
  gives both), ``static_after_init`` per stage after the split (weights only);
  ``step_s`` = the slowest stage's median of steps 2–4; ``tokens_per_s`` = micro_batch × seq ×
  grad_accum / step_s (the whole job), ``tokens_per_s_per_device`` = that / 2.

Each configuration runs in isolation inside one ``torchrun --nproc_per_node=2`` launch; everything
is deleted and the cache emptied before the next. If a launch dies or hangs (an out-of-memory error
on one stage leaves the other waiting in a send), the launcher records the row and relaunches with
the configurations that are left.

    python bench/gpu/measure_pipeline.py --list
    python bench/gpu/measure_pipeline.py --out /tmp/pp.jsonl

Needs ``torch`` and ``transformers`` on the GPU machine only; ``--list`` needs neither.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repository root: bench.gpu.common, when run as a script

from bench.gpu import common  # noqa: E402

STEPS = 4
STAGES = 2
PG_TIMEOUT_S = 60


@dataclass(frozen=True)
class Config(common.ModelShape):
    micro_batch: int
    seq: int
    grad_accum: int
    schedule: str = "1f1b"  # 1f1b | gpipe
    grad_ckpt: bool = False
    precision: str = "amp_bf16"


_SHAPES = {name: shape[1:] for name, shape in common.SHAPES.items() if shape[0] == "llama"}  # the Llama shapes


def _c(
    model: str, micro_batch: int, seq: int, grad_accum: int, *, schedule: str = "1f1b", ckpt: bool = False
) -> Config:
    hidden, layers, heads, kv, inter, vocab = _SHAPES[model]
    tags = [model, f"pp2-{schedule}", f"b{micro_batch}x{seq}", f"m{grad_accum}"] + (["ckpt"] if ckpt else [])
    return Config(
        name="-".join(tags),
        kind="llama",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv,
        inter=inter,
        vocab=vocab,
        micro_batch=micro_batch,
        seq=seq,
        grad_accum=grad_accum,
        schedule=schedule,
        grad_ckpt=ckpt,
    )


# Small to large; the one that may run out of memory last.
CONFIGS: tuple[Config, ...] = (
    _c("llama-125m", 8, 1024, 4),
    _c("llama-350m", 8, 2048, 4),
    _c("llama-1.1b", 4, 2048, 4),
    _c("llama-1.1b", 4, 2048, 8),
    _c("llama-1.1b", 4, 2048, 4, schedule="gpipe"),
    _c("llama-1.1b", 8, 2048, 4, ckpt=True),
    _c("llama-3b", 2, 2048, 4),
    _c("llama-3b", 4, 2048, 8, ckpt=True),
    _c("llama-7b", 2, 2048, 8, ckpt=True),
)


def _stage_module(torch: Any, model: Any, lo: int, hi: int, *, first: bool, last: bool, autocast: bool) -> Any:
    """Stage ``[lo, hi)`` of a ``LlamaForCausalLM`` as a module whose forward takes ids (first) or hidden states.

    The stage gets its modules as arguments (no closure over ``model``), so deleting the model
    frees what the stage does not hold."""

    class Stage(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, embed: Any, layers: list[Any], norm: Any, lm_head: Any, rotary: Any) -> None:
            super().__init__()
            self.embed = embed
            self.layers = torch.nn.ModuleList(layers)
            self.norm = norm
            self.lm_head = lm_head
            self.rotary = rotary

        def forward(self, x: Any) -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                h = self.embed(x) if self.embed is not None else x
                pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
                pe = self.rotary(h, pos)
                for layer in self.layers:
                    out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
                    h = out[0] if isinstance(out, tuple) else out
                if self.norm is not None:
                    h = self.lm_head(self.norm(h))
            return h

    inner = model.model
    return Stage(
        inner.embed_tokens if first else None,
        list(inner.layers)[lo:hi],
        inner.norm if last else None,
        model.lm_head if last else None,
        inner.rotary_emb,
    )


def _build(c: Config, torch: Any, transformers: Any, rank: int) -> tuple[Any, int]:
    cfg = common.hf_config_of(transformers, c, kind="llama", positions=max(2048, c.seq), use_cache=False)
    model = common.from_config(torch, transformers, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    if c.precision == "bf16":
        model = model.to(torch.bfloat16)
    common.for_training(model, grad_ckpt=c.grad_ckpt)
    split = -(-c.layers // STAGES)
    lo, hi = (0, split) if rank == 0 else (split, c.layers)
    stage = _stage_module(
        torch, model, lo, hi, first=rank == 0, last=rank == STAGES - 1, autocast=c.precision == "amp_bf16"
    )
    # Drop what this stage does not hold (the other stage's layers, and the embedding or head).
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return stage, n_params


def _measure(c: Config, torch: Any, transformers: Any, rank: int, dist: Any) -> dict[str, Any]:
    pipelining = importlib.import_module("torch.distributed.pipelining")
    local: dict[str, Any] = {"oom": False}
    torch.manual_seed(0)
    phase = "build"
    stage_mod: Any = None
    opt: Any = None
    sched: Any = None
    try:
        stage_mod, n_params = _build(c, torch, transformers, rank)
        local["n_params"] = n_params
        local["stage_params"] = sum(p.numel() for p in stage_mod.parameters())
        device = torch.device("cuda", torch.cuda.current_device())
        stage = pipelining.PipelineStage(stage_mod, rank, STAGES, device)
        loss_utils = importlib.import_module("transformers.loss.loss_utils")

        def loss_fn(logits: Any, labels: Any) -> Any:
            return loss_utils.ForCausalLMLoss(logits, labels, vocab_size=c.vocab)

        cls = pipelining.Schedule1F1B if c.schedule == "1f1b" else pipelining.ScheduleGPipe
        sched = cls(stage, n_microbatches=c.grad_accum, loss_fn=loss_fn)
        opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-4, fused=True)
        gen = torch.Generator(device="cuda").manual_seed(1000)  # the same ids on both stages
        ids = torch.randint(0, c.vocab, (c.micro_batch * c.grad_accum, c.seq), device="cuda", generator=gen)
        local["static_after_init"] = common.static_after_init(torch)
        losses: list[Any] = []

        def step() -> None:
            losses.clear()
            if rank == 0:
                sched.step(ids)
            else:
                sched.step(target=ids, losses=losses)
            opt.step()
            opt.zero_grad(set_to_none=True)

        phase = "steps"
        times, _ = common.timed_steps(torch, step, STEPS, before=lambda _i: dist.barrier())
        local |= {
            **common.peaks(torch),
            "nvml_used_after": common.nvml_used(torch),
            "step_s": statistics.median(times[1:]),
            "step_times": times,
        }
        if losses:
            local["loss"] = float(sum(float(x.detach().float().item()) for x in losses) / len(losses))
    except torch.cuda.OutOfMemoryError:
        local |= {"oom": True, "oom_phase": phase, "peak_alloc": int(torch.cuda.max_memory_allocated())}
    except Exception as exc:  # noqa: BLE001 - recorded in the row
        local["error"] = f"{phase}: {type(exc).__name__}: {exc}"[:800]
        traceback.print_exc()
    finally:
        stage_mod = opt = sched = None
        common.release(torch)
    return local


def _row(c: Config, ranks: list[dict[str, Any]], env: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "mode": "train",
        "kind": c.kind,
        **common.shape_fields(c),
        "precision": c.precision,
        "optimizer": "adamw",
        "sharding": "none",
        "pipeline_parallel": STAGES,
        "schedule": c.schedule,
        "devices": STAGES,
        "seq": c.seq,
        "micro_batch": c.micro_batch,
        "grad_accum": c.grad_accum,
        "grad_ckpt": c.grad_ckpt,
        "n_params": next((r["n_params"] for r in ranks if "n_params" in r), None),
        "stage_params": [r.get("stage_params") for r in ranks],
        "static_after_init_by_stage": [r.get("static_after_init") for r in ranks],
    }
    errors = [r["error"] for r in ranks if "error" in r]
    peaks = [r.get("peak_alloc") for r in ranks]
    if any(r["oom"] for r in ranks):
        row |= {"oom": True, "oom_ranks": [i for i, r in enumerate(ranks) if r["oom"]], "peak_alloc_by_stage": peaks}
    elif errors:
        row |= {"error": errors[0], "oom": False}
    else:
        step_s = max(r["step_s"] for r in ranks)
        tokens = c.micro_batch * c.seq * c.grad_accum
        row |= {
            "peak_alloc": max(int(r["peak_alloc"]) for r in ranks),
            "peak_alloc_by_stage": peaks,
            "peak_reserved_by_stage": [r["peak_reserved"] for r in ranks],
            "nvml_used_after_by_stage": [r.get("nvml_used_after") for r in ranks],
            "step_s": step_s,
            "step_s_by_stage": [r["step_s"] for r in ranks],
            "tokens_per_s": tokens / step_s,
            "tokens_per_s_per_device": tokens / step_s / STAGES,
            "oom": False,
            "loss": next((r["loss"] for r in ranks if "loss" in r), None),
        }
    row["config"] = c.name
    return row | env


def worker(names: list[str], out: Path, status_dir: Path) -> int:
    r = common.init_rank(PG_TIMEOUT_S)
    torch, transformers, dist, rank = r.torch, r.transformers, r.dist, r.rank
    env = common.environment(torch, transformers, distributed=True)
    if rank == 0:
        print(f"{STAGES} × {env['gpu']}, torch {env['torch']}, transformers {env['transformers']}", flush=True)
    by_name = {c.name: c for c in CONFIGS}
    for name in names:
        c = by_name[name]
        (status_dir / f"rank{rank}.json").write_text(json.dumps({"config": name}), encoding="utf-8")
        t0 = time.perf_counter()
        local = _measure(c, torch, transformers, rank, dist)
        gathered: list[Any] = [None] * STAGES
        dist.all_gather_object(gathered, local)
        if rank == 0:
            row = _row(c, gathered, env)
            common.append_row(out, row)
            shown = (
                "OOM"
                if row.get("oom")
                else row.get("error") or f"peaks {[p / 1e9 for p in row['peak_alloc_by_stage']]} GB"
            )
            speed = f", {row['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in row else ""
            print(f"{name:40} {shown}{speed}  ({time.perf_counter() - t0:.1f}s)", flush=True)
        torch.cuda.reset_peak_memory_stats()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _done(out: Path) -> set[str]:
    return {r["config"] for r in common.rows(out)}


def launch(configs: list[Config], out: Path, timeout_s: int, status_dir: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    status_dir.mkdir(parents=True, exist_ok=True)
    script = str(Path(__file__).resolve())

    def attempt(names: list[str]) -> int:
        return common.torchrun(script, STAGES, out=out, status_dir=status_dir, names=names, timeout_s=timeout_s)

    def died(broken: Config, rc: int) -> None:
        row = {**asdict(broken), "config": broken.name, "oom": None, "error": f"launch ended with {rc}"}
        common.append_row(out, row)

    pending = [c for c in configs if c.name not in _done(out)]
    return common.relaunch(pending, launch=attempt, done=lambda: _done(out), died=died)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", help="comma-separated configuration names (see --list)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--launch-timeout", type=int, default=420)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--status-dir", type=Path)
    args = parser.parse_args(argv)
    configs = list(CONFIGS)
    if args.only:
        configs, unknown = common.chosen(CONFIGS, args.only)
        if unknown:
            parser.error(f"unknown configuration(s): {', '.join(unknown)}; see --list")
    if args.list:
        common.print_configs(configs)
        return 0
    if args.out is None:
        parser.error("--out is required")
    status_dir = args.status_dir or Path(tempfile.gettempdir()) / "measure_pipeline"
    if args.worker:
        return worker([c.name for c in configs], args.out, status_dir)
    common.no_nvlink_multicast()
    return launch(configs, args.out, args.launch_timeout, status_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
