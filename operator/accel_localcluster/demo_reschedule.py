"""The demo's rescheduling step: a device fails under a running job, and the job moves.

On a pool of its own (two KWOK nodes, 8 H100s each) an 8-GPU job with a checkpoint runs; a node
agent per node (``python -m accel_agent --backend simulated``, processes of their own: the dev
tooling does not import the agent) reports every second; then the job's node gets a simulated
uncorrectable ECC error on device 3, and its agent reports it. The operator taints the node, asks the job to
checkpoint now, and after the grace (the demo sets ``ACCEL_OPERATOR_CHECKPOINT_GRACE_SECONDS``)
ends the attempt and runs the job again on the healthy node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import demo_pools, kubeapi

POOL = "demo-h100-sick"
JOB = "fragile"


def clean(api: client.ApiClient) -> None:
    """Remove what an earlier run left: the pool, its nodes and their reports."""
    demo_pools.remove_pool(api, POOL, reports=True)


def _agents(kubeconfig: Path, names: list[str]) -> list[subprocess.Popen[bytes]]:
    """One node agent per node, as the DaemonSet runs it, sampling every second."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    # The simulated backend decides which devices pods hold from the pods on the node: the opt-in
    # pod list (the kubeconfig here is the admin's; a DaemonSet needs components/pod-list).
    cmd = [sys.executable, "-m", "accel_agent", "--backend", "simulated", "--pod-list", "--interval", "1"]
    cmd += ["--port", "0"]
    return [
        subprocess.Popen(
            [*cmd, "--bind-address", "127.0.0.1", "--log-level", "WARNING", "--node-name", n],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for n in names
    ]


def _reported(custom: client.CustomObjectsApi, node: str, healthy: bool) -> bool:
    try:
        obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, node)
    except client.exceptions.ApiException:
        return False
    return bool((obj.get("status") or {}).get("healthy") is healthy)


def _job(namespace: str) -> dict[str, Any]:
    """examples/01 on all 8 GPUs of one node of the pool, with a checkpoint."""
    return demo_pools.example_job(namespace, JOB, POOL, 8)


def _status(custom: client.CustomObjectsApi, namespace: str) -> dict[str, Any]:
    return demo_pools.job_status(custom, namespace, JOB)


def _pod_node(core: client.CoreV1Api, namespace: str, attempt: int) -> str | None:
    for p in core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}={JOB}").items:
        if p.metadata.labels.get(v.LABEL_ATTEMPT) == str(attempt) and p.status.phase == "Running":
            return str(p.spec.node_name)
    return None


def run(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    wait: Callable[[str, Callable[[], Any], float], bool],
    timeout: float,
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    made = demo_pools.make_pool(api, POOL, 2)
    print(f"pool {POOL}: 8x h100-80gb on two simulated nodes {', '.join(made)}")
    kubeapi.ensure_namespace(api, namespace)
    kubeapi.apply(api, _job(namespace))
    if not wait(f"{JOB} running", lambda: _pod_node(core, namespace, 0), timeout):
        return
    sick = _pod_node(core, namespace, 0)
    assert sick is not None
    agents = _agents(kubeconfig, made)
    try:
        _moved(custom, core, namespace, sick=sick, wait=wait, timeout=timeout)
    finally:
        for agent in agents:
            agent.terminate()
            agent.wait(timeout=30)


def _moved(
    custom: client.CustomObjectsApi,
    core: client.CoreV1Api,
    namespace: str,
    *,
    sick: str,
    wait: Callable[[str, Callable[[], Any], float], bool],
    timeout: float,
) -> None:
    wait("the agent's first report", lambda: _reported(custom, sick, True), timeout)
    print(f"{JOB} runs on {sick}; the node agents report every device healthy")
    core.patch_node(sick, {"metadata": {"annotations": {v.ANNOTATION_SIM_FAULTS: "3=ecc"}}})
    wait("the agent reporting the fault", lambda: _reported(custom, sick, False), timeout)
    t0 = time.monotonic()
    print(f"\n-- device 3 of {sick} gets an uncorrectable ECC error; the agent reports it")
    wait(
        "the job moved",
        lambda: (
            (_status(custom, namespace).get("health") or {}).get("moves") == 1
            and _pod_node(core, namespace, 1) is not None
        ),
        timeout,
    )
    st = _status(custom, namespace)
    taints = {t.key: t.value for t in core.read_node(sick).spec.taints or []}
    print(f"node {sick} taints: {taints}")
    print(
        f"{JOB}: phase {st.get('phase')}, attempt {st.get('attempt')}, now on {_pod_node(core, namespace, 1)} "
        f"({time.monotonic() - t0:.1f}s after the report)"
    )
    print(f"why: {(st.get('health') or {}).get('moveReason')}")
    for e in core.list_namespaced_event(namespace).items:
        if e.involved_object and e.involved_object.name == JOB and e.reason in ("DeviceUnhealthy", "Moved"):
            print(f"  event {e.reason}: {e.message}")
