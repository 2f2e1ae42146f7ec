"""How fast the operator turns an EC2 spot interruption warning into a checkpoint-now request.

On the local control plane (KWOK nodes, real API server), with EventBridge's SQS queue simulated
by moto in server mode on this machine:

1. one pool of ``--nodes`` nodes (8 × H100 each) and one 8-GPU job per node, all Running, and
   the operator as a subprocess reading the queue (``ACCEL_OPERATOR_SQS_*``, 1 s long poll);
2. ``--single`` warnings one at a time (each for another node, the next only after the previous
   was acted on): the time from SendMessage to the request seen on the job's pod;
3. a burst: a warning for every remaining node at once (a whole zone reclaimed), the same time
   for each, and until the queue is empty.

Times are taken by polling the pods every 0.1 s from here (so they include up to 0.1 s of
polling and the watch's delay); AWS gives two minutes, GKE 30 seconds.

Run:  ACCEL_CLUSTER_PORT_BASE=31000 python bench/early_warning.py --nodes 30 --single 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import default_cluster, demo_signals, kubeapi, nodes, preempt

NS = "bench-warnings"


def _wait(what: str, check: Any, timeout: float, interval: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def _requests(core: client.CoreV1Api) -> dict[str, str]:
    """node -> the checkpoint-now token on the pod running there."""
    out = {}
    for p in core.list_namespaced_pod(NS).items:
        token = (p.metadata.annotations or {}).get(v.ANNOTATION_CHECKPOINT_NOW)
        if token and p.spec.node_name:
            out[p.spec.node_name] = token
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=30)
    ap.add_argument("--single", type=int, default=5, help="warnings sent one at a time before the burst")
    ap.add_argument("--timeout", type=float, default=180.0)
    args = ap.parse_args()
    if args.single >= args.nodes:
        raise SystemExit("--single must be less than --nodes")

    cluster = default_cluster()
    cluster.up(build=True)
    api = kubeapi.api_client(cluster.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    kubeapi.install_crds(api)
    kubeapi.ensure_namespace(api, NS)
    pool = f"bench-warn-{uuid.uuid4().hex[:6]}"
    spec = {
        "provider": "aws",
        "accelerator": "h100-80gb",
        "devicesPerNode": 8,
        "capacityType": "spot",
        "maxNodes": args.nodes,
        "tolerations": [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
    }
    kubeapi.apply(
        api, {"apiVersion": v.API_VERSION, "kind": "AcceleratorPool", "metadata": {"name": pool}, "spec": spec}
    )
    made = nodes.ensure_nodes(core, nodes.node_manifests(pool, AcceleratorPoolSpec.model_validate(spec), args.nodes))
    provider = {n: core.read_node(n).spec.provider_id for n in made}
    queue = demo_signals.start_queue()
    if queue is None:
        raise SystemExit("moto is not installed (the workspace's dev extra)")
    env = {
        **os.environ,
        **queue.operator_env(),
        "KUBECONFIG": str(cluster.kubeconfig),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_NAMESPACES": f'["{NS}"]',
    }
    log = tempfile.NamedTemporaryFile(prefix="early-warning-operator-", suffix=".log", delete=False)  # noqa: SIM115
    operator = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=log, stderr=log)
    try:
        for i in range(args.nodes):
            doc = demo_signals.warned_job(f"job-{i:03d}", NS, pool)
            custom.create_namespaced_custom_object(v.GROUP, v.VERSION, NS, registry.JOB.plural, doc)

        def running() -> bool:
            pods = core.list_namespaced_pod(NS).items
            return sum(1 for p in pods if p.status.phase == "Running") == args.nodes

        t = time.monotonic()
        _wait("every job running", running, args.timeout, 0.5)
        print(f"{args.nodes} nodes, {args.nodes} jobs running in {time.monotonic() - t:.1f}s")

        single: list[float] = []
        for node in made[: args.single]:
            t0 = time.monotonic()
            queue.send(preempt.spot_interruption_event(provider[node]))
            _wait(f"the request on {node}", lambda n=node: n in _requests(core), args.timeout)
            single.append(time.monotonic() - t0)
        burst_nodes = made[args.single :]
        sent = time.monotonic()
        for node in burst_nodes:
            queue.send(preempt.spot_interruption_event(provider[node]))
        sent_all = time.monotonic() - sent
        seen: dict[str, float] = {}

        def all_seen() -> bool:
            now = time.monotonic()
            for node in _requests(core):
                seen.setdefault(node, now - sent)
            return all(n in seen for n in burst_nodes)

        _wait("every request of the burst", all_seen, args.timeout)
        _wait("the queue empty", lambda: queue.waiting() == 0, args.timeout, 0.2)
        emptied = time.monotonic() - sent
        tainted = sum(
            1 for n in made if any(t.key == v.TAINT_ACCEL_INTERRUPTION for t in core.read_node(n).spec.taints or [])
        )
        burst = [seen[n] for n in burst_nodes]
        print(f"one at a time ({len(single)}): median {statistics.median(single):.2f}s, max {max(single):.2f}s")
        print(
            f"burst of {len(burst)} (sent in {sent_all:.2f}s): median {statistics.median(burst):.2f}s, "
            f"p95 {_pct(burst, 0.95):.2f}s, last {max(burst):.2f}s; queue empty after {emptied:.2f}s"
        )
        print(f"nodes tainted: {tainted} of {args.nodes}; operator log: {log.name}")
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        queue.stop()
        with kubeapi.ignoring(404):
            custom.delete_collection_namespaced_custom_object(v.GROUP, v.VERSION, NS, registry.JOB.plural)
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, pool)
        for n in made:
            preempt.delete_node(core, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
