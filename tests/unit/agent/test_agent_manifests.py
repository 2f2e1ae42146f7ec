"""The agent's manifests agree with its settings and grant what the code calls, and no more."""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_agent.settings import AgentSettings
from accel_api.nodereport import AcceleratorNodeReportSpec

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests" / "agent"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def daemonset() -> dict[str, Any]:
    (ds,) = docs("daemonset.yaml")
    assert ds["kind"] == "DaemonSet"
    return ds


def test_kustomization_lists_every_file() -> None:
    (k,) = docs("kustomization.yaml")
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) | set(k["configurations"]) == files


def test_env_names_are_settings() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    for name in env:
        if name.startswith("ACCEL_AGENT_"):
            assert name.removeprefix("ACCEL_AGENT_").lower() in AgentSettings.model_fields, name
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["ACCEL_AGENT_BACKEND"]["value"] == "auto"
    port = int(env["ACCEL_AGENT_PORT"]["value"])
    assert pod["containers"][0]["ports"][0]["containerPort"] == port == AgentSettings().port


def test_scheduling_and_privileges() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    assert "hostPID" not in pod and "hostNetwork" not in pod
    keys = {t["key"] for t in pod["tolerations"] if t["effect"] == "NoSchedule"}
    assert keys == {"nvidia.com/gpu", "google.com/tpu"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {t["matchExpressions"][0]["key"] for t in terms} == {
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.product",
        "cloud.google.com/gke-tpu-accelerator",
    }
    container = pod["containers"][0]
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # Not root by default: a fixed non-root user and group, which runAsNonRoot can verify.
    assert pod["securityContext"] == {
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # ... so without the kubelet's root-owned socket, and the manifest says why.
    assert "only UID 0 as the owner" in (MANIFESTS / "daemonset.yaml").read_text()
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert paths == {"host-proc": "/proc", "host-dev": "/dev"}
    assert "ACCEL_AGENT_POD_RESOURCES_SOCKET" not in {e["name"] for e in container["env"]}
    probes = (container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"])
    assert probes == ("/healthz", "/readyz")


def test_rbac_is_what_the_agent_calls() -> None:
    role = next(d for d in docs("rbac.yaml") if d["kind"] == "ClusterRole")
    grants = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    assert grants == {
        ("accel.dev", "acceleratornodereports", "create"),
        ("accel.dev", "acceleratornodereports", "get"),
        ("accel.dev", "acceleratornodereports", "patch"),
        ("accel.dev", "acceleratornodereports/status", "patch"),
        ("accel.dev", "acceleratornodereports/status", "update"),
        ("", "nodes", "get"),
    }
    binding = next(d for d in docs("rbac.yaml") if d["kind"] == "ClusterRoleBinding")
    (sa,) = docs("serviceaccount.yaml")
    assert (
        binding["subjects"][0]["name"]
        == sa["metadata"]["name"]
        == daemonset()["spec"]["template"]["spec"]["serviceAccountName"]
    )


# --- the own-node admission policy follows the install namespace -------------------------------
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def _set_path(obj: dict[str, Any], path: str, value: str) -> bool:
    *parents, last = path.split("/")
    for key in parents:
        obj = obj.get(key)  # type: ignore[assignment]
        if not isinstance(obj, dict):
            return False
    if last not in obj:  # create: false
        return False
    obj[last] = value
    return True


def render(namespace: str) -> list[dict[str, Any]]:
    """What kustomize's namespace transformer makes of this folder under an overlay that sets
    ``namespace``: metadata.namespace of namespaced objects, ServiceAccount subjects of role
    bindings, and the extra field specs this folder declares in its ``configurations``."""
    (k,) = docs("kustomization.yaml")
    extra = [
        (spec["kind"], spec["path"])
        for config in k["configurations"]
        for spec in (yaml.safe_load((MANIFESTS / config).read_text()).get("namespace") or [])
    ]
    out = [d for name in k["resources"] for d in docs(name)]
    for d in out:
        if d["kind"] not in CLUSTER_SCOPED:
            d["metadata"]["namespace"] = namespace
        for subject in d.get("subjects") or []:
            if subject["kind"] == "ServiceAccount":
                subject["namespace"] = namespace
        for kind, path in extra:
            if d["kind"] == kind:
                assert _set_path(d, path, namespace), f"{kind} has no {path}"
    return out


def username_matched(policy: dict[str, Any], params: dict[str, Any]) -> str:
    """The username the policy's match condition compares with, for these params.

    Understands the one form the policy uses: ``request.userInfo.username == <term> + <term> …``
    with string literals and ``params.metadata.<field>`` terms; anything else fails the test.
    """
    (condition,) = policy["spec"]["matchConditions"]
    lhs, rhs = (side.strip() for side in condition["expression"].split("==", 1))
    assert lhs == "request.userInfo.username"
    parts = []
    for term in (t.strip() for t in rhs.split("+")):
        if term.startswith("'") and term.endswith("'"):
            parts.append(term[1:-1])
        else:
            assert term.startswith("params.metadata."), term
            parts.append(str(params["metadata"][term.removeprefix("params.metadata.")]))
    return "".join(parts)


@pytest.mark.parametrize("namespace", ["accel-system", "gpu-monitoring"])
def test_the_node_restriction_follows_the_install_namespace(namespace: str) -> None:
    objs = render(namespace)
    (sa,) = (d for d in objs if d["kind"] == "ServiceAccount")
    (policy,) = (d for d in objs if d["kind"] == "ValidatingAdmissionPolicy")
    (binding,) = (d for d in objs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    (ds,) = (d for d in objs if d["kind"] == "DaemonSet")
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ServiceAccount"}
    ref = binding["spec"]["paramRef"]
    assert (ref["namespace"], ref["name"]) == (namespace, sa["metadata"]["name"])
    assert ref["parameterNotFoundAction"] == "Deny"  # no ServiceAccount: fail closed, not silently open
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert ds["metadata"]["namespace"] == namespace
    agent = f"system:serviceaccount:{namespace}:{ds['spec']['template']['spec']['serviceAccountName']}"
    assert username_matched(policy, sa) == agent
    assert "accel-system" not in yaml.safe_dump(policy)  # nothing in the policy names a namespace


def test_the_node_restriction_checks_name_and_spec_node_name() -> None:
    policy = next(d for d in docs("node-restriction.yaml") if d["kind"] == "ValidatingAdmissionPolicy")
    token = "request.userInfo.extra['authentication.kubernetes.io/node-name']"
    checks = [v["expression"] for v in policy["spec"]["validations"]]
    assert any(f"{token}.exists(n, n == object.metadata.name)" in c for c in checks)
    assert any(f"{token}.exists(n, n == object.spec.nodeName)" in c for c in checks)
    # The field the agent writes is the one the policy reads.
    assert "nodeName" in AcceleratorNodeReportSpec.model_json_schema(by_alias=True)["properties"]


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl (kustomize) on this machine")
def test_kustomize_renders_the_policy_for_another_namespace_and_prefix(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "gpu-monitoring",
                "namePrefix": "team-",
                "resources": [os.path.relpath(MANIFESTS, overlay)],
            }
        )
    )
    built = subprocess.run(
        [str(KUBECTL), "kustomize", str(overlay)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    objs = [d for d in yaml.safe_load_all(built) if d]
    (sa,) = (d for d in objs if d["kind"] == "ServiceAccount")
    (policy,) = (d for d in objs if d["kind"] == "ValidatingAdmissionPolicy")
    (binding,) = (d for d in objs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert (sa["metadata"]["namespace"], sa["metadata"]["name"]) == ("gpu-monitoring", "team-accel-agent")
    ref = binding["spec"]["paramRef"]
    assert (ref["namespace"], ref["name"]) == ("gpu-monitoring", "team-accel-agent")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "team-accel-agent-own-node-report"
    assert username_matched(policy, sa) == "system:serviceaccount:gpu-monitoring:team-accel-agent"


ROOT_COMPONENT = MANIFESTS / "components" / "root"


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl (kustomize) on this machine")
def test_kustomize_renders_the_root_component_with_the_pod_resources_socket(tmp_path: Path) -> None:
    objs = _kustomize(tmp_path, ROOT_COMPONENT)
    (ds,) = (d for d in objs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert paths == {"host-proc": "/proc", "host-dev": "/dev", "pod-resources": "/var/lib/kubelet/pod-resources"}
    (container,) = pod["containers"]
    (mount,) = (m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ACCEL_AGENT_POD_RESOURCES_SOCKET"] == mount["mountPath"] + "/kubelet.sock"
    assert mount["readOnly"] is True
    # Root, but still without capabilities, escalation or a writable root filesystem.
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


# --- the opt-in pod list ----------------------------------------------------------------------------
POD_LIST = MANIFESTS / "components" / "pod-list"


def _kustomize(tmp_path: Path, *components: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(MANIFESTS, tmp_path)],
                "components": [os.path.relpath(c, tmp_path) for c in components],
            }
        )
    )
    built = subprocess.run(
        [str(KUBECTL), "kustomize", str(tmp_path)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(built) if d]


def _pod_grants(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (d["metadata"]["name"], verb)
        for d in objs
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d.get("rules") or []
        if "" in rule["apiGroups"] and ("pods" in rule["resources"] or "*" in rule["resources"])
        for verb in rule["verbs"]
    }


def _agent_env(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = (d for d in objs if d["kind"] == "DaemonSet")
    return {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl (kustomize) on this machine")
def test_by_default_the_agent_has_no_pod_permission_and_lists_no_pods(tmp_path: Path) -> None:
    objs = _kustomize(tmp_path)
    assert _pod_grants(objs) == set()
    assert _agent_env(objs).get("ACCEL_AGENT_POD_LIST") in (None, "false")
    assert AgentSettings().pod_list is False


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl (kustomize) on this machine")
def test_the_pod_list_component_grants_list_and_turns_the_setting_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = _kustomize(tmp_path, POD_LIST)
    assert _pod_grants(objs) == {("accel-agent-pod-list", "list")}
    binding = next(d for d in objs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("pod-list"))
    assert binding["roleRef"]["name"] == "accel-agent-pod-list"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "accel-agent", "namespace": "accel-system"}]
    env = _agent_env(objs)
    assert env["ACCEL_AGENT_POD_LIST"] == "true"
    monkeypatch.setenv("ACCEL_AGENT_POD_LIST", env["ACCEL_AGENT_POD_LIST"])
    assert AgentSettings().pod_list is True
