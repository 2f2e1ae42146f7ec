"""A workload on the real control plane: the built Job and Service are accepted, created once,
run as a gang on two KWOK nodes, fail by the exit-code rule, and go with their AcceleratorJob."""

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import catalog, load_documents, parse_resource
from accel_api import vocabulary as v
from accel_api.job import AcceleratorJob
from accel_api.pool import AcceleratorPool
from accel_localcluster import nodes, preempt, stages
from accel_operator.adapters.kube import workloads
from accel_operator.adapters.kube.workloads import KubeWorkloadClient, WorkloadSpec
from tests.support.cluster import ROOT, wait_for

EXAMPLES = ROOT / "examples"
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def _h100_spot(name: str) -> AcceleratorPool:
    """The example pool under ``name``; its selector also names the pool, so this test's pods
    land on this test's nodes whatever other H100 spot nodes the cluster has."""
    for doc in load_documents((EXAMPLES / "10-pool-h100-spot.yaml").read_text()):
        if doc["metadata"]["name"] == "h100-spot":
            doc["metadata"]["name"] = name
            doc["spec"]["nodeSelector"][v.LABEL_POOL] = name
            pool = parse_resource(doc)
            assert isinstance(pool, AcceleratorPool)
            return pool
    raise AssertionError("examples/10-pool-h100-spot.yaml has no h100-spot pool")


@pytest.fixture
def gang_pool(core: client.CoreV1Api, namespace: str) -> Iterator[tuple[AcceleratorPool, list[str]]]:
    pool = _h100_spot(f"h100-wl-{namespace}")
    name = pool.metadata.name
    assert name is not None
    made = nodes.ensure_nodes(core, nodes.node_manifests(name, pool.spec, count=2))
    yield pool, made
    for node in made:
        preempt.delete_node(core, node)


def _owner(api: client.ApiClient, namespace: str) -> tuple[AcceleratorJob, str]:
    doc = yaml.safe_load((EXAMPLES / "01-finetune-single-gpu.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        v.GROUP, v.VERSION, namespace, "acceleratorjobs", doc
    )
    job = parse_resource(created)
    assert isinstance(job, AcceleratorJob)
    return job, created["metadata"]["uid"]


def _env(pod: Any) -> dict[str, str]:
    out = {}
    for e in pod.spec.containers[0].env:
        # The server omits an empty value ("" comes back as None): the variable is set, and empty.
        out[e.name] = (e.value or "") if e.value_from is None else e.value_from.field_ref.field_path
    return out


def _gone(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _start_gang(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, pool: AcceleratorPool
) -> tuple[AcceleratorJob, str, dict[str, Any]]:
    """Create the owner and its attempt-0 workload (twice); return the owner, the workload's name
    and its two Running pods by completion index."""
    owner, uid = _owner(api, namespace)
    h100 = catalog.default().get(pool.spec.accelerator)
    assert h100 is not None and owner.metadata.name is not None and pool.metadata.name is not None
    w = WorkloadSpec(
        job_name=owner.metadata.name,
        namespace=namespace,
        job_uid=uid,
        spec=owner.spec,
        attempt=0,
        pool_name=pool.metadata.name,
        pool=pool.spec,
        accelerator=h100,
        devices=16,
        nodes=2,
    )
    job, service = workloads.build(w)
    kube = KubeWorkloadClient(api)
    assert kube.create(job, service) is True
    assert kube.create(job, service) is False  # a retried reconcile: still one workload
    selector = f"{v.LABEL_JOB}={owner.metadata.name},{v.LABEL_ATTEMPT}=0"

    def running() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        up = [p for p in pods if p.status.phase == "Running" and p.spec.node_name]
        return up if len(up) == 2 else []

    pods = wait_for(running, timeout=90, what="both gang pods Running")
    return owner, w.name, {p.metadata.annotations[v.ANNOTATION_JOB_COMPLETION_INDEX]: p for p in pods}


def _failed(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    batch = client.BatchV1Api(api)

    def check() -> dict[str, Any] | None:
        got: dict[str, Any] = api.sanitize_for_serialization(batch.read_namespaced_job(name, namespace))
        conditions = got.get("status", {}).get("conditions") or []
        return got if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions) else None

    found: dict[str, Any] = wait_for(check, timeout=90, what=f"Job {name} Failed")
    return found


def test_gang_workload_runs_fails_by_exit_code_and_goes_with_its_job(
    api: client.ApiClient,
    core: client.CoreV1Api,
    crds: list[str],
    namespace: str,
    gang_pool: tuple[AcceleratorPool, list[str]],
) -> None:
    pool, node_names = gang_pool
    owner, name, by_index = _start_gang(api, core, namespace, pool)
    batch = client.BatchV1Api(api)
    assert [j.metadata.name for j in batch.list_namespaced_job(namespace).items] == [name]
    assert [s.metadata.name for s in core.list_namespaced_service(namespace).items] == [name]
    assert core.read_namespaced_service(name, namespace).spec.cluster_ip == "None"
    assert sorted(p.spec.node_name for p in by_index.values()) == sorted(node_names)  # one pod per node
    assert sorted(by_index) == ["0", "1"]
    for index, pod in by_index.items():
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"{name}-{index}", name)
        env = _env(pod)
        assert env[v.RDZV_MASTER_ADDR] == f"{name}-0.{name}"
        assert env[v.RDZV_WORLD_SIZE] == env[v.ENV_DEVICES] == "16"
        assert env[v.ENV_NNODES] == "2" and env[v.ENV_NPROC_PER_NODE] == "8"
        assert env[v.ENV_NODE_RANK] == env[v.RDZV_NODE_RANK] == INDEX
        assert env[v.ENV_ATTEMPT] == "0" and env[v.ENV_RESUME_FROM] == ""
        assert pod.spec.containers[0].resources.limits == {v.RESOURCE_NVIDIA_GPU: "8"}

    core.patch_namespaced_pod(
        by_index["1"].metadata.name, namespace, {"metadata": {"annotations": {stages.EXIT_CODE_ANNOTATION: "3"}}}
    )
    ended = _failed(api, namespace, name)
    assert workloads.failed_rule(ended) == workloads.RULE_EXIT_CODE, ended["status"]

    assert owner.metadata.name is not None
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        v.GROUP, v.VERSION, namespace, "acceleratorjobs", owner.metadata.name
    )
    wait_for(
        lambda: (
            _gone(batch.read_namespaced_job, name, namespace) and _gone(core.read_namespaced_service, name, namespace)
        ),
        timeout=90,
        what="the garbage collector to delete the Job and the Service",
    )


@pytest.mark.parametrize("cloud", ["aws", "gke"])
def test_a_preempted_gang_fails_by_the_disruption_rule(
    api: client.ApiClient,
    core: client.CoreV1Api,
    crds: list[str],
    namespace: str,
    gang_pool: tuple[AcceleratorPool, list[str]],
    cloud: str,
) -> None:
    """AWS: Karpenter evicts the pods (DisruptionTarget, then deleted); GKE: the kubelet fails them
    with DisruptionTarget on shutdown. Either way the operator reads a preemption, not a failure."""
    pool, _ = gang_pool
    _, name, by_index = _start_gang(api, core, namespace, pool)
    node = by_index["0"].spec.node_name
    if cloud == "aws":
        preempt.aws_spot_interruption(core, node, handler="karpenter")
    else:
        preempt.gke_preemption(core, node)
    ended = _failed(api, namespace, name)
    assert workloads.failed_rule(ended) == workloads.RULE_DISRUPTION, ended["status"]
