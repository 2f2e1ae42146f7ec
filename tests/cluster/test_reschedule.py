"""Rescheduling on what the node agents report, against the real API server with KWOK nodes: a
device going bad taints its node and moves the job (under the operator's least-privilege role), a
hung two-node job is restarted, and a stale report does nothing until it is fresh again. The
agent's simulated backend writes the reports (``run_cluster_pass``), except where a test needs a
report the agent would never write (an old heartbeat)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_agent import run_cluster_pass
from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import Cluster, kubeapi
from accel_operator.settings import OperatorSettings
from tests.support.cluster import free_port, token_kubeconfig, unexpected_errors, wait_for
from tests.support.jobs import create_job, events_of, gpu_pool, job_doc, pods_of, status, wait_phase
from tests.support.operator import checked_operator, running_operator, settings_for

CHECKPOINT = {"uri": "pvc://checkpoints/reschedule", "intervalMinutes": 10}


@pytest.fixture(autouse=True)
def _checkpoint_claim(api: client.ApiClient, namespace: str) -> None:
    """The claim the jobs' pvc:// checkpoints name (their pods mount it: a missing claim keeps
    them unscheduled)."""
    kubeapi.ensure_claim(api, namespace, "checkpoints")


def _settings(namespace: str) -> OperatorSettings:
    return settings_for(
        namespace,
        resync_seconds=2.0,
        bind_timeout_seconds=20.0,
        checkpoint_grace_seconds=3.0,
        hung_window_seconds=4.0,
        report_stale_seconds=120.0,
    )


@pytest.fixture
def rescheduler(cluster: Cluster, crds: list[str], namespace: str) -> Iterator[Any]:
    """The operator in-process with short rescheduling windows; fails on unexpected log errors."""
    with checked_operator(_settings(namespace)) as runner:
        yield runner


def _drop_reports(api: client.ApiClient, nodes: list[str]) -> None:
    custom = client.CustomObjectsApi(api)
    for n in nodes:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, n)


def _taints(core: client.CoreV1Api, node: str) -> dict[str, str]:
    return {t.key: t.value or "" for t in core.read_node(node).spec.taints or []}


def _running_pods(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> list[Any]:
    return [
        p
        for p in pods_of(core, namespace, job)
        if p.metadata.labels.get(v.LABEL_ATTEMPT) == str(attempt) and p.status.phase == "Running"
    ]


def _annotations(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, str]:
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return dict(pod.metadata.annotations or {})


def _health(api: client.ApiClient, namespace: str, job: str) -> dict[str, Any]:
    st = status(api, namespace, job)
    h: dict[str, Any] = st.get("health") or {}
    return {**h, "attempt": st.get("attempt", 0), "phase": st.get("phase")}


def test_a_failing_device_taints_its_node_and_moves_the_job_under_least_privilege(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str], tmp_path: Path
) -> None:
    kubeconfig = token_kubeconfig(api, core, tmp_path)
    metrics_port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "2",
        "ACCEL_OPERATOR_CHECKPOINT_GRACE_SECONDS": "3",
        "ACCEL_OPERATOR_METRICS_PORT": str(metrics_port),
        "ACCEL_OPERATOR_METRICS_ADDRESS": "127.0.0.1",
    }
    log = tmp_path / "operator.log"
    pool = f"{namespace}-sick"
    with gpu_pool(api, pool, count=2) as nodes:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            create_job(api, job_doc(namespace, pool, devices=8, name="train", checkpoint=CHECKPOINT))
            wait_phase(api, namespace, "train", "Running", timeout=90)
            first = wait_for(lambda: _running_pods(core, namespace, "train", 0), timeout=30, what="attempt 0 running")
            sick = first[0].spec.node_name
            healthy = next(n for n in nodes if n != sick)
            assert run_cluster_pass(api, node_name=sick, pod_list=True).written
            core.patch_node(sick, {"metadata": {"annotations": {v.ANNOTATION_SIM_FAULTS: "3=ecc"}}})
            assert run_cluster_pass(api, node_name=sick, pod_list=True).written

            wait_for(
                lambda: _taints(core, sick).get(v.TAINT_DEVICE_UNHEALTHY) == "3",
                timeout=30,
                what="the device-unhealthy taint on the sick node",
            )
            moved = wait_for(
                lambda: (h := _health(api, namespace, "train")).get("moves") == 1 and h,
                timeout=60,
                what="the job moved",
            )
            assert moved["attempt"] == 1
            second = wait_for(lambda: _running_pods(core, namespace, "train", 1), timeout=60, what="attempt 1 running")
            assert [p.spec.node_name for p in second] == [healthy]
            wait_phase(api, namespace, "train", "Running", timeout=30)
            events = wait_for(
                lambda: (e := events_of(core, namespace, "train")) and "Moved" in {r for r, _ in e} and e,
                timeout=30,
                what="the Moved event",
            )
            unhealthy = [m for r, m in events if r == "DeviceUnhealthy"]
            assert unhealthy and "device 3" in unhealthy[0] and "ECC" in unhealthy[0], events
            assert "checkpoint requested" in unhealthy[0]
            assert any(r == "Moved" and "from its latest checkpoint" in m for r, m in events), events
            assert _taints(core, healthy).get(v.TAINT_DEVICE_UNHEALTHY) is None
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
                metrics = resp.read().decode()
            assert 'accel_operator_moves_total{reason="device-unhealthy"} 1.0' in metrics
            assert 'accel_operator_node_taints_total{action="taint"} 1.0' in metrics
            assert 'accel_operator_checkpoint_requests_total{reason="device-unhealthy"} 1.0' in metrics

            # The device heals: a fresh healthy report takes the taint off.
            core.patch_node(sick, {"metadata": {"annotations": {v.ANNOTATION_SIM_FAULTS: None}}})
            assert run_cluster_pass(api, node_name=sick, pod_list=True).written
            wait_for(
                lambda: v.TAINT_DEVICE_UNHEALTHY not in _taints(core, sick),
                timeout=30,
                what="the taint taken off the healed node",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            _drop_reports(api, nodes)
    text = log.read_text()
    assert "is forbidden: User" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def test_a_hung_two_node_job_is_detected_and_restarted(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, rescheduler: Any
) -> None:
    pool = f"{namespace}-hung"
    with gpu_pool(api, pool, count=2) as nodes:
        try:
            create_job(api, job_doc(namespace, pool, devices=16, name="gang", checkpoint=CHECKPOINT))
            wait_phase(api, namespace, "gang", "Running", timeout=90)
            pods = wait_for(
                lambda: len(p := _running_pods(core, namespace, "gang", 0)) == 2 and p,
                timeout=30,
                what="both pods of attempt 0 running",
            )
            # Both ranks stop computing at once but keep their memory: a stalled collective.
            for p in pods:
                core.patch_namespaced_pod(
                    p.metadata.name, namespace, {"metadata": {"annotations": {v.ANNOTATION_SIM_UTILIZATION: "0"}}}
                )
            for n in nodes:
                assert run_cluster_pass(api, node_name=n, pod_list=True).written
            moved = wait_for(
                lambda: (h := _health(api, namespace, "gang")).get("moves") == 1 and h,
                timeout=60,
                what="the hung job restarted",
            )
            assert moved["attempt"] == 1 and "hung" in moved["moveReason"]
            # The status is written first, the event after it.
            restarted = wait_for(
                lambda: [m for r, m in events_of(core, namespace, "gang") if r == "Moved"],
                timeout=30,
                what="the Moved event",
            )
            assert all(n in restarted[0] for n in nodes), restarted
            assert "from its latest checkpoint" in restarted[0]
            wait_for(
                lambda: len(_running_pods(core, namespace, "gang", 1)) == 2,
                timeout=60,
                what="both pods of attempt 1 running",
            )
            assert not any(v.TAINT_DEVICE_UNHEALTHY in _taints(core, n) for n in nodes)
        finally:
            _drop_reports(api, nodes)


def _put_report(api: client.ApiClient, node: str, devices: list[dict[str, Any]], heartbeat: dt.datetime) -> None:
    custom = client.CustomObjectsApi(api)
    with kubeapi.ignoring(409):
        custom.create_cluster_custom_object(
            v.GROUP,
            v.VERSION,
            registry.NODE_REPORT.plural,
            {
                "apiVersion": v.API_VERSION,
                "kind": "AcceleratorNodeReport",
                "metadata": {"name": node},
                "spec": {"nodeName": node},
            },
        )
    custom.patch_cluster_custom_object_status(
        v.GROUP,
        v.VERSION,
        registry.NODE_REPORT.plural,
        node,
        {
            "status": {
                "backend": "simulated",
                "healthy": all(d.get("healthy", True) for d in devices),
                "devices": devices,
                "heartbeatTime": heartbeat.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        },
    )


ECC_PROBLEM = "uncorrectable ECC errors since the driver loaded: 1"


def _write_report(api: client.ApiClient, node: str, pod: str, namespace: str, heartbeat: dt.datetime) -> None:
    devices = [
        {
            "index": i,
            "healthy": i != 3,
            "problems": [ECC_PROBLEM] if i == 3 else [],
            "utilizationGpuPercent": 0.0,
            "allocatedPods": [{"namespace": namespace, "name": pod}],
        }
        for i in range(8)
    ]
    _put_report(api, node, devices, heartbeat)


def test_a_failing_device_the_device_plugin_withholds_leaves_the_node_schedulable(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, rescheduler: Any
) -> None:
    """Per-device exclusion: device 7 fails. While the device plugin still advertises it, a new pod
    could get it: the node is tainted. Once the plugin withholds it (the kubelet keeps it in
    capacity, not in allocatable) no new pod can: the taint comes off and the node takes a job on
    its healthy devices, one fewer of them."""
    pool = f"{namespace}-plugin"
    with gpu_pool(api, pool, count=1) as nodes:
        node = nodes[0]
        try:
            devices = [
                {"index": i, "healthy": i != 7, "problems": [ECC_PROBLEM] if i == 7 else [], "utilizationGpuPercent": 0}
                for i in range(8)
            ]
            # The agent reports first: the plugin still advertises the device, so the node is tainted...
            _put_report(api, node, devices, dt.datetime.now(dt.UTC))
            wait_for(lambda: v.TAINT_DEVICE_UNHEALTHY in _taints(core, node), timeout=30, what="the taint")
            # ... until the plugin withholds it: the taint comes off.
            core.patch_node_status(node, {"status": {"allocatable": {v.RESOURCE_NVIDIA_GPU: "7"}}})
            wait_for(
                lambda: v.TAINT_DEVICE_UNHEALTHY not in _taints(core, node),
                timeout=30,
                what="the taint taken off once the device plugin withholds the device",
            )
            create_job(api, job_doc(namespace, pool, devices=4, name="first", checkpoint=CHECKPOINT))
            wait_phase(api, namespace, "first", "Running", timeout=90)
            create_job(api, job_doc(namespace, pool, devices=4, name="second", checkpoint=CHECKPOINT))
            st = wait_for(
                lambda: (s := status(api, namespace, "second")).get("phase") == "Pending" and s.get("message") and s,
                timeout=30,
                what="the second job waiting",
            )
            # 7 allocatable, 4 taken: 3 free, fewer than the 4 it needs (with 8 counted it would run).
            assert "fewer than 4 free device(s)" in st["message"], st["message"]
            assert v.TAINT_DEVICE_UNHEALTHY not in _taints(core, node)
            read = core.read_node(node).status
            assert (read.capacity[v.RESOURCE_NVIDIA_GPU], read.allocatable[v.RESOURCE_NVIDIA_GPU]) == ("8", "7")
        finally:
            _drop_reports(api, nodes)


def test_a_stale_report_does_nothing_until_it_is_fresh(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, rescheduler: Any
) -> None:
    pool = f"{namespace}-stale"
    with gpu_pool(api, pool, count=1) as nodes:
        try:
            create_job(api, job_doc(namespace, pool, devices=8, name="quiet", checkpoint=CHECKPOINT))
            wait_phase(api, namespace, "quiet", "Running", timeout=90)
            pod = wait_for(lambda: _running_pods(core, namespace, "quiet", 0), timeout=30, what="a running pod")[0]
            node = pod.spec.node_name
            an_hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
            _write_report(api, node, pod.metadata.name, namespace, an_hour_ago)

            def stale() -> dict[str, Any] | None:
                st = status(api, namespace, "quiet")
                conds = {c["type"]: c for c in st.get("conditions", [])}
                c = conds.get("NodeReports")
                return st if c and c["status"] == "False" and c["reason"] == "ReportStale" else None

            st = wait_for(stale, timeout=30, what="the job saying its node's report is stale")
            assert node in next(c["message"] for c in st["conditions"] if c["type"] == "NodeReports")
            assert st["phase"] == "Running" and st.get("attempt", 0) == 0 and not st.get("health")
            assert v.TAINT_DEVICE_UNHEALTHY not in _taints(core, node)
            assert v.ANNOTATION_CHECKPOINT_NOW not in _annotations(core, namespace, pod.metadata.name)
            assert not [r for r, _ in events_of(core, namespace, "quiet") if r in ("DeviceUnhealthy", "Moved")]

            # The same report with a fresh heartbeat condemns the node: the test can fail.
            _write_report(api, node, pod.metadata.name, namespace, dt.datetime.now(dt.UTC))
            wait_for(
                lambda: v.TAINT_DEVICE_UNHEALTHY in _taints(core, node), timeout=30, what="the node tainted when fresh"
            )
            # Seen before the grace (3 s) ends the attempt and its pod goes.
            wait_for(
                lambda: v.ANNOTATION_CHECKPOINT_NOW in _annotations(core, namespace, pod.metadata.name),
                timeout=30,
                what="the checkpoint-now request on the pod",
            )
        finally:
            _drop_reports(api, nodes)


def test_a_policy_stops_an_idle_job_at_its_checkpoint_and_a_user_resumes_it(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str], cluster: Cluster
) -> None:
    """The agent's reports show the job's devices quiet and empty; a policy (for this test's team
    only) stops such a job after 5 minutes. The test does not wait the minutes out: once the
    operator has started counting (``status.health.idleSince``) it moves that mark 10 minutes back.
    The grace is long (60 s), so the stop comes from the checkpoint the job reports."""
    custom = client.CustomObjectsApi(api)
    name = f"idle-{namespace}"
    policy: dict[str, Any] = {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": name},
        "spec": {"idle": {"stopAfterMinutes": 5, "action": "stop", "teams": [namespace]}},
    }
    custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
    settings = _settings(namespace).model_copy(update={"checkpoint_grace_seconds": 60.0})
    ckpt = {"uri": "pvc://checkpoints/idle", "intervalMinutes": 10}
    pool = f"{namespace}-idle"
    try:
        with running_operator(settings) as runner, gpu_pool(api, pool, count=1) as nodes:
            try:
                create_job(api, job_doc(namespace, pool, devices=8, name="sleepy", checkpoint=ckpt, team=namespace))
                wait_phase(api, namespace, "sleepy", "Running", timeout=90)
                pod = wait_for(lambda: _running_pods(core, namespace, "sleepy", 0), timeout=30, what="a pod")[0]
                quiet = {v.ANNOTATION_SIM_UTILIZATION: "0", v.ANNOTATION_SIM_MEMORY_FRACTION: "0"}
                core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"annotations": quiet}})
                assert run_cluster_pass(api, node_name=nodes[0], pod_list=True).written
                wait_for(lambda: _health(api, namespace, "sleepy").get("idleSince"), timeout=30, what="idleSince")
                ten_minutes_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
                custom.patch_namespaced_custom_object_status(
                    v.GROUP,
                    v.VERSION,
                    namespace,
                    registry.JOB.plural,
                    "sleepy",
                    {"status": {"health": {"idleSince": ten_minutes_ago}}},
                )
                wait_for(
                    lambda: v.ANNOTATION_CHECKPOINT_NOW in _annotations(core, namespace, pod.metadata.name),
                    timeout=30,
                    what="the checkpoint-now request on the idle job's pod",
                )
                assert status(api, namespace, "sleepy")["phase"] == "Running"  # not before its checkpoint
                saved = {v.ANNOTATION_CHECKPOINT: "pvc://checkpoints/idle/step-100"}
                core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"annotations": saved}})

                st = wait_phase(api, namespace, "sleepy", "Stopped", timeout=30)
                conds = {c["type"]: c for c in st["conditions"]}
                assert (conds["Admitted"]["status"], conds["Admitted"]["reason"]) == ("False", "StoppedIdle")
                assert conds["IdleStop"]["reason"] == "Stopped" and v.ANNOTATION_RESUME in conds["IdleStop"]["message"]
                assert st["attempt"] == 1 and st["health"]["stoppedTime"]
                assert "checkpoint written" in st["message"] and f"policy idle-{namespace}" in st["message"]
                # The events follow the status write that made the job Stopped: wait for them.
                wanted = {"IdleStopRequested", "StoppedIdle"}
                wait_for(
                    lambda: wanted <= {r for r, _ in events_of(core, namespace, "sleepy")},
                    timeout=30,
                    what="the IdleStopRequested and StoppedIdle events",
                )
                wait_for(
                    lambda: (
                        not [p for p in pods_of(core, namespace, "sleepy") if p.metadata.deletion_timestamp is None]
                    ),
                    timeout=60,
                    what="the stopped attempt's pod gone",
                )
                assert status(api, namespace, "sleepy")["phase"] == "Stopped"

                # A user resumes it: a new attempt from the checkpoint it wrote.
                resume = {"metadata": {"annotations": {v.ANNOTATION_RESUME: dt.datetime.now(dt.UTC).isoformat()}}}
                custom.patch_namespaced_custom_object(
                    v.GROUP, v.VERSION, namespace, registry.JOB.plural, "sleepy", resume
                )
                st = wait_phase(api, namespace, "sleepy", "Running", timeout=60)
                assert st["attempt"] == 1 and st["resume"]["resumeFrom"] == "pvc://checkpoints/idle/step-100"
                assert "Resumed" in [r for r, _ in events_of(core, namespace, "sleepy")]
            finally:
                _drop_reports(api, nodes)
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, name)
    assert runner.exception is None, runner.exception
    errors = unexpected_errors(runner.output, [])
    assert not errors, "the operator logged errors the test did not expect:\n" + "\n".join(errors)
