"""What consolidation adds to a scheduling pass, at cluster scale (no cluster).

Builds the scheduler's indexes in memory: N nodes × 8 H100 in 10 pools, every node holding one
4-GPU running job that checkpoints (so every pool is fragmented: half its devices free, no node
whole), a waiting 2-node × 8 gang per pool, and a policy that allows consolidation. Then times,
over R repetitions: for the 10 gangs, ``decide`` + ``consolidate.amend`` (the proposal over the
pool's occupants, the hourly rate and the moves in flight, both scans of every job) against
``decide`` alone; for every running job, ``decide`` + ``consolidate.carry`` (the common case: no
move asked) against ``decide`` alone. Prints the medians.

Run: ``PYTHONPATH=. python bench/consolidate.py [--nodes 1000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.policy import AcceleratorPolicy
from accel_operator.engine import schedule
from accel_operator.engine.scheduler import Scheduler
from accel_operator.reconcile.common.snapshot import JobView
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import consolidate

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repository root: bench.sched_world, when run as a script

from bench.sched_world import NOW, SPEC, add_pools, add_running, indexes, scheduler  # noqa: E402


def build(nodes: int) -> Scheduler:
    idx = indexes("policies")
    spec = AcceleratorJobSpec.model_validate(SPEC)
    for p, pool in enumerate(add_pools(idx, nodes)):
        gang = {**SPEC, "placement": {"pools": [pool], "minDevices": 16, "maxDevices": 16}}
        view = JobView(
            "ns",
            f"gang-{p}",
            f"uid-g{p}",
            NOW,
            1,
            AcceleratorJobSpec.model_validate(gang),
            (),
            AcceleratorJobStatus(),
        )
        idx["jobs"][("ns", f"gang-{p}")] = [view]
    checkpoint = {"lastCheckpoint": {"uri": "s3://ckpt/x/step-5", "step": 5, "time": "2026-11-26T11:50:00Z"}}
    for i in range(nodes):
        add_running(idx, i, spec=spec, devices=4, created=NOW - dt.timedelta(hours=1), status=checkpoint)
    policy = {"metadata": {"name": "platform"}, "spec": {"consolidation": {"allowed": True, "maxMovesPerHour": 100}}}
    idx["policies"]["platform"] = [AcceleratorPolicy.model_validate(policy)]
    return scheduler(idx)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sched = build(args.nodes)
    snap = sched.observe(NOW)
    from dataclasses import replace

    plans = {k: p for k, j in snap.jobs.items() if j.phase is None and (p := sched.plans.plan(j, snap)) is not None}
    snap = replace(snap, plans=plans)
    rules = schedule.consolidation_rules(sched.settings, snap)
    gangs = [j for j in snap.jobs.values() if j.phase is None]
    running = [j for j in snap.jobs.values() if j.phase is not None]
    g_plain, g_amend, r_plain, r_carry = [], [], [], []
    ordered = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for job in gangs:
            decide(job, snap, NOW, cache=sched.plans.cache)
        g_plain.append(time.perf_counter() - t0)
        ordered = 0
        t0 = time.perf_counter()
        for job in gangs:
            _d, orders = consolidate.amend(decide(job, snap, NOW, cache=sched.plans.cache), job, snap, NOW, rules)
            ordered += len(orders)
        g_amend.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for job in running:
            decide(job, snap, NOW, cache=sched.plans.cache)
        r_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for job in running:
            consolidate.carry(decide(job, snap, NOW, cache=sched.plans.cache), job, snap, NOW, rules)
        r_carry.append(time.perf_counter() - t0)
    med = statistics.median
    n = args.nodes
    print(f"nodes={n} running jobs={n} waiting gangs={len(gangs)} repeat={args.repeat}")
    print(
        f"gangs: decide {med(g_plain) * 1e3:.2f} ms; decide + consolidate.amend {med(g_amend) * 1e3:.2f} ms "
        f"({(med(g_amend) - med(g_plain)) / len(gangs) * 1e3:.2f} ms per fragmented gang; {ordered} move(s) ordered)"
    )
    print(
        f"running: decide {med(r_plain) * 1e3:.1f} ms; decide + consolidate.carry {med(r_carry) * 1e3:.1f} ms "
        f"({(med(r_carry) - med(r_plain)) / n * 1e6:.2f} us per job)"
    )


if __name__ == "__main__":
    main()
