"""``kubectl accel`` as a user runs it: the real kubectl finds the ``kubectl-accel`` entry point on
PATH and runs ``why`` (a job waiting for capacity, another running), ``stop`` and ``resume`` against jobs the
operator reconciles on the local control plane."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from accel_localcluster import Cluster
from tests.support.cluster import wait_for
from tests.support.jobs import batch_job_exists, create_job, gpu_pool, job_doc, status, wait_phase


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
            f"The operator says: waiting for capacity: {pool} has 0 free device(s) on 1 usable node(s); "
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
