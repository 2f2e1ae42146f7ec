"""The cost ledger in the running operator, against the real API server: a spot job runs, the
operator restarts in the middle, the node is preempted, the job resumes as a new attempt on the
other node and succeeds; the job's ledger and its team's spending equal the hand computation
from the status timestamps to the cent, the preempted attempt's work is counted as lost, and the
team's budget, exceeded on the way, gave the running job an event and a status entry, not a kill."""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
import urllib.request
import uuid
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from accel_localcluster import kubeapi, preempt
from accel_operator.settings import OperatorSettings
from tests.support.cluster import free_port, unexpected_errors, wait_for
from tests.support.jobs import (
    create_job,
    end_pods,
    events_of,
    get_job,
    gpu_pool,
    job_doc,
    pods_of,
    status,
    wait_phase,
    workloads_of,
)
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
    kubeapi.ensure_claim(api, namespace, "ckpt")  # the checkpoint's claim, mounted by the pods
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
                assert running["admittedTime"]
                time.sleep(6)
                pod0 = next(p for p in pods_of(core, namespace, "costly") if p.spec.node_name)
                node, started0 = pod0.spec.node_name, pod0.status.start_time  # the ledger's start
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
                batch_end = next(
                    w.status.completion_time for w in workloads_of(api, namespace, "costly") if w.status.completion_time
                )
                started1 = next(
                    p.status.start_time
                    for p in pods_of(core, namespace, "costly")
                    if p.metadata.labels.get(v.LABEL_ATTEMPT) == "1"
                )
            logs.append(second.output)
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)

    # The hand computation, from the pods' own timestamps (docs/cost.md, "When an attempt is
    # charged"): an attempt runs from its pod's start to its pod's end, which the failure record
    # keeps (held.endTime) and the completion time says; never later than the operator recorded it
    # or the batch Job ended.
    ended0 = final["lastFailure"].get("held", {}).get("endTime")
    failed0 = min(_t(final["lastFailure"]["time"]), *([_t(ended0)] if ended0 else []))
    done = min(_t(final["completionTime"]), batch_end)
    held0 = (failed0 - started0).total_seconds()
    held1 = (done - started1).total_seconds()
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


def test_a_deleted_jobs_money_stays_in_its_teams_total_to_the_cent(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str
) -> None:
    """Two jobs run and accrue; one is deleted while the operator runs, the other while it is
    stopped. The team's spending in the policy status keeps both jobs' money once (ticks after
    the fold change nothing): the first up to its deletion (as the cost rollup's row of it says,
    at least what its status said last), the second as its status said last."""
    custom = client.CustomObjectsApi(api)
    pool = f"{namespace}-od"
    policy = f"{namespace}-budget"
    team = f"team-{uuid.uuid4().hex[:6]}"
    kubeapi.apply(api, _policy(policy, team, limit=1000.0))
    logs: list[str] = []

    def ledger_of() -> dict[str, Any]:
        obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
        return (obj.get("status") or {}).get("ledger") or {}

    def team_spent() -> float:
        obj = custom.get_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)
        spend = (obj.get("status") or {}).get("spend") or []
        return float(next(s["spentUsd"] for s in spend if s["team"] == team))

    def carried(uid: str) -> dict[str, Any] | None:
        return next((c for c in ledger_of().get("carried", []) if c["uid"] == uid), None)

    def gone(name: str) -> bool:
        try:
            get_job(api, namespace, name)
        except client.ApiException as exc:
            return bool(exc.status == 404)
        return False

    def delete(name: str) -> None:
        custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name)
        wait_for(lambda: gone(name), timeout=30, what=f"{name} gone")

    try:
        with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
            uids = {}
            with running_operator(_operator_settings(namespace)) as first:
                for name in ("first", "second"):
                    create_job(api, job_doc(namespace, pool, devices=DEVICES, name=name, team=team))
                for name in ("first", "second"):
                    wait_phase(api, namespace, name, "Running", timeout=60)
                    uids[name] = get_job(api, namespace, name)["metadata"]["uid"]
                for name in ("first", "second"):
                    wait_for(
                        lambda n=name: (status(api, namespace, n).get("cost") or {}).get("spentUsd", 0) > 0.02,  # type: ignore[misc]
                        timeout=30,
                        what=f"{name} accruing more than two cents",
                    )
                    wait_for(functools.partial(carried, uids[name]), timeout=15, what=f"{name} carried by the policy")
                # Deleted while the operator runs.
                written_first = status(api, namespace, "first")["cost"]["spentUsd"]
                delete("first")
                wait_for(
                    lambda: uids["first"] in ledger_of().get("settledUids", []),
                    timeout=15,
                    what="the deleted job folded into the settled totals",
                )
                assert carried(uids["first"]) is None
                cm = core.read_namespaced_config_map("accel-cost-rollup", namespace)
                (row,) = [j for j in json.loads(cm.data["rollup.json"])["jobs"] if j["uid"] == uids["first"]]
                spent_first = sum(d["f"][0] for d in row["days"])
                assert written_first <= spent_first + 1e-6, (written_first, spent_first)
            logs.append(first.output)
            # Deleted while the operator is stopped: the policy's status still carries it as its
            # status said last.
            spent_second = status(api, namespace, "second")["cost"]["spentUsd"]
            assert spent_first > 0.01 and spent_second > 0.01, (spent_first, spent_second)
            delete("second")
            with running_operator(_operator_settings(namespace)) as second:
                wait_for(
                    lambda: uids["second"] in ledger_of().get("settledUids", []),
                    timeout=30,
                    what="the job deleted while the operator was down folded in",
                )
                time.sleep(2.5)  # more ticks: nothing moves, nothing is counted twice
                total = team_spent()
                settled = ledger_of()["settled"]
            logs.append(second.output)
    finally:
        with kubeapi.ignoring(404):
            custom.delete_cluster_custom_object(v.GROUP, v.VERSION, registry.POLICY.plural, policy)

    expected = spent_first + spent_second
    assert abs(total - expected) < 0.005, (total, spent_first, spent_second)
    assert [(s["team"], s["jobs"]) for s in settled] == [(team, 2)], settled
    assert abs(settled[0]["spentUsd"] - expected) < 0.005, settled
    for text in logs:
        assert not unexpected_errors(text, []), unexpected_errors(text, [])


