"""``bash hack/dev.sh deploy`` end to end, on a control plane of its own with the real node
(accel_localcluster.realnode: containerd, runc, a kubelet): the chart installed with the images
built here, the operator pod Ready on that node from the operator image, a spot job without a
checkpoint refused by the webhook through the chart's Service, a job admitted and its batch Job
made by the operator running in the cluster, and an uninstall that leaves no webhook behind.

Two replicas run on that node's pod network (kube-proxy leads them to the API server): the leader
pod is killed and the other replica takes over, and a ``helm upgrade`` to a newer chart version
rolls both pods while a job keeps running, untouched.

Opt-in (``ACCEL_DEPLOY_TEST=1``): it needs root, the Debian packages ``hack/dev.sh deploy``
installs, and the images (``bash hack/images.sh build``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import Cluster, demo_pools, kubeapi, nodes, preempt
from accel_localcluster import deploy as deploy_mod
from accel_localcluster.control_plane import Ports
from accel_localcluster.realnode import NODE_NAME
from tests.support import jobs as jobs_mod
from tests.support.cluster import ROOT, wait_for
from tests.support.jobs import create_job, job_doc

pytestmark = pytest.mark.skipif(
    os.environ.get("ACCEL_DEPLOY_TEST") != "1", reason="opt-in: ACCEL_DEPLOY_TEST=1 (root, containerd, the images)"
)
PORT_BASE = int(os.environ.get("ACCEL_DEPLOY_PORT_BASE", "29000"))


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("deploy-cluster")
    ports = Ports.from_base(PORT_BASE)
    bin_dir = Path(os.environ.get("ACCEL_CLUSTER_BIN", ROOT / ".cache" / "localcluster" / "bin"))
    cluster = Cluster(state=home / "state", bin=bin_dir, ports=ports, pod_network=True)
    t0 = time.monotonic()
    try:
        deploy_mod.up(cluster)
        print(f"deployed in {time.monotonic() - t0:.1f}s")
        yield cluster
    finally:
        deploy_mod.down(cluster)
        cluster.down()


SELECTOR = "app.kubernetes.io/name=accel-operator"


def _operator_pods(core: client.CoreV1Api) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(deploy_mod.NAMESPACE, label_selector=SELECTOR).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _leader_pod(api: client.ApiClient) -> str:
    """The pod whose replica holds the Lease (its identity starts with the pod's hostname)."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("accel-operator", deploy_mod.NAMESPACE)
    except client.ApiException as exc:
        if exc.status == 404:  # not taken yet
            return ""
        raise
    holder = lease.spec.holder_identity or ""
    names = [p.metadata.name for p in _operator_pods(client.CoreV1Api(api))]
    return next((n for n in names if holder.startswith(f"{n}-")), "")


def _leader_gauge(pod: client.V1Pod) -> float:
    """``accel_operator_leader`` read from the pod's metrics port: the host reaches the bridge."""
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8080/metrics", timeout=5) as resp:
        text = resp.read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith("accel_operator_leader ")]
    return float(line.split()[1])


def _job_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "accel.dev", "v1alpha1", "ml-research", "acceleratorjobs", name
    )
    status: dict[str, Any] = obj.get("status") or {}
    return status


