"""Platform policy end to end, against the real API server.

With the webhook: the operator (``accel_operator.app.run``, the webhook registered from its
settings) refuses, through the real ``kubectl apply``, a spot job without checkpointing, a team
using another team's pool and a job naming another namespace's team, each with the policy's
message; a job that names no team gets its namespace's. Without it: CEL in the CRDs still refuses
an intra-object violation, and the reconciler catches the rest with a condition naming the rule
and the policy; a budget queues; a policy change never stops a running job.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import Cluster, kubeapi
from accel_operator.settings import OperatorSettings
from tests.support import webhooks
from tests.support.cluster import free_port, unexpected_errors, wait_for
from tests.support.jobs import create_job, events_of, get_job, gpu_pool, job_doc, status, wait_phase, workloads_of
from tests.support.operator import running_operator


def _kubectl_apply(cluster: Cluster, doc: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
    path = tmp / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.fixture
def policy(api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str) -> Iterator[dict[str, Any]]:
    """The namespace labelled team=research and a policy pol-<namespace> (removed afterwards):
    spot jobs checkpoint at least hourly; research may use only pool r-<ns>, serving only s-<ns>."""
    core.patch_namespace(namespace, {"metadata": {"labels": {v.LABEL_NAMESPACE_TEAM: "research"}}})
    doc: dict[str, Any] = {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": f"pol-{namespace}"},
        "spec": {
            "spot": {"requireCheckpoint": True, "maxCheckpointIntervalMinutes": 60},
            "poolAccess": [
                {"teams": ["research"], "pools": [f"r-{namespace}"]},
                {"teams": ["serving"], "pools": [f"s-{namespace}"]},
            ],
        },
    }
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, doc)
    try:
        yield doc
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, doc["metadata"]["name"])


@pytest.fixture
def operator_with_webhook(
    api: client.ApiClient, crds: list[str], namespace: str, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """The operator in-process with its webhooks on a free local port; afterwards it is stopped and
    its configurations removed (they are persistent: they outlive the process on purpose)."""
    settings = OperatorSettings(
        namespaces=[namespace],
        liveness_port=0,
        metrics_port=0,
        resync_seconds=3.0,
        webhook_port=free_port(),
        webhook_host="127.0.0.1",
        webhook_address="127.0.0.1",
    )
    try:
        with running_operator(settings) as runner:
            wait_for(lambda: webhooks.configured(api), timeout=60, what="the webhook configuration")
            yield runner
        assert runner.exception is None, runner.exception
        # Refusals are logged at INFO (handlers.admission.RefusalsAreNotErrors), not as errors.
        errors = unexpected_errors(runner.output, [])
        assert "INFO kopf.objects Webhook 'policy' failed permanently: spec.checkpoint" in runner.output
        assert not errors, "the operator logged errors the test did not expect:\n" + "\n".join(errors)
    finally:
        webhooks.remove(api)


def _has_event(core: client.CoreV1Api, namespace: str, name: str, reason: str) -> bool:
    return reason in {r for r, _ in events_of(core, namespace, name)}


def _spot_without_checkpoint(namespace: str, name: str, pool: str) -> dict[str, Any]:
    doc = job_doc(namespace, pool, devices=1, name=name, spot={"policy": "prefer"})
    doc["spec"].pop("checkpoint", None)
    return doc


def test_kubectl_apply_is_refused_with_the_policys_message(
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
    policy: dict[str, Any],
    operator_with_webhook: Any,
    tmp_path: Path,
) -> None:
    pol = policy["metadata"]["name"]
    mine = f"r-{namespace}"

    # A spot job without checkpointing. The indexes may lag the webhook's registration for a
    # moment: a job let through then is removed and the apply tried again.
    def refused() -> str | None:
        proc = _kubectl_apply(cluster, _spot_without_checkpoint(namespace, "spot", mine), tmp_path)
        if proc.returncode == 0:
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                v.GROUP, v.VERSION, namespace, registry.JOB.plural, "spot"
            )
            return None
        return proc.stderr

    err = wait_for(refused, timeout=30, what="kubectl apply refused")
    assert "admission webhook" in err and "denied the request" in err, err
    assert (
        f"spec.checkpoint: required for spot jobs by policy '{pol}' (rule spot-needs-checkpoint); "
        "fix: add spec.checkpoint with an s3:// or pvc:// uri, or set spec.spot.policy: never"
    ) in err, err

    # Another team's pool.
    proc = _kubectl_apply(cluster, job_doc(namespace, f"s-{namespace}", name="theirs"), tmp_path)
    assert proc.returncode != 0
    assert (
        f"spec.placement.pools[0]: team 'research' may not use pool 's-{namespace}' "
        f"by policy '{pol}' (rule pool-access)"
    ) in proc.stderr, proc.stderr

    # Another namespace's team.
    proc = _kubectl_apply(cluster, job_doc(namespace, mine, name="other-team", team="serving"), tmp_path)
    assert proc.returncode != 0
    assert (
        "spec.team: must be 'research', the team of its namespace (got 'serving') (rule namespace-team); "
        f"fix: set spec.team to 'research', or submit in a namespace labelled {v.LABEL_NAMESPACE_TEAM}='serving'"
    ) in proc.stderr, proc.stderr

    # No team at all: the mutating webhook writes the namespace's; the job is created.
    doc = job_doc(namespace, mine, name="no-team")
    del doc["spec"]["team"]
    proc = _kubectl_apply(cluster, doc, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert get_job(api, namespace, "no-team")["spec"]["team"] == "research"


def test_without_the_webhook_cel_refuses_and_the_reconciler_catches_the_rest(
    api: client.ApiClient,
    core: client.CoreV1Api,
    cluster: Cluster,
    namespace: str,
    policy: dict[str, Any],
    operator: Any,
    tmp_path: Path,
) -> None:
    pol = policy["metadata"]["name"]
    mine = f"r-{namespace}"
    assert not webhooks.configured(api), "no webhook in this test"

    # CEL in the CRD: spot.policy require without a checkpoint, within one object.
    doc = job_doc(namespace, mine, name="cel", spot={"policy": "require"})
    doc["spec"].pop("checkpoint", None)
    proc = _kubectl_apply(cluster, doc, tmp_path)
    assert proc.returncode != 0
    assert "spot.policy require needs spec.checkpoint" in proc.stderr, proc.stderr

    # What CEL cannot see (other objects: the policy, the namespace) is the reconciler's.
    create_job(api, _spot_without_checkpoint(namespace, "spot", mine))
    create_job(api, job_doc(namespace, f"s-{namespace}", name="theirs"))
    create_job(api, job_doc(namespace, mine, name="other-team", team="serving"))
    for name, rule in (("spot", "spot-needs-checkpoint"), ("theirs", "pool-access"), ("other-team", "namespace-team")):
        st = wait_phase(api, namespace, name, "Unschedulable", timeout=60)
        cond = {c["type"]: c for c in st["conditions"]}["PolicyCompliant"]
        assert (cond["status"], cond["reason"]) == ("False", "PolicyViolation"), cond
        assert f"(rule {rule})" in cond["message"], cond
        if rule != "namespace-team":
            assert f"by policy '{pol}'" in cond["message"], cond
        assert st["message"].startswith("not admitted: ")
        wait_for(
            functools.partial(_has_event, core, namespace, name, "PolicyViolation"),
            timeout=30,
            what=f"the PolicyViolation event of {name}",
        )
        assert not workloads_of(api, namespace, name)

    # The policy changes: spot jobs need no checkpoint any more; the refused job is planned.
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        v.GROUP, v.VERSION, registry.POLICY.plural, pol, {"spec": {"spot": {"requireCheckpoint": False}}}
    )

    def planned() -> dict[str, Any] | None:
        st = status(api, namespace, "spot")
        conditions = {c["type"] for c in st.get("conditions") or []}
        return st if "PolicyCompliant" not in conditions and "Planned" in conditions else None

    wait_for(planned, timeout=60, what="the job re-decided under the changed policy")


def test_a_budget_queues_and_a_policy_change_never_stops_a_running_job(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = f"r-{namespace}"
    custom = client.CustomObjectsApi(api)
    name = f"pol-{namespace}"
    with gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=2, name="runs"))
        wait_phase(api, namespace, "runs", "Running", timeout=90)
        # Now a policy the running job breaks (2 devices > 1), and a budget the team has spent.
        doc = {
            "apiVersion": v.API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": name},
            "spec": {"maxDevicesPerJob": 1, "budgets": [{"team": "research", "limitUsd": 100}]},
        }
        custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, doc)
        try:
            spend = [{"team": "research", "period": "monthly", "spentUsd": 100, "limitUsd": 100}]
            custom.patch_cluster_custom_object_status(
                v.GROUP, v.VERSION, registry.POLICY.plural, name, {"status": {"spend": spend}}
            )

            def flagged() -> dict[str, Any] | None:
                st = status(api, namespace, "runs")
                cond = {c["type"]: c for c in st.get("conditions") or []}.get("PolicyCompliant")
                return st if cond and cond["reason"] == "PolicyChanged" else None

            st = wait_for(flagged, timeout=60, what="the running job flagged, not stopped")
            cond = {c["type"]: c for c in st["conditions"]}["PolicyCompliant"]
            assert "(rule max-devices)" in cond["message"] and f"by policy '{name}'" in cond["message"]
            wait_for(
                lambda: "PolicyViolation" in {r for r, _ in events_of(core, namespace, "runs")},
                timeout=30,
                what="the PolicyViolation event",
            )
            # A new job of the team waits for the budget (queued, not refused).
            create_job(api, job_doc(namespace, pool, devices=1, name="queued"))

            def queued() -> dict[str, Any] | None:
                s = status(api, namespace, "queued")
                admitted = {c["type"]: c for c in s.get("conditions") or []}.get("Admitted")
                return s if admitted and admitted["reason"] == "BudgetExhausted" else None

            q = wait_for(queued, timeout=60, what="the job queued on the budget")
            assert q["phase"] == "Pending"
            assert "has spent $100.00 of its monthly budget of $100.00" in q["message"]
            # The running job was never stopped.
            assert status(api, namespace, "runs")["phase"] == "Running"
            assert workloads_of(api, namespace, "runs")
        finally:
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, name)


# --- issue 25, finding 10: a team checkpoints to S3 only under its own prefixes -------------------


def _grant_prefixes(api: client.ApiClient, pol: str, bucket: str) -> None:
    """The policy grants research and serving a prefix each in one shared bucket."""
    rules = [
        {"teams": ["research"], "prefixes": [f"s3://{bucket}/teams/research/"]},
        {"teams": ["serving"], "prefixes": [f"s3://{bucket}/teams/serving/"]},
    ]
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        v.GROUP, v.VERSION, registry.POLICY.plural, pol, {"spec": {"checkpointAccess": rules}}
    )
    stored = client.CustomObjectsApi(api).get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, pol)
    assert stored["spec"].get("checkpointAccess") == rules, "the CRD keeps the rules"


def _checkpointing(namespace: str, name: str, pool: str, uri: str) -> dict[str, Any]:
    return job_doc(namespace, pool, name=name, checkpoint={"uri": uri, "intervalMinutes": 30})


def test_a_checkpoint_outside_the_teams_prefixes_is_refused(
    api: client.ApiClient, namespace: str, policy: dict[str, Any], operator_with_webhook: Any
) -> None:
    pol, mine, bucket = policy["metadata"]["name"], f"r-{namespace}", f"ckpt-{namespace}"
    _grant_prefixes(api, pol, bucket)
    custom = client.CustomObjectsApi(api)

    def dry_run(doc: dict[str, Any]) -> str | None:
        """None when the API server (and the webhook) would create it; else the refusal."""
        try:
            custom.create_namespaced_custom_object(
                v.GROUP, v.VERSION, namespace, registry.JOB.plural, doc, dry_run="All"
            )
        except client.ApiException as exc:
            return str(exc.body)
        return None

    # The webhook's policy index may lag the patch for a moment: asked again until it refuses.
    theirs = _checkpointing(namespace, "theirs", mine, f"s3://{bucket}/teams/serving/run")
    body = wait_for(lambda: dry_run(theirs), timeout=30, what="the webhook refusing serving's prefix")
    assert "denied the request" in body, body
    assert (
        f"spec.checkpoint.uri: team 'research' may not checkpoint to 's3://{bucket}/teams/serving/run': it is "
        f"under none of the team's 1 allowed prefix(es) by policy '{pol}' (rule checkpoint-prefix); fix: "
        f"checkpoint under a prefix granted to team 'research': 's3://{bucket}/teams/research/'"
    ) in body, body
    # A sibling that shares the letters, and a path that would climb out, are outside too.
    for i, uri in enumerate((f"s3://{bucket}/teams/research-old/run", f"s3://{bucket}-x/teams/research/run")):
        refusal = dry_run(_checkpointing(namespace, f"sibling-{i}", mine, uri))
        assert refusal is not None and "(rule checkpoint-prefix)" in refusal, (uri, refusal)
    escape = dry_run(_checkpointing(namespace, "escape", mine, f"s3://{bucket}/teams/research/../serving/run"))
    assert escape is not None and "must stay inside its bucket or claim" in escape, escape  # the CRD's own rule
    # Its own prefix is created.
    assert dry_run(_checkpointing(namespace, "ours", mine, f"s3://{bucket}/teams/research/run")) is None
    assert not custom.list_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural)["items"]


def test_without_the_webhook_the_reconciler_refuses_another_teams_prefix(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, policy: dict[str, Any], operator: Any
) -> None:
    pol, mine, bucket = policy["metadata"]["name"], f"r-{namespace}", f"ckpt-{namespace}"
    assert not webhooks.configured(api), "no webhook in this test"
    _grant_prefixes(api, pol, bucket)
    create_job(api, _checkpointing(namespace, "theirs", mine, f"s3://{bucket}/teams/serving/run"))
    st = wait_phase(api, namespace, "theirs", "Unschedulable", timeout=60)
    cond = {c["type"]: c for c in st["conditions"]}["PolicyCompliant"]
    assert (cond["status"], cond["reason"]) == ("False", "PolicyViolation"), cond
    assert cond["message"].startswith(
        f"spec.checkpoint.uri: team 'research' may not checkpoint to 's3://{bucket}/teams/serving/run'"
    ), cond
    assert f"by policy '{pol}' (rule checkpoint-prefix)" in cond["message"], cond
    assert f"'s3://{bucket}/teams/research/'" in cond["message"], cond
    wait_for(
        functools.partial(_has_event, core, namespace, "theirs", "PolicyViolation"),
        timeout=30,
        what="the PolicyViolation event",
    )
    assert not workloads_of(api, namespace, "theirs")

    # The platform team grants research that prefix too: the job is planned.
    rules = [{"teams": ["research"], "prefixes": [f"s3://{bucket}/teams/research/", f"s3://{bucket}/teams/serving/"]}]
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        v.GROUP, v.VERSION, registry.POLICY.plural, pol, {"spec": {"checkpointAccess": rules}}
    )

    def compliant() -> dict[str, Any] | None:
        s = status(api, namespace, "theirs")
        return s if "PolicyCompliant" not in {c["type"] for c in s.get("conditions") or []} else None

    wait_for(compliant, timeout=60, what="the job re-decided under the granted prefix")


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("s3://b/a//", "must name one directory"),
        ("s3://b/teams/../other/", "must name one directory"),
        ("s3://b/%2e%2e/x", "must name one directory"),
        ("gs://b/x", "should match"),
        ("s3://b/" + "x" * 250, "Too long"),
    ],
)
def test_the_api_server_refuses_a_malformed_checkpoint_prefix(
    api: client.ApiClient, crds: list[str], namespace: str, prefix: str, why: str
) -> None:
    """The CRD's pattern, length and CEL rule, with no webhook and no operator: the models refuse the same."""
    custom = client.CustomObjectsApi(api)

    def doc(p: str) -> dict[str, Any]:
        spec = {"checkpointAccess": [{"teams": ["research"], "prefixes": [p]}]}
        return {
            "apiVersion": v.API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": f"p-{namespace}"},
            "spec": spec,
        }

    with pytest.raises(client.ApiException) as info:
        custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, doc(prefix), dry_run="All")
    assert info.value.status == 422
    assert "spec.checkpointAccess[0].prefixes[0]" in str(info.value.body) and why in str(info.value.body), (
        info.value.body
    )
    custom.create_cluster_custom_object(
        v.GROUP, v.VERSION, registry.POLICY.plural, doc("s3://b/teams/ml/"), dry_run="All"
    )
