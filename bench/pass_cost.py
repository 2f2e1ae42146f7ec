"""The scheduling pass alone, in process: what one pass costs at full size, without an API server.

``bench/scale.py`` measures the whole system on the local control plane, where the API server's
CPU dominates and the machine's load moves every figure. This script isolates the operator's
own loop: it builds the benchmark's world as the kopf indexes would hold it (``--nodes`` nodes ×
8 H100 in ``--pools`` pools, ``--jobs`` one-device jobs pinned round robin to the burst pools,
``--rate-pools`` pools kept empty), with fake writers, then plays what the watch would show:

1. the first full pass over every new job (the burst: admissions and queued jobs);
2. the watch catching up: each admitted job's status, its workload and its pod bound to a node
   (all marked, one pass);
3. a full pass (the resync) over the settled world;
4. ``--events`` single events, each followed by one pass: a new job in an empty pool (admitted),
   and a pod of a running job ending (its pool grew: the queue behind it is decided again).

It prints the CPU seconds of each pass (median of the single-event passes; CPU, not wall time,
because the machine's load moves wall time several-fold) and, with ``--profile``,
the top functions by cumulative time of phases 3 and 4.

Run: python bench/pass_cost.py [--nodes 500 --pools 10 --jobs 3800 --rate-pools 3] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import datetime as dt
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel_api.job import AcceleratorJobSpec, AcceleratorJobStatus
from accel_operator.reconcile.common.snapshot import JobView, PodView, WorkloadView

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support
from tests.support.reconcile import World

_SEEN: dict[tuple[str, str], dict[str, Any]] = {}


def _settle(w: World) -> list[tuple[str, str]]:
    """Show the scheduler's writes through the 'watch': statuses, workloads and bound pods."""
    sched = w.scheduler
    writer: Any = sched.applier.writer
    workloads: Any = sched.applier.workloads
    free: dict[str, int] = {}
    for name, entries in w.nodes.items():
        node = entries[0]
        free[name] = node.devices - sum(p.devices for p in w.pods.get(name, ()) if not p.ended)
    by_pool: dict[str, list[str]] = {}
    for name, entries in w.nodes.items():
        by_pool.setdefault(entries[0].labels["accel.dev/pool"], []).append(name)
    changed = []
    for (ns, name), status in writer.statuses.items():
        key = (ns, name)
        job: JobView = w.jobs[key][0]
        if _SEEN.get(key) == status:
            continue  # the watch showed this one already
        _SEEN[key] = copy.deepcopy(status)
        new = AcceleratorJobStatus.model_validate(status)
        w.jobs[key] = [
            JobView(
                job.namespace,
                job.name,
                job.uid,
                job.created,
                job.generation,
                job.spec,
                (),
                new,
                resource_version=str(10**9),
            )
        ]
        sched.mark(key)
        changed.append(key)
    for (ns, wname), _body in workloads.jobs.items():
        key = (ns, wname.rsplit("-a", 1)[0])
        if (ns, wname) in w.workloads:
            continue
        w.workloads[(ns, wname)] = [WorkloadView(ns, wname, key, 0, active=1)]
        sched.workload_changed((ns, wname), key)
        pool = w.jobs[key][0].status.plan.pool  # type: ignore[union-attr]
        node = next(n for n in by_pool[pool] if free[n] >= 1)
        free[node] -= 1
        pod = PodView(ns, f"{wname}-0", node, "Running", 1, key, 0)
        w.pods.setdefault(key, []).append(pod)
        w.pods.setdefault(node, []).append(pod)
        sched.pods_changed(None, pod)
    return changed


_SPECS: dict[str, AcceleratorJobSpec] = {}


def _job(w: World, name: str, pool: str) -> None:
    """What ``World.job`` makes, with the spec read from the example once per pool."""
    spec = _SPECS.get(pool)
    if spec is None:
        spec = _SPECS[pool] = w.job(name, pool, devices=1).spec
    assert spec is not None
    w.created += dt.timedelta(seconds=1)
    w.jobs[("ns", name)] = [
        JobView("ns", name, f"uid-{name}", w.created, 1, spec, (), AcceleratorJobStatus.model_validate({}))
    ]


