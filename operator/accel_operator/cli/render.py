"""``accelctl plan`` output: the stable JSON contract and the table, written from typed values.

The JSON (``{"job": ..., "candidates": [...], "decision": {...}}``) is a contract: field names do
not change. Every number in it is finite (a non-finite figure is written as null).
"""

from __future__ import annotations

import math
from typing import Any

from accel_api.enums import WorkloadMode
from accel_operator.planning import explain
from accel_operator.planning.candidates import Candidate, Plan, best_per_pool


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _round(x: float | None, digits: int) -> float | None:
    x = _finite(x)
    return None if x is None else round(x, digits)


def job_json(plan: Plan, namespace: str | None = None) -> dict[str, Any]:
    spec, w = plan.spec, plan.profile
    s = w.shape
    out: dict[str, Any] = {
        "name": plan.name,
        "namespace": namespace,
        "model": spec.model.name,
        "parameters": s.params,
        "architecture": {
            "layers": s.layers,
            "hidden": s.hidden,
            "heads": s.heads,
            "kvHeads": s.kv_heads,
            "intermediate": s.intermediate,
            "vocab": s.vocab,
            "mlp": s.mlp.value,
        },
        "mode": w.mode.value,
        "precision": w.precision.value,
        "tokens": w.tokens,
        "objective": spec.objective.value,
        "deadlineSeconds": spec.deadline_seconds,
        "maxCostUSD": spec.max_cost,
        "spotPolicy": spec.spot.policy.value,
        "checkpointIntervalMinutes": None if spec.checkpoint is None else spec.checkpoint.interval_minutes,
        "notes": list(w.notes),
    }
    if w.mode is WorkloadMode.TRAINING:
        out |= {
            "optimizer": w.optimizer.value,
            "microBatch": w.micro_batch,
            "seqLen": w.seq_len,
            "gradientCheckpointing": w.checkpointing,
            "recompute": w.recompute.value,
            "framework": w.framework.value,
            "sharding": w.sharding.value,
            "tensorParallel": w.tensor_parallel,
            "pipelineParallel": w.pipeline_parallel,
            "contextParallel": w.context_parallel,
            "gradientAccumulation": w.gradient_accumulation,
        }
    else:
        out |= {
            "batch": w.batch,
            "promptLen": w.prompt_len,
            "newTokens": w.new_tokens,
            "tensorParallel": w.tensor_parallel,
        }
    return out


def candidate_json(c: Candidate) -> dict[str, Any]:
    mem, speed, ce = c.memory, c.speed, c.cost
    return {
        "pool": c.pool,
        "accelerator": c.accelerator,
        "devices": c.devices,
        "nodes": c.nodes,
        "capacityType": c.capacity_type.value,
        "fits": c.fits,
        "peakAllocatedBytes": None if mem is None else mem.peak_allocated_bytes,
        "footprintBytes": None if mem is None else mem.footprint_bytes,
        "deviceMemoryBytes": None if mem is None else mem.device_bytes,
        "peakAt": None if mem is None else mem.peak_at,
        "stepSeconds": None if speed is None else _finite(speed.step_seconds),
        "tokensPerSecond": None if speed is None else _finite(speed.tokens_per_second),
        "durationSeconds": None if speed is None else _finite(speed.duration_seconds),
        "expectedSeconds": None if ce is None else _finite(ce.expected_seconds),
        "mfu": None if speed is None else _round(speed.mfu, 4),
        "costUSD": None
        if ce is None
        else {
            "onDemand": _round(ce.on_demand_usd, 2),
            "spot": _round(ce.spot_usd, 2),
            "expected": _round(ce.expected_usd, 2),
        },
        "expectedPreemptions": None if ce is None else _round(ce.preemptions, 2),
        "feasible": c.feasible,
        "reasons": list(explain.reasons(c)),
        "notes": list(c.notes),
        "rank": c.rank,
    }


def plan_json(plan: Plan, namespace: str | None = None) -> dict[str, Any]:
    """The stable JSON contract of ``accelctl plan -o json``: job, candidates, decision."""
    win = plan.winner
    decision: dict[str, Any] = {"schedulable": plan.schedulable, "reason": plan.reason}
    if win is not None and win.cost is not None:
        decision |= {
            "pool": win.pool,
            "accelerator": win.accelerator,
            "devices": win.devices,
            "nodes": win.nodes,
            "capacityType": win.capacity_type.value,
            "costUSD": _round(win.cost.expected_usd, 2),
            "durationSeconds": _finite(win.cost.expected_seconds),
        }
    else:
        decision |= {"pool": None, "accelerator": None, "devices": None, "nodes": None, "capacityType": None}
    decision["poolReasons"] = dict(explain.pool_reasons(plan))
    return {
        "job": job_json(plan, namespace),
        "candidates": [candidate_json(c) for c in plan.candidates],
        "decision": decision,
    }


def _gb(x: int | None) -> str:
    return "-" if x is None else f"{x / 1e9:.1f}GB"


def _dur(s: float | None) -> str:
    return "-" if s is None or not math.isfinite(s) else explain.duration(s)


def _money(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else explain.money(x)


COLUMNS = (
    "RANK",
    "POOL",
    "ACCELERATOR",
    "DEV",
    "NODES",
    "CAPACITY",
    "FITS",
    "PEAK/DEV",
    "NVML/DEV",
    "STEP",
    "TOKENS/S",
    "DURATION",
    "COST",
    "WHY NOT",
)


def plan_table(plan: Plan, show_all: bool) -> str:
    spec, w = plan.spec, plan.profile
    head = (
        f"job {plan.name or '(unnamed)'}: {w.mode.value}, {w.shape.params / 1e9:.2f}B parameters, "
        f"{w.precision.value}, {w.tokens:,} tokens; objective {spec.objective.value}"
    )
    if spec.deadline_seconds:
        head += f", deadline {_dur(spec.deadline_seconds)}"
    if spec.max_cost:
        head += f", maxCost {_money(spec.max_cost)}"
    head += f", spot {spec.spot.policy.value}"
    lines = [head, *(f"note: {n}" for n in w.notes)]
    rows = list(plan.candidates) if show_all else best_per_pool(plan.candidates)
    table: list[tuple[str, ...]] = [COLUMNS]
    for c in rows:
        mem, speed, cost = c.memory, c.speed, c.cost
        table.append(
            (
                str(c.rank) if c.rank is not None else "-",
                c.pool,
                c.accelerator,
                str(c.devices),
                str(c.nodes),
                c.capacity_type.value,
                "yes" if c.fits else "no",
                _gb(None if mem is None else mem.peak_allocated_bytes),
                _gb(None if mem is None else mem.footprint_bytes),
                "-" if speed is None else f"{speed.step_seconds:.3g}s",
                "-" if speed is None else f"{speed.tokens_per_second:,.0f}",
                _dur(None if cost is None else cost.expected_seconds),
                _money(None if cost is None else cost.expected_usd),
                "; ".join(explain.reasons(c)) if c.rank != 1 else "chosen",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS) - 1)]
    for r in table:
        lines.append("  ".join(v.ljust(widths[i]) for i, v in enumerate(r[:-1])) + "  " + r[-1])
    state = "schedulable" if plan.schedulable else "NOT schedulable"
    lines.append("")
    lines.append(f"decision: {state}: {plan.reason}")
    return "\n".join(lines)
