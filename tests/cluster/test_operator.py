"""The operator against the real API server: every AcceleratorJob gets a plan in its status,
invalid specs are reported on the object, and the operator works under its own least-privilege
ClusterRole from manifests/operator/rbac.yaml."""

import functools
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import kubeapi
from accel_operator.handlers import admission
from tests.support import crd_schema, webhooks
from tests.support.cluster import ROOT, free_port, token_kubeconfig, wait_for
from tests.support.jobs import create_job, end_pods, events_of, gpu_pool, job_doc, wait_phase

EXAMPLES = ROOT / "examples"


WEBHOOK_CERT_SECRET = "accel-operator-webhook-cert"  # the name manifests/operator/rbac.yaml grants


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


@pytest.fixture
def pools(api: client.ApiClient, crds: list[str]) -> Any:
    """The example pools under unique names; removed after the test."""
    custom = client.CustomObjectsApi(api)
    suffix = uuid.uuid4().hex[:6]
    made = []
    for name in ("10-pool-h100-spot.yaml", "11-pool-l4-on-demand.yaml", "12-pool-tpu-v5e.yaml"):
        for doc in _docs(name):
            doc["metadata"]["name"] += f"-{suffix}"
            custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, doc)
            made.append(doc["metadata"]["name"])
    yield made
    for name in made:
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, name)


def _create_job(api: client.ApiClient, ns: str, example: str, **spec_changes: Any) -> dict[str, Any]:
    doc = _docs(example)[0]
    doc["metadata"]["namespace"] = ns
    doc["spec"].update(spec_changes)
    custom = client.CustomObjectsApi(api)
    created: dict[str, Any] = custom.create_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural, doc)
    return created


def _status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(v.GROUP, v.VERSION, ns, registry.JOB.plural, name)
    status: dict[str, Any] | None = obj.get("status")
    return status if status and status.get("phase") else None


def test_job_gets_a_plan_from_the_pools(api: client.ApiClient, namespace: str, pools: list[str], operator: Any) -> None:
    job = _create_job(api, namespace, "01-finetune-single-gpu.yaml")
    status = wait_for(lambda: _status(api, namespace, job["metadata"]["name"]), timeout=60, what="a planned job")
    assert status["phase"] == "Pending", status
    plan = status["plan"]
    assert plan["pool"] in pools
    assert plan["devices"] == 1
    assert plan["peakAllocatedBytesPerDevice"] > 0
    assert plan["costUsd"] > 0
    assert plan["alternatives"], "the plan should say why the other pools lost"
    # The pools have no nodes: planned, and waiting for capacity with the reason.
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {
        "Valid": ("True", "SpecValid"),
        "Planned": ("True", "Planned"),
        "Admitted": ("False", "WaitingForCapacity"),
    }
    assert "free device(s)" in status["message"]


def test_impossible_job_is_unschedulable_with_reasons(
    api: client.ApiClient, namespace: str, pools: list[str], operator: Any
) -> None:
    job = _create_job(api, namespace, "01-finetune-single-gpu.yaml", maxCost=0.01)
    status = wait_for(lambda: _status(api, namespace, job["metadata"]["name"]), timeout=60, what="a planned job")
    assert status["phase"] == "Unschedulable", status
    assert status["plan"]["alternatives"], status
    assert all(alt["reason"] for alt in status["plan"]["alternatives"])


def _job_rule_pointer(api: client.ApiClient, message: str) -> str:
    """The JSON pointer of the spec's CEL rule with ``message`` in the jobs' CRD."""
    crd = json.loads(
        client.ApiextensionsV1Api(api)
        .read_custom_resource_definition(registry.JOB.crd_name, _preload_content=False)
        .data
    )
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    index = next(i for i, r in enumerate(rules) if r["message"] == message)
    return f"{crd_schema.SPEC}/x-kubernetes-validations/{index}"


@pytest.mark.expect_errors(
    r"workload.tensorParallel must divide model.architecture.heads and kvHeads",
    r"storage is \(re\)initializing",  # the CRD changed under the watches (an upgrade does the same)
)
def test_invalid_spec_is_reported_on_the_object(
    api: client.ApiClient, namespace: str, pools: list[str], operator: Any
) -> None:
    # A spec stored while the CRD lacked a rule that the models hold (an older release's CRD,
    # since tightened): the operator reports it on the object.
    doc = _docs("01-finetune-single-gpu.yaml")[0]
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["workload"]["tensorParallel"] = 8
    custom = client.CustomObjectsApi(api)
    probe = {**doc, "metadata": {"name": "probe", "namespace": namespace}}
    dry_run = functools.partial(
        custom.create_namespaced_custom_object, v.GROUP, v.VERSION, namespace, registry.JOB.plural, probe, dry_run="All"
    )
    message = "workload.tensorParallel must divide model.architecture.heads and kvHeads"
    with crd_schema.without(api, registry.JOB.crd_name, _job_rule_pointer(api, message), crd_schema.stores(dry_run)):
        job = create_job(api, doc)
    status = wait_for(lambda: _status(api, namespace, job["metadata"]["name"]), timeout=60, what="a status")
    assert status["phase"] == "Failed"
    assert f"spec: {message} (got tensorParallel 8, heads 32, kvHeads 4)" in status["message"]


