"""The cost ledger in the running operator, against the real API server: a spot job runs, the
operator restarts in the middle, the node is preempted, the job resumes as a new attempt on the
other node and succeeds; the job's ledger and its team's spending equal the hand computation
from the status timestamps to the cent, the preempted attempt's work is counted as lost, and the
team's budget, exceeded on the way, gave the running job an event and a status entry, not a kill."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import kubeapi, preempt
from accel_operator.settings import OperatorSettings
from tests.support.cluster import unexpected_errors, wait_for
from tests.support.jobs import create_job, end_pods, events_of, gpu_pool, job_doc, pods_of, status, wait_phase
from tests.support.operator import running_operator, settings_for

PRICE = 3.6  # USD per device-hour: a cent every five device-seconds
DEVICES = 2


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _policy(name: str, team: str, limit: float) -> dict[str, Any]:
    return {
        "apiVersion": v.API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": name},
        "spec": {"budgets": [{"team": team, "period": "monthly", "limitUsd": limit}]},
    }


def _operator_settings(namespace: str) -> OperatorSettings:
    return settings_for(namespace, cost_interval_seconds=1.0, cost_write_seconds=1.0)


def test_a_preempted_and_resumed_job_costs_what_the_timestamps_say_across_a_restart(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    pool = f"{namespace}-spot"
    policy = f"{namespace}-budget"
    team = f"team-{uuid.uuid4().hex[:6]}"
    kubeapi.apply(api, _policy(policy, team, limit=0.01))
    doc = job_doc(
        namespace,
        pool,
        devices=DEVICES,
        name="costly",
        team=team,
        spot={"policy": "require", "maxPreemptions": 2},
        checkpoint={"uri": "pvc://ckpt/costly", "intervalMinutes": 10},  # nothing reported: from scratch
    )
    logs: list[str] = []

    def spend_of_team() -> dict[str, Any] | None:
        obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
        return next((s for s in (obj.get("status") or {}).get("spend", []) if s["team"] == team), None)

    def settled() -> dict[str, Any] | None:
        cost = status(api, namespace, "costly").get("cost") or {}
        attempts = cost.get("attempts") or []
        return cost if len(attempts) == 2 and all(a.get("end") for a in attempts) else None

    try:
        with gpu_pool(api, pool, count=2, capacityType="spot", price={"spotPerDeviceHour": PRICE}):
            with running_operator(_operator_settings(namespace)) as first:
                create_job(api, doc)
                running = wait_phase(api, namespace, "costly", "Running", timeout=60)
                admitted0 = _t(running["admittedTime"])
                time.sleep(6)
                node = next(p.spec.node_name for p in pods_of(core, namespace, "costly") if p.spec.node_name)
                preempt.gke_preemption(core, node)
                wait_for(
                    lambda: (
                        status(api, namespace, "costly").get("attempt") == 1
                        and status(api, namespace, "costly").get("phase") == "Running"
                    ),
                    timeout=90,
                    what="the second attempt running",
                )
                time.sleep(2)
                over = status(api, namespace, "costly")["cost"].get("overBudget")
                assert over is not None and over["policy"] == policy, over
                condition = wait_for(
                    lambda: next(
                        (c for c in status(api, namespace, "costly")["conditions"] if c["type"] == "OverBudget"), None
                    ),
                    timeout=15,
                    what="the OverBudget condition on the running job",
                )
                assert condition["status"] == "True" and "keeps running" in condition["message"], condition
            logs.append(first.output)
            # The operator is down while the second attempt runs: when it is back, its ledger must
            # neither lose these seconds nor the first attempt (whose admission time status no
            # longer shows: only the ledger's watermark has it), nor count anything twice.
            before_restart = status(api, namespace, "costly")["cost"]
            time.sleep(3)
            with running_operator(_operator_settings(namespace)) as second:
                wait_for(
                    lambda: status(api, namespace, "costly")["cost"]["spentUsd"] > before_restart["spentUsd"] + 0.01,
                    timeout=30,
                    what="accrual after the restart",
                )
                end_pods(core, namespace, "costly", 0)
                wait_phase(api, namespace, "costly", "Succeeded", timeout=60)
                cost = wait_for(settled, timeout=30, what="both attempts closed in the ledger")
                time.sleep(2.5)  # more ticks: a settled ledger does not move
                final = status(api, namespace, "costly")
                assert final["cost"]["spentUsd"] == cost["spentUsd"]
                spend = wait_for(
                    lambda: (s := spend_of_team()) is not None and abs(s["spentUsd"] - cost["spentUsd"]) < 1e-6 and s,
                    timeout=15,
                    what="the team's spending in the policy's status",
                )
                reasons = [r for r, _ in events_of(core, namespace, "costly")]
            logs.append(second.output)
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)

    # The hand computation, from the status timestamps alone.
    failed0 = _t(final["lastFailure"]["time"])
    admitted1 = _t(final["admittedTime"])
    done = _t(final["completionTime"])
    held0 = (failed0 - admitted0).total_seconds()
    held1 = (done - admitted1).total_seconds()
    expected = DEVICES * (held0 + held1) * PRICE / 3600
    assert held0 > 5 and held1 > 2, (held0, held1)
    assert round(cost["spentUsd"], 2) == round(expected, 2), (cost, expected)
    assert abs(cost["spentUsd"] - expected) < 0.005
    assert abs(spend["spentUsd"] - expected) < 0.005
    assert abs(cost["deviceSeconds"] - DEVICES * (held0 + held1)) < 1e-3
    # Attempt 0 was preempted with no checkpoint reported: all its work is done again. The work
    # is what ran (from the attempt's start, recorded with the failure), a little less than what
    # was held (from its admission, what it is charged for).
    assert final["lastFailure"]["kind"] == "Preemption"
    lost = final["lastFailure"]["lostDeviceSeconds"]
    assert DEVICES * (held0 - 5) < lost <= DEVICES * held0 + 1e-3, (lost, held0)
    assert abs(cost["lostDeviceSeconds"] - lost) < 1e-3
    assert abs(cost["lostToPreemptionUsd"] - lost * PRICE / 3600) < 0.005
    assert [a["preempted"] for a in cost["attempts"]] == [True, False]
    assert cost["forecastUsd"] is not None and cost["forecastUsd"] > 0
    # Over budget on the way: an event, the job ran to the end.
    assert "OverBudget" in reasons, reasons
    assert final["phase"] == "Succeeded"
    assert "overBudget" not in final["cost"]  # no longer running: no longer flagged
    assert all(c["type"] != "OverBudget" for c in final["conditions"])
    for text in logs:
        assert not unexpected_errors(text, []), unexpected_errors(text, [])