def test_the_chart_runs_the_operator_from_its_image_on_the_real_node(deployed: Cluster) -> None:
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    core = client.CoreV1Api(api)
    pods = _operator_pods(core)
    assert len(pods) == 2
    for pod in pods:
        assert pod.spec.node_name == NODE_NAME
        assert not pod.spec.host_network  # on the pod network: the API server through the Service
        status = pod.status.container_statuses[0]
        assert status.ready and status.image.startswith("docker.io/library/accel-operator:")
        assert pod.spec.security_context.run_as_user == 65532
    # One leader: only its replica exports 1 (a follower's cost counters stay out of the dashboard).
    leader = wait_for(lambda: _leader_pod(api), timeout=60, what="a Lease holder")
    assert {p.metadata.name: _leader_gauge(p) for p in pods} == {
        p.metadata.name: (1.0 if p.metadata.name == leader else 0.0) for p in pods
    }

    # A policy: spot jobs must checkpoint; the namespace is team research's.
    kubeapi.ensure_namespace(api, "ml-research", labels={"accel.dev/team": "research"})
    subprocess.run(
        [str(deployed.bin / "kubectl"), "apply", "-f", str(ROOT / "examples" / "20-policy.yaml")],
        env={**os.environ, "KUBECONFIG": str(deployed.kubeconfig)},
        check=True,
        capture_output=True,
    )
    bad = job_doc("ml-research", "deploy-pool", devices=8, name="spot-no-ckpt", team="research")
    bad["spec"]["spot"] = {"policy": "prefer"}
    bad["spec"].pop("checkpoint", None)

    def refused() -> str | None:
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "accel.dev", "v1alpha1", "ml-research", "acceleratorjobs", bad, dry_run="All"
            )
        except client.ApiException as exc:
            return str(exc.body) if exc.status == 422 else None
        return None  # the webhook has not read the policy yet

    body = wait_for(refused, timeout=60, what="the webhook's refusal through its Service")
    assert 'admission webhook \\"policy.accel.dev\\" denied' in body or "policy.accel.dev" in body
    assert "required for spot jobs by policy 'platform-defaults'" in body

    # A job admitted by the operator in the cluster: its batch Job made, the job Running.
    demo_pools.make_pool(api, "deploy-pool", 1)
    create_job(api, job_doc("ml-research", "deploy-pool", devices=8, name="deployed", team="research"))

    def running() -> bool:
        st = (
            client.CustomObjectsApi(api)
            .get_namespaced_custom_object("accel.dev", "v1alpha1", "ml-research", "acceleratorjobs", "deployed")
            .get("status")
            or {}
        )
        return st.get("phase") == "Running"

    wait_for(running, timeout=90, what="the job Running")
    names = [j.metadata.name for j in client.BatchV1Api(api).list_namespaced_job("ml-research").items]
    assert names == ["deployed-a0"]


