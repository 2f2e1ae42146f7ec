"""Early warnings against the real API server: an EC2 interruption notice on an SQS queue (moto in
server mode) taints the node and asks the job's pods to checkpoint before the node goes; an
operator killed between acting and deleting the message acts again harmlessly (under its
least-privilege role); GKE's impending-termination taint asks the same; a TPU VM the TPU API
(a local stand-in, through google-cloud-tpu) reports PREEMPTED makes the attempt a preemption."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from accel_api import vocabulary as v
from accel_localcluster import preempt
from accel_operator.settings import OperatorSettings
from tests.support.cluster import ROOT, token_kubeconfig, wait_for
from tests.support.jobs import create_job, end_pods, events_of, gpu_pool, job_doc, pods_of, status, wait_phase
from tests.support.moto_server import REGION, MotoServer, moto_server
from tests.support.operator import checked_operator, settings_for
from tests.support.tpu_standin import TpuStandin, tpu_standin

TPU_TOLERATION = [{"key": v.TAINT_TPU, "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture
def queue(moto: MotoServer, namespace: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """A queue of its own (redelivery after 2 s), and boto3's credentials for the in-process operator."""
    for key, value in moto.env().items():
        monkeypatch.setenv(key, value)
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName=f"interruptions-{namespace}", Attributes={"VisibilityTimeout": "2"})["QueueUrl"]
    return sqs, str(url)


def _settings(namespace: str, **kw: Any) -> OperatorSettings:
    return settings_for(namespace, **kw)


def _sqs_settings(namespace: str, moto: MotoServer, url: str) -> OperatorSettings:
    aws = {"sqs_queue_url": url, "sqs_region": REGION, "aws_endpoint_url": moto.endpoint, "sqs_wait_seconds": 1}
    return _settings(namespace, **aws)


@contextmanager
def _operator(settings: OperatorSettings, *expected: str) -> Iterator[None]:
    with checked_operator(settings, *expected):
        yield


def _taints(core: client.CoreV1Api, node: str) -> dict[str, str]:
    return {t.key: t.value for t in core.read_node(node).spec.taints or []}


def _requests(core: client.CoreV1Api, namespace: str, job: str) -> dict[str, str]:
    """The checkpoint-now request on each running pod of ``job``; empty until every one has it."""
    pods = [p for p in pods_of(core, namespace, job) if p.status.phase == "Running"]
    got = {p.metadata.name: (p.metadata.annotations or {}).get(v.ANNOTATION_CHECKPOINT_NOW) for p in pods}
    return got if got and all(got.values()) else {}  # type: ignore[return-value]


def _queue_empty(sqs: Any, url: str) -> bool:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return bool(attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0")


def _reasons(core: client.CoreV1Api, namespace: str, job: str, reason: str) -> int:
    return sum(1 for r, _ in events_of(core, namespace, job) if r == reason)


def test_a_queue_warning_taints_the_node_and_asks_for_a_checkpoint_before_the_node_goes(
    api: client.ApiClient,
    core: client.CoreV1Api,
    crds: list[str],
    namespace: str,
    moto: MotoServer,
    queue: tuple[Any, str],
) -> None:
    sqs, url = queue
    pool = f"{namespace}-sqs"
    with gpu_pool(api, pool, count=1) as [node], _operator(_sqs_settings(namespace, moto, url)):
        create_job(api, job_doc(namespace, pool, devices=4, name="train"))
        wait_phase(api, namespace, "train", "Running", timeout=90)
        provider_id = core.read_node(node).spec.provider_id
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(preempt.spot_interruption_event(provider_id)))

        requests = wait_for(lambda: _requests(core, namespace, "train"), timeout=30, what="the checkpoint-now request")
        [token] = set(requests.values())
        assert token.startswith("aws-spot-interruption/i-"), token
        assert _taints(core, node).get(v.TAINT_ACCEL_INTERRUPTION) == "aws-spot-interruption"
        wait_for(lambda: _queue_empty(sqs, url), timeout=30, what="the message deleted after acting")
        wait_for(
            lambda: _reasons(core, namespace, "train", "CheckpointRequested"), timeout=15, what="the event on the job"
        )
        # All of that while the node and the job's pod are still there.
        assert core.read_node(node).metadata.deletion_timestamp is None
        assert status(api, namespace, "train")["phase"] == "Running"

        # Nothing new lands on the tainted node, though it has 4 free devices.
        create_job(api, job_doc(namespace, pool, devices=1, name="next"))
        waiting = wait_for(
            lambda: (st := status(api, namespace, "next")).get("phase") == "Pending" and st, timeout=30, what="next"
        )
        assert "0 usable node(s)" in waiting["message"], waiting

        # Then the cloud takes the node: the attempt ends as a preemption (once the pod garbage
        # collector removes the evicted pod of the deleted node: about 40 s on its own).
        preempt.aws_spot_interruption(core, node, handler="nth")
        failed = wait_for(
            lambda: (status(api, namespace, "train").get("lastFailure") or {}).get("kind"),
            timeout=150,
            what="the attempt's end",
        )
        assert failed == "Preemption"
        assert _reasons(core, namespace, "train", "CheckpointRequested") == 1


