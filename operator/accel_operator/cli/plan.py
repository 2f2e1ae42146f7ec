"""``accelctl plan JOB.yaml``: where the planner would run a job, and why not elsewhere.

Prints every pool's best placement (``--all``: every pool × device count) with per-device
memory, step time, duration and cost, then the decision. ``-o json`` prints the stable contract
``{"job": ..., "candidates": [...], "decision": {...}}``. Exit status 0 for any valid plan,
schedulable or not (the decision says which); 2 for invalid input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from accel_api import InvalidResource, bounds
from accel_api.enums import CapacityType
from accel_api.job import AcceleratorJob
from accel_api.pool import AcceleratorPool
from accel_operator.cli import io
from accel_operator.planning import catalog, select

NAME = "plan"
HELP = (
    "Plan an AcceleratorJob: memory, speed and cost on each pool and device count, and the choice. "
    "Without --pools: one on-demand and one spot pool per catalog accelerator (catalog devices per node, "
    f"up to {select.DEFAULT_MAX_NODES} nodes, catalog list prices). Exit 0 for a valid plan even when "
    "nothing can run it (see decision.schedulable); exit 2 for invalid input."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB.yaml", help="file holding one AcceleratorJob (- for stdin)")
    parser.add_argument(
        "--pools",
        action="append",
        default=[],
        metavar="POOLS.yaml",
        help="AcceleratorPool resources to choose from (repeatable); default: one on-demand and one spot pool "
        "per catalog accelerator",
    )
    parser.add_argument(
        "--catalog", metavar="FILE", help="accelerator catalog YAML overriding or adding to the shipped one"
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--accelerator", metavar="ID", help="evaluate one placement: this catalog accelerator ...")
    parser.add_argument("--devices", type=int, metavar="N", help="... with this many devices (needs --accelerator)")
    parser.add_argument("--spot", action="store_true", help="with --accelerator: price the placement as spot")
    parser.add_argument("--all", action="store_true", help="table: every pool × device count, not each pool's best")


def _usage(message: str) -> Exception:
    from accel_operator.cli.errors import UsageError

    return UsageError(message)


def _job(path: str) -> AcceleratorJob:
    resources = io.read_resources(path)
    jobs = [r for r in resources if isinstance(r, AcceleratorJob)]
    if not jobs:
        kinds = ", ".join(sorted({type(r).__name__ for r in resources}))
        raise InvalidResource([f"(document): expected an AcceleratorJob, found {kinds}"], path)
    if len(jobs) > 1:
        names = ", ".join(j.metadata.name or "(unnamed)" for j in jobs)
        raise _usage(f"{path}: (document): holds {len(jobs)} AcceleratorJobs ({names}); plan one file per job")
    return jobs[0]


def _pools(paths: list[str]) -> list[select.PoolOffer]:
    offers: list[select.PoolOffer] = []
    for path in paths:
        found = [r for r in io.read_resources(path) if isinstance(r, AcceleratorPool)]
        if not found:
            raise InvalidResource(["(document): expected AcceleratorPool resources, found none"], path)
        for i, pool in enumerate(found):
            offers.append(select.PoolOffer(name=pool.metadata.name or f"{path}#{i + 1}", spec=pool.spec))
    return offers


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by null: JSON has no such numbers, and an
    estimate that is not finite is unknown."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _gb(x: int | None) -> str:
    return "-" if x is None else f"{x / 1e9:.1f}GB"


def _dur(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    if s < 3600:
        return f"{s / 60:.1f}m"
    if s < 3 * 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def _money(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _table(plan: select.Plan, show_all: bool) -> str:
    job = plan.job
    head = (
        f"job {job['name'] or '(unnamed)'}: {job['mode']}, {job['parameters'] / 1e9:.2f}B parameters, "
        f"{job['precision']}, {job['tokens']:,} tokens; objective {job['objective']}"
    )
    if job.get("deadlineSeconds"):
        head += f", deadline {_dur(job['deadlineSeconds'])}"
    if job.get("maxCostUSD"):
        head += f", maxCost {_money(job['maxCostUSD'])}"
    head += f", spot {job['spotPolicy']}"
    lines = [head, *(f"note: {n}" for n in job["notes"])]
    rows = list(plan.candidates) if show_all else select.best_per_pool(plan.candidates)
    cols = (
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
    table: list[tuple[str, ...]] = [cols]
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
                "; ".join(c.reasons) if c.rank != 1 else "chosen",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(cols) - 1)]
    for r in table:
        lines.append("  ".join(v.ljust(widths[i]) for i, v in enumerate(r[:-1])) + "  " + r[-1])
    state = "schedulable" if plan.schedulable else "NOT schedulable"
    lines.append("")
    lines.append(f"decision: {state}: {plan.reason}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if (args.accelerator is None) != (args.devices is None):
        raise _usage("--accelerator and --devices go together")
    if args.devices is not None and not 1 <= args.devices <= bounds.DEVICES:
        raise _usage(f"--devices must be between 1 and {bounds.DEVICES} (got {args.devices})")
    if args.accelerator is not None and args.pools:
        raise _usage("--accelerator/--devices evaluate one placement without pools; drop --pools")
    if args.spot and args.accelerator is None:
        raise _usage("--spot needs --accelerator and --devices")
    try:
        cat = catalog.load(args.catalog)
    except catalog.CatalogError as exc:
        message = str(exc)
        shown = message if len(message) <= 300 else message[:299] + f"… ({len(message)} chars)"
        raise _usage(f"--catalog: {shown}") from None
    job = _job(args.job)
    name = job.metadata.name
    if args.accelerator is not None:
        capacity = CapacityType.SPOT if args.spot else CapacityType.ON_DEMAND
        result = select.evaluate(job.spec, args.accelerator, args.devices, cat, capacity_type=capacity, name=name)
    else:
        offers = _pools(args.pools) if args.pools else list(select.default_pools(cat))
        result = select.plan(job.spec, offers, cat, name=name)
    if args.output == "json":
        out: dict[str, Any] = result.to_json()
        out["job"]["namespace"] = job.metadata.namespace
        json.dump(_finite(out), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(_table(result, args.all))
    return 0
