"""Spot preemption survived, on the local control plane: each cloud's signals end a running
attempt, the next attempt resumes from the latest *complete* checkpoint (S3 in moto's server mode,
or what a PVC job reported), the lost work is in the status and an event, a real failure is not a
preemption, a prefer job that one spot pool keeps preempting leaves it for a steadier spot pool,
and after spot.maxPreemptions a prefer job falls back to on-demand pools. The operator killed
mid-resume still creates exactly one workload per attempt."""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from accel_api import vocabulary as v
from accel_localcluster import Cluster, kubeapi, preempt
from accel_operator.settings import OperatorSettings
from tests.support.cluster import free_port, unexpected_errors, wait_for
from tests.support.jobs import create_job, end_pods, events_of, gpu_pool, job_doc, pods_of, status, wait_phase
from tests.support.moto_server import CREDENTIALS, REGION, MotoServer, moto_server
from tests.support.operator import RunningOperator, checked_operator, running_operator, settings_for


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture
def spot_operator(
    cluster: Cluster, crds: list[str], namespace: str, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningOperator]:
    """The operator in-process (as the ``operator`` fixture), reading S3 checkpoints from moto."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    with checked_operator(settings_for(namespace, s3_endpoint_url=moto.endpoint, s3_region=REGION)) as runner:
        yield runner


def _checkpoints(moto: MotoServer, bucket: str, *, complete: list[int], partial: list[int]) -> None:
    """Steps with data and their COMPLETE marker, and newer ones whose writer died before it."""
    s3 = moto.client("s3")
    s3.create_bucket(Bucket=bucket)
    for step in complete + partial:
        s3.put_object(Bucket=bucket, Key=f"run/step-{step}/shard-0", Body=b"state")
    for step in complete:
        s3.put_object(Bucket=bucket, Key=f"run/step-{step}/{v.CHECKPOINT_MARKER}", Body=b"")


def _env(api: client.ApiClient, namespace: str, workload: str) -> dict[str, str]:
    job = client.BatchV1Api(api).read_namespaced_job(workload, namespace)
    return {e.name: e.value or "" for e in job.spec.template.spec.containers[0].env or []}


def _running_pod(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> Any:
    """A Running pod of ``job``'s ``attempt``, once there is one (the job runs once its pods are
    bound; KWOK marks them Running a moment later)."""

    def pod() -> Any:
        for p in pods_of(core, namespace, job):
            if p.metadata.labels.get(v.LABEL_ATTEMPT) == str(attempt) and p.status.phase == "Running":
                return p
        return None

    return wait_for(pod, timeout=60, what=f"a running pod of {job} attempt {attempt}")


def _running_node(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> str:
    return str(_running_pod(core, namespace, job, attempt).spec.node_name)


def _running_attempt(api: client.ApiClient, namespace: str, job: str, attempt: int) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        st = status(api, namespace, job)
        return st if st.get("attempt") == attempt and st.get("phase") == "Running" else None

    got: dict[str, Any] = wait_for(check, timeout=90, what=f"{job} running as attempt {attempt}")
    return got


def _seconds(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in st.get("conditions", [])}


def _preempt(core: client.CoreV1Api, node: str, signals: str) -> None:
    if signals == "aws-nth":
        preempt.aws_spot_interruption(core, node, handler="nth")
    elif signals == "karpenter":
        preempt.aws_spot_interruption(core, node, handler="karpenter")
    else:
        preempt.gke_preemption(core, node)


@pytest.mark.parametrize("signals", ["aws-nth", "karpenter", "gke"])
def test_a_preempted_job_resumes_from_the_latest_complete_checkpoint(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    spot_operator: RunningOperator,
    moto: MotoServer,
    signals: str,
) -> None:
    pool, bucket = f"{namespace}-spot", f"ckpt-{namespace}"
    uri = f"s3://{bucket}/run"
    with gpu_pool(api, pool, count=2, capacityType="spot"):
        spec = {"checkpoint": {"uri": uri, "intervalMinutes": 1}, "spot": {"policy": "prefer", "maxPreemptions": 3}}
        create_job(api, job_doc(namespace, pool, devices=8, name="train", **spec))
        first = wait_phase(api, namespace, "train", "Running")
        assert _env(api, namespace, "train-a0")[v.ENV_RESUME_FROM] == ""
        node = _running_node(core, namespace, "train", 0)
        time.sleep(4)  # work that the checkpoint below keeps
        before = time.time()
        # step-2 is newer but half-written (no marker): it must never be chosen.
        _checkpoints(moto, bucket, complete=[1], partial=[2])
        after = time.time()
        time.sleep(2)  # work that the preemption loses
        preempted = time.time()
        _preempt(core, node, signals)

        st = _running_attempt(api, namespace, "train", 1)
        env = _env(api, namespace, "train-a1")
        assert env[v.ENV_RESUME_FROM] == f"{uri}/step-1", env
        assert env[v.ENV_ATTEMPT] == "1"
        assert _running_node(core, namespace, "train", 1) != node
        assert st["lastCheckpoint"]["uri"] == f"{uri}/step-1" and st["lastCheckpoint"]["step"] == 1
        assert st["resume"] == {"attempt": 1, "resumeFrom": f"{uri}/step-1", "source": "s3"}
        failure = st["lastFailure"]
        assert failure["kind"] == "Preemption" and failure["attempt"] == 0
        assert st["preemptions"] == 1 and st.get("retries", 0) == 0
        # Lost work: 8 devices × (preemption − the checkpoint's marker), not since the attempt began.
        # The preemption is when the pod was evicted or ended (its own timestamps), not when the
        # operator recorded it: a KWOK pod evicted from a node deleted at once is removed only by
        # the pod garbage collector, a minute later.
        lost = failure["lostDeviceSeconds"]
        assert _seconds(failure["held"]["endTime"]) <= _seconds(failure["time"])
        slack = 2 + (after - before)
        assert abs(lost / 8 - (preempted - (before + after) / 2)) <= slack, (lost, preempted, before, after)
        assert lost / 8 < preempted - _seconds(first["startTime"]) - 1
        assert st["spot"]["lostDeviceSeconds"] == lost
        assert _conditions(st)["Resumed"] == ("True", "FromCheckpoint")
        reasons = dict(events_of(core, namespace, "train"))
        assert "ResumingFromCheckpoint" in reasons and f"{uri}/step-1" in reasons["ResumingFromCheckpoint"]
        assert "LostWork" in reasons and "device-seconds" in reasons["LostWork"]


def test_a_real_failure_is_not_a_preemption_and_its_retry_resumes(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    spot_operator: RunningOperator,
    moto: MotoServer,
) -> None:
    pool, bucket = f"{namespace}-fail", f"ckpt-{namespace}"
    uri = f"s3://{bucket}/run"
    _checkpoints(moto, bucket, complete=[3, 7], partial=[9])
    with gpu_pool(api, pool, count=1, capacityType="spot"):
        spec = {"checkpoint": {"uri": uri}, "spot": {"policy": "prefer"}, "maxRetries": 1}
        create_job(api, job_doc(namespace, pool, devices=8, name="crash", **spec))
        wait_phase(api, namespace, "crash", "Running")
        end_pods(core, namespace, "crash", 3)  # a non-zero exit on a healthy node
        st = _running_attempt(api, namespace, "crash", 1)
        failure = st["lastFailure"]
        assert failure["kind"] == "Failure" and failure["exitCode"] == 3
        assert "lostDeviceSeconds" not in failure and "spot" not in st
        assert st["retries"] == 1 and st.get("preemptions", 0) == 0
        assert _env(api, namespace, "crash-a1")[v.ENV_RESUME_FROM] == f"{uri}/step-7"


def test_a_job_without_a_checkpoint_restarts_from_scratch_and_says_so(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, spot_operator: RunningOperator
) -> None:
    pool = f"{namespace}-bare"
    with gpu_pool(api, pool, count=2):
        create_job(api, job_doc(namespace, pool, devices=8, name="bare"))
        wait_phase(api, namespace, "bare", "Running")
        # Lost work is counted from the pods' own timestamps, in whole seconds: let it run two.
        time.sleep(2.5)
        preempt.aws_spot_interruption(core, _running_node(core, namespace, "bare", 0), handler="karpenter")
        st = _running_attempt(api, namespace, "bare", 1)
        assert _env(api, namespace, "bare-a1")[v.ENV_RESUME_FROM] == ""
        assert _conditions(st)["Resumed"] == ("False", "FromScratch")
        assert st["resume"]["source"] == "none" and "lastCheckpoint" not in st
        assert st["lastFailure"]["lostDeviceSeconds"] > 0
        reasons = dict(events_of(core, namespace, "bare"))
        assert "restarts from scratch" in reasons["RestartingFromScratch"]


def _claim_mounts(api: client.ApiClient, namespace: str, workload: str) -> list[tuple[str, str, str | None]]:
    """(claim, mount path, sub-path) of each claim a batch Job's pods mount."""
    pod = client.BatchV1Api(api).read_namespaced_job(workload, namespace).spec.template.spec
    claims = {vol.name: vol.persistent_volume_claim.claim_name for vol in pod.volumes if vol.persistent_volume_claim}
    return [
        (claims[m.name], m.mount_path, m.sub_path) for m in pod.containers[0].volume_mounts or [] if m.name in claims
    ]


