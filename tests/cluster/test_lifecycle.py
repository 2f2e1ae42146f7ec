"""The operator runs jobs on the local control plane: gang admission on real capacity, the
workload of each attempt, and the lifecycle to Succeeded or Failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from accel_api import registry
from accel_api import vocabulary as v
from tests.support.cluster import wait_for
from tests.support.jobs import (
    create_job,
    end_pods,
    events_of,
    gpu_pool,
    job_doc,
    pods_of,
    status,
    wait_phase,
    workloads_of,
)


def _pool_name(namespace: str, tag: str) -> str:
    return f"{namespace}-{tag}"


def _conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in st.get("conditions", [])}


def test_two_jobs_compete_for_the_last_eight_gpus(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = _pool_name(namespace, "h100")
    with gpu_pool(api, pool, count=1):
        first = create_job(api, job_doc(namespace, pool, devices=8, name="first"))
        wait_phase(api, namespace, "first", "Running")
        second = create_job(api, job_doc(namespace, pool, devices=8, name="second"))

        def waiting() -> dict[str, Any] | None:
            st = status(api, namespace, "second")
            return st if _conditions(st).get("Admitted", ("", ""))[0] == "False" else None

        st = wait_for(waiting, timeout=30, what="the second job waiting with a reason")
        assert st["phase"] == "Pending"
        assert _conditions(st)["Admitted"][1] == "WaitingForCapacity"
        assert "0 free device(s)" in st["message"], st["message"]
        assert not pods_of(core, namespace, "second"), "a waiting job must have no pods"
        # The first finishes: its devices go to the second.
        assert end_pods(core, namespace, "first", 0)
        done = wait_phase(api, namespace, "first", "Succeeded")
        assert done["completionTime"]
        running = wait_phase(api, namespace, "second", "Running")
        assert running["plan"]["pool"] == pool
        assert first["metadata"]["uid"] != second["metadata"]["uid"]
        reasons = [r for r, _ in events_of(core, namespace, "second")]
        assert "WaitingForCapacity" in reasons and "Admitted" in reasons, reasons


def test_a_two_node_gang_waits_for_a_whole_set_of_nodes_and_starts_together(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = _pool_name(namespace, "gang")
    with gpu_pool(api, pool, count=2):
        create_job(api, job_doc(namespace, pool, devices=1, name="small"))
        wait_phase(api, namespace, "small", "Running")
        create_job(api, job_doc(namespace, pool, devices=16, name="gang"))
        wait_for(
            lambda: "needs 2 node(s) with 8 free" in (status(api, namespace, "gang").get("message") or ""),
            timeout=30,
            what="the gang waiting for two whole nodes",
        )
        time.sleep(1.0)
        assert not pods_of(core, namespace, "gang"), "no partial gang: not one pod before all fit"
        end_pods(core, namespace, "small", 0)
        st = wait_phase(api, namespace, "gang", "Running")
        pods = pods_of(core, namespace, "gang")
        assert len(pods) == 2 and len({p.spec.node_name for p in pods}) == 2
        assert st["plan"]["nodes"] == 2 and st["plan"]["devices"] == 16
        assert len(workloads_of(api, namespace, "gang")) == 1


def test_success_failure_and_retry(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = _pool_name(namespace, "life")
    with gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=2, name="fails"))
        create_job(api, job_doc(namespace, pool, devices=2, name="retries", maxRetries=1))
        wait_phase(api, namespace, "fails", "Running")
        wait_phase(api, namespace, "retries", "Running")
        end_pods(core, namespace, "fails", 3)
        st = wait_phase(api, namespace, "fails", "Failed")
        failure = st["lastFailure"]
        assert failure["kind"] == "Failure" and failure["exitCode"] == 3 and failure["pod"].startswith("fails-a0")
        assert "maxRetries is 0" in st["message"]
        # One retry: a new attempt with a new workload; its own failure then ends the job.
        end_pods(core, namespace, "retries", 7)
        wait_for(lambda: status(api, namespace, "retries").get("attempt") == 1, timeout=30, what="attempt 1")
        again = wait_phase(api, namespace, "retries", "Running")
        assert again["workload"] == "retries-a1" and again["retries"] == 1
        assert {w.metadata.name for w in workloads_of(api, namespace, "retries")} <= {"retries-a0", "retries-a1"}
        end_pods(core, namespace, "retries", 0)
        assert wait_phase(api, namespace, "retries", "Succeeded")["lastFailure"]["exitCode"] == 7


def test_deleting_a_running_job_admits_the_next(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = _pool_name(namespace, "del")
    with gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=8, name="holder"))
        wait_phase(api, namespace, "holder", "Running")
        create_job(api, job_doc(namespace, pool, devices=8, name="next"))
        wait_for(lambda: status(api, namespace, "next").get("phase") == "Pending", timeout=30, what="next waiting")
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            v.GROUP, v.VERSION, namespace, registry.JOB.plural, "holder"
        )
        wait_phase(api, namespace, "next", "Running", timeout=60)
        # The owner references took the holder's workload with it.
        wait_for(lambda: not workloads_of(api, namespace, "holder"), timeout=60, what="the holder's workload gone")


def test_a_node_cordoned_before_binding_releases_the_gang(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    pool = _pool_name(namespace, "cordon")
    with gpu_pool(api, pool, count=1, nodes_max=2) as made:
        # A taint the workload does not tolerate keeps the scheduler from binding (the operator
        # does not count it against capacity); one update then cordons the node and lifts the
        # taint, so the scheduler never sees the node both schedulable and free of it.
        taints = [api.sanitize_for_serialization(t) for t in core.read_node(made[0]).spec.taints or []]
        held = [*taints, {"key": "test.accel.dev/hold", "effect": "NoSchedule"}]
        core.patch_node(made[0], {"spec": {"taints": held}})
        create_job(api, job_doc(namespace, pool, devices=8, name="cordoned"))
        wait_phase(api, namespace, "cordoned", "Admitted")
        core.patch_node(made[0], {"spec": {"unschedulable": True, "taints": taints}})
        # The test operator releases an unbound gang after 8 s and plans it again; it waits
        # for capacity (the only node is cordoned) until a second node arrives.
        wait_for(
            lambda: status(api, namespace, "cordoned").get("attempt") == 1,
            timeout=60,
            what="the gang released as attempt 1",
        )
        wait_for(
            lambda: any(r == "GangTimeout" for r, _ in events_of(core, namespace, "cordoned")),
            timeout=30,
            what="the GangTimeout event",
        )
        from accel_api.pool import AcceleratorPoolSpec
        from accel_localcluster import nodes
        from tests.support.jobs import pool_doc

        spec = AcceleratorPoolSpec.model_validate(pool_doc(pool, nodes_max=2)["spec"])
        second = nodes.node_manifests(pool, spec, 2)[1]
        nodes.ensure_nodes(core, [second])
        st = wait_phase(api, namespace, "cordoned", "Running", timeout=60)
        assert st["workload"] == "cordoned-a1"
        # The job runs once its pods are bound; KWOK marks them Running a moment later.
        running = wait_for(
            lambda: {p.spec.node_name for p in pods_of(core, namespace, "cordoned") if p.status.phase == "Running"},
            timeout=30,
            what="the pods running",
        )
        assert running == {second["metadata"]["name"]}


def test_operator_killed_during_admission_creates_nothing_twice(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str], tmp_path: Path
) -> None:
    """SIGKILL the operator while it admits 40 jobs, start it again: every job runs, each with
    exactly one workload, and no job is lost."""
    pool = _pool_name(namespace, "kill")
    env = {
        **os.environ,
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_NAMESPACES": f'["{namespace}"]',  # other tests' leftovers stay out of sight
    }
    names = [f"k{i:02d}-{uuid.uuid4().hex[:4]}" for i in range(40)]
    with gpu_pool(api, pool, count=5):
        for name in names:
            create_job(api, job_doc(namespace, pool, devices=1, name=name))
        log = tmp_path / "operator.log"
        with log.open("ab") as out:
            first = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=out)
        wait_for(lambda: workloads_of_ns(api, namespace), timeout=60, what="the first workloads")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        made_before = len(workloads_of_ns(api, namespace))
        with log.open("ab") as out:
            second = subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=out)
        try:
            wait_for(
                lambda: all(status(api, namespace, n).get("phase") == "Running" for n in names),
                timeout=120,
                what="every job running after the restart",
            )
        finally:
            second.terminate()
            second.wait(timeout=30)
        workloads = workloads_of_ns(api, namespace)
        per_job: dict[str, int] = {}
        for w in workloads:
            per_job[w.metadata.labels[v.LABEL_JOB]] = per_job.get(w.metadata.labels[v.LABEL_JOB], 0) + 1
        assert per_job == dict.fromkeys(names, 1), per_job
        assert all(status(api, namespace, n)["attempt"] == 0 for n in names)
        assert 0 < made_before < len(names) or made_before == len(names), made_before
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def workloads_of_ns(api: client.ApiClient, namespace: str) -> list[Any]:
    return list(
        client.BatchV1Api(api)
        .list_namespaced_job(namespace, label_selector=f"{v.LABEL_MANAGED_BY}={v.MANAGED_BY_VALUE}")
        .items
    )


def test_an_autoscaled_pool_grows_for_a_gang_and_shrinks_afterwards(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    from accel_localcluster import autoscaler

    pool = _pool_name(namespace, "auto")
    with (
        gpu_pool(api, pool, count=0, nodes_max=2, scaling="autoscaled", scaleUpTimeoutSeconds=60),
        autoscaler.running(api, scale_up_delay=1.0, idle_seconds=3.0, interval=0.25) as scaler,
    ):
        # No node exists: the operator admits against the nodes the pool may still grow.
        create_job(api, job_doc(namespace, pool, devices=16, name="grow"))
        st = wait_phase(api, namespace, "grow", "Running", timeout=60)
        assert st["plan"]["nodes"] == 2
        pods = pods_of(core, namespace, "grow")
        assert len({p.spec.node_name for p in pods}) == 2
        assert scaler.nodes_added == 2
        end_pods(core, namespace, "grow", 0)
        wait_phase(api, namespace, "grow", "Succeeded")
        wait_for(
            lambda: not core.list_node(label_selector=f"{v.LABEL_POOL}={pool}").items,
            timeout=60,
            what="the autoscaled nodes removed once idle",
        )
        # The scaler counts a removal after the API server took it: the deletion can be seen first.
        wait_for(lambda: scaler.nodes_removed == 2, timeout=10, what="the scaler to count both removals")


def test_a_gang_that_does_not_get_its_nodes_in_time_is_released(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: Any
) -> None:
    """An autoscaled pool whose nodes never come (no autoscaler runs): no partial gang holds
    devices; after scaleUpTimeoutSeconds the workload is deleted and the job planned again."""
    pool = _pool_name(namespace, "never")
    with gpu_pool(api, pool, count=0, nodes_max=2, scaling="autoscaled", scaleUpTimeoutSeconds=4):
        create_job(api, job_doc(namespace, pool, devices=16, name="stuck"))
        wait_phase(api, namespace, "stuck", "Admitted")
        assert wait_for(lambda: workloads_of(api, namespace, "stuck"), timeout=30, what="attempt 0's workload")
        wait_for(lambda: status(api, namespace, "stuck").get("attempt", 0) >= 1, timeout=60, what="the release")
        wait_for(
            lambda: any(r == "GangTimeout" for r, _ in events_of(core, namespace, "stuck")),
            timeout=30,
            what="the GangTimeout event",
        )
        wait_for(
            lambda: "stuck-a0" not in {w.metadata.name for w in workloads_of(api, namespace, "stuck")},
            timeout=60,
            what="attempt 0's workload deleted",
        )


def test_two_replicas_never_both_act_and_the_second_takes_over(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, crds: list[str], tmp_path: Path
) -> None:
    pool = _pool_name(namespace, "ha")
    env = {
        **os.environ,
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_NAMESPACES": f'["{namespace}"]',  # other tests' leftovers stay out of sight
        "ACCEL_OPERATOR_LEASE": f"lease-{namespace}",
        "ACCEL_OPERATOR_LEASE_NAMESPACE": namespace,
        "ACCEL_OPERATOR_LEASE_SECONDS": "6",
    }
    logs = [tmp_path / "a.log", tmp_path / "b.log"]

    def start(log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen([sys.executable, "-m", "accel_operator"], env=env, stdout=out, stderr=out)

    with gpu_pool(api, pool, count=2):
        a = start(logs[0])
        wait_for(lambda: "this replica leads" in logs[0].read_text(), timeout=60, what="replica a leading")
        b = start(logs[1])
        try:
            first = [f"ha{i}" for i in range(6)]
            for name in first:
                create_job(api, job_doc(namespace, pool, devices=1, name=name))
            for name in first:
                wait_phase(api, namespace, name, "Running", timeout=60)
            assert "this replica leads" not in logs[1].read_text()
            a.send_signal(signal.SIGKILL)
            a.wait(timeout=30)
            second = [f"hb{i}" for i in range(4)]
            for name in second:
                create_job(api, job_doc(namespace, pool, devices=1, name=name))
            for name in second:
                wait_phase(api, namespace, name, "Running", timeout=60)
            assert "this replica leads" in logs[1].read_text()
        finally:
            for p in (a, b):
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=30)
        per_job: dict[str, int] = {}
        for w in workloads_of_ns(api, namespace):
            per_job[w.metadata.labels[v.LABEL_JOB]] = per_job.get(w.metadata.labels[v.LABEL_JOB], 0) + 1
        assert per_job == dict.fromkeys(first + second, 1), per_job
