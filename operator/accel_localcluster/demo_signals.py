"""The demo's early-warning step: EventBridge's SQS queue, simulated by moto in server mode on
this machine, and a spot interruption warning for a simulated node that runs a job.

The operator reads the queue exactly as in AWS (``ACCEL_OPERATOR_SQS_QUEUE_URL``, boto3); the
demo puts the warning on it the way EventBridge would (SQS's JSON protocol over HTTP, so this
dev tooling needs no AWS SDK of its own), then shows the taint on the node and the
checkpoint-now request on the job's pod before the node goes, and finally takes the node away
(``preempt.aws_spot_interruption``): the attempt ends as a preemption.

moto is in the workspace's dev extra; without it the step is skipped with a note.
"""

from __future__ import annotations

import copy
import json
import logging
import socket
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from accel_api import load_documents, registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import kubeapi, nodes, preempt
from accel_localcluster.control_plane import REPO

POOL = "demo-h100-spot-warned"
JOB = "warned"
REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo"}


@dataclass
class LocalQueue:
    endpoint: str
    url: str
    server: Any  # moto.server.ThreadedMotoServer

    def operator_env(self) -> dict[str, str]:
        """What the operator process needs to read this queue."""
        return {
            **CREDENTIALS,
            "AWS_DEFAULT_REGION": REGION,
            "ACCEL_OPERATOR_SQS_QUEUE_URL": self.url,
            "ACCEL_OPERATOR_SQS_REGION": REGION,
            "ACCEL_OPERATOR_AWS_ENDPOINT_URL": self.endpoint,
            "ACCEL_OPERATOR_SQS_WAIT_SECONDS": "1",
        }

    def _call(self, target: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.endpoint + "/",
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": f"AmazonSQS.{target}",
                # moto reads the account and region from the credential scope; it checks no signature.
                "Authorization": f"AWS4-HMAC-SHA256 Credential=demo/20260101/{REGION}/sqs/aws4_request, "
                "SignedHeaders=host, Signature=0",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            out: dict[str, Any] = json.loads(reply.read() or b"{}")
        return out

    def send(self, event: dict[str, Any]) -> None:
        self._call("SendMessage", {"QueueUrl": self.url, "MessageBody": json.dumps(event)})

    def waiting(self) -> int:
        attrs = self._call(
            "GetQueueAttributes",
            {
                "QueueUrl": self.url,
                "AttributeNames": ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            },
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def stop(self) -> None:
        self.server.stop()


def start_queue() -> LocalQueue | None:
    """moto on a free local port with one queue; None when moto is not installed."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        return None
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log in the demo's output
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    queue = LocalQueue(f"http://127.0.0.1:{port}", "", server)
    queue.url = str(queue._call("CreateQueue", {"QueueName": "demo-interruptions"})["QueueUrl"])
    return queue


def clean(api: client.ApiClient) -> None:
    """Remove what an earlier run of this step left (the pool and its node)."""
    with kubeapi.ignoring(404):
        client.CustomObjectsApi(api).delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, POOL)
    core = client.CoreV1Api(api)
    for node in core.list_node(label_selector=f"{v.LABEL_POOL}={POOL}").items:
        preempt.delete_node(core, node.metadata.name)


def _wait(what: str, check: Callable[[], Any], timeout: float) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    print(f"  (timed out after {timeout:.0f}s waiting for {what})", file=sys.stderr)
    return None


def warned_job(name: str, namespace: str, pool: str) -> dict[str, Any]:
    """examples/01 (a 1.1B fine-tune) on 8 spot GPUs of ``pool``, checkpointing (spot requires it)."""
    doc = copy.deepcopy(next(iter(load_documents((REPO / "examples" / "01-finetune-single-gpu.yaml").read_text()))))
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["placement"] = {"pools": [pool], "minDevices": 8, "maxDevices": 8}
    doc["spec"]["spot"] = {"policy": "require"}
    doc["spec"]["checkpoint"] = {"uri": f"pvc://demo-checkpoints/{name}", "intervalMinutes": 30}
    return doc


def run(api: client.ApiClient, queue: LocalQueue, namespace: str, timeout: float) -> None:
    """A spot job on this step's one-node pool, the warning for its node, what the operator did."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    spec = {
        "provider": "aws",
        "accelerator": "h100-80gb",
        "devicesPerNode": 8,
        "capacityType": "spot",
        "maxNodes": 1,
        "tolerations": [{"key": v.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
    }
    pool = {"apiVersion": v.API_VERSION, "kind": "AcceleratorPool", "metadata": {"name": POOL}, "spec": spec}
    kubeapi.apply(api, pool)
    [node] = nodes.ensure_nodes(core, nodes.node_manifests(POOL, AcceleratorPoolSpec.model_validate(spec), 1))
    kubeapi.apply(api, warned_job(JOB, namespace, POOL))

    def phase() -> str:
        obj = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, JOB)
        return str((obj.get("status") or {}).get("phase") or "-")

    if not _wait(f"{JOB} running", lambda: phase() == "Running", timeout):
        return
    provider_id = core.read_node(node).spec.provider_id
    event = preempt.spot_interruption_event(provider_id)
    print(f"EventBridge -> SQS: '{event['detail-type']}' for {event['detail']['instance-id']} (node {node})")
    t0 = time.monotonic()
    queue.send(event)

    def asked() -> dict[str, str]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}={JOB}").items
        got = {p.metadata.name: (p.metadata.annotations or {}).get(v.ANNOTATION_CHECKPOINT_NOW) for p in pods}
        return got if got and all(got.values()) else {}  # type: ignore[return-value]

    requests = _wait("the checkpoint-now request", asked, timeout)
    if not requests:
        return
    print(f"the operator acted in {time.monotonic() - t0:.1f}s:")
    taints = {t.key: f"{t.value}:{t.effect}" for t in core.read_node(node).spec.taints or []}
    print(f"  node {node} taint {v.TAINT_ACCEL_INTERRUPTION}={taints.get(v.TAINT_ACCEL_INTERRUPTION)}")
    for pod, token in requests.items():
        print(f"  pod {pod} annotation {v.ANNOTATION_CHECKPOINT_NOW}={token}")
        print(f"    (the job reads it in {v.POD_ANNOTATIONS_FILE}, projected by a downward-API volume)")
    for e in core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={JOB}").items:
        if e.reason == "CheckpointRequested":
            print(f"  event on {namespace}/{JOB}: {e.type} {e.reason}: {e.message}")
    _wait("the message deleted", lambda: queue.waiting() == 0, timeout)
    print(f"  the message was deleted from the queue after acting ({queue.waiting()} left)")
    print(f"-- two minutes later AWS takes the instance: {node} drained and gone")
    preempt.aws_spot_interruption(core, node, handler="nth")

    def ended() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, JOB)
        failure: dict[str, Any] = (obj.get("status") or {}).get("lastFailure") or {}
        return failure

    failure = _wait("the attempt's end", ended, timeout)
    if failure:
        print(f"  attempt {failure.get('attempt')} ended: {failure.get('kind')} ({failure.get('reason')})")
