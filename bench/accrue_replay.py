"""The accrual of one job (``accrual.accrue``) on the inputs a fleet really gives it, against the
code it replaced (``tests/support/accrual_v1.py``: the ledger's model functions, a model copied
at every step).

Runs ``bench/sim_scale.py``'s trace at one size, keeps every ``accrue`` call the accountant makes
(the job view, what this process wrote, the tick, the base ledger: jobs that started, ended or
whose inputs moved since the last step), then calls both implementations on every kept call,
alternating, ``--rounds`` times each, and prints the CPU time per call (``time.process_time``;
the best round of each, as the machine's load moves single rounds) and how many results differ
(as models or as bytes on the wire: 0 expected).

Run: python bench/accrue_replay.py [--size 500x5000] [--ticks 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench, tests.support

from bench import sim_scale
from tests.support import accrual_v1

from accel_api.job import CostStatus
from accel_operator.accounting import accrual
from accel_operator.engine import collector
from accel_operator.reconcile.common.snapshot import JobView

Call = tuple[JobView, CostStatus | None, accrual.Tick, CostStatus | None]
Accrue = Callable[..., CostStatus]


def _kept(nodes: int, jobs: int, ticks: int) -> list[Call]:
    calls: list[Call] = []
    real = accrual.accrue

    def keeping(job: JobView, known: CostStatus | None, tick: accrual.Tick, *, base: CostStatus | None = None) -> Any:
        calls.append((job, known, tick, base))
        return real(job, known, tick, base=base)

    accrual.accrue = keeping  # accrual.step calls it by the module's name
    try:
        asyncio.run(sim_scale.simulate(nodes, jobs, ticks=ticks))
    finally:
        accrual.accrue = real
    return calls


def _round(fn: Accrue, calls: list[Call]) -> tuple[float, list[CostStatus]]:
    t0 = time.process_time()
    out = [fn(job, known, tick, base=base) for job, known, tick, base in calls]
    return time.process_time() - t0, out


def _wire(cost: CostStatus) -> str:
    return cost.model_dump_json(by_alias=True, exclude_none=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="500x5000", help="NODESxJOBS (default 500x5000)")
    p.add_argument("--ticks", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    nodes, jobs = (int(x) for x in args.size.split("x"))
    collector.tune()
    calls = _kept(nodes, jobs, args.ticks)
    best = {"draft": float("inf"), "models": float("inf")}
    differ = 0
    for _ in range(args.rounds):
        mine_s, mine = _round(accrual.accrue, calls)
        ref_s, ref = _round(accrual_v1.accrue, calls)
        best["draft"] = min(best["draft"], mine_s)
        best["models"] = min(best["models"], ref_s)
        differ = sum(1 for a, b in zip(mine, ref, strict=True) if a != b or _wire(a) != _wire(b))
    n = max(1, len(calls))
    print(
        f"{args.size}, {args.ticks} ticks: {len(calls)} accrue calls kept; "
        f"accrue on a draft {best['draft'] / n * 1e6:.1f} us a call, "
        f"on models (the reference) {best['models'] / n * 1e6:.1f} us a call (best of {args.rounds}); "
        f"results that differ: {differ}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