def _subprocess_env(kubeconfig: Path, namespace: str, moto: MotoServer, url: str) -> dict[str, str]:
    return {
        **os.environ,
        **moto.env(),
        "KUBECONFIG": str(kubeconfig),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_LOG_FORMAT": "json",
        "ACCEL_OPERATOR_SQS_QUEUE_URL": url,
        "ACCEL_OPERATOR_SQS_REGION": REGION,
        "ACCEL_OPERATOR_AWS_ENDPOINT_URL": moto.endpoint,
        "ACCEL_OPERATOR_SQS_WAIT_SECONDS": "1",
    }


def test_a_crash_between_acting_and_deleting_redelivers_and_acting_again_is_harmless(
    api: client.ApiClient,
    core: client.CoreV1Api,
    crds: list[str],
    namespace: str,
    moto: MotoServer,
    queue: tuple[Any, str],
    tmp_path: Path,
) -> None:
    """Both operators run as processes under the ServiceAccount of manifests/operator/rbac.yaml:
    the taint (nodes patch), the request (pods patch) and the event (events create) need it."""
    sqs, url = queue
    env = _subprocess_env(token_kubeconfig(api, core, tmp_path), namespace, moto, url)
    pool = f"{namespace}-crash"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with gpu_pool(api, pool, count=1) as [node]:
        with first_log.open("wb") as out:
            first = subprocess.Popen(
                [sys.executable, "-m", "tests.support.operator_dies_before_ack"],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            create_job(api, job_doc(namespace, pool, devices=8, name="train"))
            wait_phase(api, namespace, "train", "Running", timeout=90)
            provider_id = core.read_node(node).spec.provider_id
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps(preempt.spot_interruption_event(provider_id)))
            assert first.wait(timeout=60) == -9, first_log.read_text()[-3000:]  # killed at the delete
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        # It acted, and the message is still on the queue.
        [token] = set(_requests(core, namespace, "train").values())
        assert _taints(core, node).get(v.TAINT_ACCEL_INTERRUPTION) == "aws-spot-interruption"
        assert not _queue_empty(sqs, url)
        events = _reasons(core, namespace, "train", "CheckpointRequested")
        assert events == 1

        with second_log.open("wb") as out:
            second = subprocess.Popen(
                [sys.executable, "-m", "accel_operator"], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            wait_for(lambda: _queue_empty(sqs, url), timeout=60, what="the redelivered message deleted")
        finally:
            second.terminate()
            second.wait(timeout=30)
        text = second_log.read_text()
        records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        acted = [r["message"] for r in records if r.get("logger") == "accel_operator.signals"]
        assert any("0 pod(s) of 0 job(s) asked" in m for m in acted), text[-3000:]
        # Acting twice changed nothing: the same request, one taint of ours, one event.
        assert set(_requests(core, namespace, "train").values()) == {token}
        keys = [t.key for t in core.read_node(node).spec.taints or []]
        assert keys.count(v.TAINT_ACCEL_INTERRUPTION) == 1
        assert _reasons(core, namespace, "train", "CheckpointRequested") == 1
    for log in (first_log, second_log):
        assert "is forbidden: User" not in log.read_text(), log.read_text()[-3000:]


def test_the_gke_termination_taint_asks_for_a_checkpoint(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = f"{namespace}-gke"
    with gpu_pool(api, pool, count=1, provider="gcp", zone="us-central1-a") as [node]:
        create_job(api, job_doc(namespace, pool, devices=8, name="train"))
        wait_phase(api, namespace, "train", "Running", timeout=90)
        preempt.taint(core, node, v.TAINT_GKE_IMPENDING_TERMINATION)
        requests = wait_for(lambda: _requests(core, namespace, "train"), timeout=30, what="the checkpoint-now request")
        uid = core.read_node(node).metadata.uid
        assert set(requests.values()) == {f"gke-impending-termination/{node}/{uid}"}
        wait_for(
            lambda: _reasons(core, namespace, "train", "CheckpointRequested"), timeout=15, what="the event on the job"
        )
        assert v.TAINT_ACCEL_INTERRUPTION not in _taints(core, node)  # GKE's own taint keeps pods off
        # Then GKE's graceful shutdown ends the pod: a preemption, as before.
        preempt.gke_preemption(core, node, reason="NodeShutdown")
        kind = wait_for(
            lambda: (status(api, namespace, "train").get("lastFailure") or {}).get("kind"), timeout=60, what="the end"
        )
        assert kind == "Preemption"
        assert _reasons(core, namespace, "train", "CheckpointRequested") == 1


@pytest.fixture
def tpu() -> Iterator[TpuStandin]:
    with tpu_standin() as standin:
        yield standin


def test_a_tpu_vm_reported_preempted_makes_the_attempt_a_preemption(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str, tpu: TpuStandin
) -> None:
    pool = f"{namespace}-tpu"
    settings = _settings(namespace, tpu_pools=[pool], tpu_endpoint=tpu.endpoint, tpu_poll_seconds=1)
    spec: dict[str, Any] = {
        "accelerator": "tpu-v5p",
        "provider": "gcp",
        "zone": "us-central2-b",
        "tolerations": TPU_TOLERATION,
    }
    with gpu_pool(api, pool, count=1, devices_per_node=4, **spec) as [node], _operator(settings):
        tpu.nodes[("accel-local", "us-central2-b")] = {node: "READY", "someone-elses": "PREEMPTED"}
        create_job(api, job_doc(namespace, pool, devices=4, name="train", maxRetries=0))
        wait_phase(api, namespace, "train", "Running", timeout=90)
        wait_for(lambda: tpu.requests, timeout=30, what="the TPU API asked")
        tpu.nodes[("accel-local", "us-central2-b")] = {node: "PREEMPTED"}
        wait_for(
            lambda: _taints(core, node).get(v.TAINT_ACCEL_INTERRUPTION) == "tpu-preempted", timeout=30, what="taint"
        )
        # The VM died: its program ends with SIGTERM's exit code, no DisruptionTarget. Without the
        # TPU API that is a failure (maxRetries 0: the job would fail); with it, a preemption.
        end_pods(core, namespace, "train", 143)
        st = wait_for(
            lambda: (s := status(api, namespace, "train")).get("lastFailure") and s, timeout=60, what="the end"
        )
        assert st["lastFailure"]["kind"] == "Preemption", st
        assert st.get("preemptions") == 1 and st["phase"] != "Failed", st
        wait_for(lambda: _reasons(core, namespace, "train", "NodePreempted"), timeout=15, what="the event")