def _spend(custom: client.CustomObjectsApi, policy: str) -> dict[str, Any]:
    obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
    spend: list[dict[str, Any]] = (obj.get("status") or {}).get("spend") or [{}]
    return spend[0]


def test_operator_runs_under_its_least_privilege_role(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """The whole lifecycle (watch, admit, create the workload, post events, see it succeed) with
    the ServiceAccount token of manifests/operator/rbac.yaml: a missing verb fails here."""
    kubeconfig = token_kubeconfig(api, core, tmp_path)
    metrics_port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_METRICS_PORT": str(metrics_port),
        "ACCEL_OPERATOR_METRICS_ADDRESS": "127.0.0.1",
        "ACCEL_OPERATOR_LOG_FORMAT": "json",
        # The admission webhooks too: their configurations, the policies and the namespaces' teams.
        "ACCEL_OPERATOR_WEBHOOK_PORT": str(free_port()),
        "ACCEL_OPERATOR_WEBHOOK_HOST": "127.0.0.1",
        "ACCEL_OPERATOR_WEBHOOK_ADDRESS": "127.0.0.1",
        "ACCEL_OPERATOR_COST_INTERVAL_SECONDS": "1",
        # Its certificate through the Secret the replicas share: made under this role.
        "ACCEL_OPERATOR_WEBHOOK_TLS_SECRET": WEBHOOK_CERT_SECRET,
        # The webhook configurations installed with it (the manifests'): it writes their caBundle only.
        "ACCEL_OPERATOR_WEBHOOK_CONFIGURATION": admission.WEBHOOK_CONFIGURATION,
    }
    webhooks.install(api, int(env["ACCEL_OPERATOR_WEBHOOK_PORT"]))
    with kubeapi.ignoring(404):
        core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, "accel-system")
    core.patch_namespace(namespace, {"metadata": {"labels": {v.LABEL_NAMESPACE_TEAM: f"{namespace}-team"}}})
    log = tmp_path / "operator.log"
    pool = f"{namespace}-rbac"
    custom = client.CustomObjectsApi(api)
    policy: dict[str, Any] = {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": f"{namespace}-rbac"},
        "spec": {"budgets": [{"team": f"{namespace}-team", "limitUsd": 1000}]},
    }
    custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
    with gpu_pool(api, pool, count=1):
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            create_job(api, job_doc(namespace, pool, devices=2, name="rbac", team=f"{namespace}-team"))
            wait_phase(api, namespace, "rbac", "Running", timeout=90)
            # The ledger charges the pods' own lifetime, in whole seconds: let them run two.
            time.sleep(2.5)
            end_pods(core, namespace, "rbac", 0)
            wait_phase(api, namespace, "rbac", "Succeeded", timeout=60)
            wait_for(
                lambda: {"Admitted", "Succeeded"} <= {r for r, _ in events_of(core, namespace, "rbac")},
                timeout=30,
                what="the Admitted and Succeeded events",
            )
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
                metrics = resp.read().decode()
            assert "accel_operator_workloads_created_total 1.0" in metrics, metrics[:2000]
            assert "accel_operator_admission_latency_seconds_count 1.0" in metrics
            for resource in ("jobs", "pods", "workloads", "nodes"):  # the informers listed under this role
                assert f'accel_operator_watch_listed{{resource="{resource}"}} 1.0' in metrics
            assert 'accel_operator_watch_events_total{resource="jobs"} 0.0' not in metrics
            # The installed webhooks got the shared certificate's caBundle (get and patch on their
            # name only) and judge with the indexes kept under this role (namespaces, policies):
            # another team's job is refused.
            wait_for(lambda: webhooks.configured(api), timeout=60, what="the webhook configuration")
            stored = core.read_namespaced_secret(WEBHOOK_CERT_SECRET, "accel-system").data["ca.crt"]
            adm = client.AdmissionregistrationV1Api(api)
            hooks = adm.read_validating_webhook_configuration(admission.WEBHOOK_CONFIGURATION).webhooks
            assert {h.client_config.ca_bundle for h in hooks} == {stored}, "the caBundle is not the shared certificate"

            def refused() -> str | None:
                try:
                    create_job(api, job_doc(namespace, pool, name="other-team", team="serving"))
                except client.ApiException as exc:
                    return str(exc.body) if exc.status == 422 else None
                client.CustomObjectsApi(api).delete_namespaced_custom_object(
                    v.GROUP, v.VERSION, namespace, registry.JOB.plural, "other-team"
                )
                return None

            assert "(rule namespace-team)" in wait_for(refused, timeout=30, what="the webhook's refusal")
            # The cost ledger under the same role: the job's cost, the policy's spending.
            wait_for(
                lambda: _spend(custom, policy["metadata"]["name"]).get("jobs") == 1,
                timeout=30,
                what="the team's spending in the policy status",
            )
            # The job's own ledger: written at its end at once, but while it ran only at the
            # ledger's capped cadence, so the policy may count the job before its status shows it.
            wait_for(
                lambda: ((_status(api, namespace, "rbac") or {}).get("cost") or {}).get("spentUsd", 0) > 0,
                timeout=30,
                what="the job's cost in its status",
            )
            # The durable cost rollup (a ConfigMap in the operator's namespace) under the same
            # role: the finished attempt folded into it (create, then get and update by name).
            wait_for(
                lambda: any(b["team"] == f"{namespace}-team" for b in _rollup(core).get("buckets", [])),
                timeout=30,
                what="the finished attempt in the cost rollup",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            webhooks.remove(api)
            with kubeapi.ignoring(404):
                core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, "accel-system")
            with kubeapi.ignoring(404):
                custom.delete_cluster_custom_object(
                    v.GROUP, v.VERSION, registry.POLICY.plural, policy["metadata"]["name"]
                )
    text = log.read_text()
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(r.get("logger") == "accel_operator.scheduler" and r.get("job") for r in records), text[-2000:]
    # RBAC denials name the user; a 403 for a namespace being deleted (another test's) does not.
    assert "is forbidden: User" not in text, text[-3000:]


