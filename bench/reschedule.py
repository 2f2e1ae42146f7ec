"""What rescheduling on node reports adds to a scheduling pass, at cluster scale (no cluster).

Builds the scheduler's indexes in memory: N nodes × 8 H100 in 10 pools, one 8-GPU running job
per node with its pod, and one AcceleratorNodeReport per node (every device mapped to the pod;
1% of the nodes with a failing device, 10% of the jobs idle). Then times, over R repetitions:
``observe`` (the snapshot, with the reports folded in and condemned nodes marked, and without),
``health.node_actions`` (taints to write), and ``decide`` + ``health.amend`` for every running
job, against ``decide`` alone. Prints the medians in milliseconds and the per-job cost.

Run: ``python bench/reschedule.py [--nodes 1000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

from accel_api.job import AcceleratorJobSpec
from accel_operator.engine import schedule
from accel_operator.engine.scheduler import Scheduler
from accel_operator.reconcile.common.reports import DeviceReport, ReportView
from accel_operator.reconcile.job.decide import decide
from accel_operator.reconcile.nodes import health

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repository root: bench.sched_world, when run as a script

from bench.sched_world import NOW, SPEC, add_pools, add_running, indexes, scheduler  # noqa: E402


def build(nodes: int) -> Scheduler:
    idx = indexes("reports")
    spec = AcceleratorJobSpec.model_validate(SPEC)
    add_pools(idx, nodes)
    for i in range(nodes):
        pod = add_running(idx, i, spec=spec, devices=8)
        util = 0.0 if i % 10 == 3 else 90.0
        devices = tuple(
            DeviceReport(
                index=d,
                healthy=not (i % 100 == 7 and d == 3),
                problems=("uncorrectable ECC errors: 1",) if i % 100 == 7 and d == 3 else (),
                utilization=util,
                memory_used=60 * 2**30,
                memory_total=80 * 2**30,
                pods=frozenset({("ns", pod.name)}),
            )
            for d in range(8)
        )
        node = pod.node
        assert node is not None
        idx["reports"][node] = [ReportView(node, NOW - dt.timedelta(seconds=30), devices)]
    return scheduler(idx)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sched = build(args.nodes)
    rules = schedule.health_rules(sched.settings)
    observe, nodes_ms, plain, amended = [], [], [], []
    counts: dict[str, int] = {}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        snap = sched.observe(NOW)
        observe.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        taints = health.node_actions(snap, rules)
        nodes_ms.append(time.perf_counter() - t0)
        jobs = list(snap.jobs.values())
        t0 = time.perf_counter()
        for job in jobs:
            decide(job, snap, NOW, cache=sched.plans.cache)
        plain.append(time.perf_counter() - t0)
        counts = {}
        t0 = time.perf_counter()
        for job in jobs:
            d, moved = health.amend(decide(job, snap, NOW, cache=sched.plans.cache), job, snap, NOW, rules)
            kind = (
                moved.value
                if moved
                else ("checkpoint-now" if any("Checkpoint" in type(a).__name__ for a in d.actions) else "none")
            )
            counts[kind] = counts.get(kind, 0) + 1
        amended.append(time.perf_counter() - t0)
    assert sched.indices is not None
    reports, sched.indices.reports = sched.indices.reports, {}
    bare = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sched.observe(NOW)
        bare.append(time.perf_counter() - t0)
    sched.indices.reports = reports
    med = statistics.median
    n = args.nodes
    print(f"nodes={n} running jobs={n} reports={n} repeat={args.repeat}")
    print(f"observe (reports folded in): {med(observe) * 1e3:.1f} ms; without reports {med(bare) * 1e3:.1f} ms")
    print(f"node_actions: {med(nodes_ms) * 1e3:.2f} ms ({len(taints)} taints)")
    print(f"decide, every running job: {med(plain) * 1e3:.1f} ms ({med(plain) / n * 1e6:.1f} us/job)")
    print(f"decide + health.amend: {med(amended) * 1e3:.1f} ms ({med(amended) / n * 1e6:.1f} us/job)")
    print(f"health.amend alone: {(med(amended) - med(plain)) / n * 1e6:.1f} us/job; outcomes {counts}")


if __name__ == "__main__":
    main()
