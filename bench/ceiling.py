"""What the machine allows without the operator: the control plane's ceiling for "create → workload".

With the operator NOT running, this creates batch Jobs directly, the body the operator makes
(``adapters.kube.workloads.build`` for one H100 of one pool of bench/scale.py, less its owner
reference, which would point at an AcceleratorJob that does not exist and get the Job garbage
collected), on the same pools and KWOK nodes as bench/scale.py, from ``--clients`` threads (one
API client, reused connections, each) as fast as they go. A pod watch records when each Job's
pod is first Running (the Job controller made it, the scheduler bound it, KWOK ran it).

It prints:
- the offered rate (Jobs created per second by the clients);
- jobs/s from the first create to the last pod Running, and sustained (the middle 10 %–90 %);
- p50/p99 of create → pod Running;
- each control-plane process's CPU seconds and CPU-ms per job.

That is the upper bound, on this machine, of "create → workload" plus its pods: the operator adds
its own work (and its writes) on top, on the same cores.

Run (medium):
    python bench/ceiling.py --nodes 100 --pools 5 --jobs 800
Run (full size of bench/scale.py's burst):
    python bench/ceiling.py --jobs 2800
Export ``ACCEL_CLUSTER_PORT_BASE`` to run the control plane on other ports.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import kwok_world  # noqa: E402
from bench.kwok_world import cleanup, cpu_seconds, job_doc, make_pools, pct, pool_doc, wait_ready  # noqa: E402

from accel_api import catalog  # noqa: E402
from accel_api import vocabulary as v  # noqa: E402
from accel_api.job import AcceleratorJobSpec  # noqa: E402
from accel_api.pool import AcceleratorPoolSpec  # noqa: E402
from accel_operator.adapters.kube import workloads  # noqa: E402


def job_body(namespace: str, name: str, pool: str, per_pool: int, devices: int) -> dict[str, Any]:
    """The batch Job the operator makes for bench/scale.py's job ``name`` in ``pool``, unowned."""
    spec = AcceleratorJobSpec.model_validate(job_doc(namespace, name, pool)["spec"])
    pool_spec = AcceleratorPoolSpec.model_validate(pool_doc(pool, per_pool, devices)["spec"])
    accel = catalog.default().get(pool_spec.accelerator)
    if accel is None:
        raise SystemExit(f"{pool_spec.accelerator} is not in the catalog")
    w = workloads.WorkloadSpec(
        job_name=name,
        namespace=namespace,
        job_uid=str(uuid.uuid4()),
        spec=spec,
        attempt=0,
        pool_name=pool,
        pool=pool_spec,
        accelerator=accel,
        devices=1,
        nodes=1,
    )
    body, _service = workloads.build(w)
    body["metadata"].pop("ownerReferences", None)
    return body


