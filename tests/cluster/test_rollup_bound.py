"""The cost rollup stays bounded however many jobs are deleted, against the real API server (issue
25, finding 8): with the bound on deleted jobs' keys set low (``cost_rollup_gone``), eight jobs
run and are deleted; the rollup keeps no pending key per deleted job, at most that many digests,
every write succeeds, and its money equals the deleted jobs' summaries to the cent."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_operator.settings import OperatorSettings
from tests.support.cluster import unexpected_errors, wait_for
from tests.support.jobs import create_job, gpu_pool, job_doc, status, wait_phase
from tests.support.operator import running_operator, settings_for

JOBS = 8
KEPT = 3
PRICE = 3.6


def _gone(rollup: dict[str, Any]) -> int:
    return sum(len(g["ids"].split(",")) for g in rollup.get("gone", []) if g.get("ids"))


def test_deleted_jobs_keys_stay_within_their_bound_and_the_money_stays(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str
) -> None:
    pool = f"{namespace}-od"
    team = f"team-{uuid.uuid4().hex[:6]}"
    custom = client.CustomObjectsApi(api)
    settings: OperatorSettings = settings_for(
        namespace, cost_interval_seconds=1.0, cost_write_seconds=1.0, cost_rollup_gone=KEPT
    )

    def rollup() -> dict[str, Any]:
        try:
            cm = core.read_namespaced_config_map("accel-cost-rollup", namespace)
        except client.ApiException:
            return {}
        return dict(json.loads(cm.data["rollup.json"]))

    names = [f"j{i}" for i in range(JOBS)]
    with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
        with running_operator(settings) as op:
            for name in names:
                create_job(api, job_doc(namespace, pool, devices=1, name=name, team=team))
            for name in names:
                wait_phase(api, namespace, name, "Running", timeout=60)
            wait_for(
                lambda: all((status(api, namespace, n).get("cost") or {}).get("spentUsd", 0) > 0 for n in names),
                timeout=30,
                what="every job accruing",
            )
            for name in names:
                custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name)
            wait_for(
                lambda: len(rollup().get("jobs", [])) == JOBS,
                timeout=30,
                what="every deleted job folded into the rollup",
            )
            bounded = wait_for(
                lambda: (r := rollup()) and _gone(r) <= KEPT and r,
                timeout=30,
                what=f"the deleted jobs' keys trimmed to {KEPT}",
            )
            time.sleep(2.5)  # more ticks: nothing grows back, nothing fails
            final = rollup()
        output = op.output
    # No pending key per deleted job (they grew by one per deletion, past 1 MiB at scale).
    assert final.get("pending", []) == [], final.get("pending")
    assert 0 < _gone(final) <= KEPT and _gone(bounded) <= KEPT
    folded = sum(b["f"][0] for b in final["buckets"] if b["team"] == team)
    summaries = sum(d["f"][0] for j in final["jobs"] for d in j["days"])
    assert folded > 0 and abs(folded - summaries) < 0.005, (folded, summaries)
    assert "cost rollup" not in output or "not written" not in output, output[-2000:]
    assert not unexpected_errors(output, []), unexpected_errors(output, [])
