"""The node agent against the real API server, under its own RBAC and admission policy
(manifests/agent/): it writes its node's AcceleratorNodeReport as a status patch, with figures
that follow the pods bound to the (KWOK) node, and it is refused another node's report."""

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_agent import run_cluster_pass
from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import Cluster, kubeapi, nodes, preempt
from tests.support.cluster import ROOT, apply_manifests, wait_for

AGENT_NS = "accel-system"


def _apply_agent_rbac(api: client.ApiClient) -> None:
    folder = ROOT / "manifests" / "agent"
    apply_manifests(api, [folder / n for n in ("serviceaccount.yaml", "rbac.yaml", "node-restriction.yaml")], AGENT_NS)


def _agent_client(
    api: client.ApiClient, core: client.CoreV1Api, node: str, namespace: str = AGENT_NS, account: str = "accel-agent"
) -> client.ApiClient:
    """A client holding the agent ServiceAccount's token, bound to an agent pod on ``node``."""
    pod = core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"accel-agent-{node}"),
            spec=client.V1PodSpec(
                service_account_name=account,
                node_name=node,
                tolerations=[client.V1Toleration(operator="Exists")],
                containers=[client.V1Container(name="agent", image="ghcr.io/accel-dev/accel-agent:0.1.0")],
            ),
        ),
    )
    token = core.create_namespaced_service_account_token(
        account,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=3600,
                bound_object_ref=client.V1BoundObjectReference(
                    kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid
                ),
            ),
        ),
    ).status.token
    cfg = client.Configuration()
    cfg.host = api.configuration.host
    cfg.ssl_ca_cert = api.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def _report(api: client.ApiClient, node: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
        v.GROUP, v.VERSION, registry.NODE_REPORT.plural, node
    )
    return obj


@pytest.fixture
def gpu_nodes(core: client.CoreV1Api, api: client.ApiClient, crds: list[str]) -> Any:
    pool = f"agent-{uuid.uuid4().hex[:6]}"
    spec = AcceleratorPoolSpec.model_validate(
        {"provider": "aws", "accelerator": "h100-80gb", "devicesPerNode": 8, "capacityType": "on-demand", "maxNodes": 2}
    )
    names = nodes.ensure_nodes(core, nodes.node_manifests(pool, spec))
    yield names
    custom = client.CustomObjectsApi(api)
    for n in names:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.NODE_REPORT.plural, n)
        with kubeapi.ignoring(404):
            core.delete_namespaced_pod(f"accel-agent-{n}", AGENT_NS, grace_period_seconds=0)
        preempt.delete_node(core, n)


def test_agent_reports_its_node_under_least_privilege(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, gpu_nodes: list[str], tmp_path: Path
) -> None:
    own, other = gpu_nodes
    _apply_agent_rbac(api)
    # A training pod holding 2 of the node's 8 GPUs.
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="train"),
            spec=client.V1PodSpec(
                node_name=own,
                tolerations=[client.V1Toleration(key=v.TAINT_GPU, operator="Exists")],
                containers=[
                    client.V1Container(
                        name="t",
                        image="trainer:1",
                        resources=client.V1ResourceRequirements(
                            limits={v.RESOURCE_NVIDIA_GPU: "2"}, requests={v.RESOURCE_NVIDIA_GPU: "2"}
                        ),
                    )
                ],
            ),
        ),
    )
    wait_for(
        lambda: core.read_namespaced_pod("train", namespace).status.phase == "Running",
        timeout=60,
        what="training pod Running",
    )
    agent_api = _agent_client(api, core, own)

    result = run_cluster_pass(agent_api, node_name=own)
    assert result.written, result.write_error
    report = _report(api, own)
    status = report["status"]
    assert status["backend"] == "simulated"
    assert status["fragmentation"]["totalDevices"] == 8
    assert status["fragmentation"]["freeDevices"] == 6
    assert report["metadata"]["ownerReferences"][0]["uid"] == core.read_node(own).metadata.uid
    holders = [p for d in status["devices"] for p in d.get("allocatedPods", [])]
    assert holders == [{"namespace": namespace, "name": "train", "container": "t"}] * 2, holders

    # A fault on device 1 makes the node unhealthy in the next report.
    core.patch_node(own, {"metadata": {"annotations": {v.ANNOTATION_SIM_FAULTS: "1=ecc"}}})
    result = run_cluster_pass(agent_api, node_name=own)
    assert result.written, result.write_error
    assert _report(api, own)["status"]["healthy"] is False

    # The admission policy keeps an agent to its own node's report (a policy applied moments ago
    # takes a little while to be enforced by the API server: wait for it).
    denied = wait_for(
        lambda: (r := run_cluster_pass(agent_api, node_name=other)) and not r.written and r,
        timeout=30,
        what="the admission policy refusing another node's report",
    )
    assert not denied.written
    assert denied.write_error and "may only write the AcceleratorNodeReport of its own node" in denied.write_error

    # ... and its spec to its own node: a report named after it that names another node is refused.
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(agent_api).patch_cluster_custom_object(
            v.GROUP, v.VERSION, registry.NODE_REPORT.plural, own, {"spec": {"nodeName": other}}
        )
    assert refused.value.status == 422 and "spec.nodeName is not its node" in str(refused.value.body)


