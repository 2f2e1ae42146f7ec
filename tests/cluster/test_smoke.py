"""The local control plane is real: CRDs validate on the server, the scheduler binds GPU pods to
KWOK GPU nodes, KWOK runs and ends them, and simulated preemption shows up on the pods the way
each cloud's does."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from accel_api import load_documents, parse_resource, registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPool
from accel_localcluster import kubeapi, nodes, preempt, stages
from tests.support.cluster import ROOT, install_crds, wait_for

EXAMPLES = ROOT / "examples"


def _pool(name: str) -> AcceleratorPool:
    for path in sorted(EXAMPLES.glob("1*-pool-*.yaml")):
        for doc in load_documents(path.read_text()):
            if doc["metadata"]["name"] == name:
                res = parse_resource(doc)
                assert isinstance(res, AcceleratorPool)
                return res
    raise AssertionError(name)


@pytest.fixture
def make_nodes(core: client.CoreV1Api, namespace: str) -> Iterator[Callable[[str, str], list[str]]]:
    """Create one simulated node of an example pool (under a per-test name); delete leftovers after."""
    made: list[str] = []

    def make(example_pool: str, prefix: str) -> list[str]:
        names = nodes.ensure_nodes(
            core, nodes.node_manifests(f"{prefix}-{namespace}", _pool(example_pool).spec, count=1)
        )
        made.extend(names)
        return names

    yield make
    for n in made:
        preempt.delete_node(core, n)  # 404 (already preempted) is fine


def _gpu_job(
    api: client.ApiClient,
    ns: str,
    name: str,
    pool: str,
    resource: str = v.RESOURCE_NVIDIA_GPU,
    taint: str = v.TAINT_GPU,
) -> Any:
    container = client.V1Container(
        name="train",
        image="trainer:1",
        command=["python", "train.py"],
        resources=client.V1ResourceRequirements(limits={resource: "2"}, requests={resource: "2"}),
    )
    pod = client.V1PodSpec(
        containers=[container],
        restart_policy="Never",
        node_selector={v.LABEL_POOL: pool},
        tolerations=[client.V1Toleration(key=taint, operator="Exists", effect="NoSchedule")],
    )
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name=name, namespace=ns),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": name}), spec=pod),
        ),
    )
    return client.BatchV1Api(api).create_namespaced_job(ns, job)


def _running_pod(core: client.CoreV1Api, ns: str, app: str) -> Any:
    def check() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=f"app={app}").items
        return next((p for p in pods if p.status.phase == "Running" and p.spec.node_name), None)

    return wait_for(check, timeout=90, what=f"a Running pod of {app}")


def test_crds_apply_and_server_rejects_invalid(crds: list[str], api: client.ApiClient, namespace: str) -> None:
    assert len(crds) == 4
    custom = client.CustomObjectsApi(api)
    job = yaml.safe_load((EXAMPLES / "01-finetune-single-gpu.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    created = custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, "acceleratorjobs", job)
    assert created["spec"]["workload"]["microBatch"] == 4
    bad = yaml.safe_load((EXAMPLES / "01-finetune-single-gpu.yaml").read_text())
    bad["metadata"].update(name="bad", namespace=namespace)
    bad["spec"]["workload"]["microBatch"] = 0
    bad["spec"]["workload"]["precision"] = "fp4"
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(v.GROUP, v.VERSION, namespace, "acceleratorjobs", bad)
    assert info.value.status == 422
    assert "spec.workload.microBatch" in info.value.body
    assert "spec.workload.precision" in info.value.body
    # Cluster-scoped kinds and printer columns are served as generated.
    for path in (EXAMPLES / "10-pool-h100-spot.yaml", EXAMPLES / "20-policy.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            plural = "acceleratorpools" if doc["kind"] == "AcceleratorPool" else "acceleratorpolicies"
            doc["metadata"]["name"] += f"-{namespace}"
            custom.create_cluster_custom_object(v.GROUP, v.VERSION, plural, doc)
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, plural, doc["metadata"]["name"])


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_accepted_by_the_api_server(
    crds: list[str], api: client.ApiClient, namespace: str, path: Path
) -> None:
    """Server-side, strict field validation (unknown fields are errors, not pruned), dry run."""
    custom = client.CustomObjectsApi(api)
    for doc in load_documents(path.read_text(), source=path.name):
        kind = registry.BY_KIND[doc["kind"]]
        if kind.namespaced:
            doc["metadata"]["namespace"] = namespace
            custom.create_namespaced_custom_object(
                v.GROUP, v.VERSION, namespace, kind.plural, doc, dry_run="All", field_validation="Strict"
            )
        else:
            doc["metadata"]["name"] += f"-{namespace}"  # the demo may have left the real one
            custom.create_cluster_custom_object(
                v.GROUP, v.VERSION, kind.plural, doc, dry_run="All", field_validation="Strict"
            )


def test_gpu_job_is_scheduled_on_kwok_node_and_ends_on_request(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, make_nodes: Callable[[str, str], list[str]]
) -> None:
    pool = f"h100-{namespace}"
    names = make_nodes("h100-spot", "h100")
    node = core.read_node(names[0])
    assert node.metadata.labels[v.LABEL_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels[v.LABEL_KARPENTER_CAPACITY] == "spot"
    assert node.spec.provider_id.startswith("aws:///us-east-1a/i-")
    _gpu_job(api, namespace, "train", pool)
    pod = _running_pod(core, namespace, "train")
    assert pod.spec.node_name == names[0]
    core.patch_namespaced_pod(
        pod.metadata.name, namespace, {"metadata": {"annotations": {stages.EXIT_CODE_ANNOTATION: "0"}}}
    )
    batch = client.BatchV1Api(api)
    wait_for(
        lambda: (batch.read_namespaced_job("train", namespace).status.succeeded or 0) >= 1,
        timeout=60,
        what="Job succeeded",
    )


def test_tpu_pod_lands_on_tpu_host_and_fails_with_exit_code(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, make_nodes: Callable[[str, str], list[str]]
) -> None:
    pool = f"v5e-{namespace}"
    names = make_nodes("tpu-v5e-spot", "v5e")
    node = core.read_node(names[0])
    assert node.status.allocatable[v.RESOURCE_GOOGLE_TPU] == "4"
    assert node.metadata.labels[v.LABEL_TPU_TOPOLOGY] == "2x4"
    assert any(t.key == v.TAINT_TPU for t in node.spec.taints)
    _gpu_job(api, namespace, "tpu", pool, resource=v.RESOURCE_GOOGLE_TPU, taint=v.TAINT_TPU)
    pod = _running_pod(core, namespace, "tpu")
    core.patch_namespaced_pod(
        pod.metadata.name, namespace, {"metadata": {"annotations": {stages.EXIT_CODE_ANNOTATION: "3"}}}
    )

    def failed() -> Any:
        p = core.read_namespaced_pod(pod.metadata.name, namespace)
        return p if p.status.phase == "Failed" else None

    ended = wait_for(failed, timeout=60, what="pod Failed")
    assert ended.status.container_statuses[0].state.terminated.exit_code == 3


def _events_until_deleted(core: client.CoreV1Api, ns: str, name: str, rv: str) -> list[Any]:
    seen = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}", resource_version=rv, timeout_seconds=90
    ):
        seen.append(ev)
        if ev["type"] == "DELETED":
            w.stop()
    return seen


@pytest.mark.parametrize("handler", ["karpenter", "nth"])
def test_aws_spot_interruption_shows_on_the_pod(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    handler: str,
    make_nodes: Callable[[str, str], list[str]],
) -> None:
    pool = f"h100-{handler}-{namespace}"
    names = make_nodes("h100-spot", f"h100-{handler}")
    _gpu_job(api, namespace, "spot", pool)
    pod = _running_pod(core, namespace, "spot")
    instance = core.read_node(names[0]).spec.provider_id.rsplit("/", 1)[-1]
    rv = core.list_namespaced_pod(namespace).metadata.resource_version
    event = preempt.aws_spot_interruption(core, names[0], handler=handler)
    assert event["detail"]["instance-id"] == instance
    assert event["detail-type"] == "EC2 Spot Instance Interruption Warning"
    seen = _events_until_deleted(core, namespace, pod.metadata.name, rv)
    conditions = [c for ev in seen for c in (ev["object"].status.conditions or [])]
    target = [c for c in conditions if c.type == v.CONDITION_DISRUPTION_TARGET and c.status == "True"]
    assert target, "no DisruptionTarget condition was seen on the evicted pod"
    assert target[0].reason == "EvictionByEvictionAPI"
    assert seen[-1]["type"] == "DELETED"
    with pytest.raises(ApiException) as info:
        core.read_node(names[0])
    assert info.value.status == 404


def test_gke_preemption_fails_pods_with_node_shutdown(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, make_nodes: Callable[[str, str], list[str]]
) -> None:
    pool = f"v5e-gke-{namespace}"
    names = make_nodes("tpu-v5e-spot", "v5e-gke")
    _gpu_job(api, namespace, "gke", pool, resource=v.RESOURCE_GOOGLE_TPU, taint=v.TAINT_TPU)
    pod = _running_pod(core, namespace, "gke")
    preempt.gke_preemption(core, names[0])
    p = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert p.status.phase == "Failed"
    assert p.status.reason == "NodeShutdown"
    cond = next(c for c in p.status.conditions if c.type == v.CONDITION_DISRUPTION_TARGET)
    assert (cond.status, cond.reason) == ("True", "TerminationByKubelet")


def test_kubeconfig_and_status(cluster: Any) -> None:
    assert Path(cluster.kubeconfig).is_file()
    assert all(s.healthy for s in cluster.status())


def test_kubectl_version_reports_the_pinned_release(cluster: Any) -> None:
    """The binaries carry the upstream version stamp: `kubectl version` parses the server's
    version (it failed on v0.0.0-master+$Format:%H$) and both report the release in go.mod."""
    import json
    import re
    import subprocess

    gomod = (ROOT / "hack" / "localcluster" / "k8s" / "go.mod").read_text()
    pinned = re.search(r"^require k8s\.io/kubernetes (v\S+)$", gomod, re.M)
    assert pinned is not None
    proc = subprocess.run(
        [str(cluster.bin / "kubectl"), "version", "-o", "json", "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    versions = json.loads(proc.stdout)
    assert versions["serverVersion"]["gitVersion"] == pinned.group(1)
    assert versions["clientVersion"]["gitVersion"] == pinned.group(1)
    assert versions["serverVersion"]["minor"] == pinned.group(1).split(".")[1]


def test_up_is_idempotent_and_cleans_up_after_lost_pidfiles(cluster: Any, api: client.ApiClient) -> None:
    """Runs last in this file: it restarts the control plane, then reinstalls the CRDs."""
    before = {s.name: s.pid for s in cluster.status()}
    cluster.up(build=False)
    assert {s.name: s.pid for s in cluster.status()} == before, "up on a healthy cluster must change nothing"
    for pidfile in (cluster.state / "run").glob("*.pid"):
        pidfile.unlink()  # as after a crash or a wiped state folder: the processes live on
    cluster.up(build=False, timeout=120)
    after = {s.name: s.pid for s in cluster.status()}
    assert all(s.healthy for s in cluster.status())
    for name, pid in before.items():
        assert pid is not None and after[name] != pid
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    install_crds(api)


def test_manifests_are_accepted_by_the_api_server(cluster: Any, core: client.CoreV1Api, crds: list[str]) -> None:
    """Everything under manifests/ (kustomize: CRDs, operator, agent) passes server-side dry run."""
    import subprocess

    with kubeapi.ignoring(409):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="accel-system")))
    proc = subprocess.run(
        [
            str(cluster.bin / "kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-k",
            str(ROOT / "manifests"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for kind in (
        "daemonset.apps/accel-agent",
        "deployment.apps/accel-operator",
        "clusterrole.rbac.authorization.k8s.io/accel-operator",
        "customresourcedefinition.apiextensions.k8s.io/acceleratorjobs.accel.dev",
    ):
        assert kind in proc.stdout, proc.stdout
