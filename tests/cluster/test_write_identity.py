"""Status writes carry the job's identity, against the real API server: a write addressed to a
job that was deleted and re-created under the same name while the write was in flight is refused,
and the new job keeps its own (empty) ledger (issue 25, finding 5)."""

from __future__ import annotations

import pytest
from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.adapters.kube.jobs import JobGone, JobRef, KubeJobWriter
from tests.support.cluster import wait_for
from tests.support.jobs import create_job, get_job, job_doc, status


def test_a_status_write_for_a_deleted_and_recreated_job_is_refused(
    api: client.ApiClient, crds: list[str], namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    doc = job_doc(namespace, "nowhere", name="twice")
    first = create_job(api, doc)
    old = JobRef(namespace, "twice", first["metadata"]["uid"])
    writer = KubeJobWriter(api)
    writer.patch_status(old, {"message": "the first job's"})  # the right job: written
    assert status(api, namespace, "twice").get("message") == "the first job's"

    custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, "twice")
    wait_for(
        lambda: not custom.list_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural)["items"],
        timeout=30,
        what="the first job gone",
    )
    second = create_job(api, doc)
    assert second["metadata"]["uid"] != old.uid
    # The first job's ledger, written late under the same name, must not reach the second job.
    with pytest.raises(JobGone):
        writer.patch_status(old, {"cost": {"attempts": [], "spentUsd": 7.26}, "message": "the first job's"})
    assert status(api, namespace, "twice") == {}
    assert get_job(api, namespace, "twice")["metadata"]["uid"] == second["metadata"]["uid"]
    # The second job's own write goes through.
    writer.patch_status(JobRef(namespace, "twice", second["metadata"]["uid"]), {"message": "the second job's"})
    assert status(api, namespace, "twice").get("message") == "the second job's"
