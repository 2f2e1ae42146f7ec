"""Node writes, applied: a typed node action (a taint, its removal, a checkpoint-now request; see
:mod:`accel_operator.reconcile.common.actions`) turned into calls of the
:class:`~accel_operator.adapters.kube.nodes.NodeWriter` port.

The scheduler (device health, consolidation, idle stops) and the early warnings
(:mod:`accel_operator.engine.signals`) both apply theirs here; each runs the blocking calls its
own way (``run``): the scheduler in its write threads, retried while the API server is
unavailable; the early warnings in the default executor, once (the notice is acted on again).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from accel_operator.adapters.kube.nodes import NodeWriter
from accel_operator.reconcile.common import actions as act

T = TypeVar("T")


class Run(Protocol):
    """Runs one blocking call of the port; ``call`` names it (a retry metric's label)."""

    def __call__(self, call: str, fn: Callable[[], T], /) -> Awaitable[T]: ...


def in_thread(call: str, fn: Callable[[], T], /) -> Awaitable[T]:
    """Once, in the default executor."""
    return asyncio.to_thread(fn)


async def apply(writer: NodeWriter, action: act.NodeWrite, *, run: Run) -> int:
    """Apply ``action``; how many objects it reached: a taint or its removal 1 (0: the node is
    gone), a request the number of pods annotated (one that ended meanwhile is not counted)."""
    if isinstance(action, act.TaintNode):
        taint = functools.partial(
            writer.taint, action.node, action.key, action.value, keep_existing=action.keep_existing
        )
        return int(await run("taint_node", taint))
    if isinstance(action, act.UntaintNode):
        return int(await run("untaint_node", functools.partial(writer.untaint, action.node, action.key)))
    asked = 0
    for namespace, pod in action.pods:
        if await run("annotate_pod", functools.partial(writer.request_checkpoint, namespace, pod, action.token)):
            asked += 1
    return asked
