"""The in-memory cluster the scheduling benchmarks time (``bench/consolidate.py``,
``bench/reschedule.py``): pools of 8 × H100 nodes, one running job per node with its pod and
workload, folded into the scheduler's indexes as the watches would fill them. No cluster.

Imported as ``bench.sched_world``: each benchmark puts the repository root on ``sys.path``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from accel_api import catalog
from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.engine.scheduler import Indices, Scheduler
from accel_operator.metrics import OperatorMetrics
from accel_operator.reconcile.common.snapshot import JobView, NodeView, PodView, PoolView, WorkloadView
from accel_operator.settings import OperatorSettings

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
POOLS = 10
SPEC: dict[str, Any] = {
    "team": "research",
    "image": "trainer:1",
    "model": {"parameters": 1_000_000_000},
    "workload": {"mode": "training", "tokens": 1_000_000_000},
    "checkpoint": {"uri": "s3://ckpt/x", "intervalMinutes": 10},
}

Index = dict[str, dict[Any, Any]]


def indexes(*extra: str) -> Index:
    """Empty indexes: pools, nodes, pods, workloads, jobs, and the ``extra`` ones (policies, reports)."""
    return {k: {} for k in ("pools", "nodes", "pods", "workloads", "jobs", *extra)}


def add_pools(idx: Index, max_nodes: int) -> list[str]:
    """``POOLS`` pools of 8 × H100 nodes, ``pool-0`` … ``pool-9``; their names."""
    names = [f"pool-{p}" for p in range(POOLS)]
    for pool in names:
        doc = {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8, "maxNodes": max_nodes}
        idx["pools"][pool] = [(PoolView(pool, AcceleratorPoolSpec.model_validate(doc)), ())]
    return names


def add_running(
    idx: Index,
    i: int,
    *,
    spec: AcceleratorJobSpec,
    devices: int,
    created: dt.datetime = NOW,
    status: dict[str, Any] | None = None,
) -> PodView:
    """Node ``node-i`` (in ``pool-{i % POOLS}``) running job ``job-i`` on ``devices`` of its 8
    devices, attempt 0, with its pod and workload; ``status``: more of the job's status. Its pod."""
    pool, node, job = f"pool-{i % POOLS}", f"node-{i}", f"job-{i}"
    idx["nodes"][node] = [NodeView(node, {"accel.dev/pool": pool}, 8)]
    st = AcceleratorJobStatus.model_validate(
        {
            "phase": "Running",
            "attempt": 0,
            "workload": f"{job}-a0",
            "startTime": "2026-11-26T11:00:00Z",
            **(status or {}),
            "plan": {
                "pool": pool,
                "accelerator": "h100-80gb",
                "devices": devices,
                "nodes": 1,
                "durationSeconds": 36000,
            },
        }
    )
    idx["jobs"][("ns", job)] = [JobView("ns", job, f"uid-{i}", created, 1, spec, (), st)]
    pod = PodView("ns", f"{job}-a0-0", node, "Running", devices, ("ns", job), 0)
    idx["pods"].setdefault(("ns", job), []).append(pod)
    idx["pods"].setdefault(node, []).append(pod)
    idx["workloads"][("ns", f"{job}-a0")] = [WorkloadView("ns", f"{job}-a0", ("ns", job), 0, active=1)]
    return pod


def scheduler(idx: Index) -> Scheduler:
    """The operator's scheduler with fakes for every write, reading ``idx``."""
    sched = Scheduler(
        # Statuses as the passes decide them.
        settings=OperatorSettings(admitted_status_seconds=0, waiting_status_seconds=0),
        catalog=catalog.default(),
        writer=FakeJobWriter(),
        workloads=FakeWorkloadClient(),
        metrics=OperatorMetrics(),
    )
    sched.indices = Indices(**idx)
    return sched