def test_max_preemptions_then_on_demand_fallback_with_reported_pvc_checkpoints(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, spot_operator: RunningOperator
) -> None:
    spot, od = f"{namespace}-spot", f"{namespace}-od"
    uri = "pvc://train-ckpt/run"
    kubeapi.ensure_claim(api, namespace, "train-ckpt")  # mounted by every attempt's pods
    # Three spot nodes: after two preemptions one is still free, and the job must not take it.
    with gpu_pool(api, spot, count=3, capacityType="spot"), gpu_pool(api, od, count=1):
        doc = job_doc(namespace, spot, devices=8, name="flaky")
        doc["spec"]["placement"]["pools"] = [spot, od]
        doc["spec"]["checkpoint"] = {"uri": uri}
        doc["spec"]["spot"] = {"policy": "prefer", "maxPreemptions": 1}
        create_job(api, doc)
        st = wait_phase(api, namespace, "flaky", "Running")
        assert st["plan"]["pool"] == spot
        for attempt, step in ((0, 4), (1, 9)):
            # The job reports its checkpoints on its pod; a forged one outside its URI is ignored.
            pod = _running_pod(core, namespace, "flaky", attempt)
            for reported in (f"{uri}/step-{step}", "pvc://someone-else/step-99"):
                core.patch_namespaced_pod(
                    pod.metadata.name, namespace, {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT: reported}}}
                )
                if reported.startswith(uri):

                    def recorded(n: int = step) -> bool:
                        return (status(api, namespace, "flaky").get("lastCheckpoint") or {}).get("step") == n

                    wait_for(recorded, timeout=30, what=f"step {step} recorded")
            mounted = _claim_mounts(api, namespace, f"flaky-a{attempt}")
            preempt.aws_spot_interruption(core, _running_node(core, namespace, "flaky", attempt), handler="karpenter")
            st = _running_attempt(api, namespace, "flaky", attempt + 1)
            env = _env(api, namespace, f"flaky-a{attempt + 1}")
            assert env[v.ENV_RESUME_FROM] == f"{uri}/step-{step}"
            # The claim's path is mounted at the same place on every attempt; the resume point is
            # the step's directory under it (what the previous attempt wrote there).
            assert env[v.ENV_RESUME_FROM_DIR] == f"{v.CHECKPOINT_MOUNT_DIR}/step-{step}"
            assert mounted == _claim_mounts(api, namespace, f"flaky-a{attempt + 1}")
            assert mounted == [("train-ckpt", v.CHECKPOINT_MOUNT_DIR, "run")]
            assert st["resume"]["source"] == "reported"
        # Two preemptions, one allowed: on-demand now, said in a condition and an event.
        assert st["preemptions"] == 2 and st["spot"]["onDemand"] is True
        assert st["plan"]["pool"] == od and st["plan"]["capacityType"] == "on-demand"
        assert _conditions(st)["SpotFallback"] == ("True", "MaxPreemptions")
        assert any(r == "FellBackToOnDemand" for r, _ in events_of(core, namespace, "flaky"))
        assert len(st["spot"]["recentPreemptions"]) == 2


