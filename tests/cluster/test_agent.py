"""The node agent against the real API server, under its own RBAC and admission policy
(manifests/agent/): it writes its node's AcceleratorNodeReport as a status patch, with figures
that follow the pods bound to the (KWOK) node (the simulated backend, under the opt-in pod list,
components/pod-list), and it is refused another node's report. Under the default role, which grants
nothing on pods, it still reports, naming a GPU process's pod by the UID its cgroup gives."""

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_agent import AgentSettings, build_agent, run_cluster_pass
from accel_agent.backends.fake import FakeNvml, FakeProcess
from accel_agent.backends.nvml import NvmlBackend
from accel_api import registry
from accel_api import vocabulary as v
from accel_api.pool import AcceleratorPoolSpec
from accel_localcluster import Cluster, kubeapi, nodes, preempt
from accel_operator.adapters.kube import reports, views
from tests.support.cluster import ROOT, apply_manifests, wait_for

AGENT_NS = "accel-system"


def _apply_agent_rbac(api: client.ApiClient, *, pod_list: bool) -> None:
    """The agent's default ServiceAccount, role and admission policy; with ``pod_list``, the opt-in
    role of components/pod-list too (the simulated backend needs it), else that role is removed."""
    folder = ROOT / "manifests" / "agent"
    apply_manifests(api, [folder / n for n in ("serviceaccount.yaml", "rbac.yaml", "node-restriction.yaml")], AGENT_NS)
    if pod_list:
        apply_manifests(api, [folder / "components" / "pod-list" / "rbac.yaml"], AGENT_NS)
        return
    rbac = client.RbacAuthorizationV1Api(api)
    with kubeapi.ignoring(404):
        rbac.delete_cluster_role_binding("accel-agent-pod-list")
    with kubeapi.ignoring(404):
        rbac.delete_cluster_role("accel-agent-pod-list")


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


def _training_pod(node: str, gpus: int) -> client.V1Pod:
    """Pod ``train`` bound to ``node``, holding ``gpus`` of its GPUs."""
    limits = {v.RESOURCE_NVIDIA_GPU: str(gpus)}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="train"),
        spec=client.V1PodSpec(
            node_name=node,
            tolerations=[client.V1Toleration(key=v.TAINT_GPU, operator="Exists")],
            containers=[
                client.V1Container(
                    name="t", image="trainer:1", resources=client.V1ResourceRequirements(limits=limits, requests=limits)
                )
            ],
        ),
    )


def test_agent_reports_its_node_under_least_privilege(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, gpu_nodes: list[str], tmp_path: Path
) -> None:
    own, other = gpu_nodes
    _apply_agent_rbac(api, pod_list=True)
    # A training pod holding 2 of the node's 8 GPUs.
    core.create_namespaced_pod(
        namespace,
        _training_pod(own, 2),
    )
    wait_for(
        lambda: core.read_namespaced_pod("train", namespace).status.phase == "Running",
        timeout=60,
        what="training pod Running",
    )
    agent_api = _agent_client(api, core, own)

    result = run_cluster_pass(agent_api, node_name=own, pod_list=True)
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
    result = run_cluster_pass(agent_api, node_name=own, pod_list=True)
    assert result.written, result.write_error
    assert _report(api, own)["status"]["healthy"] is False

    # The admission policy keeps an agent to its own node's report (a policy applied moments ago
    # takes a little while to be enforced by the API server: wait for it).
    denied = wait_for(
        lambda: (r := run_cluster_pass(agent_api, node_name=other, pod_list=True)) and not r.written and r,
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


def test_the_agent_reports_under_its_default_role_without_any_pod_permission(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, gpu_nodes: list[str], tmp_path: Path
) -> None:
    """The default role grants nothing on pods: the agent's token cannot list them, even with its
    node's field selector. The agent (NVML, here the fake library) still writes its report, and a
    GPU process's pod is named by the UID its cgroup gives, which the operator maps to the pod."""
    own, _ = gpu_nodes
    _apply_agent_rbac(api, pod_list=False)
    pod = core.create_namespaced_pod(
        namespace,
        _training_pod(own, 1),
    )
    agent_api = _agent_client(api, core, own)
    # RBAC is read from an informer cache: a role removed moments ago may still be in force.
    wait_for(
        lambda: _forbidden(
            lambda: client.CoreV1Api(agent_api).list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={own}", limit=1
            )
        ),
        timeout=30,
        what="the agent's token refused a list of its node's pods",
    )
    assert _forbidden(lambda: client.CoreV1Api(agent_api).list_namespaced_pod(namespace, limit=1))

    # A GPU process of the training pod, as the host's /proc shows it (systemd cgroup driver).
    uid = pod.metadata.uid
    (tmp_path / "4242").mkdir()
    scope = f"kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-{'c' * 64}.scope"
    (tmp_path / "4242" / "cgroup").write_text(f"0::/kubepods.slice/{scope}\n")
    nvml = FakeNvml.h100(8)
    nvml.devices[2].processes.append(FakeProcess(pid=4242, used_memory_bytes=40 << 30))
    settings = AgentSettings(node_name=own, kubernetes=True, proc_root=tmp_path)
    agent = build_agent(settings, api_client=agent_api, backend=NvmlBackend(nvml, xid_events=False))
    try:
        result = agent.run_once()
    finally:
        agent.close()
    assert result.written, result.write_error
    report = _report(api, own)
    (process,) = report["status"]["devices"][2]["processes"]
    assert process["pid"] == 4242 and process["podUid"] == uid and process.get("pod") is None

    # The operator names the pod from its own cache: the report's device 2 is the training pod's.
    view = reports.report_view(report)
    pod_view = views.pod_view(api.sanitize_for_serialization(core.read_namespaced_pod("train", namespace)))
    assert view is not None and pod_view is not None and pod_view.uid == uid
    mine = view.devices_of(frozenset({(namespace, "train")}), frozenset({uid}))
    assert [d.index for d in mine] == [2]


def _forbidden(call: Any) -> bool:
    try:
        call()
    except ApiException as exc:
        if exc.status == 403:
            return True
        raise
    return False


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
                # The simulated backend lists the pods on its node: the opt-in role.
                "components": [os.path.relpath(ROOT / "manifests" / "agent" / "components" / "pod-list", overlay)],
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
            lambda: (r := run_cluster_pass(agent_api, node_name=other, pod_list=True)) and not r.written and r,
            timeout=30,
            what="the overlay's policy refusing another node's report",
        )
        assert denied.write_error and "may only write the AcceleratorNodeReport of its own node" in denied.write_error
        result = run_cluster_pass(agent_api, node_name=own, pod_list=True)
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