async def _pass(w: World) -> float:
    """CPU seconds of one pass (this process, all threads): the machine's load moves wall time."""
    t0 = time.process_time()
    await w.scheduler.step()
    took = time.process_time() - t0
    if w.scheduler.applier.in_flight:
        await asyncio.gather(*w.scheduler.applier.in_flight)
    return took


async def run(args: argparse.Namespace) -> None:
    w = World()
    per_pool = args.nodes // args.pools
    for p in range(args.pools):
        w.pool(f"pool-{p}", nodes=per_pool, per_node=8)
    burst = [f"pool-{p}" for p in range(args.pools - args.rate_pools)]
    t0 = time.perf_counter()
    for i in range(args.jobs):
        _job(w, f"b-{i:05d}", burst[i % len(burst)])
        w.scheduler.mark(("ns", f"b-{i:05d}"))
    print(
        f"world: {args.nodes} nodes in {args.pools} pools, {args.jobs} jobs ({time.perf_counter() - t0:.1f}s to build)"
    )
    sched = w.scheduler
    sched.marks.full_pass = False
    profiler = cProfile.Profile() if args.profile else None
    if profiler and (args.profile_all or args.profile_first):
        profiler.enable()
    first = await _pass(w)
    if profiler and args.profile_first:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
        print(out.getvalue())
        return
    _settle(w)
    settle = await _pass(w)
    _settle(w)
    await _pass(w)
    if profiler:
        profiler.enable()
    sched.marks.full_pass = True
    full = await _pass(w)
    new_job: list[float] = []
    pod_end: list[float] = []
    running = [k for k, v in w.jobs.items() if v[0].phase is not None and v[0].phase.value == "Running"]
    for e in range(args.events):
        name = f"r-{e:05d}"
        _job(w, name, f"pool-{args.pools - 1}")
        sched.mark(("ns", name))
        new_job.append(await _pass(w))
        key = running[e % len(running)]
        pod = w.pods[key][0]
        ended = PodView(pod.namespace, pod.name, pod.node, "Succeeded", pod.devices, pod.job, pod.attempt, exit_code=0)
        w.pods[key] = [ended]
        assert pod.node is not None
        w.pods[pod.node] = [ended if p == pod else p for p in w.pods[pod.node]]
        sched.pods_changed(pod, ended)
        pod_end.append(await _pass(w))
        _settle(w)
    if profiler:
        profiler.disable()
    phases: dict[str, int] = {}
    for entries in w.jobs.values():
        ph = entries[0].phase.value if entries[0].phase is not None else "new"
        phases[ph] = phases.get(ph, 0) + 1
    rows: list[tuple[str, Callable[[], str]]] = [
        ("first pass (every new job)", lambda: f"{first:.3f} s"),
        ("settling pass (statuses, workloads, pods seen)", lambda: f"{settle:.3f} s"),
        ("full pass (resync)", lambda: f"{full:.3f} s"),
        ("one new job, one pass (median)", lambda: f"{statistics.median(new_job) * 1000:.1f} ms"),
        ("one pod ended, one pass (median)", lambda: f"{statistics.median(pod_end) * 1000:.1f} ms"),
        ("jobs by phase at the end", lambda: str(dict(sorted(phases.items())))),
    ]
    for label, value in rows:
        print(f"{label:<50} {value()}")
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
        print(out.getvalue())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--pools", type=int, default=10)
    p.add_argument("--rate-pools", type=int, default=3, help="pools kept empty for the single new jobs (default 3)")
    p.add_argument("--jobs", type=int, default=3800, help="burst jobs (default 3800: 2800 fit, 1000 queue)")
    p.add_argument("--events", type=int, default=20, help="single-event passes of each kind (default 20)")
    p.add_argument("--profile", action="store_true", help="cProfile the full and single-event passes")
    p.add_argument("--profile-all", action="store_true", help="with --profile: the first passes too")
    p.add_argument("--profile-first", action="store_true", help="with --profile: only the first pass, by own time")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