def test_a_spot_pool_that_keeps_preempting_is_left_for_a_steadier_spot_pool_not_on_demand(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str]
) -> None:
    """The window rule (here 2 preemptions within the hour) moves the job off the cheap pool that
    keeps preempting it; the planner then picks the steadier spot pool, not on-demand, and the
    status the API server keeps says which pool the job left."""
    flaky, steady, od = f"{namespace}-flaky", f"{namespace}-steady", f"{namespace}-od"
    spot_b: dict[str, Any] = {"capacityType": "spot", "price": {"spotPerDeviceHour": 2.0}, "preemptionRatePerHour": 0.1}
    spot_a: dict[str, Any] = {
        "capacityType": "spot",
        "price": {"spotPerDeviceHour": 2.4},
        "preemptionRatePerHour": 0.02,
    }
    settings = settings_for(namespace, spot_fallback_preemptions=2, spot_fallback_window_seconds=3600)
    kubeapi.ensure_claim(api, namespace, "moving-ckpt")
    with (
        gpu_pool(api, flaky, count=3, **spot_b),  # a node still free there after two preemptions
        gpu_pool(api, steady, count=1, **spot_a),
        gpu_pool(api, od, count=1, price={"onDemandPerDeviceHour": 6.0}),
        checked_operator(settings),
    ):
        doc = job_doc(namespace, flaky, devices=8, name="moving")
        doc["spec"]["placement"]["pools"] = [flaky, steady, od]
        doc["spec"]["spot"] = {"policy": "prefer", "maxPreemptions": 10}
        # A checkpoint, or a preemption loses the whole run and spot prices above on-demand.
        doc["spec"]["checkpoint"] = {"uri": "pvc://moving-ckpt/run", "intervalMinutes": 10}
        create_job(api, doc)
        st = wait_phase(api, namespace, "moving", "Running")
        assert st["plan"]["pool"] == flaky  # the cheapest by expected cost
        for attempt in (0, 1):
            preempt.aws_spot_interruption(core, _running_node(core, namespace, "moving", attempt), handler="karpenter")
            st = _running_attempt(api, namespace, "moving", attempt + 1)
        assert st["preemptions"] == 2
        assert st["spot"]["leftPools"] == [flaky] and st["spot"].get("onDemand", False) is False
        assert st["plan"]["pool"] == steady and st["plan"]["capacityType"] == "spot"
        assert "SpotFallback" not in _conditions(st)
        reasons = dict(events_of(core, namespace, "moving"))
        assert f"on spot pool {flaky}" in reasons["LeftSpotPool"]


