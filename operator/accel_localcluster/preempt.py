"""Spot preemption as each cloud does it, applied to a simulated node.

- AWS: the node-termination handler (or Karpenter) taints the node, drains it through the
  Eviction API (pods get ``DisruptionTarget`` with reason ``EvictionByEvictionAPI``), then the
  instance and its Node go away. The EventBridge event AWS sends two minutes earlier is returned
  so a test can put it on an SQS queue (moto).
- GKE: the node gets ``cloud.google.com/impending-node-termination``; 30 seconds later the
  kubelet's graceful shutdown ends every pod ``Failed`` with reason ``Terminated`` or
  ``NodeShutdown`` (condition ``DisruptionTarget``/``TerminationByKubelet``); the node is deleted.
- Plain eviction: one pod evicted through the Eviction API.
"""

import datetime as dt
import uuid
from typing import Any

from kubernetes import client

from accel_api import vocabulary as v
from accel_api.durations import stamp
from accel_localcluster import kubeapi


def _now() -> str:
    return stamp(dt.datetime.now(dt.UTC))


def _pods_on(core: client.CoreV1Api, node: str) -> list[Any]:
    return list(core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items)


def taint(core: client.CoreV1Api, node: str, key: str, effect: str = "NoSchedule", value: str = "true") -> None:
    current = core.read_node(node)
    taints = [t for t in (current.spec.taints or []) if t.key != key]
    taints.append(client.V1Taint(key=key, value=value, effect=effect, time_added=None))
    core.patch_node(node, {"spec": {"taints": [t.to_dict() for t in taints]}})


def evict(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    with kubeapi.ignoring(404):
        core.create_namespaced_pod_eviction(pod, namespace, body)


def delete_node(core: client.CoreV1Api, node: str) -> None:
    with kubeapi.ignoring(404):
        core.delete_node(node)


def spot_interruption_event(provider_id: str, region: str = "us-east-1") -> dict[str, Any]:
    """The EventBridge 'EC2 Spot Instance Interruption Warning' for the node's instance."""
    instance_id = provider_id.rsplit("/", 1)[-1]
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": _now(),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:123456789012:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }


def aws_spot_interruption(
    core: client.CoreV1Api, node: str, *, handler: str = "karpenter", remove_node: bool = True
) -> dict[str, Any]:
    """Interrupt ``node`` the AWS way; return the EventBridge event that announced it."""
    provider_id = core.read_node(node).spec.provider_id or ""
    key = v.TAINT_KARPENTER_DISRUPTED if handler == "karpenter" else v.TAINT_NTH_SPOT_ITN
    taint(core, node, key)
    for pod in _pods_on(core, node):
        evict(core, pod.metadata.namespace, pod.metadata.name)
    if remove_node:
        delete_node(core, node)
    return spot_interruption_event(provider_id)


def gke_preemption(
    core: client.CoreV1Api, node: str, *, reason: str = "NodeShutdown", remove_node: bool = True
) -> None:
    """Preempt ``node`` the GKE way: taint, pods Failed by the kubelet's shutdown, node deleted."""
    taint(core, node, v.TAINT_GKE_IMPENDING_TERMINATION)
    now = _now()
    for pod in _pods_on(core, node):
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        conditions = [c.to_dict() for c in (pod.status.conditions or []) if c.type != v.CONDITION_DISRUPTION_TARGET]
        conditions = [{k: val for k, val in c.items() if val is not None} for c in conditions]
        for c in conditions:
            if c.get("type") in ("Ready", "ContainersReady"):
                c["status"] = "False"
        conditions.append(
            {
                "type": v.CONDITION_DISRUPTION_TARGET,
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Pod was terminated in response to imminent node shutdown.",
                "lastTransitionTime": now,
            }
        )
        statuses = [
            {
                "name": cs.name,
                "image": cs.image,
                "ready": False,
                "restartCount": cs.restart_count or 0,
                "state": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": now, "startedAt": now}},
            }
            for cs in (pod.status.container_statuses or [])
        ]
        core.patch_namespaced_pod_status(
            pod.metadata.name,
            pod.metadata.namespace,
            {
                "status": {
                    "phase": "Failed",
                    "reason": reason,
                    "message": "Pod was terminated in response to imminent node shutdown.",
                    "conditions": conditions,
                    "containerStatuses": statuses,
                }
            },
        )
    if remove_node:
        delete_node(core, node)
