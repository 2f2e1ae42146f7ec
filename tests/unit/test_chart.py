"""The Helm chart (charts/accel-operator) and the kustomize base (manifests/) install the same thing.

The chart's defaults are rendered with the helm built from its Go module (hack/localcluster/build.sh)
and compared object by object with ``kubectl kustomize manifests``: the same roles and rules, the
same admission policies and webhook configurations, the same Services, the same containers (image
references aside). The chart's own additions (a PodDisruptionBudget, a metrics Service) and the
objects helm leaves to ``--create-namespace`` and ``crds/`` are named here, so any other difference
fails. The chart's CRDs are the generated ones (crds/). Non-default values (cert-manager, a
root agent, a ServiceMonitor, a NetworkPolicy, settings) are rendered and checked too.

Skipped when the tools are not built (``bash hack/localcluster/build.sh``); CI builds them first.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "accel-operator"
BIN = Path(os.environ.get("ACCEL_CLUSTER_BIN") or ROOT / ".cache" / "localcluster" / "bin")
HELM, KUBECTL = BIN / "helm", BIN / "kubectl"
NAMESPACE = "accel-system"
STANDARD_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version")
# What only the chart makes, and what only the base makes (helm: crds/ and --create-namespace).
CHART_ONLY = {("PodDisruptionBudget", "accel-operator"), ("Service", "accel-operator-metrics")}
BASE_ONLY_KINDS = {"CustomResourceDefinition", "Namespace"}
# Environment only the chart sets (a value of its own).
CHART_ONLY_ENV = {"ACCEL_OPERATOR_LEASE_SECONDS"}
# Cluster-scoped kinds kustomize's namespace transformer does not know (it sets a namespace the API
# server ignores).
CLUSTER_SCOPED = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

needs_tools = pytest.mark.skipif(
    not (HELM.is_file() and KUBECTL.is_file()) and not os.environ.get("CI"),
    reason="helm and kubectl not built here (bash hack/localcluster/build.sh)",
)


def _run(*args: str | Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{args[0]} failed: {done.stderr[-2000:]}"
    return done.stdout


def render(*values: str) -> list[dict[str, Any]]:
    sets = [a for v in values for a in ("--set", v)]
    out = _run(HELM, "template", "accel-operator", CHART, "-n", NAMESPACE, "--kube-version", "1.36.0", *sets)
    return [d for d in yaml.safe_load_all(out) if d]


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def _normal(doc: dict[str, Any]) -> dict[str, Any]:
    """What must be equal: everything but labels, annotations and image references (the chart's
    labels are the standard set; its images are values)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(doc))
    meta = out["metadata"]
    meta.pop("labels", None)
    meta.pop("annotations", None)
    if doc["kind"] in CLUSTER_SCOPED:
        meta.pop("namespace", None)
    template = (out.get("spec") or {}).get("template")
    if template is not None:
        template["metadata"].pop("labels", None)
        spec = template["spec"]
        spec.pop("affinity", None) if doc["kind"] == "Deployment" else None
        for c in spec["containers"]:
            c.pop("image"), c.pop("imagePullPolicy", None)
            c["env"] = sorted((e for e in c["env"] if e["name"] not in CHART_ONLY_ENV), key=lambda e: e["name"])
    return out


@needs_tools
def test_helm_lints_the_chart() -> None:
    _run(HELM, "lint", CHART, "--strict", "--kube-version", "1.36.0")


@needs_tools
def test_the_chart_and_the_kustomize_base_install_the_same_objects() -> None:
    chart = {_key(d): d for d in render()}
    base = {_key(d): d for d in yaml.safe_load_all(_run(KUBECTL, "kustomize", ROOT / "manifests")) if d}
    base = {k: d for k, d in base.items() if k[0] not in BASE_ONLY_KINDS}
    assert set(chart) - set(base) == CHART_ONLY
    assert set(base) - set(chart) == set()
    for key, doc in base.items():
        assert _normal(chart[key]) == _normal(doc), f"{key} differs between the chart and manifests/"


@needs_tools
def test_every_object_carries_the_standard_labels() -> None:
    for doc in render("metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=true"):
        labels = doc["metadata"].get("labels") or {}
        missing = [name for name in (*STANDARD_LABELS, "app.kubernetes.io/managed-by") if name not in labels]
        assert not missing, f"{_key(doc)} lacks {missing}"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_the_charts_crds_are_the_generated_ones() -> None:
    generated = {p.name: p.read_text() for p in (ROOT / "crds").glob("accelerator*.yaml")}
    shipped = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert shipped == generated, "copy crds/accelerator*.yaml into charts/accel-operator/crds/"


@needs_tools
def test_cert_manager_mode_makes_a_certificate_and_lets_the_injector_write_the_bundle() -> None:
    docs = {_key(d): d for d in render("webhook.certificate=cert-manager")}
    cert = docs[("Certificate", "accel-operator-webhook")]
    assert cert["spec"]["secretName"] == "accel-operator-webhook-tls"  # what the Deployment mounts
    assert f"accel-operator-webhook.{NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    assert ("Issuer", "accel-operator-selfsigned") in docs
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        inject = docs[(kind, "accel.dev")]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert inject == f"{NAMESPACE}/accel-operator-webhook"
    own = {_key(d) for d in render("webhook.certificate=cert-manager", "webhook.certManager.issuerRef.name=corp")}
    assert ("Issuer", "accel-operator-selfsigned") not in own