class PodWatch(kwok_world.NamespaceWatch):
    """Records when each Job's first pod (by the job label) is first seen Running."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(client.CoreV1Api(api).list_namespaced_pod, namespace, thread="pods")
        self.running: dict[str, float] = {}
        self.made: dict[str, float] = {}  # job -> its pod first seen (the Job controller made it)
        self.bound: dict[str, float] = {}  # job -> its pod first seen bound (the scheduler)
        self.lock = threading.Condition()

    def record(self, pod: Any, now: float, event: str) -> None:
        job = (pod.metadata.labels or {}).get(v.LABEL_JOB)
        if not job:
            return
        self.made.setdefault(job, now)
        if pod.spec is not None and pod.spec.node_name:
            self.bound.setdefault(job, now)
        if pod.status is not None and pod.status.phase == "Running":
            with self.lock:
                if job not in self.running:
                    self.running[job] = now
                    self.lock.notify_all()

    def wait(self, want: int, timeout: float) -> int:
        end = time.monotonic() + timeout
        with self.lock:
            while len(self.running) < want and time.monotonic() < end:
                self.lock.wait(min(1.0, max(0.0, end - time.monotonic())))
            return len(self.running)


def create_all(kubeconfig: Path, bodies: list[dict[str, Any]], clients: int) -> tuple[dict[str, float], list[str]]:
    """Create ``bodies`` from ``clients`` threads, one API client each; return create times by job."""
    local = threading.local()
    started: dict[str, float] = {}
    failed: list[str] = []

    def one(body: dict[str, Any]) -> None:
        if not hasattr(local, "batch"):
            api = config.new_client_from_config(config_file=str(kubeconfig))
            api.configuration.connection_pool_maxsize = 2
            local.batch = client.BatchV1Api(api)
        name = body["metadata"]["annotations"][v.ANNOTATION_JOB_NAME]
        started[name] = time.monotonic()
        try:
            local.batch.create_namespaced_job(body["metadata"]["namespace"], body)
        except client.ApiException as exc:
            failed.append(f"{name}: {exc.status}")

    with ThreadPoolExecutor(clients, thread_name_prefix="create") as pool:
        list(pool.map(one, bodies))
    return started, failed


def run(args: argparse.Namespace) -> dict[str, Any]:
    world = kwok_world.start()
    cluster, kubeconfig, api, core = world.cluster, world.kubeconfig, world.api, world.core
    api_factory = world.new_api
    per_pool = args.nodes // args.pools
    pools = [f"ceil-{i}" for i in range(args.pools)]
    jobs = min(args.jobs, per_pool * args.pools * args.devices_per_node)
    namespace = world.new_namespace("ceiling")
    out: dict[str, Any] = {"nodes": per_pool * args.pools, "pools": args.pools, "jobs": jobs, "clients": args.clients}
    try:
        made = make_pools(api_factory, pools, per_pool, args.devices_per_node, args.node_threads)
        wait_ready(core, set(made), args.timeout)
        print(f"{len(made)} nodes in {len(pools)} pools ready; the operator is not running", flush=True)
        bodies = [
            job_body(namespace, f"c-{i:05d}", pools[i % len(pools)], per_pool, args.devices_per_node)
            for i in range(jobs)
        ]
        watcher = PodWatch(api_factory(), namespace)
        watcher.start()
        time.sleep(1.0)
        pids = {c.name: c.pid for c in cluster.status()}
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        print(f"creating {jobs} batch Jobs from {args.clients} threads ...", flush=True)
        t0 = time.monotonic()
        created, failed = create_all(kubeconfig, bodies, args.clients)
        t_created = time.monotonic()
        got = watcher.wait(jobs - len(failed), args.timeout)
        watcher.stop()
        cpu = {k: round(cpu_seconds(p) - cpu0[k], 1) for k, p in pids.items()}
        running = watcher.running
        names = sorted(created)
        lat = [running[n] - created[n] for n in names if n in running]

        def stage(a: dict[str, float], b: dict[str, float]) -> list[float]:
            return [b[n] - a[n] for n in names if n in a and n in b]

        pod_made, bound = watcher.made, watcher.bound
        out["stages_p50_p99_s"] = {
            name: (round(pct(d, 50), 2), round(pct(d, 99), 2))
            for name, d in (
                ("create → pod made (Job controller)", stage(created, pod_made)),
                ("pod made → bound (scheduler)", stage(pod_made, bound)),
                ("bound → Running (kwok)", stage(bound, running)),
            )
        }
        times = sorted(running[n] for n in names if n in running)
        lo, hi = int(0.1 * len(times)), max(int(0.9 * len(times)) - 1, 0)
        out.update(
            {
                "namespace": namespace,
                "create_s": t_created - t0,
                "offered_jobs_per_s": jobs / (t_created - t0),
                "running": got,
                "create_failures": failed[:5],
                "jobs_per_s": len(times) / (times[-1] - t0) if times else math.nan,
                "sustained_jobs_per_s": (hi - lo) / (times[hi] - times[lo]) if hi > lo else math.nan,
                "latency_p50_s": pct(lat, 50),
                "latency_p99_s": pct(lat, 99),
                "cpu_s": cpu,
                "cpu_ms_per_job": {k: round(1000 * s / max(got, 1), 1) for k, s in cpu.items()},
                "watch_errors": watcher.errors,
            }
        )
    finally:
        cleanup(api, core, namespace, pools, stop_cluster=world.started and not args.keep_cluster)
    return out


def table(out: dict[str, Any]) -> str:
    rows = [
        f"nodes {out['nodes']} in {out['pools']} pools; {out['jobs']} batch Jobs from {out['clients']} threads",
        f"offered (created)        {out.get('offered_jobs_per_s', math.nan):8.1f} jobs/s"
        f"  ({out.get('create_s', 0):.1f} s)",
        f"create → pod Running     {out.get('jobs_per_s', math.nan):8.1f} jobs/s  ({out.get('running')} running)",
        f"  sustained (10–90 %)    {out.get('sustained_jobs_per_s', math.nan):8.1f} jobs/s",
        f"  latency p50 / p99      {out.get('latency_p50_s', math.nan):8.2f}"
        f" / {out.get('latency_p99_s', math.nan):.2f} s",
        "stages p50 / p99:",
    ]
    for k, (p50, p99) in out.get("stages_p50_p99_s", {}).items():
        rows.append(f"  {k:36s} {p50:6.2f} / {p99:.2f} s")
    rows.append("CPU seconds (CPU-ms per job):")
    for k, s in out.get("cpu_s", {}).items():
        rows.append(f"  {k:22s} {s:8.1f}  ({out['cpu_ms_per_job'][k]:.1f})")
    return "\n".join(rows)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=500, help="KWOK nodes in all (default 500)")
    p.add_argument("--pools", type=int, default=10, help="pools the nodes are split into (default 10)")
    p.add_argument("--devices-per-node", type=int, default=8)
    p.add_argument("--jobs", type=int, default=2800, help="batch Jobs, one device each (default 2800)")
    p.add_argument("--clients", type=int, default=32, help="threads creating Jobs (default 32)")
    p.add_argument("--node-threads", type=int, default=16)
    p.add_argument("--timeout", type=float, default=600.0, help="deadline of the wait for pods (default 600 s)")
    p.add_argument("--keep-cluster", action="store_true", help="leave a control plane this run started running")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = run(args)
    print()
    print(table(out))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
