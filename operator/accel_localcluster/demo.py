"""The demo: the local cluster, simulated GPU/TPU pools, the operator, and the example jobs.

``python -m accel_localcluster.demo`` (what ``bash hack/dev.sh demo`` runs): starts the control
plane, installs the CRDs, creates the example pools with KWOK nodes behind them, starts the
operator, submits every example job, waits until each one is planned, and prints where each job
would run and why. The cluster is left running for exploration (``accel-cluster down``).
"""

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from kubernetes import client

from accel_api import load_documents, parse_resource, registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPool
from accel_localcluster import default_cluster, kubeapi, nodes
from accel_localcluster.control_plane import REPO

EXAMPLES = REPO / "examples"


def _gb(n: Any) -> str:
    return f"{n / 1e9:.1f}" if isinstance(n, int | float) else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every job's plan")
    args = parser.parse_args(argv)

    cluster = default_cluster()
    t0 = time.monotonic()
    cluster.up(build=True)
    print(f"local control plane healthy in {time.monotonic() - t0:.1f}s (KUBECONFIG={cluster.kubeconfig})")
    api = kubeapi.api_client(cluster.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    kubeapi.install_crds(api)

    docs = [(p, d) for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_documents(p.read_text(), source=p.name)]
    for _, doc in docs:
        if doc["kind"] in ("AcceleratorPool", "AcceleratorPolicy"):
            kubeapi.apply(api, doc)
        res = parse_resource(doc)
        if isinstance(res, AcceleratorPool):
            made = nodes.ensure_nodes(
                core, nodes.node_manifests(res.metadata.name or "pool", res.spec, count=min(res.spec.max_nodes, 2))
            )
            print(
                f"pool {res.metadata.name}: {res.spec.devices_per_node}x {res.spec.accelerator} "
                f"{res.spec.capacity_type.value}, simulated nodes {', '.join(made)}"
            )

    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ACCEL_OPERATOR_LIVENESS_PORT": "0"}
    log_path = cluster.state / "logs" / "operator.log"
    with log_path.open("wb") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", "accel_operator"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        jobs = [d for _, d in docs if d["kind"] == "AcceleratorJob"]
        for doc in jobs:
            kubeapi.ensure_namespace(api, doc["metadata"]["namespace"])
            kubeapi.apply(api, doc)
        print(f"submitted {len(jobs)} AcceleratorJobs; the operator is planning them (log: {log_path})")
        end = time.monotonic() + args.timeout
        statuses: dict[str, dict[str, Any]] = {}
        while time.monotonic() < end and len(statuses) < len(jobs):
            for doc in jobs:
                meta = doc["metadata"]
                obj = custom.get_namespaced_custom_object(
                    v.GROUP, v.VERSION, meta["namespace"], registry.JOB.plural, meta["name"]
                )
                if obj.get("status", {}).get("phase"):
                    statuses[f"{meta['namespace']}/{meta['name']}"] = obj["status"]
            time.sleep(0.5)
        if len(statuses) < len(jobs):
            print(
                f"error: only {len(statuses)} of {len(jobs)} jobs were planned in {args.timeout:.0f}s; see {log_path}",
                file=sys.stderr,
            )
            return 1
    finally:
        operator.terminate()
        operator.wait(timeout=30)

    print()
    print(f"{'JOB':38} {'PHASE':13} {'POOL':16} {'ACCEL':10} {'DEV':>4} {'GB/DEV':>8} {'HOURS':>8} {'COST $':>10}")
    for key, st in sorted(statuses.items()):
        p = st.get("plan", {})
        hours = p.get("durationSeconds")
        cost = p.get("costUsd")
        print(
            f"{key:38} {st['phase']:13} {p.get('pool') or '-':16} {p.get('accelerator') or '-':10} "
            f"{p.get('devices') or '-':>4} {_gb(p.get('footprintBytesPerDevice')):>8} "
            f"{'-' if hours is None else f'{hours / 3600:.1f}':>8} {'-' if cost is None else f'{cost:,.2f}':>10}"
        )
        print(f"    why: {st.get('message', '')}")
        for alt in p.get("alternatives", [])[:3]:
            print(f"    lost: {alt['pool']} {alt['devices']}x {alt['accelerator']}: {alt['reason']}")
    kubectl = cluster.bin / "kubectl"
    print(f"\n$ kubectl get acceleratorjobs -A   (KUBECONFIG={cluster.kubeconfig})")
    subprocess.run([str(kubectl), "get", "acceleratorjobs", "-A"], env=env, check=False)
    print("\nThe cluster is still running: `accel-cluster status`, `accel-cluster down`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
