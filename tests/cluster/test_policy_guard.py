"""Issue 25, findings 6 and 7, against the real API server.

A policy the models refuse fails closed: stored while the CRD lacked the rule that refuses it
(as after an upgrade that tightened the schema), it gets a ``Valid=False`` condition naming the
field and an ``InvalidPolicy`` event, and a job it governs is held (``Unschedulable``, its message
naming the policy) until the policy is fixed; then the job is admitted. Before, such a policy was
indexed as nothing: its rules switched off and the job ran.

The team a job is charged to cannot be changed: the API server refuses a patch of ``spec.team``
(CEL ``self == oldSelf`` from the model), with no webhook and no operator.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import kubeapi
from tests.support import crd_schema
from tests.support.cluster import wait_for
from tests.support.jobs import create_job, gpu_pool, job_doc, status, wait_phase

_RESERVED_ENV_PATTERN = f"{crd_schema.SPEC}/properties/reservedEnv/items/pattern"


def _policy(name: str, reserved: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": name},
        "spec": {"reservedEnv": reserved, "maxDevicesPerJob": 1},
    }


def _valid_condition(custom: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, name)
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Valid"), None)


def _policy_events(core: client.CoreV1Api, name: str) -> list[tuple[str, str]]:
    return [
        (e.reason, e.message or "")
        for e in core.list_namespaced_event("default").items
        if e.involved_object and e.involved_object.kind == "AcceleratorPolicy" and e.involved_object.name == name
    ]


@pytest.fixture
def broken_policy(api: client.ApiClient, crds: list[str], namespace: str) -> Iterator[str]:
    """A policy with reservedEnv ["MY SECRET"], stored while the CRD lacked the pattern that
    refuses it (before the operator starts: the CRD's change reinitialises its storage, and the
    watches would log it), removed afterwards."""
    custom = client.CustomObjectsApi(api)
    name = f"broken-{namespace}"
    doc = _policy(name, ["MY SECRET"])
    probe = copy.deepcopy(doc)
    probe["metadata"]["name"] = f"{name}-probe"  # a dry run: never stored, never in the way
    dry_run = functools.partial(
        custom.create_cluster_custom_object, v.GROUP, v.VERSION, registry.POLICY.plural, probe, dry_run="All"
    )
    with crd_schema.without(api, registry.POLICY.crd_name, _RESERVED_ENV_PATTERN, crd_schema.stores(dry_run)):
        custom.create_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, doc)
    try:
        yield name
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, name)


# Changing a CRD makes the API server reinitialise its storage for a moment: kopf's first list of
# a kind may get a 429 it retries (logged at ERROR), as after any CRD upgrade.
@pytest.mark.expect_errors(r"storage is \(re\)initializing")
def test_a_policy_the_models_refuse_fails_closed_until_fixed(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, broken_policy: str, operator: Any
) -> None:
    custom = client.CustomObjectsApi(api)
    name = broken_policy
    with gpu_pool(api, f"p-{namespace}", count=1):
        cond = wait_for(
            lambda: (c := _valid_condition(custom, name)) and c.get("status") == "False" and c,
            timeout=60,
            what="the policy's Valid=False condition",
        )
        assert cond["reason"] == "InvalidSpec", cond
        assert "spec.reservedEnv[0]: must be an environment variable name" in cond["message"], cond
        assert "holds every job until it is fixed" in cond["message"], cond
        wait_for(
            lambda: any(r == "InvalidPolicy" for r, _ in _policy_events(core, name)),
            timeout=30,
            what="the InvalidPolicy event",
        )

        # A job the policy governs (a device cap applies to every team) is held, naming it.
        create_job(api, job_doc(namespace, f"p-{namespace}", name="held"))
        st = wait_phase(api, namespace, "held", "Unschedulable", timeout=60)
        policy_cond = {c["type"]: c for c in st["conditions"]}["PolicyCompliant"]
        assert f"by policy '{name}' (rule policy-invalid)" in policy_cond["message"], policy_cond
        assert "the policy does not parse" in st["message"], st

        # Fixed: the condition turns True and the job is admitted.
        custom.patch_cluster_custom_object(
            v.GROUP, v.VERSION, registry.POLICY.plural, name, {"spec": {"reservedEnv": ["MY_SECRET"]}}
        )
        wait_for(
            lambda: (c := _valid_condition(custom, name)) and c.get("status") == "True",
            timeout=60,
            what="the policy's Valid=True condition",
        )
        wait_for(
            lambda: status(api, namespace, "held").get("phase") in ("Admitted", "Running"),
            timeout=60,
            what="the held job admitted once the policy is fixed",
        )


def test_the_api_server_refuses_a_change_of_team(api: client.ApiClient, crds: list[str], namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    create_job(api, job_doc(namespace, "any-pool", name="mine", team="research"))
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(
            v.GROUP, v.VERSION, namespace, registry.JOB.plural, "mine", {"spec": {"team": "serving"}}
        )
    assert info.value.status == 422, info.value.body
    message = json.loads(info.value.body)["message"]
    assert "spec.team" in message and "is immutable" in message, message
    # Other fields stay editable, and so does the team's own value, unchanged.
    custom.patch_namespaced_custom_object(
        v.GROUP, v.VERSION, namespace, registry.JOB.plural, "mine", {"spec": {"team": "research", "priority": 5}}
    )


def test_an_unlabelled_namespace_may_not_borrow_a_bound_team(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    """Without the webhook, the reconciler refuses what the webhook refuses: a job in an unlabelled
    namespace naming a team that a labelled namespace holds (its spend would land on that team)."""
    owner = f"{namespace}-owner"
    kubeapi.ensure_namespace(api, owner)
    core.patch_namespace(owner, {"metadata": {"labels": {v.LABEL_NAMESPACE_TEAM: f"{namespace}-team"}}})
    try:
        with gpu_pool(api, f"p-{namespace}", count=1):
            create_job(api, job_doc(namespace, f"p-{namespace}", name="borrowed", team=f"{namespace}-team"))
            st = wait_phase(api, namespace, "borrowed", "Unschedulable", timeout=60)
            cond = {c["type"]: c for c in st["conditions"]}["PolicyCompliant"]
            assert "(rule namespace-team)" in cond["message"], cond
            assert f"is bound to the namespaces labelled {v.LABEL_NAMESPACE_TEAM}='{namespace}-team'" in cond["message"]
            # A team no namespace holds stays open to the unlabelled namespace.
            create_job(api, job_doc(namespace, f"p-{namespace}", name="own", team=f"{namespace}-free"))
            wait_for(
                lambda: status(api, namespace, "own").get("phase") in ("Admitted", "Running"),
                timeout=60,
                what="the job of an unbound team admitted",
            )
    finally:
        core.delete_namespace(owner, propagation_policy="Background", grace_period_seconds=0)
