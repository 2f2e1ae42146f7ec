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
import time
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.handlers.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile import consolidate
from accel_operator.reconcile.decide import decide
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
    idx: dict[str, dict[Any, Any]] = {k: {} for k in ("pools", "nodes", "pods", "workloads", "jobs", "policies")}
    spec = AcceleratorJobSpec.model_validate(SPEC)
    for p in range(10):
        pool = f"pool-{p}"
        doc = {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8, "maxNodes": nodes}
        idx["pools"][pool] = [(PoolView(pool, AcceleratorPoolSpec.model_validate(doc)), ())]
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
    for i in range(nodes):
        pool, node, job = f"pool-{i % 10}", f"node-{i}", f"job-{i}"
        idx["nodes"][node] = [NodeView(node, {"accel.dev/pool": pool}, 8)]
        status = AcceleratorJobStatus.model_validate(
            {
                "phase": "Running",
                "attempt": 0,
                "workload": f"{job}-a0",
                "startTime": "2026-11-26T11:00:00Z",
                "lastCheckpoint": {"uri": "s3://ckpt/x/step-5", "step": 5, "time": "2026-11-26T11:50:00Z"},
                "plan": {"pool": pool, "accelerator": "h100-80gb", "devices": 4, "nodes": 1, "durationSeconds": 36000},
            }
        )
        view = JobView("ns", job, f"uid-{i}", NOW - dt.timedelta(hours=1), 1, spec, (), status)
        idx["jobs"][("ns", job)] = [view]
        pod = PodView("ns", f"{job}-a0-0", node, "Running", 4, ("ns", job), 0)
        idx["pods"].setdefault(("ns", job), []).append(pod)
        idx["pods"].setdefault(node, []).append(pod)
        idx["workloads"][("ns", f"{job}-a0")] = [WorkloadView("ns", f"{job}-a0", ("ns", job), 0, active=1)]
    policy = {"metadata": {"name": "platform"}, "spec": {"consolidation": {"allowed": True, "maxMovesPerHour": 100}}}
    idx["policies"]["platform"] = [AcceleratorPolicy.model_validate(policy)]
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
    snap = sched.observe(NOW)
    from dataclasses import replace

    plans = {k: p for k, j in snap.jobs.items() if j.phase is None and (p := sched._plan(j, snap)) is not None}
    snap = replace(snap, plans=plans)
    rules = sched.consolidation_rules(snap)
    gangs = [j for j in snap.jobs.values() if j.phase is None]
    running = [j for j in snap.jobs.values() if j.phase is not None]
    g_plain, g_amend, r_plain, r_carry = [], [], [], []
    ordered = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for job in gangs:
            decide(job, snap, NOW)
        g_plain.append(time.perf_counter() - t0)
        ordered = 0
        t0 = time.perf_counter()
        for job in gangs:
            _d, orders = consolidate.amend(decide(job, snap, NOW), job, snap, NOW, rules)
            ordered += len(orders)
        g_amend.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for job in running:
            decide(job, snap, NOW)
        r_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for job in running:
            consolidate.carry(decide(job, snap, NOW), job, snap, NOW, rules)
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