def test_an_attempt_that_ran_and_failed_while_the_operator_was_down_is_charged(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str
) -> None:
    """The operator admits the job and stops before its first accrual; the attempt fails while
    it is down. Back, it retries; the failed attempt is charged from its pod's start to its pod's
    end, as the pod recorded them (not to when the operator noticed), once, beside the second
    attempt."""
    pool = f"{namespace}-od"
    doc = job_doc(namespace, pool, devices=DEVICES, name="unseen", maxRetries=1)
    never = _operator_settings(namespace).model_copy(update={"cost_interval_seconds": 3600.0})
    logs: list[str] = []
    with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
        with running_operator(never) as first:  # schedules, never accrues
            create_job(api, doc)
            wait_phase(api, namespace, "unseen", "Running", timeout=60)
        logs.append(first.output)
        assert "cost" not in status(api, namespace, "unseen")
        time.sleep(3)
        end_pods(core, namespace, "unseen", 1)
        wait_for(
            lambda: any(
                c.type == "Failed" and c.status == "True"
                for w in workloads_of(api, namespace, "unseen")
                for c in w.status.conditions or []
            ),
            timeout=30,
            what="the batch Job failed",
        )
        time.sleep(3)  # the operator comes back later than that
        with running_operator(_operator_settings(namespace)) as second:
            wait_for(
                lambda: (
                    status(api, namespace, "unseen").get("attempt") == 1
                    and status(api, namespace, "unseen").get("phase") == "Running"
                ),
                timeout=60,
                what="the retry running",
            )
            end_pods(core, namespace, "unseen", 0)
            wait_phase(api, namespace, "unseen", "Succeeded", timeout=60)

            def settled() -> dict[str, Any] | None:
                cost = status(api, namespace, "unseen").get("cost") or {}
                attempts = cost.get("attempts") or []
                return cost if len(attempts) == 2 and all(a.get("end") for a in attempts) else None

            cost = wait_for(settled, timeout=30, what="both attempts closed in the ledger")
            time.sleep(2.5)
            final = status(api, namespace, "unseen")
            batch_end = next(
                w.status.completion_time for w in workloads_of(api, namespace, "unseen") if w.status.completion_time
            )
        logs.append(second.output)
    assert final["cost"]["spentUsd"] == cost["spentUsd"]  # ticks after the close change nothing
    failure = final["lastFailure"]
    held = failure["held"]
    assert failure["attempt"] == 0 and held["pool"] == pool and held["devices"] == DEVICES
    # The failure record keeps the pod's own start and end (docs/cost.md, "When an attempt is
    # charged"); the retry ran from its pod's start to the completion its pod recorded.
    assert _t(held["admittedTime"]) <= _t(held["startTime"])
    held0 = (_t(held["endTime"]) - _t(held["startTime"])).total_seconds()
    assert _t(held["endTime"]) < _t(failure["time"]) - dt.timedelta(seconds=2)  # noticed later: not charged
    assert _t(final["completionTime"]) <= batch_end
    pod1 = next(p for p in pods_of(core, namespace, "unseen") if p.metadata.labels.get(v.LABEL_ATTEMPT) == "1")
    held1 = (_t(final["completionTime"]) - pod1.status.start_time).total_seconds()
    assert held0 > 2 and held1 >= 0, (held0, held1)
    expected = DEVICES * (held0 + held1) * PRICE / 3600
    assert abs(cost["spentUsd"] - expected) < 0.005, (cost, expected)
    first_attempt = cost["attempts"][0]
    assert first_attempt["attempt"] == 0 and first_attempt["end"] == held["endTime"]
    for text in logs:
        assert not unexpected_errors(text, []), unexpected_errors(text, [])


