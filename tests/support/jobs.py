"""Builders and probes for cluster tests of the operator: pools with simulated nodes, jobs from
the examples, their pods and workloads, and ending a pod with an exit code (KWOK)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import demo_pools, kubeapi, nodes, preempt
from tests.support.cluster import ROOT, wait_for

EXAMPLES = ROOT / "examples"


def example(name: str, index: int = 0) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return copy.deepcopy(docs[index])


def pool_doc(name: str, *, nodes_max: int, devices_per_node: int = 8, **spec: Any) -> dict[str, Any]:
    """An H100 pool whose nodes carry accel.dev/pool=<name> (no shared selector with other tests)."""
    return demo_pools.pool_manifest(name, max_nodes=nodes_max, devices_per_node=devices_per_node, **spec)


@contextmanager
def gpu_pool(
    api: client.ApiClient, name: str, *, count: int, nodes_max: int | None = None, **spec: Any
) -> Iterator[list[str]]:
    """The pool and ``count`` simulated nodes; both removed afterwards."""
    doc = pool_doc(name, nodes_max=nodes_max or max(count, 1), **spec)
    kubeapi.apply(api, doc)
    core = client.CoreV1Api(api)
    made = nodes.ensure_nodes(core, nodes.node_manifests(name, AcceleratorPoolSpec.model_validate(doc["spec"]), count))
    try:
        yield made
    finally:
        for n in core.list_node(label_selector=f"{v.LABEL_POOL}={name}").items:
            preempt.delete_node(core, n.metadata.name)
        with kubeapi.ignoring(404):
            client.CustomObjectsApi(api).delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)


def job_doc(namespace: str, pool: str, *, devices: int = 1, name: str | None = None, **spec: Any) -> dict[str, Any]:
    """examples/01 (a 1.1B fine-tune) pinned to ``pool`` with exactly ``devices`` devices."""
    doc = example("01-finetune-single-gpu.yaml")
    doc["metadata"] = {"name": name or f"job-{uuid.uuid4().hex[:6]}", "namespace": namespace}
    doc["spec"]["placement"] = {"pools": [pool], "minDevices": devices, "maxDevices": devices}
    doc["spec"].update(spec)
    return doc


def create_job(api: client.ApiClient, doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc["metadata"]
    out: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        v.GROUP, v.VERSION, meta["namespace"], registry.JOB.plural, doc
    )
    return out


def get_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        v.GROUP, v.VERSION, namespace, registry.JOB.plural, name
    )
    return out


def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    st: dict[str, Any] = get_job(api, namespace, name).get("status") or {}
    return st


def wait_phase(api: client.ApiClient, namespace: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        st = status(api, namespace, name)
        return st if st.get("phase") == phase else None

    got: dict[str, Any] = wait_for(check, timeout=timeout, what=f"{namespace}/{name} in phase {phase}")
    return got


def pods_of(core: client.CoreV1Api, namespace: str, job: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}={job}").items)


def workloads_of(api: client.ApiClient, namespace: str, job: str) -> list[Any]:
    return list(client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=f"{v.LABEL_JOB}={job}").items)


def end_pods(core: client.CoreV1Api, namespace: str, job: str, exit_code: int = 0) -> list[str]:
    """Make KWOK end every running pod of ``job`` with ``exit_code``."""
    ended = []
    for pod in pods_of(core, namespace, job):
        if pod.status.phase == "Running":
            core.patch_namespaced_pod(
                pod.metadata.name,
                namespace,
                {"metadata": {"annotations": {v.ANNOTATION_SIM_EXIT_CODE: str(exit_code)}}},
            )
            ended.append(pod.metadata.name)
    return ended


def events_of(core: client.CoreV1Api, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events about the AcceleratorJob ``name`` (read through core/v1:
    the events.k8s.io client model refuses events without an eventTime, which others post)."""
    events = core.list_namespaced_event(namespace)
    return [
        (e.reason, e.message or "")
        for e in events.items
        if e.involved_object and e.involved_object.kind == "AcceleratorJob" and e.involved_object.name == name
    ]


def batch_job_exists(batch: client.BatchV1Api, namespace: str, name: str) -> bool:
    """Whether the batch Job ``name`` is there (404: gone; any other error is raised)."""
    try:
        batch.read_namespaced_job(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
