"""The operator's writes to pods and nodes held to what it needs (issue 25, finding 9), on the real
API server: under the ServiceAccount token of manifests/operator/rbac.yaml, with the admission
policy of manifests/operator/write-guard.yaml, the checkpoint-now annotation and accel.dev/ taints
go through, while anything else on someone's pod or node, and deleting a pod the operator did not
make, is refused with the policy's message. RBAC alone (before the policy) allowed all of it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from accel_api import vocabulary as v
from tests.support.cluster import ROOT, apply_manifests, token_kubeconfig, wait_for

RBAC = "rbac.authorization.k8s.io"


def _refused(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status in (403, 422), info.value
    return str(info.value.body)


@pytest.fixture
def operator_api(api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path) -> Iterator[client.CoreV1Api]:
    token = config.new_client_from_config(config_file=str(token_kubeconfig(api, core, tmp_path)))
    yield client.CoreV1Api(token)


def _pod(core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str]) -> None:
    finalizers = [v.FINALIZER_LEDGER, "team.example/keep"]
    core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"team.example/owner": "alice"},
                "finalizers": finalizers,
            },
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}], "nodeName": "nowhere"},
        },
    )


def _policy_active(op: client.CoreV1Api, namespace: str, pod: str) -> bool:
    """The policy has reached the API server's admission (it applies a moment after it is made)."""
    try:
        op.patch_namespaced_pod(pod, namespace, {"metadata": {"labels": {"probe": "x"}}})
    except ApiException as exc:
        return exc.status in (403, 422) and "accel-operator-writes" in str(exc.body)
    # Went through before the policy was active: undo, and try again.
    op.patch_namespaced_pod(pod, namespace, {"metadata": {"labels": {"probe": None}}})
    return False


