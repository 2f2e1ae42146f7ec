"""The API writes one job costs on the real API server, counted at the client the operator runs
in-process: status patches (and the refused ones, and the reads a refusal makes), Events by
reason. What a user needs is written once per change; what changes only in a count the pool's
status shows (its free devices, its usable nodes) is not written again to every waiting job."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from accel_api import vocabulary as v
from accel_api.enums import JobPhase
from accel_operator.adapters.kube import informer as informer_mod
from tests.support.cluster import wait_for
from tests.support.jobs import create_job, events_of, gpu_pool, job_doc, status, wait_phase
from tests.support.operator import checked_operator, settings_for


class Calls:
    """Status patches, 409s and reads of AcceleratorJobs, per job name, as the operator sends them."""

    def __init__(self) -> None:
        self.patches: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        self.lock = threading.Lock()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    seen = Calls()
    patch = client.CustomObjectsApi.patch_namespaced_custom_object_status
    get = client.CustomObjectsApi.get_namespaced_custom_object

    def counted_patch(self: Any, group: str, version: str, ns: str, plural: str, name: str, *a: Any, **kw: Any) -> Any:
        if plural == "acceleratorjobs":
            with seen.lock:
                seen.patches[name] += 1
        try:
            return patch(self, group, version, ns, plural, name, *a, **kw)
        except ApiException as exc:
            if exc.status == 409 and plural == "acceleratorjobs":
                with seen.lock:
                    seen.conflicts[name] += 1
            raise

    def counted_get(self: Any, group: str, version: str, ns: str, plural: str, name: str, *a: Any, **kw: Any) -> Any:
        if plural == "acceleratorjobs" and threading.current_thread() is not threading.main_thread():  # not the test's
            with seen.lock:
                seen.reads[name] += 1
        return get(self, group, version, ns, plural, name, *a, **kw)

    monkeypatch.setattr(client.CustomObjectsApi, "patch_namespaced_custom_object_status", counted_patch)
    monkeypatch.setattr(client.CustomObjectsApi, "get_namespaced_custom_object", counted_get)
    yield seen


@pytest.fixture
def admitted_watch_lags(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs' watch shows an Admitted status 3 s late (a loaded API server): the Running
    decision is then taken on the status this process wrote, not on the one the watch shows."""
    hand = informer_mod.Informer._hand

    def late(self: Any, changes: list[tuple[Any, Any]], listing: set[Any] | None = None) -> None:
        admitted = self.kind == "jobs" and any(
            view is not None and view.status.phase is JobPhase.ADMITTED for _key, view in changes
        )
        if admitted and listing is None:
            threading.Timer(3.0, hand, (self, changes, listing)).start()
        else:
            hand(self, changes, listing)

    monkeypatch.setattr(informer_mod.Informer, "_hand", late)


def test_a_job_admitted_then_running_is_patched_once_with_no_conflict_while_the_watch_lags(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    calls: Calls,
    admitted_watch_lags: None,
    operator: Any,
) -> None:
    pool = f"{namespace}-w"
    with gpu_pool(api, pool, count=1):
        create_job(api, job_doc(namespace, pool, devices=1, name="once"))
        wait_phase(api, namespace, "once", "Running")
        wait_for(
            lambda: "Admitted" in [r for r, _ in events_of(core, namespace, "once")],
            timeout=30,
            what="the Admitted event",
        )
        time.sleep(1.0)  # the event threads drain: a Running Event would be posted by now
        # The phase and the Running condition say it: no Event repeats it.
        assert [r for r, _ in events_of(core, namespace, "once")] == ["Admitted"]
        # Admitted and Running in one write: the batch Job, created first, records the admission,
        # and the status goes with Running once the pod has its node (before: two patches). An
        # Admitted status written by itself (pods slower than admitted_status_seconds) would be
        # followed by Running on the version this process wrote, while the watch lags.
        assert calls.patches["once"] == 1, (calls.patches, calls.conflicts, calls.reads)
        assert calls.conflicts["once"] == 0, calls.conflicts
        assert calls.reads["once"] == 0, calls.reads
        st = status(api, namespace, "once")
        assert st["phase"] == "Running" and st["admittedTime"] and st["plan"]["pool"] == pool