def _counter(port: int, team: str, pool: str) -> float | None:
    """``accel_cost_usd_total`` of (team, pool, on-demand) from the operator's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "accel_cost_usd_total" and sample.labels == {
                "team": team,
                "pool": pool,
                "capacity_type": "on-demand",
            }:
                return float(sample.value)
    return None


def _report(capsys: Any, namespace: str, by: str) -> dict[str, dict[str, Any]]:
    from accel_operator.cli import main as cli

    argv = ["cost", "report", "-A", "--by", by, "--since", "30d", "-o", "json", "--rollup-namespace", namespace]
    assert cli.main(argv) == 0
    return {r["key"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


def test_deleted_jobs_stay_in_the_counters_and_the_report_to_the_cent_across_a_restart(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str, capsys: Any
) -> None:
    """A job runs and succeeds, then is deleted; another is deleted while it runs. The cost
    counter on /metrics and `accelctl cost report --since 30d` (team and job rows) still count
    both: the finished one to the cent of its final ledger, the running one up to its deletion
    (at least what its status said last). An operator restart changes nothing."""
    pool = f"{namespace}-od"
    team = f"team-{uuid.uuid4().hex[:6]}"
    custom = client.CustomObjectsApi(api)
    logs: list[str] = []

    def settings(port: int) -> OperatorSettings:
        return _operator_settings(namespace).model_copy(update={"metrics_port": port, "metrics_address": "127.0.0.1"})

    def rollup() -> dict[str, Any]:
        cm = core.read_namespaced_config_map("accel-cost-rollup", namespace)
        return dict(json.loads(cm.data["rollup.json"]))

    def summary(uid: str) -> dict[str, Any] | None:
        try:
            return next((j for j in rollup().get("jobs", []) if j["uid"] == uid), None)
        except client.ApiException:
            return None

    def delete(name: str) -> tuple[float, float]:
        before = time.time()
        custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, name)
        return before, time.time()

    with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
        port = free_port()
        with running_operator(settings(port)) as first:
            create_job(api, job_doc(namespace, pool, devices=DEVICES, name="done", team=team))
            wait_phase(api, namespace, "done", "Running", timeout=60)
            time.sleep(4)
            end_pods(core, namespace, "done", 0)
            wait_phase(api, namespace, "done", "Succeeded", timeout=60)
            done = wait_for(
                lambda: (
                    (c := status(api, namespace, "done").get("cost") or {}).get("attempts")
                    and all(a.get("rolledUp") for a in c["attempts"])
                    and c
                ),
                timeout=30,
                what="the finished attempt folded into the rollup and marked",
            )
            uid_done = get_job(api, namespace, "done")["metadata"]["uid"]
            assert done["spentUsd"] > 0.005
            delete("done")
            wait_for(lambda: summary(uid_done), timeout=30, what="the deleted job's row in the rollup")
            create_job(api, job_doc(namespace, pool, devices=DEVICES, name="running", team=team))
            wait_phase(api, namespace, "running", "Running", timeout=60)
            admitted = _t(status(api, namespace, "running")["admittedTime"])
            wait_for(
                lambda: (status(api, namespace, "running").get("cost") or {}).get("spentUsd", 0) > 0.01,
                timeout=30,
                what="the running job accruing",
            )
            uid_running = get_job(api, namespace, "running")["metadata"]["uid"]
            last_written = status(api, namespace, "running")["cost"]["spentUsd"]
            _, deleted_by = delete("running")
            running = wait_for(lambda: summary(uid_running), timeout=30, what="the running job folded at its deletion")
            time.sleep(2.5)  # more ticks: nothing moves
            counted = _counter(port, team, pool)
        logs.append(first.output)
        spent_running = sum(d["f"][0] for d in running["days"])
        # Charged up to the DELETED event (it comes a fraction of a second after the delete call
        # returned): at least what its status said last, within a cent of the deletion.
        upper = DEVICES * (deleted_by - admitted.timestamp()) * PRICE / 3600
        assert last_written <= spent_running + 1e-6 and spent_running < upper + 0.005, (
            last_written,
            spent_running,
            upper,
        )
        assert round(sum(d["f"][0] for d in summary(uid_done)["days"]), 2) == round(done["spentUsd"], 2)  # type: ignore[index]
        expected = done["spentUsd"] + spent_running
        assert counted is not None and abs(counted - expected) < 0.005, (counted, expected)
        teams = _report(capsys, namespace, "team")
        assert abs(teams[team]["spentUsd"] - expected) < 0.005 and teams[team]["jobs"] == 2, teams
        jobs = _report(capsys, namespace, "job")
        assert abs(jobs[f"{namespace}/done"]["spentUsd"] - done["spentUsd"]) < 0.005, jobs
        assert abs(jobs[f"{namespace}/running"]["spentUsd"] - spent_running) < 0.005, jobs
        # A restart: the counter starts from the rollup, not from zero, and does not double.
        port = free_port()
        with running_operator(settings(port)) as second:
            again = wait_for(lambda: _counter(port, team, pool), timeout=30, what="the counter after the restart")
            time.sleep(2.5)
            assert _counter(port, team, pool) == again
        logs.append(second.output)
    assert abs(again - counted) < 1e-6, (again, counted)
    for text in logs:
        assert not unexpected_errors(text, []), unexpected_errors(text, [])


def test_a_job_deleted_while_the_operator_is_down_is_charged_up_to_its_last_tick(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str, capsys: Any
) -> None:
    """A job runs; the operator stops; the job is deleted; an operator starts again. The attempt
    the rollup did not hold yet is folded from the open attempts kept beside it: the counter and
    the report count it up to the last accrual tick before the stop, to the cent of
    devices x (that tick - admission) x price."""
    pool = f"{namespace}-od"
    team = f"team-{uuid.uuid4().hex[:6]}"
    custom = client.CustomObjectsApi(api)

    def settings(port: int) -> OperatorSettings:
        return _operator_settings(namespace).model_copy(update={"metrics_port": port, "metrics_address": "127.0.0.1"})

    def open_entry(uid: str) -> dict[str, Any] | None:
        try:
            cm = core.read_namespaced_config_map("accel-cost-rollup-open-0", namespace)
        except client.ApiException:
            return None
        return next((e for e in json.loads(cm.data["open.json"]).get("attempts", []) if e["uid"] == uid), None)

    def summary(uid: str) -> dict[str, Any] | None:
        try:
            cm = core.read_namespaced_config_map("accel-cost-rollup", namespace)
        except client.ApiException:
            return None
        return next((j for j in json.loads(cm.data["rollup.json"]).get("jobs", []) if j["uid"] == uid), None)

    with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
        with running_operator(settings(free_port())):
            create_job(api, job_doc(namespace, pool, devices=DEVICES, name="orphan", team=team))
            wait_phase(api, namespace, "orphan", "Running", timeout=60)
            uid = get_job(api, namespace, "orphan")["metadata"]["uid"]
            admitted = _t(status(api, namespace, "orphan")["admittedTime"])
            wait_for(
                lambda: (e := open_entry(uid)) and sum(d["f"][0] for d in e["days"]) > 0.01,
                timeout=30,
                what="the running attempt kept beside the rollup",
            )
        kept = open_entry(uid)  # the operator is stopped: this is its last tick
        assert kept is not None
        custom.delete_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, "orphan")

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(v.GROUP, v.VERSION, namespace, registry.JOB.plural, "orphan")
            except client.ApiException as exc:
                return bool(exc.status == 404)
            return False

        wait_for(gone, timeout=30, what="the job gone while no operator runs (no finalizer holds it)")
        port = free_port()
        with running_operator(settings(port)):
            row = wait_for(lambda: summary(uid), timeout=30, what="the deleted job folded by the next operator")
            counted = wait_for(lambda: _counter(port, team, pool), timeout=30, what="the counter")
            time.sleep(2.5)  # more ticks: nothing moves
            assert _counter(port, team, pool) == counted
    through = _t(kept["through"])
    expected = DEVICES * (through - admitted).total_seconds() * PRICE / 3600
    spent = sum(d["f"][0] for d in row["days"])
    assert abs(spent - expected) < 0.005, (spent, expected)
    assert row["deleted"] == kept["through"]
    assert counted is not None and abs(counted - expected) < 0.005, (counted, expected)
    teams = _report(capsys, namespace, "team")
    assert abs(teams[team]["spentUsd"] - expected) < 0.005, teams


def test_a_pod_that_ended_and_was_deleted_while_the_operator_was_down_is_charged_by_its_own_times(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str
) -> None:
    """The attempt runs, ends and its pod is deleted (as a reclaimed spot node's pods are collected)
    while no operator runs. The pod's object stays (the ledger finalizer) until the operator is
    back and its ledger holds the pod's own start and end; then the finalizer goes and the pod
    with it. Without the finalizer the pod was gone, and the batch Job's times stood in."""
    pool = f"{namespace}-od"
    doc = job_doc(namespace, pool, devices=DEVICES, name="gone")
    never = _operator_settings(namespace).model_copy(update={"cost_interval_seconds": 3600.0})
    logs: list[str] = []
    with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
        with running_operator(never) as first:  # schedules, never accrues
            create_job(api, doc)
            wait_phase(api, namespace, "gone", "Running", timeout=60)
        logs.append(first.output)
        (pod,) = pods_of(core, namespace, "gone")
        assert v.FINALIZER_LEDGER in (pod.metadata.finalizers or [])
        time.sleep(2)
        end_pods(core, namespace, "gone", 0)

        def finished() -> Any:
            p = core.read_namespaced_pod(pod.metadata.name, namespace)
            states = [cs.state.terminated for cs in p.status.container_statuses or []]
            return p if p.status.phase == "Succeeded" and states and all(states) else None

        done = wait_for(finished, timeout=30, what="the pod finished")
        start = done.status.start_time
        end = max(cs.state.terminated.finished_at for cs in done.status.container_statuses)
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        time.sleep(2)
        kept = core.read_namespaced_pod(pod.metadata.name, namespace)  # still there: held for the ledger
        assert kept.metadata.deletion_timestamp is not None
        with running_operator(_operator_settings(namespace)) as second:
            wait_phase(api, namespace, "gone", "Succeeded", timeout=60)

            def recorded() -> dict[str, Any] | None:
                cost = status(api, namespace, "gone").get("cost") or {}
                attempts = cost.get("attempts") or []
                return cost if attempts and attempts[0].get("end") and attempts[0].get("podsEnd") else None

            cost = wait_for(recorded, timeout=30, what="the attempt closed in the ledger at its pod's times")
            wait_for(
                lambda: not [p for p in pods_of(core, namespace, "gone") if p.metadata.name == pod.metadata.name],
                timeout=30,
                what="the pod released and gone",
            )
        logs.append(second.output)
    (entry,) = cost["attempts"]
    assert (_t(entry["podsStart"]), _t(entry["podsEnd"]), _t(entry["end"])) == (start, end, end)
    assert cost["deviceSeconds"] == DEVICES * (end - start).total_seconds()
    assert abs(cost["spentUsd"] - DEVICES * (end - start).total_seconds() * PRICE / 3600) < 0.005
    for text in logs:
        assert not unexpected_errors(text, []), unexpected_errors(text, [])