def test_the_operator_killed_mid_resume_creates_exactly_one_workload_per_attempt(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    crds: list[str],
    moto: MotoServer,
    tmp_path: Path,
) -> None:
    """Preempt six running jobs at once, SIGKILL the operator as the first resumed workload
    appears, start it again: every job runs attempt 1 from its checkpoint, with one workload, and
    its lost work counted once."""
    pool, bucket = f"{namespace}-kill", f"ckpt-{namespace}"
    _checkpoints(moto, bucket, complete=[5], partial=[6])
    env = {
        **os.environ,
        **moto.env(),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_NAMESPACES": f'["{namespace}"]',
        "ACCEL_OPERATOR_S3_ENDPOINT_URL": moto.endpoint,
        "ACCEL_OPERATOR_S3_REGION": REGION,
    }
    names = [f"r{i}" for i in range(6)]
    log = tmp_path / "operator.log"

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=out)

    def resumed() -> list[Any]:
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=f"{v.LABEL_ATTEMPT}=1").items
        return list(jobs)

    with gpu_pool(api, pool, count=12, capacityType="spot"):
        first = start()
        try:
            for name in names:
                spec = {"checkpoint": {"uri": f"s3://{bucket}/run"}, "spot": {"policy": "prefer"}}
                create_job(api, job_doc(namespace, pool, devices=8, name=name, **spec))
            nodes = [_running_node(core, namespace, n, 0) for n in names]
            for n in names:
                wait_phase(api, namespace, n, "Running")
            for node in nodes:
                preempt.aws_spot_interruption(core, node, handler="karpenter", remove_node=False)
            for node in nodes:
                preempt.delete_node(core, node)
            wait_for(resumed, timeout=90, interval=0.05, what="the first resumed workload")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        made_before = len(resumed())
        second = start()
        try:
            for n in names:
                _running_attempt(api, namespace, n, 1)
        finally:
            second.terminate()
            second.wait(timeout=30)
        per_job: dict[str, int] = {}
        for w in resumed():
            per_job[w.metadata.labels[v.LABEL_JOB]] = per_job.get(w.metadata.labels[v.LABEL_JOB], 0) + 1
            assert _env(api, namespace, w.metadata.name)[v.ENV_RESUME_FROM] == f"s3://{bucket}/run/step-5"
        assert per_job == dict.fromkeys(names, 1), per_job
        for n in names:
            st = status(api, namespace, n)
            assert st["preemptions"] == 1
            assert st["spot"]["lostDeviceSeconds"] == st["lastFailure"]["lostDeviceSeconds"]
        assert 1 <= made_before <= len(names)
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]


