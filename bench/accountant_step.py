"""The accountant's step alone (``Accountant.step``), on a world of jobs whose ledgers are in the
state the step meets at fleet size: ``--running`` jobs whose only change is the time, ``--settled``
finished jobs whose ledgers are written and shown, and per step ``--churn`` jobs whose pods start
and as many that end. ``bench/sim_scale.py`` times the same step inside a whole trace (the
largest size runs for many minutes); this one builds the state once and times only the steps,
in seconds, so that a change to the step can be measured on its own.

The world is ``tests.support.reconcile.World`` (plain dictionaries for kopf's indexes, the fake
writers): one spot pool, one AcceleratorPolicy with a monthly budget per team (four teams), a
clock moved by the step's interval (300 s) so the write interval and rate hold as in the
operator. The snapshot is folded before each step and handed to it, so the figure is the
accountant's own work (the scheduler's incremental read is the engine's, timed by
``sim_scale.py``); the thread work runs inline. The writes the watch would show are shown
before the next step, as the watch does. Every figure is CPU time (``time.process_time``).

Run: python bench/accountant_step.py [--running 4000 --settled 6000 --churn 500 --steps 8]
[--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import datetime as dt
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel_api.enums import JobPhase
from accel_api.job import AcceleratorJobStatus
from accel_operator.adapters.kube.costs import FakeCostWriter
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.engine import collector
from accel_operator.engine.accountant import Accountant
from accel_operator.engine.clock import ManualClock
from accel_operator.reconcile.common.snapshot import JobKey, Snapshot
from accel_operator.settings import OperatorSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support
from tests.support.reconcile import T0, World

TEAMS = ("research", "serving", "vision", "speech")
STEP_SECONDS = 300.0  # the accountant's interval in bench/sim_scale.py (10 ticks of 30 s)


def _status(phase: str, **extra: Any) -> dict[str, Any]:
    return {
        "phase": phase,
        "attempt": 0,
        "admittedTime": "2026-11-26T12:00:00Z",
        "plan": {"pool": "spot", "devices": 2, "nodes": 1, "capacityType": "spot", "costUsd": 20.0},
        **extra,
    }


class Bench:
    def __init__(self, running: int, settled: int, churn: int, steps: int) -> None:
        self.world = World()
        self.world.clock = ManualClock(T0 + dt.timedelta(minutes=30), monotonic=1000.0)
        self.world.pool("spot", capacityType="spot", price={"spotPerDeviceHour": 3.6})
        self.world.policy("budgets", budgets=[{"team": t, "limitUsd": 1e9} for t in TEAMS])
        self.names: list[str] = []
        # Running from the start: their pods started at T0. The settled ones run first and end
        # after the first step; the waiting ones start ``churn`` a step.
        for i in range(running + settled):
            self._job(f"r{i}", "Running", started=T0)
        self.settled = [f"r{i}" for i in range(running, running + settled)]
        self.waiting = [f"w{i}" for i in range(churn * steps)]
        for name in self.waiting:
            self._job(name, "Admitted", started=None)
        self.running = [f"r{i}" for i in range(running)]
        self.churn = churn
        sched = self.world.scheduler
        sched.settings = OperatorSettings(cost_interval_seconds=STEP_SECONDS, cost_rollup="", admitted_status_seconds=0)
        self.snap: Snapshot | None = None
        # The step reads the snapshot folded before it (not timed): see the module's docstring.
        setattr(sched, "current", lambda now: self.snap)  # noqa: B010
        self.writer = FakeJobWriter()
        self.accountant = Accountant(scheduler=sched, writer=self.writer, costs=FakeCostWriter(), prices=PriceBook())

    def _job(self, name: str, phase: str, *, started: dt.datetime | None) -> None:
        team = TEAMS[len(self.names) % len(TEAMS)]
        self.names.append(name)
        self.world.job(name, "spot", devices=2, status=_status(phase), team=team)
        self.world.pod(name, 0, 0, node=None, devices=2, started=started)

    def _replace(self, name: str, update: dict[str, Any], pod: dict[str, Any] | None = None) -> None:
        key: JobKey = ("ns", name)
        (view,) = self.world.jobs[key]
        self.world.jobs[key] = [dataclasses.replace(view, status=view.status.model_copy(update=update))]
        if pod is not None:
            self.world.pods[key] = [dataclasses.replace(p, **pod) for p in self.world.pods[key]]

    def show(self) -> None:
        """What the watch delivers after the writes: each written job with the status written."""
        for key, patch in self.writer.statuses.items():
            (view,) = self.world.jobs[key]
            status = {**view.status.model_dump(by_alias=True, mode="json", exclude_none=True), **patch}
            self.world.jobs[key] = [dataclasses.replace(view, status=AcceleratorJobStatus.model_validate(status))]
        self.writer.statuses.clear()

    def churn_step(self, k: int, now: dt.datetime) -> None:
        """Before step ``k``: the settled jobs end (once), ``churn`` waiting jobs' pods start and as
        many running jobs end."""
        done = {"phase": JobPhase.SUCCEEDED, "completion_time": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
        ended = self.settled if k == 1 else []
        if k >= 1:
            ended = ended + self.running[: self.churn]
            self.running = self.running[self.churn :]
            for name in self.waiting[: self.churn]:
                self._replace(name, {"phase": JobPhase.RUNNING}, {"started": now - dt.timedelta(seconds=60)})
                self.running.append(name)
            self.waiting = self.waiting[self.churn :]
        for name in ended:
            self._replace(name, done, {"finished": now - dt.timedelta(seconds=30), "phase": "Succeeded"})

    async def run(self, steps: int, profiler: cProfile.Profile | None) -> list[float]:
        real: Callable[..., Any] = asyncio.to_thread

        async def inline(fn: Callable[..., Any], /, *args: Any, **kw: Any) -> Any:
            return fn(*args, **kw)

        asyncio.to_thread = inline
        out: list[float] = []
        try:
            for k in range(steps):
                self.world.clock.advance(STEP_SECONDS)  # type: ignore[attr-defined]
                now = self.world.clock.now()
                self.show()
                self.churn_step(k, now)
                self.snap = self.world.scheduler.observe(now)
                if profiler is not None and k >= 2:
                    profiler.enable()
                t0 = time.process_time()
                await self.accountant.step(now)
                out.append(time.process_time() - t0)
                if profiler is not None:
                    profiler.disable()
                print(
                    f"step {k}: {out[-1] * 1000:.0f} ms CPU, {len(self.writer.statuses)} ledgers written",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            asyncio.to_thread = real
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--running", type=int, default=4000, help="jobs running throughout (default 4000)")
    p.add_argument("--settled", type=int, default=6000, help="jobs that end after the first step (default 6000)")
    p.add_argument("--churn", type=int, default=500, help="jobs whose pods start, and jobs that end, per step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--profile", action="store_true", help="cProfile the steps from the third on")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    collector.tune()
    bench = Bench(args.running, args.settled, args.churn, args.steps)
    profiler = cProfile.Profile() if args.profile else None
    steps = asyncio.run(bench.run(args.steps, profiler))
    steady = steps[2:] or steps  # from the third: the settled jobs written and shown
    row = {
        "running": args.running,
        "settled": args.settled,
        "churn": args.churn,
        "steps_ms": [round(s * 1000, 1) for s in steps],
        "steady_p50_ms": round(statistics.median(steady) * 1000, 1),
        "steady_max_ms": round(max(steady) * 1000, 1),
    }
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.top)
        print(text.getvalue())
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
