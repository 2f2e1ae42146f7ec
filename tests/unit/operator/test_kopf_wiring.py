"""How the operator is wired into kopf: what its handlers are, and what that allows."""

from __future__ import annotations

import inspect

import kopf

from accel_operator import handlers
from accel_operator.handlers import essence
from tests.support.context import fake_context


def _registry() -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()
    ctx = fake_context()
    handlers.register(reg, ctx)
    return reg


def test_no_create_update_or_delete_handlers_while_the_essence_is_empty() -> None:
    """``essence.NoEssence`` makes kopf see no change in any object: right only while no handler
    reacts to changes (kopf's private registry is the only place that says so)."""
    reg = _registry()
    assert list(reg._changing.get_all_handlers()) == []
    assert list(reg._spawning.get_all_handlers()) == []  # daemons and timers reset on changes too
    indexes = [h.id for h in reg._indexing.get_all_handlers()]
    # One index per kind kopf watches, shared: the accountant reads the scheduler's policies and
    # node reports (no second copy of them, no event parsed twice). AcceleratorJobs, pods and
    # workloads and nodes are the informers' (adapters/kube/informer.py), never kopf's too.
    assert sorted(indexes) == sorted(["pools", "reports", "policies", "namespace_teams"])
    assert len(reg._watching.get_all_handlers()) >= 4


def test_kopf_watches_no_kind_an_informer_watches() -> None:
    """Nodes (mostly heartbeats), AcceleratorJobs, pods and batch Jobs: one watch each, the
    informers'; a kopf handler on one of them would open a second watch and parse every event twice."""
    reg = _registry()
    handlers_ = [*reg._indexing.get_all_handlers(), *reg._watching.get_all_handlers()]
    watched = {h.selector.any_name for h in handlers_ if h.selector is not None}
    assert watched == {"acceleratorpools", "acceleratornodereports", "acceleratorpolicies", "namespaces"}


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
