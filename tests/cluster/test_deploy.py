"""``bash hack/dev.sh deploy`` end to end, on a control plane of its own with the real node
(accel_localcluster.realnode: containerd, runc, a kubelet): the chart installed with the images
built here, the operator pod Ready on that node from the operator image, a spot job without a
checkpoint refused by the webhook through the chart's Service, a job admitted and its batch Job
made by the operator running in the cluster, and an uninstall that leaves no webhook behind.

Opt-in (``ACCEL_DEPLOY_TEST=1``): it needs root, the Debian packages ``hack/dev.sh deploy``
installs, and the images (``bash hack/images.sh build``). Not yet here: two replicas and the
leader's failover (on the host's network they would share ports), and ``helm upgrade`` from the
previous chart version with a job running.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from accel_localcluster import Cluster, demo_pools, kubeapi
from accel_localcluster import deploy as deploy_mod
from accel_localcluster.control_plane import Ports
from accel_localcluster.realnode import NODE_NAME
from tests.support.cluster import ROOT, wait_for
from tests.support.jobs import create_job, job_doc

pytestmark = pytest.mark.skipif(
    os.environ.get("ACCEL_DEPLOY_TEST") != "1", reason="opt-in: ACCEL_DEPLOY_TEST=1 (root, containerd, the images)"
)
PORT_BASE = int(os.environ.get("ACCEL_DEPLOY_PORT_BASE", "29000"))


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("deploy-cluster")
    d = PORT_BASE - 26000
    ports = Ports(26379 + d, 26380 + d, 26443 + d, 26457 + d, 26459 + d, 26460 + d)
    bin_dir = Path(os.environ.get("ACCEL_CLUSTER_BIN", ROOT / ".cache" / "localcluster" / "bin"))
    cluster = Cluster(state=home / "state", bin=bin_dir, ports=ports)
    t0 = time.monotonic()
    try:
        deploy_mod.up(cluster)
        print(f"deployed in {time.monotonic() - t0:.1f}s")
        yield cluster
    finally:
        deploy_mod.down(cluster)
        cluster.down()


def test_the_chart_runs_the_operator_from_its_image_on_the_real_node(deployed: Cluster) -> None:
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    core = client.CoreV1Api(api)
    selector = "app.kubernetes.io/name=accel-operator"
    (pod,) = core.list_namespaced_pod(deploy_mod.NAMESPACE, label_selector=selector).items
    assert pod.spec.node_name == NODE_NAME
    status = pod.status.container_statuses[0]
    assert status.ready and status.image.startswith("docker.io/library/accel-operator:")
    assert pod.spec.security_context.run_as_user == 65532

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


def test_uninstall_leaves_no_webhook(deployed: Cluster) -> None:
    api = config.new_client_from_config(config_file=str(deployed.kubeconfig))
    adm = client.AdmissionregistrationV1Api(api)
    assert [w.metadata.name for w in adm.list_validating_webhook_configuration().items] == ["accel.dev"]
    deploy_mod.down(deployed)
    assert adm.list_validating_webhook_configuration().items == []
    assert adm.list_mutating_webhook_configuration().items == []
    crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    assert len([c for c in crds if c.spec.group == "accel.dev"]) == 4  # the CRDs (and the jobs) stay