@needs_tools
def test_values_reach_the_objects() -> None:
    docs = {
        _key(d): d
        for d in render(
            "agent.runAsRoot=true",
            "agent.supplementalGroups[0]=44",
            "agent.dcgmCompat=true",
            "operator.settings.sqs_queue_url=https://sqs.example/q",
            "operator.replicas=1",
            "webhook.failurePolicy=Fail",
            "operator.image.tag=v9",
            "operator.hostNetwork=true",
            "operator.extraEnv[0].name=KUBERNETES_SERVICE_HOST",
            "operator.extraEnv[0].value=127.0.0.1",
        )
    }
    agent = docs[("DaemonSet", "accel-agent")]["spec"]["template"]["spec"]
    assert agent["securityContext"]["runAsNonRoot"] is False and agent["securityContext"]["runAsUser"] == 0
    assert agent["securityContext"]["supplementalGroups"] == [44]
    assert "pod-resources" in {v["name"] for v in agent["volumes"]}
    env = {e["name"]: e.get("value") for e in agent["containers"][0]["env"]}
    assert env["ACCEL_AGENT_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert env["ACCEL_AGENT_DCGM_COMPAT"] == "true"
    operator = docs[("Deployment", "accel-operator")]
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ACCEL_OPERATOR_SQS_QUEUE_URL"] == "https://sqs.example/q"
    assert env["ACCEL_OPERATOR_WEBHOOK_FAIL_CLOSED"] == "true"
    assert container["image"] == "accel-operator:v9"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    pod = operator["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert operator["spec"]["replicas"] == 1
    assert ("PodDisruptionBudget", "accel-operator") not in docs  # one replica: no budget to keep
    hooks = docs[("ValidatingWebhookConfiguration", "accel.dev")]["webhooks"]
    assert {h["failurePolicy"] for h in hooks} == {"Fail"}


@needs_tools
def test_the_admission_policies_can_be_left_out() -> None:
    """admissionPolicies.enabled=false (docs/compatibility.md): no ValidatingAdmissionPolicy or
    binding is rendered, and nothing else is left out."""
    policy_kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    full = {_key(d) for d in render()}
    assert {k for k, _ in full} >= policy_kinds
    without = {_key(d) for d in render("admissionPolicies.enabled=false")}
    assert without == {key for key in full if key[0] not in policy_kinds}


@needs_tools
def test_the_overlays_render_and_prod_keeps_what_the_chart_keeps() -> None:
    def build(overlay: str) -> dict[tuple[str, str], dict[str, Any]]:
        out = _run(KUBECTL, "kustomize", ROOT / "manifests" / "overlays" / overlay)
        return {_key(d): d for d in yaml.safe_load_all(out) if d}

    dev, prod = build("dev"), build("prod")
    assert dev[("Deployment", "accel-operator")]["spec"]["replicas"] == 1
    chart = {_key(d): d for d in render()}
    key = ("PodDisruptionBudget", "accel-operator")
    assert _normal(prod[key]) == _normal(chart[key])
    assert ("ConfigMap", "accel-grafana-dashboard") in prod


def _pod_rules(docs: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [
        (d["metadata"]["name"], rule["verbs"])
        for d in docs
        if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"].startswith("accel-agent")
        for rule in d.get("rules") or []
        if "pods" in rule["resources"] or "*" in rule["resources"]
    ]


@needs_tools
def test_the_agent_lists_pods_only_when_asked_to() -> None:
    """By default the agent's roles grant nothing on pods (a stolen token reads no pod); agent.podList
    renders a role of its own with list, and turns the agent's setting on."""

    def agent_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
        ds = next(d for d in docs if _key(d) == ("DaemonSet", "accel-agent"))
        return {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}

    default = render()
    assert _pod_rules(default) == []
    assert "ACCEL_AGENT_POD_LIST" not in agent_env(default)
    opted = render("agent.podList=true")
    assert _pod_rules(opted) == [("accel-agent-pod-list", ["list"])]
    assert agent_env(opted)["ACCEL_AGENT_POD_LIST"] == "true"
    binding = next(d for d in opted if _key(d) == ("ClusterRoleBinding", "accel-agent-pod-list"))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "accel-agent", "namespace": NAMESPACE}]


@needs_tools
def test_the_agent_runs_as_a_fixed_non_root_user_by_default() -> None:
    """The default DaemonSet: UID/GID 65534 that runAsNonRoot can verify, no privilege escalation, no
    capability, a read-only root filesystem, and no root-owned kubelet socket mounted."""
    ds = next(d for d in render() if _key(d) == ("DaemonSet", "accel-agent"))
    pod = ds["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {v["name"] for v in pod["volumes"]} == {"host-proc", "host-dev"}
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert not {"ACCEL_AGENT_POD_RESOURCES_SOCKET", "ACCEL_AGENT_DCGM_COMPAT"} & {e["name"] for e in container["env"]}