def test_a_waiting_job_is_not_written_again_when_only_its_pools_free_count_changes(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, calls: Calls, operator: Any
) -> None:
    pool = f"{namespace}-f"
    with gpu_pool(api, pool, count=1) as nodes:
        node = nodes[0]
        core.patch_node_status(node, {"status": {"allocatable": {v.RESOURCE_NVIDIA_GPU: "6"}}})
        time.sleep(1.0)  # the node's watch event reaches the operator before the job does
        create_job(api, job_doc(namespace, pool, devices=4, name="small"))
        wait_phase(api, namespace, "small", "Running")
        create_job(api, job_doc(namespace, pool, devices=8, name="big"))
        st = wait_for(
            lambda: (s := status(api, namespace, "big")).get("phase") == "Pending" and s.get("message") and s,
            timeout=30,
            what="the big job waiting",
        )
        assert "fewer than 8 free device(s)" in st["message"], st["message"]
        # The device plugin gives one device back: 3 free instead of 2, still fewer than 8.
        core.patch_node_status(node, {"status": {"allocatable": {v.RESOURCE_NVIDIA_GPU: "7"}}})
        time.sleep(3.0)  # the node's watch event, then a pass (at most 0.2 s apart) that decides the big job again
        assert status(api, namespace, "big")["message"] == st["message"]
        assert calls.patches["big"] == 1, calls.patches
        assert [r for r, _ in events_of(core, namespace, "big")] == ["WaitingForCapacity"]


@pytest.fixture
def job_watch_lags(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every change the jobs' watch shows reaches the operator 2 s late, in order (a loaded API
    server): each write is followed by the next before the watch shows it."""
    hand = informer_mod.Informer._hand
    queue: list[tuple[float, Any, list[tuple[Any, Any]]]] = []
    ready = threading.Condition()
    done = threading.Event()

    def late(self: Any, changes: list[tuple[Any, Any]], listing: set[Any] | None = None) -> None:
        if self.kind != "jobs" or listing is not None:
            hand(self, changes, listing)
            return
        with ready:
            queue.append((time.monotonic() + 2.0, self, changes))
            ready.notify()

    def deliver() -> None:
        while not done.is_set():
            with ready:
                while not queue and not done.is_set():
                    ready.wait(0.2)
                if done.is_set():
                    return
                due, informer, changes = queue[0]
                if time.monotonic() < due:
                    ready.wait(due - time.monotonic())
                    continue
                queue.pop(0)
            hand(informer, changes, None)

    worker = threading.Thread(target=deliver, daemon=True)
    worker.start()
    monkeypatch.setattr(informer_mod.Informer, "_hand", late)
    yield
    done.set()
    worker.join(timeout=5)


@contextmanager
def _running_at(api: client.ApiClient, namespace: str, name: str, *, usd_per_hour: float) -> Iterator[None]:
    """One one-device job running on an on-demand pool at ``usd_per_hour``, under an operator
    whose accountant steps every second with no write interval; the operator stops on exit."""
    pool = f"{namespace}-{name[0]}"
    settings = settings_for(namespace, cost_interval_seconds=1.0, cost_write_seconds=0.0)
    price = {"onDemandPerDeviceHour": usd_per_hour}
    with gpu_pool(api, pool, count=1, capacityType="on-demand", price=price), checked_operator(settings):
        create_job(api, job_doc(namespace, pool, devices=1, name=name))
        wait_phase(api, namespace, name, "Running", timeout=60)
        yield


def test_cost_writes_and_decisions_take_the_version_this_process_wrote_last(
    api: client.ApiClient, namespace: str, calls: Calls, job_watch_lags: None, cluster: Any, crds: list[str]
) -> None:
    """The cost ledger is written every second while the job runs (a price that moves its spend
    by a cent a second), the scheduler writes Admitted and Running, and the watch shows each
    write 2 s late: every write takes the version this process wrote last (no 409, no read)."""
    with _running_at(api, namespace, "priced", usd_per_hour=36.0):
        wait_for(
            lambda: (status(api, namespace, "priced").get("cost") or {}).get("spentUsd", 0) >= 0.05,
            timeout=60,
            what="five cents of spend written",
        )
    assert calls.patches["priced"] >= 5, calls.patches  # Admitted and Running, and the ledger's
    assert calls.conflicts["priced"] == 0, (calls.patches, calls.conflicts)
    assert calls.reads["priced"] == 0, (calls.patches, calls.reads)


def test_no_cost_write_while_the_spend_shown_does_not_move(
    api: client.ApiClient, namespace: str, calls: Calls, cluster: Any, crds: list[str]
) -> None:
    """A job running at a price that moves its spend by less than a cent in the test's seconds:
    the accountant, stepping every second with no write interval, writes no ledger (nothing its
    cost column shows moved; the pods' times rebuild it after a restart), so the job costs its
    one patch, Admitted and Running together."""
    with _running_at(api, namespace, "cheap", usd_per_hour=0.01):
        time.sleep(5.0)  # five steps of the accountant
        assert status(api, namespace, "cheap").get("cost") is None
    assert calls.patches["cheap"] == 1, calls.patches
