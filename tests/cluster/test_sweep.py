"""Nothing of ours runs outside a ledger, on the local control plane: a batch Job orphaned by
``--cascade=orphan`` and an earlier attempt's batch Job left behind are deleted by the operator's
sweep (reconcile/job/sweep.py), and an attempt admitted onto nodes that went before its pods
bound gives its reservation back at once, not after the bind timeout."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import preempt
from tests.support.cluster import token_kubeconfig, wait_for
from tests.support.jobs import (
    batch_job_exists,
    create_job,
    end_pods,
    events_of,
    gpu_pool,
    job_doc,
    status,
    wait_phase,
    workloads_of,
)
from tests.support.operator import checked_operator, settings_for

# The sweep leaves a deleted job's workload alone for the created grace (engine/apply.py:
# CREATED_TTL_SECONDS, 60 s from the workload's creation); then the next pass deletes it.
SWEEP_BOUND = 60.0 + 30.0


def test_a_job_deleted_with_cascade_orphan_leaves_nothing_running(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = f"{namespace}-orphan"
    batch = client.BatchV1Api(api)
    with gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=8, name="orphan"))
        st = wait_phase(api, namespace, "orphan", "Running")
        workload = st["workload"]
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            v.GROUP, v.VERSION, namespace, registry.JOB.plural, "orphan", propagation_policy="Orphan"
        )
        # The garbage collector orphans the batch Job (drops its owner reference) and leaves it running.
        wait_for(
            lambda: not (batch.read_namespaced_job(workload, namespace).metadata.owner_references or []),
            timeout=30,
            what="the batch Job orphaned",
        )
        wait_for(
            lambda: not batch_job_exists(batch, namespace, workload),
            timeout=SWEEP_BOUND,
            what="the orphaned batch Job deleted by the operator",
        )
        wait_for(
            lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"],
            timeout=60,
            what="its pods gone",
        )
        # Its devices are free again: a new job takes them.
        create_job(api, job_doc(namespace, pool, devices=8, name="after"))
        wait_phase(api, namespace, "after", "Running", timeout=60)


def _stale_attempt(api: client.ApiClient, namespace: str, job: dict[str, Any], name: str) -> dict[str, Any]:
    """A batch Job with the labels of ``job``'s attempt 0 (as a refused or lost delete leaves it)."""
    labels = {
        v.LABEL_JOB: job["metadata"]["name"],
        v.LABEL_ATTEMPT: "0",
        v.LABEL_MANAGED_BY: v.MANAGED_BY_VALUE,
        v.LABEL_TEAM: job["spec"]["team"],
    }
    owner = {
        "apiVersion": v.API_VERSION,
        "kind": registry.JOB.kind,
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    # Nowhere to run: only the batch Job matters here, not its pod.
                    "nodeSelector": {"test.accel.dev/nowhere": "true"},
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        },
    }
    out: dict[str, Any] = api.sanitize_for_serialization(client.BatchV1Api(api).create_namespaced_job(namespace, body))
    return out


def test_an_earlier_attempts_batch_job_left_behind_is_deleted(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = f"{namespace}-stale"
    batch = client.BatchV1Api(api)
    with gpu_pool(api, pool, count=1):
        job = create_job(api, job_doc(namespace, pool, devices=2, name="twice", maxRetries=1))
        wait_phase(api, namespace, "twice", "Running")
        end_pods(core, namespace, "twice", 7)
        wait_for(lambda: status(api, namespace, "twice").get("attempt") == 1, timeout=30, what="attempt 1")
        st = wait_phase(api, namespace, "twice", "Running")
        assert st["workload"] == "twice-a1"
        wait_for(
            lambda: not batch_job_exists(batch, namespace, "twice-a0"), timeout=60, what="the release's own delete"
        )
        # The release's delete refused or lost: attempt 0's batch Job is still there.
        _stale_attempt(api, namespace, job, "twice-a0")
        wait_for(
            lambda: not batch_job_exists(batch, namespace, "twice-a0"), timeout=30, what="the stale attempt deleted"
        )
        wait_for(
            lambda: [m for r, m in events_of(core, namespace, "twice") if r == "StrayDeleted"],
            timeout=30,
            what="the StrayDeleted event",
        )
        # The current attempt is untouched.
        time.sleep(4.0)  # more than a resync
        assert [w.metadata.name for w in workloads_of(api, namespace, "twice")] == ["twice-a1"]
        assert status(api, namespace, "twice")["phase"] == "Running"


def test_an_attempt_whose_node_went_before_binding_is_released_at_once(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str]
) -> None:
    pool = f"{namespace}-gone"
    # A bind timeout far above the test's bound: only the release on the nodes' going can pass.
    with checked_operator(settings_for(namespace, bind_timeout_seconds=600.0)), gpu_pool(api, pool, count=1) as made:
        # A taint the workload does not tolerate keeps its pod from binding (the operator does
        # not count it against capacity); then the node goes.
        taints = [api.sanitize_for_serialization(t) for t in core.read_node(made[0]).spec.taints or []]
        core.patch_node(
            made[0], {"spec": {"taints": [*taints, {"key": "test.accel.dev/hold", "effect": "NoSchedule"}]}}
        )
        create_job(api, job_doc(namespace, pool, devices=8, name="stranded"))
        wait_phase(api, namespace, "stranded", "Admitted")
        preempt.delete_node(core, made[0])
        wait_for(
            lambda: status(api, namespace, "stranded").get("attempt") == 1,
            timeout=20,
            what="the reservation released as attempt 1",
        )
        st = status(api, namespace, "stranded")
        assert st["phase"] == "Pending", st
        messages = [m for r, m in events_of(core, namespace, "stranded") if r == "GangTimeout"]
        assert messages and "nodes gone since the admission" in messages[0], messages


def test_the_operators_role_may_make_the_sweeps_deletes(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """Under the ServiceAccount token of manifests/operator/rbac.yaml: pods and batch Jobs may be
    deleted (the sweep's), pods still not updated."""
    token = config.new_client_from_config(config_file=str(token_kubeconfig(api, core, tmp_path)))
    auth = client.AuthorizationV1Api(token)

    def allowed(verb: str, group: str, resource: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
            },
        }
        return bool(auth.create_self_subject_access_review(review).status.allowed)

    assert allowed("delete", "", "pods")
    assert allowed("delete", "batch", "jobs")
    assert not allowed("update", "", "pods")
