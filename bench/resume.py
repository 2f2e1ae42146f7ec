"""How long a spot preemption takes to become a resumed attempt, per cloud's signal sequence.

On the local control plane (started or reused), with moto's S3 in server mode and the operator as
a subprocess: one 8-GPU job per signal sequence (AWS node termination handler, Karpenter, GKE),
checkpointing to S3. Each round writes a complete checkpoint, preempts the node of the running
attempt with ``accel_localcluster.preempt`` and records, from the moment of the preemption:

- ``failed``: the operator recorded the preemption (``status.lastFailure`` of that attempt); the
  time is mostly Kubernetes' (the evicted or shut-down pod ending, the Job controller's Failed);
- ``workload``: the next attempt's batch Job exists (resume point looked up, admitted, created);
- ``running``: the next attempt is Running.

Prints one row per sequence (median and worst over ``--rounds``) and checks each resumed
workload's ``ACCEL_RESUME_FROM``. Figures, not a test: nothing is asserted about speed.

    python bench/resume.py --rounds 3
Export ``ACCEL_CLUSTER_PORT_BASE`` to run the control plane on other ports.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import yaml
from kubernetes import client
from moto.server import ThreadedMotoServer

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import default_cluster, demo_pools, kubeapi, preempt

ROOT = Path(__file__).resolve().parents[1]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
SEQUENCES: dict[str, Callable[[client.CoreV1Api, str], Any]] = {
    "aws-nth": lambda core, node: preempt.aws_spot_interruption(core, node, handler="nth"),
    "karpenter": lambda core, node: preempt.aws_spot_interruption(core, node, handler="karpenter"),
    "gke": preempt.gke_preemption,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s")


Status = Callable[[], dict[str, Any]]


def _phase(st: Status, attempt: int, phase: str) -> Callable[[], bool]:
    return lambda: (s := st()).get("attempt") == attempt and s.get("phase") == phase


def _failed(st: Status, attempt: int) -> Callable[[], bool]:
    return lambda: (st().get("lastFailure") or {}).get("attempt") == attempt


def _exists(batch: client.BatchV1Api, ns: str, name: str) -> Callable[[], bool]:
    return lambda: bool(batch.list_namespaced_job(ns, field_selector=f"metadata.name={name}").items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="preemptions per signal sequence")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for each wait")
    args = parser.parse_args()

    cluster = default_cluster()
    started = not cluster.healthy()
    cluster.up(build=True)
    api = kubeapi.api_client(cluster.kubeconfig)
    core, custom, batch = client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api)
    kubeapi.install_crds(api)
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="b", aws_secret_access_key="b"
    )
    ns = f"bench-resume-{uuid.uuid4().hex[:6]}"
    kubeapi.ensure_namespace(api, ns)
    env = {
        **os.environ,
        **CREDENTIALS,
        "KUBECONFIG": str(cluster.kubeconfig),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_NAMESPACES": f'["{ns}"]',
        "ACCEL_OPERATOR_S3_ENDPOINT_URL": endpoint,
        "ACCEL_OPERATOR_SPOT_FALLBACK_PREEMPTIONS": "0",
    }
    log = Path(tempfile.mkdtemp()) / "operator.log"
    with log.open("wb") as out:
        operator = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=out)
    base = next(d for d in yaml.safe_load_all((ROOT / "examples/01-finetune-single-gpu.yaml").read_text()) if d)
    rows: list[tuple[str, list[float], list[float], list[float]]] = []
    pools: list[str] = []
    try:
        for seq, hit in SEQUENCES.items():
            pool, bucket, job = f"{ns}-{seq}", f"{ns}-{seq}", f"resume-{seq}"
            pools.append(pool)
            demo_pools.make_pool(api, pool, args.rounds + 1, capacityType="spot")
            s3.create_bucket(Bucket=bucket)
            jd = {**base, "metadata": {"name": job, "namespace": ns}}
            jd["spec"] = {
                **base["spec"],
                "placement": {"pools": [pool], "minDevices": 8, "maxDevices": 8},
                "spot": {"policy": "prefer", "maxPreemptions": args.rounds},
                "checkpoint": {"uri": f"s3://{bucket}/run"},
            }
            kubeapi.apply(api, jd)

            def st(name: str = job) -> dict[str, Any]:
                got: dict[str, Any] = (
                    custom.get_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural, name).get("status")
                    or {}
                )
                return got

            failed, created, running = [], [], []
            for attempt in range(args.rounds):
                _until(_phase(st, attempt, "Running"), args.timeout, f"attempt {attempt} running")
                selector = f"{v.LABEL_JOB}={job},{v.LABEL_ATTEMPT}={attempt}"
                pods = core.list_namespaced_pod(ns, label_selector=selector).items
                node = next(p.spec.node_name for p in pods if p.status.phase == "Running")
                s3.put_object(Bucket=bucket, Key=f"run/step-{attempt + 1}/{v.CHECKPOINT_MARKER}", Body=b"")
                t0 = time.monotonic()
                hit(core, node)
                _until(_failed(st, attempt), args.timeout, f"attempt {attempt}'s failure recorded")
                failed.append(time.monotonic() - t0)
                name = f"{job}-a{attempt + 1}"
                _until(_exists(batch, ns, name), args.timeout, name)
                created.append(time.monotonic() - t0)
                _until(_phase(st, attempt + 1, "Running"), args.timeout, f"attempt {attempt + 1} running")
                running.append(time.monotonic() - t0)
                envs = batch.read_namespaced_job(name, ns).spec.template.spec.containers[0].env
                got = next(e.value for e in envs if e.name == v.ENV_RESUME_FROM)
                expected = f"s3://{bucket}/run/step-{attempt + 1}"
                if got != expected:
                    print(f"!! {name}: ACCEL_RESUME_FROM={got!r}, expected {expected!r}", file=sys.stderr)
            rows.append((seq, failed, created, running))
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        moto.stop()
        for name in pools:
            with kubeapi.ignoring(404):
                custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)
            for n in core.list_node(label_selector=f"{v.LABEL_POOL}={name}").items:
                preempt.delete_node(core, n.metadata.name)
        core.delete_namespace(ns)
        if started:
            cluster.down()

    print(f"\npreemption -> ... seconds, median (worst) over {args.rounds} round(s); operator log {log}")
    print(f"{'SIGNALS':10} {'FAILURE RECORDED':>18} {'NEXT WORKLOAD':>16} {'NEXT RUNNING':>16}")
    for seq, failed, created, running in rows:
        cells = [f"{statistics.median(x):.1f} ({max(x):.1f})" for x in (failed, created, running)]
        print(f"{seq:10} {cells[0]:>18} {cells[1]:>16} {cells[2]:>16}")
    print("after the failure is recorded, the resume (S3 lookup, admission, workload) is the difference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
