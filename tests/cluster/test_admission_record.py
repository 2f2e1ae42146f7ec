"""The batch Job as the admission record, on the real API server: the operator killed between an
admission's batch Job and the job's status, started again, adopts the admission the Job records
(one workload, the job admitted once, its cost counted once), and the Job's devices are held
for no other job meanwhile (docs/scale.md, "The batch Job as the admission record")."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from accel_api import vocabulary as v
from tests.support.cluster import ROOT, unexpected_errors, wait_for
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
from tests.support.operator import running_operator, settings_for

PRICE = 3.6  # USD per device-hour: a cent every 1.25 s on eight devices
DEVICES = 8


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_operator_killed_between_the_batch_job_and_the_status_adopts_the_admission(
    api: client.ApiClient, core: client.CoreV1Api, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Before: the status said Admitted before the Job existed (two status writes per admitted
    job), and the Job carried no admission. Now the Job is created first with the admission in
    its annotation; killed there, the job's status says nothing of it, a job submitted then does
    not get its devices, and the restarted operator writes the admission as the Job records it."""
    pool = f"{namespace}-record"
    env = {
        **os.environ,
        "ACCEL_OPERATOR_LIVENESS_PORT": "0",
        "ACCEL_OPERATOR_METRICS_PORT": "0",
        "ACCEL_OPERATOR_RESYNC_SECONDS": "3",
        "ACCEL_OPERATOR_NAMESPACES": f'["{namespace}"]',
        "ACCEL_OPERATOR_COST_ROLLUP_NAMESPACE": namespace,
        "ACCEL_OPERATOR_ADMITTED_STATUS_SECONDS": "30",  # the hold (the default): the Job first
    }
    log = tmp_path / "first.log"
    with gpu_pool(api, pool, count=1, capacityType="on-demand", price={"onDemandPerDeviceHour": PRICE}):
        create_job(api, job_doc(namespace, pool, devices=DEVICES, name="once"))
        with log.open("wb") as out:
            first = subprocess.Popen(
                [sys.executable, "-m", "tests.support.operator_dies_after_create"],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            assert first.wait(timeout=90) == -9, log.read_text()[-3000:]  # SIGKILL, after the create
        finally:
            if first.poll() is None:
                first.kill()
        (job,) = workloads_of(api, namespace, "once")
        recorded = json.loads(job.metadata.annotations[v.ANNOTATION_ADMISSION])
        assert (recorded["attempt"], recorded["pool"], recorded["devices"], recorded["nodes"]) == (0, pool, DEVICES, 1)
        before = status(api, namespace, "once")
        assert before.get("phase") not in ("Admitted", "Running") and not before.get("admittedTime"), before
        # Submitted while the admission is recorded on the Job alone: it must not get those devices.
        create_job(api, job_doc(namespace, pool, devices=DEVICES, name="later"))
        time.sleep(2)
        with running_operator(settings_for(namespace, cost_interval_seconds=1.0, cost_write_seconds=1.0)) as second:
            st = wait_phase(api, namespace, "once", "Running", timeout=60)
            assert st["admittedTime"] == recorded["admittedTime"]  # adopted, not admitted again
            assert st["attempt"] == 0 and st["workload"] == job.metadata.name and st["plan"]["pool"] == pool
            assert [w.metadata.uid for w in workloads_of(api, namespace, "once")] == [job.metadata.uid]
            assert not workloads_of(api, namespace, "later")
            assert status(api, namespace, "later").get("phase") == "Pending"
            time.sleep(3)
            end_pods(core, namespace, "once", 0)
            wait_phase(api, namespace, "once", "Succeeded", timeout=60)

            def settled() -> dict[str, Any] | None:
                cost = status(api, namespace, "once").get("cost") or {}
                attempts = cost.get("attempts") or []
                return cost if attempts and all(a.get("end") for a in attempts) else None

            cost = wait_for(settled, timeout=30, what="the attempt closed in the ledger")
            # The devices come back only when it ends: then the later job runs.
            wait_phase(api, namespace, "later", "Running", timeout=60)
            reasons = [r for r, _ in events_of(core, namespace, "once")]
        (pod,) = [p for p in pods_of(core, namespace, "once") if p.status.start_time]
        (entry,) = cost["attempts"]  # one attempt, charged once
        assert entry["attempt"] == 0
        start, end = _t(entry["podsStart"]), _t(entry["podsEnd"])
        assert start == pod.status.start_time
        assert cost["deviceSeconds"] == DEVICES * (end - start).total_seconds()
        assert abs(cost["spentUsd"] - DEVICES * (end - start).total_seconds() * PRICE / 3600) < 0.005
        assert reasons.count("Admitted") == 1, reasons
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        assert not unexpected_errors(second.output, []), unexpected_errors(second.output, [])
