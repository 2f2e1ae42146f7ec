"""Events on the real API server under the operator's own role (manifests/operator/rbac.yaml):
a repeated Event becomes a series on the first one (engine/events.py), as client-go's recorder
writes it: one patch of ``series``, the note kept."""

from __future__ import annotations

import uuid
from pathlib import Path

from kubernetes import client, config

from accel_operator.adapters.kube.jobs import JobRef, KubeJobWriter
from tests.support.cluster import token_kubeconfig
from tests.support.jobs import create_job, gpu_pool, job_doc


def test_a_repeated_event_is_patched_into_a_series_under_the_operators_role(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    pool = f"{namespace}-ev"
    with gpu_pool(api, pool, count=0):
        job = create_job(api, job_doc(namespace, pool, devices=1, name="flaps"))
    ref = JobRef(namespace, "flaps", job["metadata"]["uid"])
    writer = KubeJobWriter(config.new_client_from_config(config_file=str(token_kubeconfig(api, core, tmp_path))))
    writer.event(ref, "Normal", "QueuedBehind", "queued behind 3 job(s)")
    writer.event_series(ref, "Normal", "QueuedBehind", "queued behind 2 job(s)", 2)
    writer.event_series(ref, "Normal", "QueuedBehind", "queued behind 1 job(s)", 5)
    events = client.EventsV1Api(api).list_namespaced_event(namespace).items
    ours = [e for e in events if e.regarding.name == "flaps" and e.reason == "QueuedBehind"]
    assert len(ours) == 1, [(e.metadata.name, e.reason, e.note) for e in ours]
    assert ours[0].series is not None and ours[0].series.count == 5
    assert ours[0].note == "queued behind 3 job(s)"  # an Event's note is immutable: the first one's
    # A writer that did not create it (another replica, a restart) posts a new Event instead.
    other = KubeJobWriter(api)
    other.event_series(ref, "Normal", "QueuedBehind", f"again {uuid.uuid4().hex[:4]}", 6)
    events = client.EventsV1Api(api).list_namespaced_event(namespace).items
    assert len([e for e in events if e.regarding.name == "flaps" and e.reason == "QueuedBehind"]) == 2
