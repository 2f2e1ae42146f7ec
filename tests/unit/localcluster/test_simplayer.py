"""The trace player of the agreement test (tests/support/simplayer.py) times an attempt's end from
the admission that attempt's batch Job records, so it does not depend on when the operator writes
the job's status: with the admission's status held (``admitted_status_seconds``), the pods run
before the status has the attempt's plan, and the player then read no duration (the simulator's
floor of 60 s stood in for it: every such job ran, and was charged, 60 s per device)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from accel_api import vocabulary as v
from accel_operator.adapters.kube import views
from accel_operator.reconcile.common.snapshot import Admission
from accel_operator.simulate import trace
from tests.support.jobs import pool_doc
from tests.support.simplayer import Player

LINE = {"submit": 0, "team": "red", "name": "j00", "model": "tinyllama-1.1b", "tokens": 500_000, "devices": 1}
POOL = pool_doc(
    "p-spot",
    nodes_max=2,
    capacityType="spot",
    restartSeconds=5,
    price={"source": "static", "spotPerDeviceHour": 2.0, "onDemandPerDeviceHour": 4.0},
)


class _Custom:
    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status

    def get_namespaced_custom_object(self, *_: Any) -> dict[str, Any]:
        return {"status": self.status}


class _Batch:
    def __init__(self, jobs: dict[str, dict[str, str]]) -> None:
        self.jobs = jobs  # name -> annotations

    def read_namespaced_job(self, name: str, _namespace: str) -> Any:
        if name not in self.jobs:
            raise ApiException(status=404)
        return SimpleNamespace(metadata=SimpleNamespace(annotations=self.jobs[name]))


def _player(status: dict[str, Any], jobs: dict[str, dict[str, str]]) -> Player:
    arrivals, disruptions = trace.read_trace_events(json.dumps(LINE) + "\n", source="t")
    pools = trace.read_pools(yaml.safe_dump(POOL), source="pools")
    player = Player(client.ApiClient(), pools, [POOL], arrivals, disruptions, lambda team: team, lambda *_: None)
    player.custom = _Custom(status)
    player.batch = _Batch(jobs)
    return player


def _note(attempt: int, duration: float) -> dict[str, str]:
    admission = Admission(
        attempt=attempt,
        pool="p-spot",
        devices=1,
        nodes=1,
        admitted_time="2026-01-01T00:00:00Z",
        duration_seconds=duration,
    )
    return {v.ANNOTATION_ADMISSION: views.admission_note(admission)}


def test_an_attempt_whose_status_is_held_ends_after_the_duration_its_batch_job_records() -> None:
    # The status still says Pending (the admission held back), the Job records it.
    player = _player({"phase": "Pending"}, {"j00-a0": _note(0, 26.0)})
    job = player.jobs["j00"]
    assert player._schedule(job, 0, 1000.0)
    assert [(at, kind) for at, _seq, kind, *_ in player.events] == [(1026.0, "end")]


def test_an_attempt_is_not_timed_until_its_admission_can_be_read() -> None:
    # Neither the Job's annotation nor the status says the attempt: nothing is scheduled (the next
    # poll asks again), where the floor of 60 s stood in before.
    player = _player({"phase": "Pending", "attempt": 0}, {})
    assert not player._schedule(player.jobs["j00"], 0, 1000.0)
    assert player.events == []
    # The status of the attempt (written first, as with the hold off) is read when no Job says it.
    plan = {"pool": "p-spot", "durationSeconds": 40.0}
    player = _player({"phase": "Admitted", "attempt": 0, "plan": plan}, {})
    assert player._schedule(player.jobs["j00"], 0, 1000.0)
    assert [(at, kind) for at, _seq, kind, *_ in player.events] == [(1040.0, "end")]
