"""The operator's memory at full size, in process: what each part holds, without an API server.

``bench/scale.py`` samples the operator's RSS on the local control plane, where one run takes
many minutes and the machine's load moves everything. This script builds the full-size world as
the operator would hold it after a burst (``--nodes`` nodes × 8 H100 in ``--pools`` pools,
``--jobs`` one-device jobs pinned round robin to the burst pools; ``--rate-pools`` pools empty)
and measures, with tracemalloc, what each part takes:

1. the kopf indexes: every object as the watch would deliver it (a wire body with the status the
   operator wrote, metadata with managedFields as the API server returns them), through the
   same index functions the handlers use (``adapters/kube/views.py``);
2. kopf's per-object memory (``ResourceMemory``: one per watched object, kept until it is deleted);
3. the scheduler: the first pass over every new job (2,800 admissions, 1,000 queued), the watch
   catching up, a full pass; what stays (its folded picture, caches) and the peak inside a pass
   (the first pass's peak includes what the fake writers record, the statuses and built batch
   Jobs, cleared after it: compare it between versions, not with RSS);
4. what a watch event costs while it waits in kopf's per-object queue (a decoded body), per kind:
   when the operator lags behind the watch, these are what RSS grows by.

Then the heap by type (the live objects' own sizes, largest types first) and the process's RSS
and peak RSS (VmHWM), with the Python heap that tracemalloc sees beside them.

Run: python bench/mem_cost.py [--nodes 500 --pools 10 --jobs 3800 --rate-pools 3] [--top 15]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support

from kopf._core.reactor.inventory import ResourceMemories
from tests.support.jobs import job_doc
from tests.support.reconcile import World

from accel_operator.adapters.kube import views

MB = 1e6


def _status_kb() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _managed_fields(manager: str, subresource: str | None = None) -> dict[str, Any]:
    """One managedFields entry as the API server writes it (the fields set, as a nested dict)."""
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-26T12:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:phase": {}, "f:conditions": {".": {}, 'k:{"type":"Ready"}': {}}}},
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _meta(kind: str, name: str, i: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ns",
        "uid": f"{kind}-{i:08d}-0000-0000-0000-000000000000",
        "resourceVersion": str(10_000 + i),
        "generation": 1,
        "creationTimestamp": "2026-11-26T12:00:00Z",
        "managedFields": [_managed_fields("bench"), _managed_fields("accel-operator", "status")],
        **extra,
    }


def _pod_body(wl: dict[str, Any], node: str, i: int) -> dict[str, Any]:
    """A running pod of workload ``wl`` as the API server returns it (KWOK filled its status)."""
    tmpl = copy.deepcopy(wl["spec"]["template"])
    meta = _meta("pod", f"{wl['metadata']['name']}-0-x{i}", i, **tmpl["metadata"])
    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": wl["metadata"]["name"], "uid": "u"}]
    status = {
        "phase": "Running",
        "hostIP": "10.240.0.1",
        "podIP": f"10.244.{i // 250}.{i % 250}",
        "startTime": "2026-11-26T12:00:01Z",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": "2026-11-26T12:00:01Z"}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": "2026-11-26T12:00:01Z"}},
            }
            for c in tmpl["spec"]["containers"]
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {**tmpl["spec"], "nodeName": node},
        "status": status,
    }


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def run(args: argparse.Namespace) -> None:
    tracemalloc.start(1)
    rows: list[tuple[str, str]] = []
    t_start = time.perf_counter()
    w = World()
    sched = w.scheduler
    per_pool = args.nodes // args.pools
    for p in range(args.pools):
        w.pool(f"pool-{p}", nodes=per_pool, per_node=8)
    burst = [f"pool-{p}" for p in range(args.pools - args.rate_pools)]

    # 1. the jobs index: new jobs, as the watch delivers them, through the index function.
    pre = _traced()  # the world's pools and nodes, and the imports
    docs: dict[tuple[str, str], dict[str, Any]] = {}
    for i in range(args.jobs):
        name = f"b-{i:05d}"
        doc = job_doc("ns", burst[i % len(burst)], devices=1, name=name)
        doc["metadata"] = _meta("job", name, i, finalizers=["accel.dev/finalizer"])
        docs[("ns", name)] = doc
    base = _traced()  # the bodies are this script's (kopf drops each once handled)
    for key, doc in docs.items():
        w.jobs[key] = [views.job_view(doc)]
        sched.mark(key)
    new_jobs = _traced()
    rows.append(
        ("jobs index, new jobs", f"{(new_jobs - base) / MB:.1f} MB ({(new_jobs - base) / args.jobs:.0f} B a job)"),
    )

    # 2. the scheduler's first pass, then the watch catching up (statuses, workloads, bound pods).
    sched.marks.full_pass = False
    tracemalloc.reset_peak()
    before_pass = _traced()
    await sched.step()
    if sched.applier.in_flight:
        await asyncio.gather(*sched.applier.in_flight)
    first_peak = tracemalloc.get_traced_memory()[1]
    writer: Any = sched.applier.writer
    made: Any = sched.applier.workloads
    free = dict.fromkeys(w.nodes, 8)
    by_pool: dict[str, list[str]] = {}
    for name, entries in w.nodes.items():
        by_pool.setdefault(entries[0].labels["accel.dev/pool"], []).append(name)
    pod_bodies: list[dict[str, Any]] = []
    wl_bodies: list[dict[str, Any]] = []

    def statuses_seen() -> None:
        """The watch shows the statuses the scheduler wrote (and the fake forgets them)."""
        for key, status in writer.statuses.items():
            doc = docs[key]
            doc["status"] = copy.deepcopy(status)
            w.jobs[key] = [views.job_view(doc)]
            sched.mark(key)
        writer.statuses.clear()

    statuses_seen()
    for i, ((ns, wname), body) in enumerate(list(made.jobs.items())):
        wl = copy.deepcopy(body)
        wl["metadata"] = {**wl["metadata"], **_meta("wl", wname, i)}
        wl["status"] = {"active": 1, "ready": 1, "startTime": "2026-11-26T12:00:01Z"}
        wl_bodies.append(wl)
        view = views.workload_view(wl)
        assert view is not None
        w.workloads[(ns, wname)] = [view]
        sched.workload_changed((ns, wname), view.job)
        pool = w.jobs[view.job][0].status.plan.pool
        node = next(n for n in by_pool[pool] if free[n] >= 1)
        free[node] -= 1
        pod_body = _pod_body(wl, node, i)
        pod_bodies.append(pod_body)
        pod = views.pod_view(pod_body)
        assert pod is not None and pod.job is not None
        w.pods.setdefault(pod.job, []).append(pod)
        w.pods.setdefault(node, []).append(pod)
        sched.pods_changed(None, pod)
    # What the fakes recorded is the fakes' memory, not the operator's.
    made.jobs.clear()
    for _ in range(2):  # Running, then nothing more to write
        await sched.step()
        if sched.applier.in_flight:
            await asyncio.gather(*sched.applier.in_flight)
        statuses_seen()
        made.jobs.clear()
    sched.marks.full_pass = True
    tracemalloc.reset_peak()
    settled = _traced()
    await sched.step()
    if sched.applier.in_flight:
        await asyncio.gather(*sched.applier.in_flight)
    full_peak = tracemalloc.get_traced_memory()[1]
    writer.statuses.clear()
    made.jobs.clear()

    phases = Counter(e[0].phase.value if e[0].phase is not None else "new" for e in w.jobs.values())
    n_pods = len(pod_bodies)
    # The bodies are this script's (kopf drops each once handled): one of each kind is kept.
    uids = [str(b["metadata"]["uid"]) for b in (*docs.values(), *wl_bodies, *pod_bodies)]
    samples = {
        "job (Running)": next(d for d in docs.values() if d.get("status", {}).get("phase") == "Running"),
        "job (queued)": next(d for d in docs.values() if d.get("status", {}).get("phase") == "Pending"),
        "pod": pod_bodies[0],
        "workload": wl_bodies[0],
    }
    texts = {label: json.dumps({"type": "MODIFIED", "object": body}) for label, body in samples.items()}
    docs.clear()
    del wl_bodies, pod_bodies, samples, doc
    after = _traced()
    rows.append(("jobs by phase", str(dict(sorted(phases.items())))))
    rows.append(("first pass: peak above the world", f"{(first_peak - before_pass) / MB:.1f} MB"))
    rows.append(("full pass: peak above the settled world", f"{(full_peak - settled) / MB:.1f} MB"))
    rows.append(
        (
            "settled world: indexes + scheduler",
            f"{(after - pre) / MB:.1f} MB ({args.jobs} jobs, {n_pods} pods, {len(w.workloads)} workloads, "
            f"{args.nodes} nodes)",
        )
    )

    # 3. kopf's per-object memory, one per watched object.
    mem_before = _traced()
    memories = ResourceMemories()
    for uid in uids:
        await memories.recall({"metadata": {"uid": uid}}, noticed_by_listing=True)
    mem_after = _traced()
    rows.append(
        (
            "kopf per-object memory",
            f"{(mem_after - mem_before) / MB:.1f} MB "
            f"({(mem_after - mem_before) / len(uids):.0f} B an object, {len(uids)})",
        )
    )

    # 4. a watch event waiting in kopf's queue: its decoded body.
    for label, text in texts.items():
        t0 = _traced()
        held = [json.loads(text) for _ in range(200)]
        t1 = _traced()
        del held
        rows.append((f"queued watch event: {label}", f"{(t1 - t0) / 200 / 1e3:.1f} KB ({len(text) / 1e3:.1f} KB JSON)"))

    # Heap by type: the live objects' own sizes (not what they point to).
    gc.collect()
    sizes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        name = type(obj).__name__
        sizes[name] += sys.getsizeof(obj)
        counts[name] += 1
    traced, peak = tracemalloc.get_traced_memory()
    proc = _status_kb()
    rows.append(("python heap (tracemalloc) now / peak since 2.", f"{traced / MB:.1f} / {peak / MB:.1f} MB"))
    rows.append(("process RSS now / peak (VmRSS / VmHWM)", f"{proc['VmRSS'] / 1e3:.1f} / {proc['VmHWM'] / 1e3:.1f} MB"))
    rows.append(("wall time (tracing on)", f"{time.perf_counter() - t_start:.1f} s"))
    print(f"world: {args.nodes} nodes in {args.pools} pools, {args.jobs} jobs (the bench's, held by this script too)")
    for label, value in rows:
        print(f"{label:<45} {value}")
    print(f"\nheap by type (gc-tracked objects' own sizes, top {args.top}):")
    for name, size in sizes.most_common(args.top):
        print(f"  {name:<32} {size / MB:8.2f} MB  {counts[name]:>9,} objects")
    if args.sites:
        print(f"\ntop {args.top} allocation sites still live:")
        for stat in tracemalloc.take_snapshot().statistics("lineno")[: args.top]:
            print(f"  {stat}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--pools", type=int, default=10)
    p.add_argument("--rate-pools", type=int, default=3, help="pools kept empty (default 3)")
    p.add_argument("--jobs", type=int, default=3800, help="burst jobs (default 3800: 2800 fit, 1000 queue)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--sites", action="store_true", help="also the top allocation sites still live")
    args = p.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