def _rollup(core: client.CoreV1Api) -> dict[str, Any]:
    try:
        cm = core.read_namespaced_config_map("accel-cost-rollup", "accel-system")
    except client.ApiException:
        return {}
    return dict(json.loads((cm.data or {}).get("rollup.json") or "{}"))


def test_waiting_job_is_replanned_when_pools_appear(api: client.ApiClient, namespace: str, operator: Any) -> None:
    # Only a pool of an accelerator this job cannot use exists at first ...
    job = _create_job(
        api, namespace, "01-finetune-single-gpu.yaml", placement={"acceleratorTypes": ["b200"], "maxDevices": 1}
    )
    name = job["metadata"]["name"]
    first = wait_for(lambda: _status(api, namespace, name), timeout=60, what="a first plan")
    assert first["phase"] == "Unschedulable", first
    # ... then a B200 pool appears: the re-plan timer (2 s in tests) picks it up.
    custom = client.CustomObjectsApi(api)
    pool: dict[str, Any] = {
        "apiVersion": "accel.dev/v1alpha1",
        "kind": "AcceleratorPool",
        "metadata": {"name": f"b200-{namespace}"},
        "spec": {"provider": "aws", "accelerator": "b200", "devicesPerNode": 8, "maxNodes": 1},
    }
    custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, pool)
    try:

        def pending() -> dict[str, Any] | None:
            st = _status(api, namespace, name)
            return st if st and st["phase"] == "Pending" else None

        status = wait_for(pending, timeout=60, what="the job re-planned onto the new pool")
        assert status["plan"]["pool"] == f"b200-{namespace}"
        # Once settled, later re-plans write nothing: the object does not change.
        obj = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name)
        time.sleep(5)
        later = custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name)
        assert later["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    finally:
        custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POOL.plural, pool["metadata"]["name"])


def _rss_kib(pid: int, field: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_the_largest_job_the_schema_admits_is_planned_fast_and_small(
    api: client.ApiClient, namespace: str, pools: list[str], tmp_path: Path
) -> None:
    """Every bound at its maximum (1000 layers, hidden 131072, vocab 2^22, ...) with the optimizer
    whose state is per matrix: the running operator plans it in under a second and 100 MB."""
    env = {
        **os.environ,
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_NAMESPACES": f'["{namespace}"]',
    }
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Ready once it has decided a first, small job.
        _create_job(api, namespace, "01-finetune-single-gpu.yaml")
        wait_for(lambda: _status(api, namespace, "tinyllama-finetune"), timeout=90, what="the operator ready")
        before = _rss_kib(proc.pid)
        doc = _docs("01-finetune-single-gpu.yaml")[0]
        doc["metadata"] = {"name": "biggest", "namespace": namespace}
        doc["spec"]["model"] = {
            "architecture": {
                "layers": 1000,
                "hidden": 131072,
                "heads": 1024,
                "kvHeads": 1024,
                "intermediate": 1048576,
                "vocab": 4194304,
                "maxPositions": 4194304,
            }
        }
        doc["spec"]["workload"] = {
            "optimizer": "adafactor",
            "microBatch": 65536,
            "seqLen": 4194304,
            "tokens": 10**15,
        }
        t0 = time.monotonic()
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            v.GROUP, v.VERSION, namespace, registry.JOB.plural, doc
        )
        status = wait_for(lambda: _status(api, namespace, "biggest"), timeout=30, what="the biggest job decided")
        elapsed = time.monotonic() - t0
        grown_mib = (_rss_kib(proc.pid) - before) / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"largest job: decided in {elapsed:.3f}s, operator peak RSS grew {grown_mib:.1f} MiB (from {before / 1024:.0f})"
    )
    assert status["phase"] == "Unschedulable", status
    assert elapsed < 1.0, f"planned in {elapsed:.2f}s"
    assert grown_mib < 100, f"peak RSS grew by {grown_mib:.0f} MiB"