def _overlay(cluster: Cluster, tmp: Path, namespace: str, prefix: str) -> list[dict[str, Any]]:
    """manifests/agent/ rendered by kustomize under an overlay that installs it in ``namespace``
    with ``prefix`` on every name: its ServiceAccount, RBAC and admission policy (not the DaemonSet)."""
    overlay = tmp / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": namespace,
                "namePrefix": prefix,
                "resources": [os.path.relpath(ROOT / "manifests" / "agent", overlay)],
            }
        )
    )
    built = subprocess.run(
        [str(cluster.bin / "kubectl"), "kustomize", str(overlay)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(built) if d and d["kind"] not in ("DaemonSet", "Service")]


def test_the_own_node_policy_follows_an_overlays_namespace_and_prefix(
    api: client.ApiClient, core: client.CoreV1Api, cluster: Cluster, gpu_nodes: list[str], tmp_path: Path
) -> None:
    """Installed by kustomize in another namespace under a name prefix, the agent still writes its
    node's report and is still refused another node's (name or spec.nodeName)."""
    own, other = gpu_nodes
    namespace, prefix = f"agents-{uuid.uuid4().hex[:6]}", f"t{uuid.uuid4().hex[:4]}-"
    objs = _overlay(cluster, tmp_path, namespace, prefix)
    binding = next(d for d in objs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["paramRef"] == {
        "name": f"{prefix}accel-agent",
        "namespace": namespace,
        "parameterNotFoundAction": "Deny",
    }
    kubeapi.ensure_namespace(api, namespace)
    try:
        for doc in objs:
            kubeapi.apply(api, doc)
        agent_api = _agent_client(api, core, own, namespace, f"{prefix}accel-agent")
        # A policy applied moments ago takes a little while to be enforced: wait for the refusal.
        denied = wait_for(
            lambda: (r := run_cluster_pass(agent_api, node_name=other)) and not r.written and r,
            timeout=30,
            what="the overlay's policy refusing another node's report",
        )
        assert denied.write_error and "may only write the AcceleratorNodeReport of its own node" in denied.write_error
        result = run_cluster_pass(agent_api, node_name=own)
        assert result.written, result.write_error
        with pytest.raises(ApiException) as refused:
            client.CustomObjectsApi(agent_api).patch_cluster_custom_object(
                v.GROUP, v.VERSION, registry.NODE_REPORT.plural, own, {"spec": {"nodeName": other}}
            )
        assert refused.value.status == 422 and "spec.nodeName is not its node" in str(refused.value.body)
    finally:
        # The binding first: without its ServiceAccount it would refuse every report (fail closed).
        adm = client.AdmissionregistrationV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        for doc in objs:
            name, kind = doc["metadata"]["name"], doc["kind"]
            with kubeapi.ignoring(404):
                if kind == "ValidatingAdmissionPolicyBinding":
                    adm.delete_validating_admission_policy_binding(name)
                elif kind == "ValidatingAdmissionPolicy":
                    adm.delete_validating_admission_policy(name)
                elif kind == "ClusterRole":
                    rbac.delete_cluster_role(name)
                elif kind == "ClusterRoleBinding":
                    rbac.delete_cluster_role_binding(name)
        core.delete_namespace(namespace, propagation_policy="Background", grace_period_seconds=0)
