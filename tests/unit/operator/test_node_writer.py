"""The one node-writer port (adapters/kube/nodes.py): its two ways to meet a taint of the same key,
its fake, and the one applier of node actions (engine/node_writes.py) that the scheduler and the
early warnings share. Against a real API server: tests/cluster/test_reschedule.py and
test_signals.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from accel_operator.adapters.kube import nodes
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.nodes import FakeNodeWriter
from accel_operator.context import OperatorContext
from accel_operator.engine import node_writes
from accel_operator.reconcile.common import actions as act
from tests.support.context import fake_context

T = TypeVar("T")
THEIRS = {"key": "theirs", "value": "x", "effect": "NoExecute", "timeAdded": "2026-11-26T12:00:00Z"}


def _taint(key: str, value: str, effect: str = nodes.NO_SCHEDULE) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


# --- the taint list: replace, add if absent, remove ---------------------------------------------


def test_replace_writes_a_new_value_and_keeps_everyone_elses_taint() -> None:
    assert nodes.replaced([THEIRS, _taint("k", "3")], "k", "3,5") == [THEIRS, _taint("k", "3,5")]
    assert nodes.replaced([THEIRS], "k", "3") == [THEIRS, _taint("k", "3")]
    assert nodes.replaced([_taint("k", "3", "NoExecute")], "k", "3") == [_taint("k", "3")]


def test_replace_with_the_same_value_writes_nothing() -> None:
    assert nodes.replaced([THEIRS, _taint("k", "3")], "k", "3") is None


def test_add_keeps_a_taint_of_the_key_whatever_it_says() -> None:
    assert nodes.added([THEIRS, _taint("k", "aws-rebalance-recommendation")], "k", "aws-spot-interruption") is None
    assert nodes.added([THEIRS], "k", "v") == [THEIRS, _taint("k", "v")]


def test_remove_takes_only_that_key_off() -> None:
    assert nodes.removed([THEIRS, _taint("k", "3")], "k") == [THEIRS]
    assert nodes.removed([THEIRS], "k") is None


# --- the fake -----------------------------------------------------------------------------------


def test_the_fake_records_calls_and_keeps_or_replaces() -> None:
    fake = FakeNodeWriter()
    assert fake.taint("n", "k", "a", keep_existing=True)
    assert fake.taint("n", "k", "b", keep_existing=True)
    assert fake.taints == {"n": {"k": "a"}}
    assert fake.taint("n", "k", "c", keep_existing=False)
    assert fake.taints == {"n": {"k": "c"}}
    assert fake.untaint("n", "k") and fake.taints == {"n": {}}
    assert fake.request_checkpoint("ns", "p", "tok")
    assert fake.annotations == {("ns", "p"): "tok"}
    assert fake.calls == [
        ("taint", "n", "k", "a", "keep"),
        ("taint", "n", "k", "b", "keep"),
        ("taint", "n", "k", "c", "replace"),
        ("untaint", "n", "k"),
        ("request_checkpoint", "ns", "p", "tok"),
    ]


def test_the_fake_answers_false_for_what_is_gone_and_fails_next_once() -> None:
    fake = FakeNodeWriter(gone={"n", "ns/p"})
    assert not fake.taint("n", "k", "v", keep_existing=False)
    assert not fake.untaint("n", "k")
    assert not fake.request_checkpoint("ns", "p", "tok")
    assert fake.taints == {} and fake.annotations == {}
    fake.fail_next = ClusterUnavailable("down")
    with pytest.raises(ClusterUnavailable):
        fake.request_checkpoint("ns", "q", "tok")
    assert fake.request_checkpoint("ns", "q", "tok")
    assert fake.calls[-2:] == [("request_checkpoint", "ns", "q", "tok")] * 2  # the failed one was tried


# --- the one applier ----------------------------------------------------------------------------


def _recording(names: list[str]) -> Callable[[str, Callable[[], T]], Awaitable[T]]:
    async def run(call: str, fn: Callable[[], T], /) -> T:
        names.append(call)
        return fn()

    return run


def test_the_applier_turns_each_action_into_port_calls() -> None:
    fake = FakeNodeWriter(gone={"ns/gone"})
    names: list[str] = []
    run = _recording(names)

    async def apply_all() -> list[int]:
        return [
            await node_writes.apply(fake, act.TaintNode("n", "k", "3", "ecc"), run=run),
            await node_writes.apply(fake, act.TaintNode("n", "k", "9", "later", keep_existing=True), run=run),
            await node_writes.apply(fake, act.UntaintNode("m", "k", "healed"), run=run),
            await node_writes.apply(
                fake, act.RequestCheckpoint((("ns", "a"), ("ns", "gone"), ("ns", "b")), "tok", "why"), run=run
            ),
        ]

    assert asyncio.run(apply_all()) == [1, 1, 1, 2]  # a pod that ended meanwhile is not counted
    assert fake.taints == {"n": {"k": "3"}}  # keep_existing: the first taint stays
    assert fake.annotations == {("ns", "a"): "tok", ("ns", "b"): "tok"}
    assert names == ["taint_node", "taint_node", "untaint_node", "annotate_pod", "annotate_pod", "annotate_pod"]


def test_the_applier_in_a_thread_reports_a_gone_node_and_raises_what_the_port_raises() -> None:
    fake = FakeNodeWriter(gone={"n"})
    assert asyncio.run(node_writes.apply(fake, act.UntaintNode("n", "k", "x"), run=node_writes.in_thread)) == 0
    fake.fail_next = ClusterUnavailable("down")
    with pytest.raises(ClusterUnavailable):
        asyncio.run(node_writes.apply(fake, act.TaintNode("m", "k", "v", "x"), run=node_writes.in_thread))


# --- the context: no adapter defaults to a fake -------------------------------------------------


def test_the_context_refuses_a_missing_adapter() -> None:
    ctx = fake_context()
    assert isinstance(ctx.nodes, FakeNodeWriter)
    with pytest.raises(TypeError, match="nodes"):
        fake_context(nodes=None)
    given = {k: getattr(ctx, k) for k in ctx.__dataclass_fields__ if k != "costs"}
    with pytest.raises(TypeError, match="costs"):
        OperatorContext(**given)
