"""``kubectl accel`` as a user runs it: the real kubectl finds the ``kubectl-accel`` entry point on
PATH and runs ``why`` (a job waiting for capacity, another running), ``stop`` and ``resume`` against jobs the
operator reconciles on the local control plane, and ``top`` over a node report the agent's own code
built from its NVML backend (on the fake NVML) and wrote to the API server."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from accel_agent import report
from accel_agent.backends.fake import FakeNvml
from accel_agent.backends.nvml import NvmlBackend
from accel_agent.sink import KubernetesReportSink
from accel_api import registry
from accel_api import vocabulary as v
from accel_api.nodereport import PodRef
from accel_localcluster import Cluster, kubeapi
from tests.support.cluster import wait_for
from tests.support.jobs import batch_job_exists, create_job, gpu_pool, job_doc, status, wait_phase
from tests.support.operator import checked_operator, settings_for


def _kubectl_accel(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """``kubectl accel ARGV`` with the venv's bin (where ``kubectl-accel`` is installed) on PATH."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(cluster.kubeconfig),
        "NO_COLOR": "",
    }
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "accel", *argv], env=env, capture_output=True, text=True, check=False, timeout=60
    )


def test_kubectl_accel_why_and_stop_through_the_real_kubectl(
    cluster: Cluster, api: client.ApiClient, namespace: str, operator: Any
) -> None:
    pool = f"{namespace}-h100"
    with gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=8, name="first"))
        wait_phase(api, namespace, "first", "Running")
        create_job(api, job_doc(namespace, pool, devices=8, name="second"))
        wait_for(
            lambda: "WaitingForCapacity" in str(status(api, namespace, "second").get("conditions")),
            timeout=30,
            what="the second job waiting for capacity",
        )

        waiting = _kubectl_accel(cluster, "why", "second", "-n", namespace)
        assert waiting.returncode == 0, waiting.stderr
        lines = waiting.stdout.splitlines()
        assert lines[0] == f"{namespace}/second is Pending (attempt 0).", waiting.stdout
        assert (
            f"The operator says: waiting for capacity: {pool} has 0 free device(s); "
            "needs 1 node(s) with 8 free device(s) each." in lines
        ), waiting.stdout
        assert "Admitted: no (WaitingForCapacity)." in lines, waiting.stdout
        assert any(ln.startswith(f"Planned on pool {pool}: 8 × h100-80gb on 1 node(s), on-demand") for ln in lines)
        assert "\033[" not in waiting.stdout  # a pipe: no colour

        running = _kubectl_accel(cluster, "why", "first", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
        assert running.returncode == 0, running.stderr
        assert running.stdout.startswith(f"{namespace}/first is Running"), running.stdout
        assert f"Planned on pool {pool}: 8 ×" in running.stdout
        assert "It runs as the batch Job " in running.stdout and " on node(s) " in running.stdout, running.stdout

        # stop: the annotation; the operator ends the attempt (no checkpoint: at once) and the job is
        # Stopped, its batch Job gone, and the job that waited for its devices runs.
        stop = _kubectl_accel(cluster, "stop", "first", "-n", namespace)
        assert stop.returncode == 0, (stop.stdout, stop.stderr)
        assert "acceleratorjob first stop requested" in stop.stdout
        wait_phase(api, namespace, "first", "Stopped")
        wait_for(
            lambda: not batch_job_exists(client.BatchV1Api(api), namespace, "first-a0"),
            timeout=30,
            what="first-a0 gone",
        )
        wait_phase(api, namespace, "second", "Running")
        again = _kubectl_accel(cluster, "stop", "first", "-n", namespace)
        assert again.returncode == 1 and "is Stopped: nothing to stop" in again.stderr
        # resume: planned again as a new attempt, waiting now for the devices "second" holds.
        resume = _kubectl_accel(cluster, "resume", "first", "-n", namespace)
        assert resume.returncode == 0, resume.stderr
        wait_for(
            lambda: (
                status(api, namespace, "first").get("phase") == "Pending"
                and status(api, namespace, "first").get("attempt") == 1
            ),
            timeout=30,
            what="first planned again as attempt 1",
        )

        missing = _kubectl_accel(cluster, "why", "nope", "-n", namespace)
        assert missing.returncode == 1
        assert missing.stderr.strip() == f"error: acceleratorjob nope in namespace {namespace} not found"


def _post_fake_agent_report(api: client.ApiClient, node: str, namespace: str, pod: str) -> int:
    """The node's report as the agent makes it: its NVML backend on the fake NVML (eight H100s, GPM
    read between two passes), the kubelet's allocation of every device to ``pod``, written by the
    agent's own sink. Devices 0-3 run short bursts (7% SMs active, 8% utilization), 4-7 nothing;
    each holds 30 GiB. Returns the devices' total memory."""
    nvml = FakeNvml.h100(8)
    for i, d in enumerate(nvml.devices):
        d.util_gpu, d.base_memory_used_bytes = (8 if i < 4 else 0), 30 << 30
        nvml.set_gpm(i, sm_active=7.0 if i < 4 else 0.0, tensor_active=5.0 if i < 4 else 0.0, pcie_rx_mib=180.0)
    backend = NvmlBackend(nvml, xid_events=False)
    backend.sample()
    sample = backend.sample()
    mine = (PodRef(namespace=namespace, name=pod),)
    sample = dataclasses.replace(
        sample, devices=tuple(dataclasses.replace(d, allocated_pods=mine) for d in sample.devices)
    )
    now = dt.datetime.now(dt.UTC)
    built = report.build(sample, node_name=node, sample_time=now)
    KubernetesReportSink.from_api_client(api).write(report.stamp_heartbeat(built, now))
    return sum(d.memory_total_bytes for d in nvml.devices)


def test_kubectl_accel_top_through_the_real_kubectl(cluster: Cluster, api: client.ApiClient, namespace: str) -> None:
    pool = f"{namespace}-h100"
    settings = settings_for(namespace, cost_interval_seconds=1.0, cost_write_seconds=1.0)
    with checked_operator(settings), gpu_pool(api, pool, count=1) as (node,):
        try:
            create_job(api, job_doc(namespace, pool, devices=8, name="starved"))
            wait_phase(api, namespace, "starved", "Running")
            pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}=starved")
            (pod,) = [p.metadata.name for p in pods.items if p.spec.node_name == node]

            # No report yet: the job is listed, and top says what it lacks.
            before = _kubectl_accel(cluster, "top", "-n", namespace)
            assert before.returncode == 0, before.stderr
            assert f"no fresh node report shows its devices on {node}" in before.stdout, before.stdout

            total = _post_fake_agent_report(api, node, namespace, pod)
            wait_for(
                lambda: any(
                    a.get("intervals")
                    for a in (status(api, namespace, "starved").get("cost") or {}).get("attempts") or []
                ),
                timeout=30,
                what="the accountant charging the attempt",
            )
            price = status(api, namespace, "starved")["cost"]["attempts"][-1]["intervals"][-1]["usdPerDeviceHour"]

            table = _kubectl_accel(cluster, "top", "-n", namespace)
            assert table.returncode == 0, table.stderr
            head, row = table.stdout.splitlines()
            assert head.split() == ["NAME", "DEVICES", "UTIL", "MEMORY", "IDLE($/H)", "DIAGNOSIS"]
            # eight devices, half at 8% and half at 0%: the accountant's idle share is one half
            memory = f"{8 * 30}/{total / (1 << 30):.0f}GiB"
            assert row.split()[:5] == ["starved", "8/8", "4%", memory, f"${price * 8 * 0.5:,.2f}"], row
            assert "input-bound: SMs active 3.5%, tensor cores 2.5%, PCIe 0.2 GB/s, NVLink 0.0 GB/s on 8 devices" in row

            as_json = _kubectl_accel(cluster, "top", "-A", "-o", "json", "--kubeconfig", str(cluster.kubeconfig))
            assert as_json.returncode == 0, as_json.stderr
            (mine,) = [j for j in json.loads(as_json.stdout)["jobs"] if j["namespace"] == namespace]
            assert mine["idleFraction"] == 0.5 and mine["diagnosis"]["verdict"] == "input-bound"
            assert mine["counters"]["source"] == "gpm" and mine["nodes"] == [node]

            wrong = _kubectl_accel(cluster, "top", "-n", namespace, "--context", "nope")
            assert wrong.returncode == 2, wrong
            assert wrong.stderr.startswith("error: --context: ") and "nope" in wrong.stderr
            assert wrong.stderr.count("\n") == 1 and "Traceback" not in wrong.stderr
        finally:
            with kubeapi.ignoring(404):
                client.CustomObjectsApi(api).delete_cluster_custom_object(
                    v.GROUP, v.VERSION, registry.NODE_REPORT.plural, node
                )
