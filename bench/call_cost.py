"""The operator's CPU per API call: what each of the three hot writes costs on the client side.

Every admission makes a status merge-patch, a batch Job create and Kubernetes Events; each runs
through the kubernetes client in a thread. This script makes ``--count`` of each against the
local control plane through the operator's own adapters (``KubeJobWriter``,
``KubeWorkloadClient``) and prints, per call, the calling thread's CPU time (``time.thread_time``:
the client's serialising, TLS and parsing, not the API server's work or the wait), the API
server's and etcd's CPU per call (from /proc, over the whole series: anything else the control
plane does meanwhile counts too, so run it on an otherwise idle control plane) and the wall time.
CPU, not wall, is the figure to compare: the machine's load moves wall time several-fold.

Run: ACCEL_CLUSTER_PORT_BASE=... python bench/call_cost.py [--count 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config

from accel_api import catalog, registry
from accel_api import vocabulary as v
from accel_api.job import AcceleratorJobSpec
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import default_cluster, kubeapi
from accel_operator.adapters.kube.jobs import JobRef, KubeJobWriter
from accel_operator.adapters.kube.workloads import KubeWorkloadClient, WorkloadSpec, build

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.kwok_world import cpu_seconds  # noqa: E402
from tests.support.jobs import job_doc, pool_doc  # noqa: E402


def measure(
    fn: Callable[[int], object], count: int, pids: dict[str, int | None]
) -> tuple[float, float, dict[str, float]]:
    """Median client CPU and wall milliseconds of ``fn(i)`` for ``i`` in ``range(count)``, and the
    mean CPU milliseconds per call of each process in ``pids``."""
    cpu, wall = [], []
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    for i in range(count):
        c0, w0 = time.thread_time(), time.perf_counter()
        fn(i)
        cpu.append((time.thread_time() - c0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
    server = {k: (cpu_seconds(p) - before[k]) * 1e3 / count for k, p in pids.items()}
    return statistics.median(cpu), statistics.median(wall), server


def _bytes(value: object) -> int:
    return len(json.dumps({"status": value}, separators=(",", ":")).encode())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=200)
    args = p.parse_args(argv)
    cluster = default_cluster()
    if not cluster.healthy():
        raise SystemExit("start the local control plane first (e.g. bench/scale.py --keep-cluster)")
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    kubeapi.install_crds(api, ROOT / "crds")
    namespace = f"callcost-{uuid.uuid4().hex[:6]}"
    kubeapi.ensure_namespace(api, namespace)
    custom = client.CustomObjectsApi(api)
    pool = pool_doc(f"cc-{uuid.uuid4().hex[:4]}", nodes_max=1)
    writer, workloads = KubeJobWriter(api), KubeWorkloadClient(api)
    try:
        refs = []
        for i in range(2 * args.count):  # the second half for the patch with a plan
            doc = job_doc(namespace, pool["metadata"]["name"], devices=1, name=f"j{i:04d}")
            made = custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, doc)
            refs.append((JobRef(namespace, doc["metadata"]["name"], made["metadata"]["uid"]), doc))
        status = {
            "phase": "Admitted",
            "attempt": 0,
            "message": "admitted attempt 0 on the pool: 1 × h100-80gb on 1 node(s), on-demand",
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": t,
                    "message": "x" * 200,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
                for t in ("SpecValid", "Planned", "Admitted")
            ],
        }
        # The same write with a plan of the size the scale bench stores (about 1.2 KB: the winner and
        # four alternatives with their reasons): how the API server's CPU per patch grows with size.
        alternative = {
            "pool": "pool-b",
            "accelerator": "h100-80gb",
            "devices": 1,
            "capacityType": "on-demand",
            "costUsd": 1.23,
            "durationSeconds": 3600.0,
            "reason": "y" * 120,
        }
        planned = {
            **status,
            "plan": {
                "pool": "pool-a",
                "accelerator": "h100-80gb",
                "devices": 1,
                "nodes": 1,
                "capacityType": "on-demand",
                "spot": False,
                "durationSeconds": 3600.0,
                "costUsd": 1.23,
                "reason": "z" * 200,
                "alternatives": [alternative] * 4,
            },
        }
        accel = catalog.default().get("h100-80gb")
        assert accel is not None
        pool_spec = AcceleratorPoolSpec.model_validate(pool["spec"])

        def patch(i: int) -> object:
            return writer.patch_status(refs[i][0], status)

        def patch_planned(i: int) -> object:
            return writer.patch_status(refs[args.count + i][0], planned)

        def event(i: int) -> object:
            writer.event(refs[i][0], "Normal", "Admitted", "admitted attempt 0 on the pool: 1 × h100-80gb")
            return None

        def workload(i: int) -> object:
            ref, doc = refs[i]
            spec = WorkloadSpec(
                job_name=ref.name,
                namespace=namespace,
                job_uid=ref.uid,
                spec=AcceleratorJobSpec.model_validate(doc["spec"]),
                attempt=0,
                pool_name=pool["metadata"]["name"],
                pool=pool_spec,
                accelerator=accel,
                devices=1,
                nodes=1,
            )
            job, service = build(spec)
            return workloads.create(job, service)

        pids = {c.name: c.pid for c in cluster.status() if c.name in ("kube-apiserver", "etcd")}
        print(f"{args.count} calls each (client: median per call; servers: mean per call):")
        size = {"status merge-patch": _bytes(status), "... with a plan": _bytes(planned)}
        for name, fn in (
            ("status merge-patch", patch),
            ("... with a plan", patch_planned),
            ("Event create", event),
            ("batch Job create", workload),
        ):
            cpu, wall, server = measure(fn, args.count, pids)
            servers = "  ".join(f"{k} {ms:5.2f} ms CPU" for k, ms in server.items())
            body = f"{size[name]:>5} B body" if name in size else " " * 11
            print(f"  {name:<20} {body}  client {cpu:5.2f} ms CPU  {wall:7.2f} ms wall  {servers}")
    finally:
        with kubeapi.ignoring(404):
            client.CoreV1Api(api).delete_namespace(namespace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