def test_an_unreachable_checkpoint_store_holds_only_the_job_that_needs_it(
    api: client.ApiClient,
    core: client.CoreV1Api,
    cluster: Cluster,
    crds: list[str],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 does not answer (nothing listens on the endpoint): the resuming job waits with the
    reason in its Resumed condition and an event, and is asked again; other jobs are admitted."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    # The harness logs at DEBUG, where botocore prints each refused connection's traceback
    # before it retries; the operator's own warning is what this test reads.
    botocore_log = logging.getLogger("botocore")
    botocore_level = botocore_log.level
    botocore_log.setLevel(logging.INFO)
    try:
        _store_down(api, core, namespace, _settings_down(namespace))
    finally:
        botocore_log.setLevel(botocore_level)


def _settings_down(namespace: str) -> OperatorSettings:
    return OperatorSettings(
        namespaces=[namespace],
        liveness_port=0,
        metrics_port=0,
        resync_seconds=3.0,
        s3_endpoint_url=f"http://127.0.0.1:{free_port()}",
        s3_region=REGION,
        checkpoint_lookup_timeout_seconds=3.0,
    )


def _store_down(api: client.ApiClient, core: client.CoreV1Api, namespace: str, settings: OperatorSettings) -> None:
    pool = f"{namespace}-down"
    with running_operator(settings) as runner, gpu_pool(api, pool, count=2):
        spec = {"checkpoint": {"uri": "s3://unreachable/run"}}
        create_job(api, job_doc(namespace, pool, devices=8, name="stuck", **spec))
        wait_phase(api, namespace, "stuck", "Running")
        preempt.aws_spot_interruption(core, _running_node(core, namespace, "stuck", 0), handler="karpenter")

        def waiting() -> dict[str, Any] | None:
            st = status(api, namespace, "stuck")
            return st if _conditions(st).get("Resumed") == ("False", "CheckpointStoreUnavailable") else None

        st = wait_for(waiting, timeout=90, what="the resume waiting for the checkpoint store")
        assert st["phase"] == "Pending" and st["attempt"] == 1 and "cannot be read" in st["message"]
        workloads = client.BatchV1Api(api).list_namespaced_job(namespace).items
        assert "stuck-a1" not in {w.metadata.name for w in workloads}
        create_job(api, job_doc(namespace, pool, devices=8, name="other"))
        wait_phase(api, namespace, "other", "Running")
        assert any(r == "CheckpointStoreUnavailable" for r, _ in events_of(core, namespace, "stuck"))
        lookups = runner.output.count("checkpoint lookup under s3://unreachable/run failed")
        wait_for(
            lambda: runner.output.count("checkpoint lookup under s3://unreachable/run failed") > lookups,
            timeout=60,
            what="the lookup asked again",
        )
        assert status(api, namespace, "stuck")["phase"] == "Pending"
    errors = unexpected_errors(runner.output, [])
    assert not errors, "\n".join(errors)
