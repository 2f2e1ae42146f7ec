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
import time
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.handlers.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile import health
from accel_operator.reconcile.decide import decide
from accel_operator.reconcile.reports import DeviceReport, ReportView
from accel_operator.reconcile.snapshot import JobView, NodeView, PodView, PoolView, WorkloadView
from accel_operator.settings import OperatorSettings

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
SPEC = {
    "team": "research",
    "image": "trainer:1",
    "model": {"parameters": 1_000_000_000},
    "workload": {"mode": "training", "tokens": 1_000_000_000},
    "checkpoint": {"uri": "s3://ckpt/x", "intervalMinutes": 10},
}


def build(nodes: int) -> Scheduler:
    idx: dict[str, dict[Any, Any]] = {k: {} for k in ("pools", "nodes", "pods", "workloads", "jobs", "reports")}
    spec = AcceleratorJobSpec.model_validate(SPEC)
    for p in range(10):
        pool = f"pool-{p}"
        doc = {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8, "maxNodes": nodes}
        idx["pools"][pool] = [(PoolView(pool, AcceleratorPoolSpec.model_validate(doc)), ())]
    for i in range(nodes):
        pool, node, job = f"pool-{i % 10}", f"node-{i}", f"job-{i}"
        idx["nodes"][node] = [NodeView(node, {"accel.dev/pool": pool}, 8)]
        status = AcceleratorJobStatus.model_validate(
            {
                "phase": "Running",
                "attempt": 0,
                "workload": f"{job}-a0",
                "startTime": "2026-11-26T11:00:00Z",
                "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": 8, "nodes": 1, "durationSeconds": 36000},
            }
        )
        view = JobView("ns", job, f"uid-{i}", NOW, 1, spec, (), status)
        idx["jobs"][("ns", job)] = [view]
        pod = PodView("ns", f"{job}-a0-0", node, "Running", 8, ("ns", job), 0)
        idx["pods"].setdefault(("ns", job), []).append(pod)
        idx["pods"].setdefault(node, []).append(pod)
        idx["workloads"][("ns", f"{job}-a0")] = [WorkloadView("ns", f"{job}-a0", ("ns", job), 0, active=1)]
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
        idx["reports"][node] = [ReportView(node, NOW - dt.timedelta(seconds=30), devices)]
    sched = Scheduler(
        settings=OperatorSettings(),
        catalog=catalog.default(),
        writer=FakeJobWriter(),
        workloads=FakeWorkloadClient(),
        metrics=OperatorMetrics(),
    )
    sched.indices = Indices(**idx)
    return sched


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sched = build(args.nodes)
    rules = sched.health_rules
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
            decide(job, snap, NOW)
        plain.append(time.perf_counter() - t0)
        counts = {}
        t0 = time.perf_counter()
        for job in jobs:
            d, moved = health.amend(decide(job, snap, NOW), job, snap, NOW, rules)
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
