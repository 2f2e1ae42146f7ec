"""The agent's manifests agree with its settings and grant what the code calls, and no more."""

from pathlib import Path
from typing import Any

import yaml

from accel_agent.settings import AgentSettings

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
    assert set(k["resources"]) == files


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
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert paths["pod-resources"] == "/var/lib/kubelet/pod-resources" and paths["host-proc"] == "/proc"
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
        ("", "pods", "list"),
    }
    binding = next(d for d in docs("rbac.yaml") if d["kind"] == "ClusterRoleBinding")
    (sa,) = docs("serviceaccount.yaml")
    assert (
        binding["subjects"][0]["name"]
        == sa["metadata"]["name"]
        == daemonset()["spec"]["template"]["spec"]["serviceAccountName"]
    )


def test_the_node_restriction_names_the_agent() -> None:
    policy = next(d for d in docs("node-restriction.yaml") if d["kind"] == "ValidatingAdmissionPolicy")
    (sa,) = docs("serviceaccount.yaml")
    who = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    assert who in policy["spec"]["matchConditions"][0]["expression"]