def test_the_operator_may_change_only_its_annotation_and_taints_and_delete_only_its_pods(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator_api: client.CoreV1Api
) -> None:
    op = operator_api
    _pod(core, namespace, "theirs", {"app": "web"})
    _pod(core, namespace, "ours", {v.LABEL_MANAGED_BY: v.MANAGED_BY_VALUE})
    wait_for(lambda: _policy_active(op, namespace, "theirs"), timeout=30, what="the write guard active")

    # Pods: the checkpoint-now request goes through; nothing else does.
    op.patch_namespaced_pod("theirs", namespace, {"metadata": {"annotations": {v.ANNOTATION_CHECKPOINT_NOW: "t1"}}})
    anno = core.read_namespaced_pod("theirs", namespace).metadata.annotations
    assert anno[v.ANNOTATION_CHECKPOINT_NOW] == "t1"
    message = _refused(lambda: op.patch_namespaced_pod("theirs", namespace, {"metadata": {"labels": {"app": "x"}}}))
    assert "only the annotation accel.dev/checkpoint-now" in message
    changes: list[dict[str, str | None]] = [{"team.example/owner": "eve"}, {"team.example/owner": None}, {"x/y": "1"}]
    for change in changes:
        body = {"metadata": {"annotations": change}}
        _refused(lambda: op.patch_namespaced_pod("theirs", namespace, body))  # noqa: B023 - called at once

    # Finalizers: its own (accel.dev/ledger, once the ledger holds the pod's times) may go, as
    # the operator removes it; no other, and none may be added.
    def finalizers(pod: str) -> list[str]:
        return list(core.read_namespaced_pod(pod, namespace).metadata.finalizers or [])

    refused = _refused(
        lambda: op.patch_namespaced_pod(
            "theirs", namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["team.example/keep"]}}
        )
    )
    assert "or remove its finalizer accel.dev/ledger" in refused
    _refused(lambda: op.patch_namespaced_pod("theirs", namespace, {"metadata": {"finalizers": ["x.example/new"]}}))
    release = {"metadata": {"$deleteFromPrimitiveList/finalizers": [v.FINALIZER_LEDGER]}}
    op.patch_namespaced_pod("ours", namespace, release)
    assert finalizers("ours") == ["team.example/keep"]

    # Deletes: only a pod the operator made (the sweep's).
    assert "only the pods it made" in _refused(
        lambda: op.delete_namespaced_pod("theirs", namespace, grace_period_seconds=0)
    )
    op.delete_namespaced_pod("ours", namespace, grace_period_seconds=0)
    for pod in ("theirs", "ours"):  # let them go (the test's own finalizer)
        core.patch_namespaced_pod(pod, namespace, {"metadata": {"finalizers": None}})

    # Nodes: accel.dev/ taints only (read-modify-write, as the operator does: the node
    # lifecycle controller adds taints of its own meanwhile).
    node = f"{namespace}-node"
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"pool": "x"}},
            "spec": {"taints": [{"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}]},
        }
    )
    mine = {"key": v.TAINT_DEVICE_UNHEALTHY, "value": "0", "effect": "NoSchedule"}

    def taints() -> list[dict[str, Any]]:
        return [api.sanitize_for_serialization(t) for t in core.read_node(node).spec.taints or []]

    def set_taints(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        """Read, change, write at the resourceVersion read (as the operator's node writer does)."""
        for _ in range(10):
            obj = core.read_node(node)
            now = [api.sanitize_for_serialization(t) for t in obj.spec.taints or []]
            body = {"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"taints": change(now)}}
            try:
                op.patch_node(node, body)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise AssertionError("10 conflicting writes in a row")

    try:
        set_taints(lambda now: [*now, mine])
        keys = [t["key"] for t in taints()]
        assert "example.com/dedicated" in keys and v.TAINT_DEVICE_UNHEALTHY in keys
        set_taints(lambda now: [t for t in now if t["key"] != v.TAINT_DEVICE_UNHEALTHY])
        assert v.TAINT_DEVICE_UNHEALTHY not in [t["key"] for t in taints()]
        refused = _refused(lambda: set_taints(lambda now: [t for t in now if t["key"] != "example.com/dedicated"]))
        assert "only the accel.dev/ taints" in refused
        _refused(lambda: op.patch_node(node, {"spec": {"unschedulable": True}}))
        _refused(lambda: op.patch_node(node, {"metadata": {"labels": {"pool": "y"}}}))
        _refused(lambda: op.delete_node(node))
    finally:
        core.delete_node(node)


def _can(auth: client.AuthorizationV1Api, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    attrs: dict[str, Any] = {"verb": verb, "group": v.GROUP, "resource": resource.split("/", maxsplit=1)[0]}
    if "/" in resource:
        attrs["subresource"] = resource.split("/")[1]
    if namespace is not None:
        attrs["namespace"] = namespace
    spec = {"user": user, "resourceAttributes": attrs}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    return bool(auth.create_subject_access_review(review).status.allowed)


def test_tenant_roles_aggregate_into_edit_and_view(api: client.ApiClient, namespace: str) -> None:
    """manifests/operator/tenant-roles.yaml: `edit` in a namespace submits and deletes its jobs,
    `view` reads them, neither writes a job's status or any pool or policy; the reader role reads
    pools and policies cluster-wide."""
    apply_manifests(api, [ROOT / "manifests" / "operator" / "tenant-roles.yaml"])
    rbac, auth = client.RbacAuthorizationV1Api(api), client.AuthorizationV1Api(api)
    for user, role in (("alice", "edit"), ("bob", "view")):
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": f"{user}-{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            },
        )
    # The aggregation controller folds each labelled role into the built-in ones on its own
    # schedule: `edit` may show the edit role's rules before the view role's, so every granted
    # verb is waited for, not just the first.
    for user, verb, resource in (
        ("alice", "create", "acceleratorjobs"),
        ("alice", "delete", "acceleratorjobs"),
        ("alice", "get", "acceleratorjobs/status"),
        ("bob", "list", "acceleratorjobs"),
    ):
        wait_for(
            functools.partial(_can, auth, user, verb, resource, namespace),
            timeout=30,
            what=f"{user} may {verb} {resource} (aggregated)",
        )
    assert not _can(auth, "alice", "patch", "acceleratorjobs/status", namespace)
    assert not _can(auth, "alice", "create", "acceleratorjobs", "default")  # only where bound
    assert not _can(auth, "bob", "create", "acceleratorjobs", namespace)
    for user in ("alice", "bob"):
        assert not _can(auth, user, "create", "acceleratorpools", None)
        assert not _can(auth, user, "patch", "acceleratorpolicies", None)
        assert not _can(auth, user, "list", "acceleratorpools", None)  # until bound to the reader role
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": f"{namespace}-bob-reader"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "accel-operator-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}],
        }
    )
    try:
        # The authorizer reads bindings from its informer cache: a new binding shows within moments.
        wait_for(lambda: _can(auth, "bob", "list", "acceleratorpools", None), timeout=30, what="reader bound")
        assert _can(auth, "bob", "get", "acceleratorpolicies", None)
        assert not _can(auth, "bob", "patch", "acceleratorpools", None)
    finally:
        rbac.delete_cluster_role_binding(f"{namespace}-bob-reader")
