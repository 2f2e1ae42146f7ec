"""How the operator is wired into kopf: what its handlers are, and what that allows."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import kopf

from accel_api import catalog
from accel_operator import handlers
from accel_operator.adapters.kube.jobs import FakeJobWriter
from accel_operator.adapters.kube.lease import AlwaysLeader
from accel_operator.adapters.kube.reschedule import FakeRescheduleClient
from accel_operator.adapters.kube.workloads import FakeWorkloadClient
from accel_operator.context import OperatorContext
from accel_operator.handlers import essence
from accel_operator.metrics import OperatorMetrics
from accel_operator.settings import OperatorSettings


def _registry() -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()
    ctx = OperatorContext(
        settings=OperatorSettings(),
        catalog=catalog.default(),
        metrics=OperatorMetrics(),
        writer=FakeJobWriter(),
        workloads=FakeWorkloadClient(),
        elector=AlwaysLeader(),
        reschedule=FakeRescheduleClient(),
    )
    handlers.register(reg, ctx)
    return reg


def test_no_create_update_or_delete_handlers_while_the_essence_is_empty() -> None:
    """``essence.NoEssence`` makes kopf see no change in any object: right only while no handler
    reacts to changes (kopf's private registry is the only place that says so)."""
    reg = _registry()
    assert list(reg._changing.get_all_handlers()) == []
    assert list(reg._spawning.get_all_handlers()) == []  # daemons and timers reset on changes too
    indexes = [h.id for h in reg._indexing.get_all_handlers()]
    # One index per watched kind, shared: the accountant reads the scheduler's policies and node
    # reports (no second copy of them, no event parsed twice).
    assert sorted(indexes) == sorted(
        ["pools", "nodes", "pods", "workloads", "jobs", "reports", "policies", "namespace_teams"]
    )
    assert len(reg._watching.get_all_handlers()) >= 5


def test_the_startup_handler_installs_the_empty_essence() -> None:
    settings = kopf.OperatorSettings()
    essence.install(settings)
    body = kopf.Body({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"big": list(range(100))}})
    assert settings.persistence.diffbase_storage.build(body=body) == {}


def test_event_and_index_handlers_are_coroutines() -> None:
    """kopf runs a plain function in a thread for every event; these run in the loop."""
    reg = _registry()
    for h in [*reg._indexing.get_all_handlers(), *reg._watching.get_all_handlers()]:
        assert inspect.iscoroutinefunction(h.fn), h.id


def test_a_pod_event_is_parsed_once_for_the_index_and_the_event_handler(monkeypatch: Any) -> None:
    from accel_operator.adapters.kube import views

    calls: list[str] = []
    real = views.pod_view

    def counting(body: Any) -> Any:
        calls.append(body["metadata"]["resourceVersion"])
        return real(body)

    monkeypatch.setattr(views, "pod_view", counting)
    reg = _registry()
    # Called as kopf would, with only the keyword arguments these handlers take.
    index: Any = next(h for h in reg._indexing.get_all_handlers() if h.id == "pods").fn
    event: Any = next(h for h in reg._watching.get_all_handlers() if h.id.endswith(".pod_changed")).fn

    def pod(rv: str) -> kopf.Body:
        return kopf.Body(
            {
                "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv},
                "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Running"},
            }
        )

    async def deliver(rv: str, *, indexed: bool) -> None:
        body = pod(rv)
        if indexed:
            await index(body=body, namespace="ns", name="p")
        await event(body=body, namespace="ns", name="p", type="MODIFIED")

    asyncio.run(deliver("1", indexed=True))
    assert calls == ["1"]  # the event handler took the index's view
    asyncio.run(deliver("2", indexed=False))
    assert calls == ["1", "2"]  # nothing indexed for this version: parsed by the event handler