def test_one_agent_runs_on_the_real_node_and_reports_it(deployed: Cluster) -> None:
    """The chart's agent DaemonSet, on the real node (labelled a GPU node) with its fake NVML
    backend: non-root by default, no pod permission, and its report of the node's eight devices."""
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    core = client.CoreV1Api(api)

    def agent_ready() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(deploy_mod.NAMESPACE, label_selector="app.kubernetes.io/name=accel-agent").items
        return next((p for p in pods if _ready(p)), None)

    pod = wait_for(agent_ready, timeout=120, what="the agent Ready")
    assert pod.spec.node_name == NODE_NAME
    assert pod.status.container_statuses[0].image.startswith("docker.io/library/accel-agent:")
    sc = pod.spec.security_context
    assert sc.run_as_user == 65534 and sc.run_as_non_root

    def report() -> dict[str, Any] | None:
        try:
            obj = client.CustomObjectsApi(api).get_cluster_custom_object(
                v.GROUP, v.VERSION, "acceleratornodereports", NODE_NAME
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        status: dict[str, Any] | None = obj.get("status")
        return status if status and status.get("devices") else None

    status = wait_for(report, timeout=120, what="the real node's report")
    assert len(status["devices"]) == 8
    assert status["healthy"] is True


def test_the_other_replica_takes_over_when_the_leader_is_killed(deployed: Cluster) -> None:
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    core = client.CoreV1Api(api)
    leader = wait_for(lambda: _leader_pod(api), timeout=60, what="a Lease holder")
    t0 = time.monotonic()
    core.delete_namespaced_pod(leader, deploy_mod.NAMESPACE, grace_period_seconds=0)
    new = wait_for(lambda: (n := _leader_pod(api)) and n != leader and n, timeout=90, what="a new Lease holder")
    print(f"{new} took over from {leader} in {time.monotonic() - t0:.1f}s")
    # The new leader admits: a job submitted now gets its batch Job.
    demo_pools.make_pool(api, "failover-pool", 1)
    create_job(api, job_doc("ml-research", "failover-pool", devices=8, name="after-failover", team="research"))
    wait_for(lambda: _job_status(api, "after-failover").get("phase") == "Running", timeout=90, what="admitted")
    assert jobs_mod.batch_job_exists(client.BatchV1Api(api), "ml-research", "after-failover-a0")
    # The Deployment replaced the killed pod: two Ready replicas again.
    wait_for(lambda: len([p for p in _operator_pods(core) if _ready(p)]) == 2, timeout=120, what="two replicas")


def test_helm_upgrade_keeps_a_running_job_running(deployed: Cluster, tmp_path: Path) -> None:
    """The chart at the next version (a patch bump of this one, with a pod template that differs)
    replaces both replicas; the running job keeps its attempt, its batch Job and its pods.

    There is no earlier released chart yet: this upgrades from the chart as installed to the same
    chart one version on, which exercises what an N-1 -> N upgrade does to running work."""
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    before = _job_status(api, "deployed")
    assert before.get("phase") == "Running"
    job_pods = {
        p.metadata.uid for p in core.list_namespaced_pod("ml-research", label_selector="job-name=deployed-a0").items
    }
    assert job_pods
    old_pods = {p.metadata.name for p in _operator_pods(core)}

    chart = tmp_path / "accel-operator"
    shutil.copytree(deploy_mod.CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    major, minor, patch = (int(x) for x in str(meta["version"]).split("-")[0].split("."))
    meta["version"] = f"{major}.{minor}.{patch + 1}"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    values = deployed.state / "deploy-values.json"
    done = subprocess.run(
        [str(deployed.bin / "helm"), "upgrade", deploy_mod.RELEASE, str(chart), "-n", deploy_mod.NAMESPACE,
         "-f", str(values), "--set-string", "operator.podAnnotations.accel\\.dev/upgraded=yes",
         "--wait", "--timeout", "5m"],
        env={**os.environ, "KUBECONFIG": str(deployed.kubeconfig)},
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    wait_for(
        lambda: (ps := _operator_pods(core)) and len(ps) == 2 and all(_ready(p) for p in ps)
        and not {p.metadata.name for p in ps} & old_pods,
        timeout=180, what="both replicas replaced",
    )  # fmt: skip
    wait_for(lambda: _leader_pod(api), timeout=60, what="a Lease holder after the upgrade")
    time.sleep(5)  # the new leader has passed over the running job at least once
    after = _job_status(api, "deployed")
    assert after.get("phase") == "Running"
    assert after.get("attempt") == before.get("attempt")
    assert [
        j.metadata.name
        for j in batch.list_namespaced_job("ml-research").items
        if j.metadata.name.startswith("deployed-")
    ] == ["deployed-a0"]
    now_pods = {
        p.metadata.uid for p in core.list_namespaced_pod("ml-research", label_selector="job-name=deployed-a0").items
    }
    assert now_pods == job_pods


# The job's program, run by the operator image's Python on the real node: attempt 0 writes a
# checkpoint under the claim and waits to be stopped; a resumed attempt copies what it finds at
# ACCEL_RESUME_FROM_DIR to a file of its own, so the test compares bytes written by two containers.
TRAINER = f"""import os,pathlib as P,socket,sys,time
e=os.environ;o=P.Path(e["{v.ENV_CHECKPOINT_DIR}"]);r=e.get("{v.ENV_RESUME_FROM_DIR}","")
if r:
 d=(P.Path(r)/"state.bin").read_bytes();(o/"resumed.bin").write_bytes(d);print("read",len(d),"from",r);sys.exit(0)
s=o/"step-7";s.mkdir(exist_ok=True)
(s/"state.bin").write_bytes(f"attempt {{e['{v.ENV_ATTEMPT}']}} on {{socket.gethostname()}}".encode()*64)
(s/"COMPLETE").write_text("");print("written",flush=True);time.sleep(600)
"""


def test_a_resumed_attempt_reads_back_what_the_previous_one_wrote(deployed: Cluster) -> None:
    """Finding 11 of the tenant-proof issue, with containers that run: the real node joins a pool
    of one device, a job checkpointing to pvc://ckpt/run writes step-7 from its first attempt,
    reports it on its pod, is evicted, and its next attempt reads the same bytes back through
    ACCEL_RESUME_FROM_DIR on the same claim."""
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    core = client.CoreV1Api(api)
    pool = "real-pool"
    doc = demo_pools.pool_manifest(pool, max_nodes=1, devices_per_node=1)
    kubeapi.apply(api, doc)
    (fake,) = nodes.node_manifests(pool, AcceleratorPoolSpec.model_validate(doc["spec"]), 1)
    labels = {k: val for k, val in fake["metadata"]["labels"].items() if k not in ("kubernetes.io/hostname", "type")}
    core.patch_node(NODE_NAME, {"metadata": {"labels": labels}})
    # An extended resource the kubelet keeps (no device plugin): what the job's pod requests.
    core.patch_node_status(NODE_NAME, {"status": {"capacity": {v.RESOURCE_NVIDIA_GPU: "1"}}})
    wait_for(
        lambda: core.read_node(NODE_NAME).status.allocatable.get(v.RESOURCE_NVIDIA_GPU) == "1",
        timeout=30, what="the real node's device",
    )  # fmt: skip

    kubeapi.ensure_claim(api, "ml-research", "ckpt")
    claim = core.read_namespaced_persistent_volume_claim("ckpt", "ml-research")
    host_dir = Path(core.read_persistent_volume(claim.spec.volume_name).spec.host_path.path) / "run"
    shutil.rmtree(host_dir, ignore_errors=True)
    host_dir.mkdir(parents=True)
    host_dir.chmod(0o777)  # the image runs as UID 65532; the kubelet would make the sub-path root's
    image = _operator_pods(core)[0].spec.containers[0].image
    job = job_doc("ml-research", pool, devices=1, name="resumer", team="research")
    job["spec"].update(
        image=image,
        command=["python3", "-c", TRAINER],
        checkpoint={"uri": "pvc://ckpt/run", "intervalMinutes": 10},
    )
    assert len(TRAINER.encode()) <= 512  # spec.command's bound per item
    create_job(api, job)

    def first_pod() -> client.V1Pod | None:
        pods = core.list_namespaced_pod("ml-research", label_selector="job-name=resumer-a0").items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod = wait_for(first_pod, timeout=120, what="attempt 0 running on the real node")
    assert pod.spec.node_name == NODE_NAME
    written = host_dir / "step-7" / "COMPLETE"
    wait_for(written.exists, timeout=60, what="attempt 0's checkpoint on the claim")
    state = (host_dir / "step-7" / "state.bin").read_bytes()
    assert state.startswith(b"attempt 0 on resumer-a0")
    # The job reports its checkpoint on its own pod; the operator copies it into the status.
    core.patch_namespaced_pod(
        pod.metadata.name,
        "ml-research",
        {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT: "pvc://ckpt/run/step-7"}}},
    )
    wait_for(
        lambda: (_job_status(api, "resumer").get("lastCheckpoint") or {}).get("uri") == "pvc://ckpt/run/step-7",
        timeout=60, what="status.lastCheckpoint",
    )  # fmt: skip
    preempt.evict(core, "ml-research", pod.metadata.name)

    resumed = host_dir / "resumed.bin"
    wait_for(resumed.exists, timeout=180, what="the next attempt's read-back")
    assert resumed.read_bytes() == state
    st = _job_status(api, "resumer")
    assert st.get("attempt") == 1
    assert (st.get("resume") or {}).get("resumeFrom") == "pvc://ckpt/run/step-7"
    wait_for(lambda: _job_status(api, "resumer").get("phase") == "Succeeded", timeout=120, what="the job done")
    shutil.rmtree(host_dir, ignore_errors=True)  # the claim's volume is the host's folder


def test_uninstall_leaves_no_webhook(deployed: Cluster) -> None:
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    adm = client.AdmissionregistrationV1Api(api)
    assert [w.metadata.name for w in adm.list_validating_webhook_configuration().items] == ["accel.dev"]
    deploy_mod.down(deployed)
    assert adm.list_validating_webhook_configuration().items == []
    assert adm.list_mutating_webhook_configuration().items == []
    crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    assert len([c for c in crds if c.spec.group == "accel.dev"]) == 4  # the CRDs (and the jobs) stay
