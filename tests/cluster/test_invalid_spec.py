"""A running job whose stored spec stops parsing, on the local control plane (issue 25, finding 3).

An upgrade that tightens a rule leaves a stored spec the operator's models refuse: the test
loosens the CRD's spec schema (the older CRD), stores an invalid spec on a running job, and puts
the strict CRD back (the upgrade). Before the fix the job was set Failed with its batch Job left
running, uncharged, its team's spend dropped by the job's money, and the fixed spec adopted the
running batch Job under the same attempt. Now: it is charged on, asked to checkpoint, its attempt
ended (the batch Job deleted) after the grace, and the fixed spec runs as a new attempt."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import registry
from accel_api import vocabulary as v
from tests.support.cluster import wait_for
from tests.support.jobs import batch_job_exists, create_job, events_of, get_job, gpu_pool, job_doc, status, wait_phase
from tests.support.operator import checked_operator, settings_for

CRD = f"{registry.JOB.plural}.{v.GROUP}"
GRACE = 6.0  # the operator's checkpoint grace in this test


@contextmanager
def _loose_spec_schema(api: client.ApiClient) -> Iterator[None]:
    """The AcceleratorJob CRD with a spec schema that keeps anything (an older, looser CRD);
    the strict one is put back at the end, as an upgrade would."""
    ext = client.ApiextensionsV1Api(api)
    strict = ext.read_custom_resource_definition(CRD)
    body = api.sanitize_for_serialization(strict)
    loose = copy.deepcopy(body)
    for version in loose["spec"]["versions"]:
        props = version["schema"]["openAPIV3Schema"]["properties"]
        props["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"].pop("x-kubernetes-validations", None)
    ext.replace_custom_resource_definition(CRD, loose)
    try:
        yield
    finally:
        for _ in range(5):
            try:
                current = ext.read_custom_resource_definition(CRD)
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                ext.replace_custom_resource_definition(CRD, body)
                break
            except ApiException as exc:
                if exc.status != 409:
                    raise


def _patch_spec(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        v.GROUP, v.VERSION, namespace, registry.JOB.plural, name, {"spec": spec}
    )


def _store_invalid(api: client.ApiClient, namespace: str, name: str) -> None:
    """microBatch 0 (the models refuse it: at least 1) stored through the loose CRD; the write is
    retried while the API server still serves the strict schema."""
    with _loose_spec_schema(api):

        def stored() -> bool:
            try:
                _patch_spec(api, namespace, name, {"workload": {"microBatch": 0}})
            except ApiException as exc:
                if exc.status == 422:
                    return False
                raise
            return True

        wait_for(stored, timeout=30, what="the invalid spec stored through the loose CRD")


def test_a_running_job_whose_spec_stops_parsing_is_charged_checkpointed_and_ended(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str
) -> None:
    pool = f"{namespace}-inv"
    batch = client.BatchV1Api(api)
    settings = settings_for(namespace, checkpoint_grace_seconds=GRACE, cost_interval_seconds=1.0)
    with checked_operator(settings), gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=8, name="inv"))
        st = wait_phase(api, namespace, "inv", "Running")
        workload, attempt = st["workload"], st.get("attempt", 0)
        wait_for(
            lambda: (status(api, namespace, "inv").get("cost") or {}).get("spentUsd", 0) > 0,
            timeout=30,
            what="the running job charged",
        )
        _store_invalid(api, namespace, "inv")
        # Asked to checkpoint while its pods run; not Failed yet, its batch Job still there.
        wait_for(
            lambda: any(
                (p.metadata.annotations or {}).get(v.ANNOTATION_CHECKPOINT_NOW)
                for p in core.list_namespaced_pod(namespace, label_selector=f"{v.LABEL_JOB}=inv").items
            ),
            timeout=30,
            what="the checkpoint-now request on the job's pods",
        )
        asked = status(api, namespace, "inv")
        assert asked["phase"] == "Running", asked
        valid = {c["type"]: c for c in asked.get("conditions", [])}["Valid"]
        assert (valid["status"], valid["reason"]) == ("False", "InvalidSpec")
        assert "spec.workload.microBatch" in valid["message"]
        spent_before = asked["cost"]["spentUsd"]
        # After the grace (no checkpoint reported): the attempt ends, its batch Job is deleted.
        ended = wait_phase(api, namespace, "inv", "Failed", timeout=GRACE + 30)
        assert ended["attempt"] == attempt + 1
        wait_for(
            lambda: not batch_job_exists(batch, namespace, workload), timeout=30, what="the attempt's batch Job deleted"
        )
        reasons = [reason for reason, _ in events_of(core, namespace, "inv")]
        assert "InvalidSpec" in reasons
        # Charged while it ran; the money never goes down.
        wait_for(
            lambda: (status(api, namespace, "inv").get("cost") or {}).get("attempts", [{}])[0].get("end"),
            timeout=30,
            what="the ended attempt closed in the ledger",
        )
        cost = status(api, namespace, "inv")["cost"]
        assert cost["spentUsd"] >= spent_before > 0
        assert cost["attempts"][0]["team"] == get_job(api, namespace, "inv")["spec"]["team"]
        # The spec fixed: a new attempt with a new batch Job, never the old one adopted.
        _patch_spec(api, namespace, "inv", {"workload": {"microBatch": 1}})
        again = wait_phase(api, namespace, "inv", "Running", timeout=60)
        assert again["attempt"] == attempt + 1 and again["workload"] != workload
        assert status(api, namespace, "inv")["cost"]["spentUsd"] >= cost["spentUsd"]
